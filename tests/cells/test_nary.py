"""NaryTreeLSTM (Tai et al. 2015 eqs 9-14) against the node-by-node reference."""

from __future__ import annotations

import random

import dgl
import pytest
import torch

import gnn_treelstm
from gnn_treelstm.cells.nary import NaryTreeLSTM
from gnn_treelstm.cells.sequential import num_params
from gnn_treelstm.trees.graph import NO_WORD, make_tree
from tests.cells.common import assert_same_graph, grads, snapshot
from tests.handbuilt import chain, random_tree
from tests.reference import tai

X, H = 6, 5
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def varied_trees(n_ary: int, seed: int = 0, count: int = 24) -> list[dgl.DGLGraph]:
    """Trees with at most ``n_ary`` children: full (constituency-like, words at leaves),
    ragged (fewer children, words at leaves or everywhere), with missing *middle* positions."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = i % 4
        if n_ary == 1 and kind < 3:  # random_tree cannot make unary trees: chains
            n = rng.randint(1, 10)
            words = [rng.randrange(50) if kind == 2 or rng.random() < 0.5 else NO_WORD
                     for _ in range(n)]
            out.append(make_tree(list(range(1, n)) + [-1], words))
        elif kind == 0:
            out.append(random_tree(rng, rng.randint(1, 12), max_children=n_ary,
                                   exact_children=True, words="leaves"))
        elif kind == 1:
            out.append(random_tree(rng, rng.randint(1, 12), max_children=n_ary, words="leaves"))
        elif kind == 2:
            out.append(random_tree(rng, rng.randint(1, 12), max_children=n_ary, words="all"))
        else:
            out.append(sparse_positions(rng, n_ary))
    return out


def sparse_positions(rng: random.Random, n_ary: int) -> dgl.DGLGraph:
    """A tree where children sit at random (not necessarily leading) positions."""
    n = rng.randint(2, 12)
    parents, pos = [-1], [0]
    free = {0: list(range(n_ary))}
    for node in range(1, n):
        p = rng.choice([q for q in free if free[q]])
        slot = free[p].pop(rng.randrange(len(free[p])))
        parents.append(p)
        pos.append(slot)
        free[node] = list(range(n_ary))
    words = [rng.randrange(50) if rng.random() < 0.6 else NO_WORD for _ in range(n)]
    return make_tree(parents, words, positions=pos)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_ary,tie", [(2, False), (3, False), (3, True), (1, False)])
@pytest.mark.parametrize("output_gate", [True, False])
def test_matches_reference_states_and_gradients(dtype, n_ary, tie, output_gate):
    torch.manual_seed(0)
    trees = varied_trees(n_ary)
    assert len(trees) >= 20
    g = dgl.batch(trees)
    cell = NaryTreeLSTM(X, H, n_ary=n_ary, tie_forget=tie, output_gate=output_gate).to(dtype)
    x = torch.randn(g.num_nodes(), X, dtype=dtype)
    x[g.ndata["word"] == NO_WORD] = float("nan")  # rows without a word must be ignored
    wh, wc = torch.randn(g.num_nodes(), H, dtype=dtype), torch.randn(g.num_nodes(), H, dtype=dtype)
    h, c = cell(g, x)
    rh, rc = tai.nary(cell, g, x)
    tol = TOL[dtype]
    torch.testing.assert_close(h, rh, atol=tol, rtol=tol)
    torch.testing.assert_close(c, rc, atol=tol, rtol=tol)
    g1 = grads(cell, (h * wh).sum() + (c * wc).sum())
    g2 = grads(cell, (rh * wh).sum() + (rc * wc).sum())
    assert set(g1) == set(g2) == {n for n, _ in cell.named_parameters()}
    for name in g1:
        torch.testing.assert_close(g1[name], g2[name], atol=tol, rtol=tol, msg=name)
    if not output_gate:  # eq 14 without o_j
        torch.testing.assert_close(h, torch.tanh(c), atol=0, rtol=0)


def test_batched_equals_tree_by_tree_and_graph_unchanged():
    torch.manual_seed(1)
    trees = varied_trees(2, seed=1)
    g = dgl.batch(trees)
    snap = snapshot(g)
    cell = NaryTreeLSTM(X, H)
    x = torch.randn(g.num_nodes(), X)
    with torch.no_grad():
        h, c = cell(g, x)
        offset = 0
        for t in trees:
            n = t.num_nodes()
            ht, ct = cell(t, x[offset:offset + n])
            torch.testing.assert_close(h[offset:offset + n], ht, atol=1e-6, rtol=1e-6)
            torch.testing.assert_close(c[offset:offset + n], ct, atol=1e-6, rtol=1e-6)
            offset += n
    assert_same_graph(g, snap)


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("output_gate", [True, False])
def test_every_parameter_gets_gradient_and_reset_changes_weights(tie, output_gate):
    torch.manual_seed(2)
    # words on internal nodes too, so that W^(f) x_j matters (it cannot on constituency trees)
    g = dgl.batch(varied_trees(3, seed=2))
    cell = NaryTreeLSTM(X, H, n_ary=3, tie_forget=tie, output_gate=output_gate)
    h, c = cell(g, torch.randn(g.num_nodes(), X))
    (h.sum() + c.sum()).backward()
    for name, p in cell.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    before = {n: p.detach().clone() for n, p in cell.named_parameters()}
    cell.reset_parameters()
    for n, p in cell.named_parameters():
        assert not torch.equal(before[n], p), n


def test_forget_input_weights_unused_on_constituency_trees():
    """Words only at leaves, and leaves have no forget gates: W^(f) gets no gradient."""
    rng = random.Random(5)
    g = dgl.batch([random_tree(rng, 6, words="leaves", exact_children=True) for _ in range(3)])
    cell = NaryTreeLSTM(X, H)
    h, c = cell(g, torch.randn(g.num_nodes(), X))
    (h.sum() + c.sum()).backward()
    W_f_grad = cell.W_x.weight.grad[3 * H:]
    assert torch.count_nonzero(W_f_grad) == 0
    assert torch.count_nonzero(cell.W_x.weight.grad[: 3 * H]) > 0


def test_param_count_matches_formula_and_tied_is_smaller():
    for n_ary, tie in [(1, False), (2, False), (2, True), (5, False), (5, True)]:
        cell = NaryTreeLSTM(300, 150, n_ary=n_ary, tie_forget=tie)
        count = sum(p.numel() for p in cell.parameters())
        assert count == num_params("nary", 300, 150, n_ary=n_ary, tie_forget=tie)
    full = sum(p.numel() for p in NaryTreeLSTM(10, 8, n_ary=5).parameters())
    tied = sum(p.numel() for p in NaryTreeLSTM(10, 8, n_ary=5, tie_forget=True).parameters())
    assert full - tied == (25 - 6) * 64


@pytest.mark.parametrize("n_ary,tie", [(1, False), (2, False), (2, True), (5, False), (5, True)])
def test_without_output_gate_has_no_output_gate_parameters(n_ary, tie):
    """Tai's relatedness cell (stanfordnlp/treelstm gate_output = false): no W_o, U_o, b_o."""
    x, h, n = 300, 150, n_ary
    gated = NaryTreeLSTM(x, h, n_ary=n, tie_forget=tie)
    cell = gnn_treelstm.build_cell("nary", x, h, n_ary=n, tie_forget=tie, output_gate=False)
    assert isinstance(cell, NaryTreeLSTM) and cell.output_gate is False
    shapes = {name: tuple(p.shape) for name, p in cell.named_parameters()}
    want = {"W_x.weight": (3 * h, x), "W_x.bias": (3 * h,)}
    gated_want = {"W_x.weight": (4 * h, x), "W_x.bias": (4 * h,)}
    if tie:
        want |= {"U_iu.weight": (2 * h, n * h), "U_f_diag": (n, h, h), "U_f_off.weight": (h, h)}
        gated_want |= {"U_iou.weight": (3 * h, n * h), "U_f_diag": (n, h, h),
                       "U_f_off.weight": (h, h)}
    else:
        want |= {"U.weight": ((2 + n) * h, n * h)}
        gated_want |= {"U.weight": ((3 + n) * h, n * h)}
    assert shapes == want
    # the gated layout is unchanged (the level engine reads these names)
    assert {name: tuple(p.shape) for name, p in gated.named_parameters()} == gated_want
    assert not any(k.endswith("_o") for k in cell.paper_weights())
    count = sum(p.numel() for p in cell.parameters())
    assert count == num_params("nary", x, h, n_ary=n, tie_forget=tie, output_gate=False)
    forget = (n + 1) * h * h if tie else n * n * h * h
    assert count == 3 * h * (x + 1) + 2 * n * h * h + forget  # by hand: i, u, f
    # exactly W^(o), b^(o) and the N matrices U^(o)_l fewer than the gated cell
    assert sum(p.numel() for p in gated.parameters()) - count == h * (x + 1) + n * h * h


