"""The Triton level loops' host-side bookkeeping in
:mod:`gnn_treelstm.kernels.fused_triton` (the kernels themselves: ``tests/engine/test_triton.py``
and the registry-wide test)."""

from __future__ import annotations

import pytest
import torch

from gnn_treelstm.kernels import fused_triton


@pytest.mark.parametrize("lexicalized", [True, False])
@pytest.mark.parametrize("gate", [True, False])
def test_lex_matrix_grads_are_autograds_gradient_of_lex_matrix(lexicalized, gate):
    hs, xs = 3, 4
    gen = torch.Generator().manual_seed(0)
    W_x = torch.randn((4 if lexicalized else 3) * hs, xs, generator=gen, dtype=torch.float64,
                      requires_grad=True)
    U_h = torch.randn(5 * hs, 2 * hs, generator=gen, dtype=torch.float64, requires_grad=True)
    U_c = torch.randn(3 * hs, 2 * hs, generator=gen, dtype=torch.float64, requires_grad=True)
    W_z = torch.randn(xs, 2 * xs, generator=gen, dtype=torch.float64, requires_grad=True)
    M = fused_triton.lex_matrix(W_x, U_h, U_c, W_z if gate else None, lexicalized)
    dM = torch.randn(M.shape, generator=gen, dtype=torch.float64)
    wanted = [W_x, U_h, U_c] + ([W_z] if gate else [])
    want = torch.autograd.grad(M, wanted, dM)
    got = fused_triton.lex_matrix_grads(dM, hs, lexicalized, gate)
    assert (got[3] is None) == (not gate)
    for g, w in zip(got, want):
        assert g.shape == w.shape and torch.equal(g, w)
