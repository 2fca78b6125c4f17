"""ChildSumTreeLSTM (Tai et al. 2015 eqs 2-8) against the node-by-node reference."""

from __future__ import annotations

import random

import dgl
import pytest
import torch

import gnn_treelstm
from gnn_treelstm.cells.childsum import ChildSumTreeLSTM
from gnn_treelstm.cells.sequential import num_params
from gnn_treelstm.trees.graph import make_tree
from tests.cells.common import assert_same_graph, grads, snapshot
from tests.handbuilt import chain, random_dependency_tree, random_tree
from tests.reference import tai

X, H = 6, 5
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def varied_trees(seed: int = 0, count: int = 24) -> list[dgl.DGLGraph]:
    """Dependency-like trees of any fan-out, binary-ish trees and chains, 1 to 15 nodes."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        if i % 3 == 0:
            out.append(random_dependency_tree(rng, rng.randint(1, 15)))
        elif i % 3 == 1:
            out.append(random_tree(rng, rng.randint(1, 10), max_children=None))
        else:
            out.append(chain(rng.randint(1, 8), seed=i))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("output_gate", [True, False])
def test_matches_reference_states_and_gradients(dtype, output_gate):
    torch.manual_seed(0)
    trees = varied_trees()
    assert len(trees) >= 20
    g = dgl.batch(trees)
    cell = ChildSumTreeLSTM(X, H, output_gate=output_gate).to(dtype)
    x = torch.randn(g.num_nodes(), X, dtype=dtype)
    wh, wc = torch.randn(g.num_nodes(), H, dtype=dtype), torch.randn(g.num_nodes(), H, dtype=dtype)
    h, c = cell(g, x)
    rh, rc = tai.childsum(cell, g, x)
    tol = TOL[dtype]
    torch.testing.assert_close(h, rh, atol=tol, rtol=tol)
    torch.testing.assert_close(c, rc, atol=tol, rtol=tol)
    g1 = grads(cell, (h * wh).sum() + (c * wc).sum())
    g2 = grads(cell, (rh * wh).sum() + (rc * wc).sum())
    assert set(g1) == set(g2) == {n for n, _ in cell.named_parameters()}
    for name in g1:
        torch.testing.assert_close(g1[name], g2[name], atol=tol, rtol=tol, msg=name)
    if not output_gate:  # eq 8 without o_j
        torch.testing.assert_close(h, torch.tanh(c), atol=0, rtol=0)


def test_batched_equals_tree_by_tree_and_graph_unchanged():
    torch.manual_seed(1)
    trees = varied_trees(seed=1)
    g = dgl.batch(trees)
    snap = snapshot(g)
    cell = ChildSumTreeLSTM(X, H)
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


@pytest.mark.parametrize("output_gate", [True, False])
def test_every_parameter_gets_gradient_and_reset_changes_weights(output_gate):
    torch.manual_seed(2)
    g = dgl.batch(varied_trees(seed=2))
    cell = ChildSumTreeLSTM(X, H, output_gate=output_gate)
    h, c = cell(g, torch.randn(g.num_nodes(), X))
    (h.sum() + c.sum()).backward()
    for name, p in cell.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    before = {n: p.detach().clone() for n, p in cell.named_parameters()}
    cell.reset_parameters()
    for n, p in cell.named_parameters():
        assert not torch.equal(before[n], p), n


def test_repr_registry_and_engine():
    cell = gnn_treelstm.build_cell("childsum", 7, 3)
    assert isinstance(cell, ChildSumTreeLSTM)
    assert "x_size=7" in repr(cell) and "h_size=3" in repr(cell)
    assert cell.out_size == 3
    assert "output_gate=True" in repr(cell)
    with pytest.raises(ValueError, match="unknown engine"):
        ChildSumTreeLSTM(7, 3, engine="levels")
    assert ChildSumTreeLSTM(7, 3, engine="level", output_gate=False).engine == "level"


def test_without_output_gate_has_no_output_gate_parameters():
    """Tai's relatedness cell (stanfordnlp/treelstm gate_output = false): no W_o, U_o, b_o."""
    x, h = 300, 150
    gated = ChildSumTreeLSTM(x, h)
    cell = gnn_treelstm.build_cell("childsum", x, h, output_gate=False)
    assert isinstance(cell, ChildSumTreeLSTM) and cell.output_gate is False
    assert "output_gate=False" in repr(cell)
    # the gated layout is unchanged (the level engine reads these names)
    assert {n: tuple(p.shape) for n, p in gated.named_parameters()} == {
        "W_x.weight": (4 * h, x), "W_x.bias": (4 * h,), "U_iou.weight": (3 * h, h),
        "U_f.weight": (h, h)}
    assert {n: tuple(p.shape) for n, p in cell.named_parameters()} == {
        "W_x.weight": (3 * h, x), "W_x.bias": (3 * h,), "U_iu.weight": (2 * h, h),
        "U_f.weight": (h, h)}
    assert set(cell.paper_weights()) == {f"{m}_{g}" for m in "WUb" for g in "iuf"}
    count = sum(p.numel() for p in cell.parameters())
    assert count == num_params("childsum", x, h, counting="module", output_gate=False)
    assert count == 3 * h * (x + h + 1)  # by hand: 3 gates, W (h x), U (h h), one bias each
    # exactly one gate's W^(o), U^(o), b^(o) fewer than the gated cell
    assert sum(p.numel() for p in gated.parameters()) - count == h * (x + h + 1)


