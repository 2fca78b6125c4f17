"""The level engine equals each cell's dgl engine: node states and parameter gradients."""

from __future__ import annotations

import dgl
import pytest
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.engine.level import KERNELS, _ChildSumLevels, _NaryLevels, level_forward
from gnn_treelstm.engine.schedule import LevelSchedule
from gnn_treelstm.graph import make_tree
from tests.engine.compare import assert_same_run
from tests.trees import chain, random_batch, random_dependency_batch

X, H = 7, 5


def _run(cell, fwd, graph, x, wh, wc):
    """States and gradients (parameters and x) of ``sum(h*wh) + sum(c*wc)``."""
    x = x.detach().clone().requires_grad_(True)
    cell.zero_grad(set_to_none=True)
    h, c = fwd(graph, x)
    ((h * wh).sum() + (c * wc).sum()).backward()
    grads = {n: p.grad.detach().clone() for n, p in cell.named_parameters() if p.grad is not None}
    grads["x"] = x.grad.detach().clone()
    return h.detach(), c.detach(), grads


def assert_engines_equal(cell, graph, x, *, tol=1e-5):
    torch.manual_seed(1)
    wh = torch.randn(graph.num_nodes(), cell.out_size, dtype=x.dtype)
    wc = torch.randn(graph.num_nodes(), cell.out_size, dtype=x.dtype)
    want = _run(cell, cell, graph, x, wh, wc)
    before = {k: v.clone() for k, v in graph.ndata.items()}
    got = _run(cell, lambda g, x: level_forward(cell, g, x), graph, x, wh, wc)
    assert set(graph.ndata) == set(before)  # the caller's graph is unchanged
    assert_same_run(got, want, tol=tol)


# ------------------------------------------------------------------ Child-Sum
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_childsum_equals_dgl_engine(dtype, tol):
    torch.manual_seed(0)
    g = random_dependency_batch()
    cell = build_cell("childsum", X, H).to(dtype)
    assert_engines_equal(cell, g, torch.randn(g.num_nodes(), X, dtype=dtype), tol=tol)


def test_childsum_on_constituency_and_chains():
    torch.manual_seed(0)
    cell = build_cell("childsum", X, H)
    for g in (dgl.batch(random_batch(2, 20, max_children=3)),
              dgl.batch([chain(n, seed=n) for n in (1, 3, 9)])):
        assert_engines_equal(cell, g, torch.randn(g.num_nodes(), X))


# ------------------------------------------------------------------ N-ary
@pytest.mark.parametrize("n_ary,tie", [(2, False), (3, False), (3, True), (2, True)])
def test_nary_equals_dgl_engine(n_ary, tie):
    torch.manual_seed(0)
    g = dgl.batch(random_batch(4, 20, max_children=n_ary, words="leaves"))
    cell = build_cell("nary", X, H, n_ary=n_ary, tie_forget=tie)
    assert_engines_equal(cell, g, torch.randn(g.num_nodes(), X))


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_nary_and_lstm_equal_dgl_engine_with_either_matrix_backend(backend):
    from gnn_treelstm.engine import gemm

    torch.manual_seed(0)
    gemm.set_backend(backend)
    try:
        g = dgl.batch(random_batch(5, 12, max_children=2, words="leaves"))
        assert_engines_equal(build_cell("nary", X, H, n_ary=2), g, torch.randn(g.num_nodes(), X))
        g = dgl.batch([chain(n, seed=n) for n in (1, 4, 30)])
        assert_engines_equal(build_cell("lstm", X, H), g, torch.randn(g.num_nodes(), X))
    finally:
        gemm.set_backend(None)


def test_nary_float64_words_everywhere_and_unary_chains():
    torch.manual_seed(0)
    g = dgl.batch(random_batch(5, 20, max_children=2, words="all"))
    cell = build_cell("nary", X, H, n_ary=2).double()
    assert_engines_equal(cell, g, torch.randn(g.num_nodes(), X, dtype=torch.float64), tol=1e-10)
    g = dgl.batch([chain(n, seed=n) for n in (1, 4, 11)])
    cell = build_cell("nary", X, H, n_ary=1)
    assert_engines_equal(cell, g, torch.randn(g.num_nodes(), X))


