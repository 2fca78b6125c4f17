"""BidirectionalTreeLSTM (Teng & Zhang §4.3, eq 16) against the naive reference."""

from __future__ import annotations

import dgl
import pytest
import torch

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm.cells import bidirectional as bimod
from gnn_treelstm.cells import build_cell, cells
from gnn_treelstm.cells.bidirectional import BidirectionalTreeLSTM
from gnn_treelstm.cells.lexicalized import teng_table5_count
from gnn_treelstm.trees.graph import make_tree
from tests.reference import teng
from tests.reference.teng import binary_batch, check_against_reference, param_count

X, H = 6, 5
CONFIGS = [dict(), dict(head="right", tie_input=False)]


def _ref_states(cell, tree, x):
    h, c, _ = teng.bitree_reference(cell, tree, x)
    return h, c


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kw", CONFIGS, ids=str)
def test_matches_reference(dtype, kw):
    cell = BidirectionalTreeLSTM(X, H, **kw)
    check_against_reference(cell, binary_batch(21), dtype, _ref_states)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sentence_vector_matches_eq16(dtype):
    """Eq 16 (B, 3h) and its gradients, against the reference, on 20 batched trees."""
    torch.manual_seed(2)
    cell = BidirectionalTreeLSTM(X, H).to(dtype)
    graphs = binary_batch(22)
    g = dgl.batch(graphs)
    x = torch.randn(g.num_nodes(), X, dtype=dtype)
    s = cell.sentence_vector(g, cell(g, x)[0])
    assert s.shape == (len(graphs), 3 * H) and cell.sentence_size == 3 * H
    r = torch.randn_like(s)
    params = list(cell.parameters())
    grads = torch.autograd.grad((s * r).sum(), params)
    off, refs = 0, []
    for gi in graphs:
        n = gi.num_nodes()
        refs.append(teng.bitree_reference(cell, teng.tree_from_graph(gi), x[off:off + n])[2])
        off += n
    ref = torch.stack(refs)
    ref_grads = torch.autograd.grad((ref * r).sum(), params)
    tol = teng.TOL[dtype]
    torch.testing.assert_close(s, ref, atol=tol, rtol=tol)
    for (name, _), a, b in zip(cell.named_parameters(), grads, ref_grads):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol, msg=lambda m, n=name: f"{n}: {m}")


def test_node_vectors():
    """Per node [h↑ ; h↓ ; mean of the covered leaves' h↓]; at roots = sentence_vector."""
    cell = BidirectionalTreeLSTM(X, H).double()
    g = dgl.batch(binary_batch(23, 6))
    x = torch.randn(g.num_nodes(), X, dtype=torch.float64)
    h, _ = cell(g, x)
    nv = cell.node_vectors(g, h)
    assert nv.shape == (g.num_nodes(), 3 * H)
    torch.testing.assert_close(nv[:, : 2 * H], h)
    roots = torch.nonzero(g.out_degrees() == 0)[:, 0]
    torch.testing.assert_close(nv[roots], cell.sentence_vector(g, h))
    span, leaf = g.ndata["span"], g.in_degrees() == 0
    off = 0
    for n in g.batch_num_nodes().tolist():
        sub = list(range(off, off + n))
        for v in sub:
            covered = [u for u in sub if leaf[u] and span[v, 0] <= span[u, 0] < span[v, 1]]
            torch.testing.assert_close(nv[v, 2 * H:], h[covered, H:].mean(0))
        off += n


def test_equals_both_directions_with_shared_heads():
    cell = BidirectionalTreeLSTM(X, H).double()
    g = dgl.batch(binary_batch(24, 5))
    x = torch.randn(g.num_nodes(), X, dtype=torch.float64)
    h, c = cell(g, x)
    heads = cell.up.head_lexicon(g, x)
    hu, cu = cell.up(g, x, heads=heads)
    hd, cd = cell.down(g, x, heads=heads)
    assert torch.equal(h, torch.cat([hu, hd], -1)) and torch.equal(c, torch.cat([cu, cd], -1))