def test_repr_registry_and_engine():
    cell = gnn_treelstm.build_cell("nary", 7, 3, n_ary=4)
    assert isinstance(cell, NaryTreeLSTM)
    r = repr(cell)
    assert "x_size=7" in r and "h_size=3" in r and "n_ary=4" in r and "output_gate=True" in r
    assert "output_gate=False" in repr(NaryTreeLSTM(7, 3, output_gate=False))
    assert cell.max_children == 4 and NaryTreeLSTM(7, 3).max_children == 2
    with pytest.raises(ValueError, match="unknown engine"):
        NaryTreeLSTM(7, 3, engine="levels")
    assert NaryTreeLSTM(7, 3, engine="level", output_gate=False).engine == "level"
    with pytest.raises(ValueError, match="n_ary"):
        NaryTreeLSTM(7, 3, n_ary=1, tie_forget=True)


def test_chain_with_n1_equals_lstmcell():
    """Tai §3.2: N-ary with N = 1 on a chain (a word at every node) is the standard LSTM."""
    torch.manual_seed(3)
    n = 7
    g = chain(n)
    cell = NaryTreeLSTM(X, H, n_ary=1).double()
    x = torch.randn(n, X, dtype=torch.float64)
    P = cell.paper_weights()
    ref = torch.nn.LSTMCell(X, H).double()
    with torch.no_grad():  # LSTMCell gate order: i, f, g(=u), o
        ref.weight_ih.copy_(torch.cat([P["W_i"], P["W_f"], P["W_u"], P["W_o"]]))
        ref.weight_hh.copy_(torch.cat([P["U_i"][0], P["U_f"][0][0], P["U_u"][0], P["U_o"][0]]))
        ref.bias_ih.copy_(torch.cat([P["b_i"], P["b_f"], P["b_u"], P["b_o"]]))
        ref.bias_hh.zero_()
        h, c = cell(g, x)
        hx = cx = torch.zeros(1, H, dtype=torch.float64)
        for t in range(n):
            hx, cx = ref(x[t:t + 1], (hx, cx))
            torch.testing.assert_close(h[t], hx[0], atol=1e-12, rtol=1e-12)
            torch.testing.assert_close(c[t], cx[0], atol=1e-12, rtol=1e-12)