def test_nary_position_gaps_and_wider_cell():
    # a node whose only child sits at position 1, run by a 4-ary cell (slots wider than data)
    torch.manual_seed(0)
    g = dgl.batch([make_tree([2, 2, -1], [0, 1, -1], positions=[0, 1, 0]),
                   make_tree([1, -1], [3, -1], positions=[1, 0])])
    cell = build_cell("nary", X, H, n_ary=4)
    assert_engines_equal(cell, g, torch.randn(g.num_nodes(), X))


def test_schedule_argument_and_batch_equals_single_trees():
    torch.manual_seed(0)
    trees = random_batch(6, 6, max_children=2, words="leaves")
    g = dgl.batch(trees)
    cell = build_cell("nary", X, H)
    x = torch.randn(g.num_nodes(), X)
    sched = LevelSchedule.from_graph(g)
    h1, c1 = level_forward(cell, g, x, schedule=sched)
    h2, c2 = level_forward(cell, sched, x)  # word ids come from the schedule
    torch.testing.assert_close(h1, h2, rtol=0, atol=0)
    rows = 0
    for t in trees:
        n = t.num_nodes()
        ht, ct = level_forward(cell, t, x[rows:rows + n])
        torch.testing.assert_close(ht, h1[rows:rows + n], rtol=1e-6, atol=1e-6)
        rows += n


# ------------------------------------------------------------------ custom backward
def test_gradcheck_recurrences():
    torch.manual_seed(0)
    g = random_dependency_batch(1, 4)
    lv = LevelSchedule.from_graph(g).up
    n = g.num_nodes()
    dd = dict(dtype=torch.float64, requires_grad=True)
    wx = torch.randn(n, 4 * 3, **dd)
    assert torch.autograd.gradcheck(
        lambda a, b, c: _ChildSumLevels.apply(a, b, c, None, None, None, lv),
        (wx, torch.randn(9, 3, **dd), torch.randn(3, 3, **dd)))
    e = g.num_edges()
    assert torch.autograd.gradcheck(  # with the multiplicative transform (Tran eq 4)
        lambda a, b, c, s, w1, w2: _ChildSumLevels.apply(a, b, c, s, w1, w2, lv),
        (wx, torch.randn(9, 3, **dd), torch.randn(3, 3, **dd), torch.randn(e, 2, **dd),
         torch.randn(2, 3, **dd), torch.randn(3, 2, **dd)))
    g = dgl.batch(random_batch(7, 4, max_children=3))
    lv = LevelSchedule.from_graph(g).up
    n, k, hs, xs = g.num_nodes(), 3, 2, 3
    slots = torch.nn.functional.pad(lv.slots, (0, k - lv.width), value=n)
    n0 = lv.node_offsets[1]
    params = (torch.randn(4 * hs, xs, **dd), torch.randn(4 * hs, **dd),
              torch.randn((3 + k) * hs, k * hs, **dd))
    # every row has an input (rows 0..N-1, the first n0 leaves), schedule order out
    assert torch.autograd.gradcheck(
        lambda x, w, b, u: _NaryLevels.apply(x, w, b, u, slots, lv, None, n0, None),
        (torch.randn(n, xs, **dd), *params))
    # inputs at some leaves and some inner nodes (scattered rows), node order out
    rows = torch.tensor(sorted({0, 2, n0 - 1, n0, n - 1}))
    m0 = int((rows < n0).sum())
    assert torch.autograd.gradcheck(
        lambda x, w, b, u: _NaryLevels.apply(x, w, b, u, slots, lv, rows, m0,
                                             (lv.rank, lv.order)),
        (torch.randn(len(rows), xs, **dd), *params))


# ------------------------------------------------------------------ misc
def test_unknown_cell_and_wrong_sizes():
    with pytest.raises(NotImplementedError, match="no kernel"):
        level_forward(torch.nn.Linear(2, 2), chain(3), torch.randn(3, 2))
    cell = build_cell("childsum", X, H)
    with pytest.raises(ValueError, match="rows"):
        level_forward(cell, chain(3), torch.randn(4, X))
    assert {"ChildSumTreeLSTM", "NaryTreeLSTM"} <= set(KERNELS)


def test_every_registry_name_has_a_kernel():
    from gnn_treelstm.cells import cells

    for name in cells.names():
        kw = {"num_relations": 3} if name.startswith("mtree") else {}
        assert type(build_cell(name, X, H, **kw)).__name__ in KERNELS, name


