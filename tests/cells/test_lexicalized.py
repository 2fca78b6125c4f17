"""LexicalizedTreeLSTM (Teng & Zhang §4.1-4.2) against the naive reference."""

from __future__ import annotations

import dataclasses

import dgl
import pytest
import torch

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm.cells import build_cell, cells
from gnn_treelstm.cells import lexicalized as lexmod
from gnn_treelstm.cells.lexicalized import (
    HEAD_MODES,
    LexicalizedTreeLSTM,
    teng_table5_count,
)
from gnn_treelstm.kernels import fused_triton, native
from gnn_treelstm.trees.graph import NO_WORD, WORD, make_tree
from gnn_treelstm.trees.schedule import LevelSchedule
from tests.cells.common import run_and_grads
from tests.engine.compare import assert_same_run
from tests.handbuilt import random_batch
from tests.reference import teng
from tests.reference.teng import binary_batch, check_against_reference, param_count

X, H = 6, 5
CONFIGS = [dict(head=m) for m in HEAD_MODES] + [dict(lexicalized=False)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kw", CONFIGS, ids=lambda k: "-".join(f"{a}={b}" for a, b in k.items()))
def test_matches_reference(dtype, kw):
    cell = LexicalizedTreeLSTM(X, H, **kw)
    check_against_reference(cell, binary_batch(), dtype, teng.lex_reference)


def test_head_lexicon_matches_reference():
    cell = LexicalizedTreeLSTM(X, H, head="gate").double()
    graphs = binary_batch(3)
    g = dgl.batch(graphs)
    x = torch.randn(g.num_nodes(), X, dtype=torch.float64)
    heads = cell.head_lexicon(g, x)
    off = 0
    m = cell.head_lexicon_module
    for gi in graphs:
        n = gi.num_nodes()
        ref = teng.heads_reference(teng.tree_from_graph(gi), x[off:off + n], "gate", m.W_z, m.b_z)
        torch.testing.assert_close(heads[off:off + n], teng.stack(ref, n), atol=1e-12, rtol=0)
        off += n


@pytest.mark.parametrize("kw", [dict(head="gate"), dict(lexicalized=False)], ids=str)
def test_batched_equals_tree_by_tree(kw):
    cell = LexicalizedTreeLSTM(X, H, **kw).double()
    graphs = binary_batch(5, 8)
    g = dgl.batch(graphs)
    x = torch.randn(g.num_nodes(), X, dtype=torch.float64)
    h, c = cell(g, x)
    off = 0
    for gi in graphs:
        n = gi.num_nodes()
        hi, ci = cell(gi, x[off:off + n])
        torch.testing.assert_close(h[off:off + n], hi, atol=1e-12, rtol=0)
        torch.testing.assert_close(c[off:off + n], ci, atol=1e-12, rtol=0)
        off += n


def test_graph_unchanged():
    g = dgl.batch(binary_batch(2, 6))
    before_n = {k: v.clone() for k, v in g.ndata.items()}
    before_e = {k: v.clone() for k, v in g.edata.items()}
    edges = [t.clone() for t in g.edges()]
    cell = LexicalizedTreeLSTM(X, H)
    x = torch.randn(g.num_nodes(), X)
    cell(g, x)
    cell.head_lexicon(g, x)
    assert set(g.ndata.keys()) == set(before_n) and set(g.edata.keys()) == set(before_e)
    for k, v in before_n.items():
        assert torch.equal(g.ndata[k], v)
    for k, v in before_e.items():
        assert torch.equal(g.edata[k], v)
    assert all(torch.equal(a, b) for a, b in zip(g.edges(), edges))


@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_every_parameter_gets_gradient(kw):
    cell = LexicalizedTreeLSTM(X, H, **kw)
    g = dgl.batch(binary_batch(4, 8))
    h, c = cell(g, torch.randn(g.num_nodes(), X))
    (h.sum() + c.sum()).backward()
    for name, p in cell.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_reset_parameters_changes_weights():
    cell = LexicalizedTreeLSTM(X, H)
    before = {n: p.detach().clone() for n, p in cell.named_parameters()}
    cell.reset_parameters()
    for n, p in cell.named_parameters():
        if n not in ("b", "head_lexicon_module.b_z"):  # biases are re-zeroed
            assert not torch.equal(before[n], p), n


def test_repr_shows_sizes():
    r = repr(LexicalizedTreeLSTM(X, H, head="right"))
    assert f"x_size={X}" in r and f"h_size={H}" in r and "'right'" in r
    assert "lexicalized=False" in repr(LexicalizedTreeLSTM(X, H, lexicalized=False))


def test_registry_and_attributes():
    assert "lex" in cells
    cell = build_cell("lex", X, H, head="average")
    assert isinstance(cell, LexicalizedTreeLSTM) and cell.head_mode == "average"
    assert cell.max_children == 2 and cell.tree_kinds == ("constituency",)
    assert cell.out_size == H


@pytest.mark.parametrize("mode,side", [("left", 0), ("right", 1)])
def test_left_head_propagates_leftmost_leaf(mode, side):
    """Head ``left``: every node's head lexicon is exactly (bit for bit) its leftmost
    leaf's vector, in particular the root's; ``right``: the rightmost leaf's."""
    cell = LexicalizedTreeLSTM(X, H, head=mode)
    g = dgl.batch(binary_batch(7))
    x = torch.randn(g.num_nodes(), X)
    heads = cell.head_lexicon(g, x)
    span, leaf, root = g.ndata["span"], g.in_degrees() == 0, g.out_degrees() == 0
    off = 0
    for n in g.batch_num_nodes().tolist():  # spans are per sentence
        sub = range(off, off + n)
        leaf_at = {int(span[v, 0]): v for v in sub if leaf[v]}
        for v in sub:
            edge_word = int(span[v, 0]) if side == 0 else int(span[v, 1]) - 1
            assert torch.equal(heads[v], x[leaf_at[edge_word]]), (v, bool(root[v]))
        off += n
    roots = torch.nonzero(root)[:, 0]
    assert len(roots) == 20


@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_internal_rows_of_x_are_ignored(kw):
    cell = LexicalizedTreeLSTM(X, H, **kw)
    g = dgl.batch(binary_batch(8, 6))
    x = torch.randn(g.num_nodes(), X)
    x2 = x.clone()
    x2[g.in_degrees() > 0] = 1e3
    h1, _ = cell(g, x)
    h2, _ = cell(g, x2)
    assert torch.equal(h1, h2)


def test_explicit_heads_equal_default():
    cell = LexicalizedTreeLSTM(X, H).double()
    g = dgl.batch(binary_batch(9, 5))
    x = torch.randn(g.num_nodes(), X, dtype=torch.float64)
    h1, c1 = cell(g, x)
    h2, c2 = cell(g, x, heads=cell.head_lexicon(g, x))
    assert torch.equal(h1, h2) and torch.equal(c1, c2)


def test_single_leaf_tree():
    cell = LexicalizedTreeLSTM(X, H).double()
    g = make_tree([-1], [3])
    x = torch.randn(1, X, dtype=torch.float64)
    h, c = cell(g, x)
    hr, cr = teng.lex_reference(cell, teng.tree_from_graph(g), x)
    torch.testing.assert_close(h[0], hr[0])


# ------------------------------------------------------------------ parameter counts
@pytest.mark.parametrize("model,h_size,paper", [
    ("contree", 150, 538_223), ("lex", 75, 376_673), ("lex", 150, 763_523),
    ("lex", 215, 1_253_493), ("lex", 300, 2_110_973),
])
def test_parameter_count_matches_teng_table5(model, h_size, paper):
    """Teng Table 5 counts cell + eq-17 classifier (h -> 128 -> 5), no embeddings."""
    cell = LexicalizedTreeLSTM(300, h_size, lexicalized=(model == "lex"))
    classifier = h_size * 128 + 128 + 128 * 5 + 5
    assert param_count(cell) + classifier == paper == teng_table5_count(model, h_size)


# ------------------------------------------------------------------ bad input
def _no_compute(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("computation started before validation")
    monkeypatch.setattr(lexmod.dgl, "prop_nodes_topo", boom)


def test_bad_input_raises_before_computation(monkeypatch):
    cell = LexicalizedTreeLSTM(X, H)
    _no_compute(monkeypatch)
    ternary = make_tree([3, 3, 3, -1], [1, 2, 3, -1])
    with pytest.raises(ValueError, match="children"):
        cell(ternary, torch.randn(4, X))
    cyc = dgl.graph((torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])))
    cyc.edata["pos"] = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(ValueError, match="cycle"):
        cell(cyc, torch.randn(3, X))
    g = binary_batch(1, 1)[0]
    n = g.num_nodes()
    with pytest.raises(ValueError, match="x_size"):
        cell(g, torch.randn(n, X + 1))
    with pytest.raises(ValueError, match="rows"):
        cell(g, torch.randn(n + 1, X))
    with pytest.raises(ValueError, match="heads"):
        cell(g, torch.randn(n, X), heads=torch.randn(n, X + 2))
    with pytest.raises(ValueError, match="float"):
        cell(g, torch.ones(n, X, dtype=torch.int64))
    nopos = make_tree([2, 2, -1], [1, 2, -1])
    del nopos.edata["pos"]
    with pytest.raises(ValueError, match="pos"):
        cell(nopos, torch.randn(3, X))
    with pytest.raises(ValueError, match="pos"):
        cell.head_lexicon(nopos, torch.randn(3, X))