def test_child_order_matters_but_edge_order_does_not():
    torch.manual_seed(4)
    # root 0 with children 1 (pos 0) and 2 (pos 1); leaves carry words
    parents, words = [-1, 0, 0], [NO_WORD, 3, 4]
    g = make_tree(parents, words, positions=[0, 0, 1])
    swapped = make_tree(parents, words, positions=[0, 1, 0])
    # same tree as g, edges listed in the other order
    shuffled = dgl.graph(([2, 1], [0, 0]), num_nodes=3)
    shuffled.ndata["word"] = g.ndata["word"]
    shuffled.edata["pos"] = torch.tensor([1, 0])
    cell = NaryTreeLSTM(X, H).double()
    x = torch.randn(3, X, dtype=torch.float64)
    with torch.no_grad():
        h, _ = cell(g, x)
        h_sw, _ = cell(swapped, x)
        h_sh, _ = cell(shuffled, x)
    assert not torch.allclose(h[0], h_sw[0])
    torch.testing.assert_close(h, h_sh, atol=1e-12, rtol=1e-12)


def test_bad_input_raises_before_computation():
    cell = NaryTreeLSTM(X, H, n_ary=2)
    g = make_tree([-1, 0, 0, 0], [NO_WORD, 1, 2, 3])  # 3 children
    with pytest.raises(ValueError, match="3 children"):
        cell(g, torch.randn(4, X))
    ok = make_tree([-1, 0, 0], [NO_WORD, 1, 2])
    with pytest.raises(ValueError, match="x_size"):
        cell(ok, torch.randn(3, X + 2))
    with pytest.raises(ValueError, match="rows"):
        cell(ok, torch.randn(2, X))
    with pytest.raises(ValueError, match="dtype"):
        cell(ok, torch.randn(3, X, dtype=torch.float64))
    bare = dgl.graph(([1, 2], [0, 0]), num_nodes=3)
    bare.ndata["word"] = torch.tensor([NO_WORD, 1, 2])
    with pytest.raises(ValueError, match="'pos'"):
        cell(bare, torch.randn(3, X))
    no_word = dgl.graph(([1, 2], [0, 0]), num_nodes=3)
    no_word.edata["pos"] = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="'word'"):
        cell(no_word, torch.randn(3, X))
    bad_pos = make_tree([-1, 0, 0], [NO_WORD, 1, 2], positions=[0, 0, 2])
    with pytest.raises(ValueError, match="position"):
        cell(bad_pos, torch.randn(3, X))
    dup = dgl.graph(([1, 2], [0, 0]), num_nodes=3)
    dup.ndata["word"] = torch.tensor([NO_WORD, 1, 2])
    dup.edata["pos"] = torch.tensor([1, 1])
    with pytest.raises(ValueError, match="share a child position"):
        cell(dup, torch.randn(3, X))
    cyc = dgl.graph(([0, 1, 2], [1, 2, 0]), num_nodes=3)
    cyc.ndata["word"] = torch.tensor([1, 2, 3])
    cyc.edata["pos"] = torch.tensor([0, 0, 0])
    with pytest.raises(ValueError, match="cycle"):
        cell(cyc, torch.randn(3, X))