def test_heads_argument_passes_through():
    torch.manual_seed(0)
    g = _sst_like(12, 5)
    cell = build_cell("lex", X, H)
    x = torch.randn(g.num_nodes(), X)
    heads = torch.randn(g.num_nodes(), X)
    h1, _ = cell(g, x, heads=heads)
    h2, _ = level_forward(cell, g, x, heads=heads)
    torch.testing.assert_close(h2, h1, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name,kw,words", [("childsum", {}, "all"), ("nary", {}, "leaves")])
def test_cuda_matches_cpu(name, kw, words):
    torch.manual_seed(0)
    g = dgl.batch(random_batch(8, 20, max_children=2, words=words))
    cell = build_cell(name, X, H, **kw)
    x = torch.randn(g.num_nodes(), X)
    sched = LevelSchedule.from_graph(g)
    h, c = level_forward(cell, g, x, schedule=sched)
    cell_cuda = cell.to("cuda")
    hc, cc = level_forward(cell_cuda, sched.to("cuda"), x.cuda())
    torch.testing.assert_close(hc.cpu(), h, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cc.cpu(), c, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ mTreeLSTM
@pytest.mark.parametrize("name", ["mtree", "mtree-add", "mtree-full"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_mtree_equals_dgl_engine(name, dtype, tol):
    torch.manual_seed(0)
    g = random_dependency_batch(2, 20, num_relations=4)
    cell = build_cell(name, X, H, num_relations=4, rel_size=3).to(dtype)
    assert_engines_equal(cell, g, torch.randn(g.num_nodes(), X, dtype=dtype), tol=tol)


# ------------------------------------------------------------------ sequential LSTMs
@pytest.mark.parametrize("name", ["lstm", "bilstm", "lstm2", "bilstm2"])
def test_sequential_equals_dgl_engine(name):
    torch.manual_seed(0)
    g = dgl.batch([chain(n, seed=n) for n in (1, 2, 5, 9, 13)])
    for kw in ({}, {"concat_layers": False}):
        cell = build_cell(name, X, H, **kw)
        assert_engines_equal(cell, g, torch.randn(g.num_nodes(), X))


# ------------------------------------------------------------------ Teng & Zhang cells
def _sst_like(seed=9, count=20):
    return dgl.batch(random_batch(seed, count, max_children=2, words="leaves"))


@pytest.mark.parametrize("kw", [{}, {"head": "left"}, {"head": "average"},
                                {"lexicalized": False}])
def test_lex_equals_dgl_engine(kw):
    torch.manual_seed(0)
    g = _sst_like()
    cell = build_cell("lex", X, H, **kw)
    assert_engines_equal(cell, g, torch.randn(g.num_nodes(), X))


@pytest.mark.parametrize("kw", [{}, {"tie_input": False}, {"head": "right"}])
def test_topdown_equals_dgl_engine(kw):
    torch.manual_seed(0)
    g = _sst_like(10)
    cell = build_cell("topdown", X, H, **kw)
    assert_engines_equal(cell, g, torch.randn(g.num_nodes(), X))


def test_bitree_equals_dgl_engine_float64():
    torch.manual_seed(0)
    g = _sst_like(11)
    cell = build_cell("bitree", X, H).double()
    assert_engines_equal(cell, g, torch.randn(g.num_nodes(), X, dtype=torch.float64), tol=1e-10)


def test_nary_without_any_word_gives_empty_input_gradient():
    from gnn_treelstm import graph as G
    from gnn_treelstm.engine.schedule import LevelSchedule

    g = G.make_tree([2, 2, -1], [G.NO_WORD] * 3)
    lv = LevelSchedule.from_graph(g).up
    xw = torch.zeros(0, 3, requires_grad=True)
    W, b = torch.randn(8, 3, requires_grad=True), torch.randn(8, requires_grad=True)
    U = torch.randn(10, 4, requires_grad=True)
    h, _ = _NaryLevels.apply(xw, W, b, U, lv.slots, lv, None, 0, (lv.rank, lv.order))
    h.sum().backward()
    assert xw.grad.shape == (0, 3)
    assert torch.equal(W.grad, torch.zeros_like(W))
    assert b.grad.abs().sum() > 0 and U.grad.abs().sum() > 0