def test_batched_equals_tree_by_tree():
    cell = BidirectionalTreeLSTM(X, H).double()
    graphs = binary_batch(25, 6)
    g = dgl.batch(graphs)
    x = torch.randn(g.num_nodes(), X, dtype=torch.float64)
    h, c = cell(g, x)
    s = cell.sentence_vector(g, h)
    off = 0
    for i, gi in enumerate(graphs):
        n = gi.num_nodes()
        hi, ci = cell(gi, x[off:off + n])
        torch.testing.assert_close(h[off:off + n], hi, atol=1e-12, rtol=0)
        torch.testing.assert_close(c[off:off + n], ci, atol=1e-12, rtol=0)
        torch.testing.assert_close(s[i], cell.sentence_vector(gi, hi)[0], atol=1e-12, rtol=0)
        off += n


def test_graph_unchanged():
    g = dgl.batch(binary_batch(26, 6))
    before_n = {k: v.clone() for k, v in g.ndata.items()}
    before_e = {k: v.clone() for k, v in g.edata.items()}
    cell = BidirectionalTreeLSTM(X, H)
    h, _ = cell(g, torch.randn(g.num_nodes(), X))
    cell.sentence_vector(g, h)
    cell.node_vectors(g, h)
    assert set(g.ndata.keys()) == set(before_n) and set(g.edata.keys()) == set(before_e)
    assert all(torch.equal(g.ndata[k], v) for k, v in before_n.items())
    assert all(torch.equal(g.edata[k], v) for k, v in before_e.items())


def test_every_parameter_gets_gradient():
    cell = BidirectionalTreeLSTM(X, H)
    g = dgl.batch(binary_batch(27, 8))
    h, c = cell(g, torch.randn(g.num_nodes(), X))
    (cell.sentence_vector(g, h).sum() + h.sum() + c.sum()).backward()
    for name, p in cell.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_reset_parameters_changes_weights():
    cell = BidirectionalTreeLSTM(X, H)
    before = {n: p.detach().clone() for n, p in cell.named_parameters()}
    cell.reset_parameters()
    changed = [n for n, p in cell.named_parameters() if not torch.equal(before[n], p)]
    assert set(before) - set(changed) == {"up.b", "up.head_lexicon_module.b_z", "down.b"}


def test_repr_registry_attributes():
    cell = build_cell("bitree", X, H)
    assert "bitree" in cells and isinstance(cell, BidirectionalTreeLSTM)
    r = repr(cell)
    assert f"x_size={X}" in r and f"h_size={H}" in r and f"out_size={2 * H}" in r
    assert cell.out_size == 2 * H and cell.max_children == 2
    assert cell.down.head_lexicon_module is None  # heads come from the bottom-up cell


@pytest.mark.parametrize("h_size,paper", [(75, 564_923), (150, 1_297_523)])
def test_parameter_count_matches_teng_table5(h_size, paper):
    """Cell + eq-17 classifier on the eq-16 vector (3h -> 128 -> 5), no embeddings."""
    cell = BidirectionalTreeLSTM(300, h_size)
    classifier = 3 * h_size * 128 + 128 + 128 * 5 + 5
    assert param_count(cell) + classifier == paper == teng_table5_count("bitree", h_size)


def test_bad_input_raises_before_computation(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("computation started before validation")

    cell = BidirectionalTreeLSTM(X, H)
    g = make_tree([2, 2, -1], [1, 2, -1])
    h, _ = cell(g, torch.randn(3, X))
    monkeypatch.setattr(bimod.dgl, "prop_nodes_topo", boom)  # the dgl module: all cells
    with pytest.raises(ValueError, match="children"):
        cell(make_tree([3, 3, 3, -1], [1, 2, 3, -1]), torch.randn(4, X))
    cyc = dgl.graph((torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])))
    cyc.edata["pos"] = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(ValueError, match="cycle"):
        cell(cyc, torch.randn(3, X))
    with pytest.raises(ValueError, match="x_size"):
        cell(g, torch.randn(3, 2 * X))
    with pytest.raises(ValueError, match="h has shape"):
        cell.sentence_vector(g, h[:, :H])
    with pytest.raises(ValueError, match="h has shape"):
        cell.node_vectors(g, h[:2])
    del g.edata["pos"]
    with pytest.raises(ValueError, match="pos"):
        cell(g, torch.randn(3, X))
    with pytest.raises(ValueError, match="unknown engine"):
        BidirectionalTreeLSTM(X, H, engine="levels")