def test_bad_construction():
    with pytest.raises(ValueError, match="unknown engine"):
        LexicalizedTreeLSTM(X, H, engine="levels")
    with pytest.raises(ValueError, match="head"):
        LexicalizedTreeLSTM(X, H, head="middle")


@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_unary_and_single_side_nodes_match_reference(kw):
    """Outside the paper's strictly binary trees: a unary node (only a left child) and a
    node with only a right child take zeros for the missing child, as in the reference."""
    graphs = [
        make_tree([1, 2, -1], [4, -1, -1]),  # leaf -> unary -> unary root
        make_tree([3, 2, 3, -1], [1, 2, -1, -1], positions=[0, 1, 1, 0]),  # right-only node
        make_tree([-1], [7]),
    ]
    check_against_reference(LexicalizedTreeLSTM(X, H, **kw), graphs, torch.float64,
                            teng.lex_reference)


def _constituency_with_wordless_leaves():
    """A batch of binary trees (every leaf a word), and the same batch with every third
    leaf's word taken away."""
    g = dgl.batch(random_batch(3, 12, max_children=2, exact_children=True, words="leaves"))
    bare = g.clone()
    leaves = torch.nonzero(g.in_degrees() == 0)[:, 0]
    words = g.ndata[WORD].clone()  # (a clone's frames share the graph's tensors)
    words[leaves[::3]] = NO_WORD
    bare.ndata[WORD] = words
    return g, bare, leaves[::3]


