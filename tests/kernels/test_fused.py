"""The level loops' bookkeeping in :mod:`gnn_treelstm.kernels.fused`: gate weights and
biases per forget gate, output gradients into schedule order."""

from __future__ import annotations

import pytest
import torch

from gnn_treelstm.kernels import fused, fused_triton


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
