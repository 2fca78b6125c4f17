"""TopDownTreeLSTM (Teng & Zhang §4.3, eqs 14-15) against the naive reference."""

from __future__ import annotations

import dgl
import pytest
import torch

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm.cells import build_cell, cells
from gnn_treelstm.cells import topdown as tdmod
from gnn_treelstm.cells.lexicalized import HeadLexicon
from gnn_treelstm.cells.topdown import TopDownTreeLSTM
from gnn_treelstm.trees.graph import make_tree
from tests.reference import teng
from tests.reference.teng import binary_batch, check_against_reference, param_count

X, H = 6, 5

CONFIGS = [dict(), dict(tie_input=False), dict(head="average"), dict(head="left", tie_input=False)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_matches_reference(dtype, kw):
    cell = TopDownTreeLSTM(X, H, **kw)
    check_against_reference(cell, binary_batch(11), dtype, teng.topdown_reference)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_reference_with_given_heads(dtype):
    """``head=None``: head lexicons come from outside (here a separate HeadLexicon whose
    parameters must receive gradients through the top-down cell too)."""
    torch.manual_seed(0)
    lexicon = HeadLexicon(X, "gate").to(dtype)
    cell = TopDownTreeLSTM(X, H, head=None).to(dtype)
    graphs = binary_batch(12)
    g = dgl.batch(graphs)
    x = torch.randn(g.num_nodes(), X, dtype=dtype)
    heads = lexicon(g, x)
    h, c = cell(g, x, heads=heads)
    off, tol = 0, (1e-5 if dtype == torch.float32 else 1e-10)
    for gi in graphs:
        n = gi.num_nodes()
        tree = teng.tree_from_graph(gi)
        ref_heads = teng.heads_reference(tree, x[off:off + n], "gate", lexicon.W_z, lexicon.b_z)
        hd, cd = teng.topdown_reference(cell, tree, x[off:off + n], ref_heads)
        torch.testing.assert_close(h[off:off + n], teng.stack(hd, n), atol=tol, rtol=tol)
        torch.testing.assert_close(c[off:off + n], teng.stack(cd, n), atol=tol, rtol=tol)
        off += n
    (h.sum() + c.sum()).backward()
    assert lexicon.W_z.grad.abs().sum() > 0


def test_root_is_seeded_from_head_lexicon():
    """The root has no predecessor: its state is an LSTM step from zero state on the root's
    head lexicon with the left set (i, g, o from W_x x + b; c = i*g; o peeps at c)."""
    cell = TopDownTreeLSTM(X, H, head="left").double()
    g = make_tree([2, 2, -1], [1, 2, -1])
    x = torch.randn(3, X, dtype=torch.float64)
    h, c = cell(g, x)
    xt = x[0]  # head "left": the root's head lexicon is the left leaf's vector
    Wi, _, Wg, Wo = (cell.W_x[0, k * H:(k + 1) * H] for k in range(4))
    bi, _, bg, bo = (cell.b[0, k * H:(k + 1) * H] for k in range(4))
    c_root = torch.sigmoid(Wi @ xt + bi) * torch.tanh(Wg @ xt + bg)
    h_root = torch.sigmoid(Wo @ xt + cell.W_co[0] @ c_root + bo) * torch.tanh(c_root)
    torch.testing.assert_close(c[2], c_root)
    torch.testing.assert_close(h[2], h_root)


def test_sides_use_their_own_parameters():
    """Swapping the two children's positions changes the states (U_L != U_R)."""
    cell = TopDownTreeLSTM(X, H, head="average").double()
    g1 = make_tree([2, 2, -1], [1, 2, -1], positions=[0, 1, 0])
    g2 = make_tree([2, 2, -1], [1, 2, -1], positions=[1, 0, 0])
    x = torch.randn(3, X, dtype=torch.float64)
    h1, _ = cell(g1, x)
    h2, _ = cell(g2, x)
    torch.testing.assert_close(h1[2], h2[2])  # root: same (average head is symmetric)
    assert not torch.allclose(h1[0], h2[0])


def test_batched_equals_tree_by_tree():
    cell = TopDownTreeLSTM(X, H, tie_input=False).double()
    graphs = binary_batch(13, 8)
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
    g = dgl.batch(binary_batch(14, 6))
    before_n = {k: v.clone() for k, v in g.ndata.items()}
    before_e = {k: v.clone() for k, v in g.edata.items()}
    src, dst = (t.clone() for t in g.edges())
    TopDownTreeLSTM(X, H)(g, torch.randn(g.num_nodes(), X))
    assert set(g.ndata.keys()) == set(before_n) and set(g.edata.keys()) == set(before_e)
    assert all(torch.equal(g.ndata[k], v) for k, v in before_n.items())
    assert all(torch.equal(g.edata[k], v) for k, v in before_e.items())
    s2, d2 = g.edges()
    assert torch.equal(src, s2) and torch.equal(dst, d2)  # not reversed in place


@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_every_parameter_gets_gradient(kw):
    cell = TopDownTreeLSTM(X, H, **kw)
    g = dgl.batch(binary_batch(15, 8))
    h, c = cell(g, torch.randn(g.num_nodes(), X))
    (h.sum() + c.sum()).backward()
    for name, p in cell.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_reset_parameters_changes_weights():
    cell = TopDownTreeLSTM(X, H)
    before = {n: p.detach().clone() for n, p in cell.named_parameters()}
    cell.reset_parameters()
    for n, p in cell.named_parameters():
        if n not in ("b", "head_lexicon_module.b_z"):
            assert not torch.equal(before[n], p), n


def test_repr_registry_attributes():
    r = repr(TopDownTreeLSTM(X, H, tie_input=False))
    assert f"x_size={X}" in r and f"h_size={H}" in r and "tie_input=False" in r
    assert "topdown" in cells
    cell = build_cell("topdown", X, H)
    assert isinstance(cell, TopDownTreeLSTM) and cell.max_children == 2
    assert cell.out_size == H


def test_parameter_counts():
    """Tied (Table 5 / authors' code): 14h² + 4hx + 4h; untied (eq 15): 14h² + 8hx + 8h."""
    h, x = 150, 300
    assert param_count(TopDownTreeLSTM(x, h, head=None)) == 14 * h * h + 4 * h * x + 4 * h
    assert param_count(TopDownTreeLSTM(x, h, head=None, tie_input=False)) == (
        14 * h * h + 8 * h * x + 8 * h)
    assert param_count(TopDownTreeLSTM(x, h)) == 14 * h * h + 4 * h * x + 4 * h + 2 * x * x + x


def test_bad_input_raises_before_computation(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("computation started before validation")

    monkeypatch.setattr(tdmod.dgl, "prop_nodes_topo", boom)
    cell = TopDownTreeLSTM(X, H)
    with pytest.raises(ValueError, match="children"):
        cell(make_tree([3, 3, 3, -1], [1, 2, 3, -1]), torch.randn(4, X))
    cyc = dgl.graph((torch.tensor([0, 1]), torch.tensor([1, 0])))
    cyc.edata["pos"] = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(ValueError, match="cycle"):
        cell(cyc, torch.randn(2, X))
    g = make_tree([2, 2, -1], [1, 2, -1])
    with pytest.raises(ValueError, match="x_size"):
        cell(g, torch.randn(3, X - 1))
    with pytest.raises(ValueError, match="heads"):
        cell(g, torch.randn(3, X), heads=torch.randn(2, X))
    with pytest.raises(ValueError, match="heads"):
        TopDownTreeLSTM(X, H, head=None)(g, torch.randn(3, X))
    del g.edata["pos"]
    with pytest.raises(ValueError, match="pos"):
        cell(g, torch.randn(3, X))


def test_bad_construction():
    with pytest.raises(ValueError, match="unknown engine"):
        TopDownTreeLSTM(X, H, engine="levels")
    with pytest.raises(ValueError, match="head"):
        TopDownTreeLSTM(X, H, head="first")


def test_unary_and_single_side_nodes_match_reference():
    graphs = [
        make_tree([1, 2, -1], [4, -1, -1]),
        make_tree([3, 2, 3, -1], [1, 2, -1, -1], positions=[0, 1, 1, 0]),
        make_tree([-1], [7]),
    ]
    check_against_reference(TopDownTreeLSTM(X, H, tie_input=False), graphs, torch.float64,
                            teng.topdown_reference)


def test_sentence_and_node_vectors_are_the_top_down_half_of_eq16():
    """Sentence: [h_ROOT↓ ; mean of the leaves' h↓] (B, 2h); node: [h↓ ; mean of the covered
    leaves' h↓]; at a root the two agree, and the bidirectional cell's eq 16 is
    [h↑_ROOT ; this]."""
    from gnn_treelstm.cells.bidirectional import BidirectionalTreeLSTM

    torch.manual_seed(3)
    cell = TopDownTreeLSTM(X, H).double()
    graphs = binary_batch(25, 6)
    g = dgl.batch(graphs)
    x = torch.randn(g.num_nodes(), X, dtype=torch.float64)
    h, _ = cell(g, x)
    s, nv = cell.sentence_vector(g, h), cell.node_vectors(g, h)
    assert s.shape == (len(graphs), 2 * H) and cell.sentence_size == 2 * H
    assert nv.shape == (g.num_nodes(), 2 * H)
    torch.testing.assert_close(nv[:, :H], h)
    roots = torch.nonzero(g.out_degrees() == 0)[:, 0]
    torch.testing.assert_close(nv[roots], s)
    span, leaf = g.ndata["span"], g.in_degrees() == 0
    off = 0
    for b, n in enumerate(g.batch_num_nodes().tolist()):
        sub = list(range(off, off + n))
        words = [u for u in sub if leaf[u]]
        torch.testing.assert_close(s[b], torch.cat([h[roots[b]], h[words].mean(0)]))
        for v in sub:
            covered = [u for u in words if span[v, 0] <= span[u, 0] < span[v, 1]]
            torch.testing.assert_close(nv[v, H:], h[covered].mean(0))
        off += n
    # the bidirectional cell's eq 16 is the bottom-up root state and this
    bi = BidirectionalTreeLSTM(X, H).double()
    hb, _ = bi(g, x)
    sb = bi.sentence_vector(g, hb)
    torch.testing.assert_close(sb[:, H:], torch.cat([hb[roots, H:],
                                                     cell.sentence_vector(g, hb[:, H:])[:, H:]],
                                                    dim=-1))
    with pytest.raises(ValueError, match="forward"):
        cell.sentence_vector(g, h[:-1])


def test_model_classifies_from_the_top_down_half_of_eq16():
    from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel

    model = TreeLSTMModel(ModelConfig(task="sst-5", cell="topdown", vocab_size=100, emb_dim=X,
                                      hidden=H, supervision="phrase"))
    assert model.has_sentence_vector and model.has_node_vectors
    g = dgl.batch(binary_batch(26, 3))
    out = model(g)
    assert out["root_logits"].shape == (3, 5) and out["node_logits"].shape == (g.num_nodes(), 5)


def test_covered_leaf_mean_is_the_cover_matrix_product_with_its_gradient():
    """``covered_leaf_mean`` = A h with A[v, u] = 1/|leaves under v| for each leaf u under v
    (a node is under itself), built here by walking each node's ancestors one at a time;
    values and the gradient, a one-node tree in the batch too."""
    from gnn_treelstm.cells.topdown import covered_leaf_mean

    graphs = binary_batch(7, 9) + [make_tree([-1], [3])]
    g = dgl.batch(graphs)
    n = g.num_nodes()
    parent = [-1] * n
    for u, v in zip(*(t.tolist() for t in g.edges())):
        parent[u] = v
    A = torch.zeros(n, n, dtype=torch.float64)
    for u in (g.in_degrees() == 0).nonzero()[:, 0].tolist():
        v = u
        while v >= 0:
            A[v, u] = 1.0
            v = parent[v]
    A = A / A.sum(1, keepdim=True)
    h = torch.randn(n, 5, dtype=torch.float64, requires_grad=True)
    out = covered_leaf_mean(g, h)
    torch.testing.assert_close(out, A @ h)
    w = torch.randn(n, 5, dtype=torch.float64)
    (gh,) = torch.autograd.grad((out * w).sum(), h)
    torch.testing.assert_close(gh, A.T @ w)