def test_chain_equals_lstmcell():
    """Tai §3.2: on a chain the Child-Sum cell reduces to the standard LSTM (eq 1)."""
    torch.manual_seed(3)
    n = 7
    g = chain(n)
    cell = ChildSumTreeLSTM(X, H).double()
    x = torch.randn(n, X, dtype=torch.float64)
    P = cell.paper_weights()
    ref = torch.nn.LSTMCell(X, H).double()
    with torch.no_grad():  # LSTMCell gate order: i, f, g(=u), o; one bias is enough
        ref.weight_ih.copy_(torch.cat([P["W_i"], P["W_f"], P["W_u"], P["W_o"]]))
        ref.weight_hh.copy_(torch.cat([P["U_i"], P["U_f"], P["U_u"], P["U_o"]]))
        ref.bias_ih.copy_(torch.cat([P["b_i"], P["b_f"], P["b_u"], P["b_o"]]))
        ref.bias_hh.zero_()
        h, c = cell(g, x)
        hx = cx = torch.zeros(1, H, dtype=torch.float64)
        for t in range(n):  # chain: node t -> t+1, so node t is time step t
            hx, cx = ref(x[t:t + 1], (hx, cx))
            torch.testing.assert_close(h[t], hx[0], atol=1e-12, rtol=1e-12)
            torch.testing.assert_close(c[t], cx[0], atol=1e-12, rtol=1e-12)


def test_invariant_to_child_order_and_edge_order():
    torch.manual_seed(4)
    rng = random.Random(4)
    for _ in range(5):
        t = random_tree(rng, 9, max_children=4, exact_children=True)
        n = t.num_nodes()
        src, dst = (a.tolist() for a in t.edges())
        parents = [-1] * n
        for s, d in zip(src, dst):
            parents[s] = d
        # permute child positions: reverse the siblings of every parent
        counts = [0] * n
        for d in dst:
            counts[d] += 1
        pos = t.edata["pos"].tolist()
        new_pos = [0] * n
        for s, d, p in zip(src, dst, pos):
            new_pos[s] = counts[d] - 1 - p
        words = t.ndata["word"].tolist()
        t2 = make_tree(parents, words, positions=new_pos)
        # and shuffle the edge order of the DGL graph
        perm = list(range(len(src)))
        rng.shuffle(perm)
        t3 = dgl.graph(([src[i] for i in perm], [dst[i] for i in perm]), num_nodes=n)
        t3.ndata["word"] = t.ndata["word"]
        cell = ChildSumTreeLSTM(X, H).double()
        x = torch.randn(n, X, dtype=torch.float64)
        with torch.no_grad():
            h1, c1 = cell(t, x)
            for other in (t2, t3):
                h2, c2 = cell(other, x)
                torch.testing.assert_close(h1, h2, atol=1e-12, rtol=1e-12)
                torch.testing.assert_close(c1, c2, atol=1e-12, rtol=1e-12)


def test_bad_input_raises_before_computation():
    cell = ChildSumTreeLSTM(X, H)
    g = chain(4)
    with pytest.raises(ValueError, match="x_size"):
        cell(g, torch.randn(4, X + 1))
    with pytest.raises(ValueError, match="rows"):
        cell(g, torch.randn(5, X))
    with pytest.raises(ValueError, match="dtype"):
        cell(g, torch.randn(4, X, dtype=torch.float64))
    cyc = dgl.graph(([0, 1, 2], [1, 2, 0]), num_nodes=3)
    with pytest.raises(ValueError, match="cycle"):
        cell(cyc, torch.randn(3, X))
    two_parents = dgl.graph(([0, 0, 1, 2], [3, 4, 3, 3]), num_nodes=5)
    with pytest.raises(ValueError, match="more than one parent"):
        cell(two_parents, torch.randn(5, X))
    # Child-Sum needs no edge fields: a bare graph works
    bare = dgl.graph(([0, 1], [2, 2]), num_nodes=3)
    h, _ = cell(bare, torch.randn(3, X))
    assert h.shape == (3, H)
