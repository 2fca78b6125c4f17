"""The level loops' bookkeeping in :mod:`gnn_treelstm.kernels.fused`: gate weights and
biases per forget gate, output gradients into schedule order, the Child-Sum loops' rows
in node order."""

from __future__ import annotations

import dgl
import pytest
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.kernels import fused, fused_triton, host
from gnn_treelstm.trees import graph as G
from tests.handbuilt import chain


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("g", [2, 3])
def test_gate_weight_and_bias_give_one_forget_gate_per_child(k, g):
    hs, xs = 4, 5
    W, b = torch.randn((g + 1) * hs, xs), torch.randn((g + 1) * hs)
    gh = g * hs
    want_w = torch.cat([W[:gh]] + [W[gh:]] * k)
    want_b = torch.cat([b[:gh]] + [b[gh:]] * k)
    assert torch.equal(fused.gate_weight(W, hs, k), want_w)
    assert torch.equal(fused._gate_bias(b, hs, k), want_b)


def test_rows_in_order_gathers_and_keeps_a_repeated_row_as_it_is():
    order = torch.randperm(7)
    dense = torch.randn(7, 3)
    assert torch.equal(fused.rows_in_order(dense, order), dense[order])
    assert torch.equal(fused.rows_in_order(dense, None), dense)
    rep = torch.randn(3).expand(7, 3)  # stride 0 along the rows: the gradient of a sum
    assert rep.stride(0) == 0
    out = fused.rows_in_order(rep, order)
    assert out.is_contiguous() and torch.equal(out, rep[order])
    one = torch.randn(7, 1).expand(7, 3)  # repeated columns, distinct rows: gathered
    assert torch.equal(fused.rows_in_order(one, order), one[order])


@pytest.mark.parametrize("repeated", [False, True])
def test_grad_buffers_take_the_gradients_in_schedule_order(repeated):
    order = torch.randperm(6)
    dh = torch.randn(3).expand(6, 3) if repeated else torch.randn(6, 3)
    dc = torch.randn(3).expand(6, 3) if repeated else torch.randn(6, 3)
    bh, bc = fused.grad_buffers(dh, dc, order)
    assert torch.equal(bh[:6], dh[order]) and torch.equal(bc[:6], dc[order])
    assert not bh[6].any() and not bc[6].any()
    # one repeated, one not: each gathered as it needs
    bh, bc = fused.grad_buffers(torch.randn(3).expand(6, 3), dc.contiguous() + 1, order)
    assert torch.equal(bc[:6], (dc.contiguous() + 1)[order])


def test_the_triton_path_takes_the_output_gradients_the_same_way():
    order = torch.randperm(5)
    dh, dc = torch.randn(3).expand(5, 3), torch.randn(5, 3)
    a, b = fused_triton._grads_in_schedule_order(dh, dc, order)
    assert torch.equal(a, dh[order]) and torch.equal(b, dc[order])


def _loop_node(t: torch.Tensor) -> tuple[str, str]:
    """The autograd node that gave ``t`` and the one that gave its first input (``wx``)."""
    node = t.grad_fn
    return type(node).__name__, type(node.next_functions[0][0]).__name__


def _paths_here() -> list[str]:
    paths = ["native"] if fused.available(torch.zeros(1)) else []
    return paths + (["triton"] if fused_triton.interpreted() else [])


@pytest.mark.parametrize("name", ["childsum", "mtree", "mtree-add", "mtree-full"])
def test_the_childsum_loops_take_and_give_node_order_gathering_inside(name):
    """Child-Sum's and the mTreeLSTM variants' loops gather the rows into schedule order and
    back inside their autograd function: ``h`` and ``c`` come out of it and its input terms
    go in as they were made, with no ``index_select`` under autograd between, whose backward
    scatters into zeros; the same states and gradients as the general level driver."""
    paths = _paths_here()
    if not paths:
        pytest.skip("neither the C++ loops nor the Triton interpreter runs here")
    # two trees whose node ids are not in level order: the permutation is not the identity
    graph = dgl.batch([G.make_tree([-1, 0, 0, 1, 1], [3, 1, 2, 0, 4], rels=[0, 1, 0, 1, 1]),
                       G.make_tree([2, 2, -1], [5, 6, 7], rels=[0, 0, 0])])
    kw = {} if name == "childsum" else {"num_relations": 2}
    torch.manual_seed(0)
    cell = build_cell(name, 4, 3, engine="level", **kw)
    x = torch.randn(graph.num_nodes(), 4, requires_grad=True)
    with host.use_path("general"):
        h0, c0 = cell(graph, x)
        (gx0,) = torch.autograd.grad((h0 * h0).sum() + c0.sum(), x)
    for path in paths:
        with host.use_path(path):
            h, c = cell(graph, x)
            for t in (h, c):  # the loop's own output, from its input terms as they were
                made, name = _loop_node(t)
                assert made.endswith("LevelsBackward") and name != "IndexSelectBackward0", path
            (gx,) = torch.autograd.grad((h * h).sum() + c.sum(), x)
        torch.testing.assert_close(h, h0)
        torch.testing.assert_close(c, c0)
        torch.testing.assert_close(gx, gx0)


@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("name", ["lstm", "bilstm", "lstm2", "bilstm2"])
def test_the_sequential_cells_states_come_in_node_order_out_of_the_loops(name, concat):
    """A sequential cell's output states (every layer's, or the top one's) come out of the
    N = 1 loop's autograd function in node order (``NaryRows.perm``): no ``index_select``
    under autograd between, whose backward scatters into zeros; with one layer and one
    direction they are the loop's outputs themselves. The same states and gradients as
    the general level driver."""
    paths = _paths_here()
    if not paths:
        pytest.skip("neither the C++ loops nor the Triton interpreter runs here")
    # chains of other lengths: the schedule's order is not the nodes' (word 1 of each
    # chain is a level-1 row, after every chain's first word)
    graph = dgl.batch([chain(n, seed=n) for n in (3, 1, 4, 2)])
    torch.manual_seed(0)
    cell = build_cell(name, 4, 3, engine="level", concat_layers=concat)
    x = torch.randn(graph.num_nodes(), 4, requires_grad=True)
    with host.use_path("general"):
        h0, c0 = cell(graph, x)
        (gx0,) = torch.autograd.grad((h0 * h0).sum() + c0.sum(), x)
    parts = (2 if "bi" in name else 1) * (2 if name.endswith("2") and concat else 1)
    for path in paths:
        with host.use_path(path):
            h, c = cell(graph, x)
            for t in (h, c):
                node = t.grad_fn
                made = [node] if parts == 1 else [f for f, _ in node.next_functions]
                assert [type(f).__name__ for f in made] == ["_NaryLevelsBackward"] * parts, \
                    (path, type(node).__name__)
            (gx,) = torch.autograd.grad((h * h).sum() + c.sum(), x)
        torch.testing.assert_close(h, h0)
        torch.testing.assert_close(c, c0)
        torch.testing.assert_close(gx, gx0)