def _run(name, g, x, path, schedule=None, engine="level"):
    """States and gradients of the cell ``name`` (seeded weights) on ``path``."""
    torch.manual_seed(0)
    cell = build_cell(name, X, H, engine=engine)
    torch.manual_seed(1)
    wh, wc = (torch.randn(g.num_nodes(), cell.out_size) for _ in range(2))
    fused_triton.set_choice(path)
    try:
        return run_and_grads(cell, lambda gg, xx: cell(gg, xx, schedule=schedule), g, x, wh, wc)
    finally:
        fused_triton.set_choice(None)


def _paths():
    paths = [pytest.param("native", id="cpp")]
    if fused_triton.interpreted():
        paths.append(pytest.param("triton", id="triton"))
    return paths


@pytest.mark.parametrize("path", _paths())
@pytest.mark.parametrize("name", ["lex", "topdown", "bitree"])
def test_a_leaf_without_a_word_reads_no_x_on_the_level_loops(name, path):
    """The head-lexicon loops read the leaves' rows of ``x`` as they are where every leaf
    has a word (``leaf_word_rows``), and masked where one has none: a word-less leaf's
    ``x`` changes nothing and gets a zero gradient, as on the dgl engine."""
    if path == "native" and not native.available(torch.zeros(1)):
        pytest.skip("the C++ level loops are not built here")
    _, bare, wordless = _constituency_with_wordless_leaves()
    torch.manual_seed(2)
    x = torch.randn(bare.num_nodes(), X)
    x_big = x.clone()
    x_big[wordless] = 1e3
    h, c, grads = _run(name, bare, x_big, path)
    h0, c0, _ = _run(name, bare, x, path)
    assert torch.equal(h, h0) and torch.equal(c, c0)
    assert torch.count_nonzero(grads["x"][wordless]) == 0
    want = _run(name, bare, x_big, path, engine="dgl")  # the same weights
    assert_same_run((h, c, grads), want, tol=1e-5)


@pytest.mark.parametrize("path", _paths())
@pytest.mark.parametrize("name", ["lex", "topdown", "bitree"])
def test_leaves_that_all_have_words_skip_the_mask_to_the_bit(name, path, monkeypatch):
    """Where the schedule counts a word at every leaf, the loops take ``x``'s rows without
    the word mask, and the states and gradients are those of the masked rows bit for bit."""
    if path == "native" and not native.available(torch.zeros(1)):
        pytest.skip("the C++ level loops are not built here")
    g, _, _ = _constituency_with_wordless_leaves()
    torch.manual_seed(2)
    x = torch.randn(g.num_nodes(), X)
    sched = LevelSchedule.from_graph(g)
    masked = _run(name, g, x, path, dataclasses.replace(sched, num_leaf_words=-1))

    def no_mask(*_):
        raise AssertionError("the word mask was applied")

    monkeypatch.setattr(lexmod, "leaf_word_inputs", no_mask)
    (h, c, grads), (h0, c0, grads0) = _run(name, g, x, path, sched), masked
    assert torch.equal(h, h0) and torch.equal(c, c0)
    assert grads.keys() == grads0.keys()
    assert all(torch.equal(grads[k], grads0[k]) for k in grads)
