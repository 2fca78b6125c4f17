"""Fast level kernels: the C++ level loops (``csrc/``) behind ``torch.autograd.Function``.

Optional accelerations of the level engine, for float32 CPU tensors when the native
library builds (:mod:`.native`). Each is named by the cell it accelerates, beside the cell's
declaration (``level_kernel`` in the cell's file); the cell's equations exist in the cell's
file and in the one C++ loop here, nowhere else. What Python does here is bookkeeping
around the loops: buffers, the input products ``W x + b`` of all nodes at once, and the
weight gradients as **one** matrix product per weight over all nodes or edges (not one per
level). ``tests/test_cell_registry.py`` holds every kernel equal to the general level
driver (:func:`gnn_treelstm.engine.level.propagate`) and to the DGL engine.

* :func:`childsum_levels`: Child-Sum (Tai eqs 2-8), also mtree-add (the relation enters
  the input terms only).
* :func:`nary_levels`: N-ary (Tai eqs 9-14) with the input projection inside, also the
  sequential LSTM (Tai eq 1 = N-ary with N = 1 on chains).
"""

from __future__ import annotations

import torch

from . import native
from .gemm import mm_nt
from .schedule import Levels

__all__ = ["available", "childsum_levels", "nary_levels", "gate_weight", "single_source_slots"]


def available(t: torch.Tensor) -> bool:
    """Whether the C++ loops run for tensors like ``t`` (float32, CPU, library built, not
    switched off by ``GNN_TREELSTM_NATIVE=off``)."""
    return native.available(t)


def _grad_buffers(dh_out: torch.Tensor, dc_out: torch.Tensor,
                  order: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward's ``dh``, ``dc`` buffers (N + 1, h) in schedule order, from the output
    gradients (N, h) in schedule order, or in node order gathered by ``order`` (a
    permutation's backward is a gather, not a scatter); row N (the padding row of missing
    children) is zero."""
    n, hs = dh_out.shape
    dh = dh_out.new_empty(n + 1, hs)
    dc = dc_out.new_empty(n + 1, hs)
    dh[n] = 0
    dc[n] = 0
    if order is None:
        dh[:n] = dh_out
        dc[:n] = dc_out
    else:
        torch.index_select(dh_out, 0, order, out=dh[:n])
        torch.index_select(dc_out, 0, order, out=dc[:n])
    return dh, dc


# ============================================================== Child-Sum (Tai eqs 2-8)

def _matmul(a: torch.Tensor, b: torch.Tensor, *, vary_k: bool = False,
            vary_m: bool = True) -> torch.Tensor:
    """``a @ b`` for the weight-gradient products, whose ``a`` is a transposed view
    (``dgates^T``): the native kernel for float32 CPU tensors reads it in place (oneDNN
    would copy it), else :func:`.gemm.mm_nt` (``vary_k``/``vary_m`` as there)."""
    if native.available(a):
        return torch.ops.gnn_treelstm.matmul(a, b)
    return mm_nt(a, b.t(), vary_k=vary_k, vary_m=vary_m)





# ============================================================== Child-Sum (Tai eqs 2-8)
class _ChildSumLevels(torch.autograd.Function):
    """Child-Sum recurrence over all levels given ``W x + b``, in C++
    (``csrc/childsum_levels.cpp``).

    Inputs: ``wx`` (N, 4h) in schedule order, gate order ``i, o, u, f``; ``U_iou`` (3h, h);
    ``U_f`` (h, h); ``lv`` (up levels). Outputs ``h, c`` (N, h) in schedule order.
    """

    @staticmethod
    def forward(ctx, wx, U_iou, U_f, lv: Levels):
        n, hs = wx.shape[0], U_f.shape[0]
        e = lv.edge_src.shape[0]
        h = wx.new_empty(n + 1, hs)
        c = wx.new_empty(n + 1, hs)
        h[n] = 0
        c[n] = 0
        gates, h_tilde = wx.new_empty(n, 3 * hs), wx.new_empty(n, hs)
        fgate, tc = wx.new_empty(e, hs), wx.new_empty(n, hs)
        torch.ops.gnn_treelstm.childsum_forward(
            wx.contiguous(), h, c, gates, h_tilde, fgate, tc, lv.edge_src, lv.edge_dst,
            lv.node_offsets, lv.edge_offsets, U_iou.contiguous(), U_f.contiguous())
        ctx.lv = lv
        ctx.save_for_backward(U_iou, U_f, h, c, gates, h_tilde, fgate, tc)
        return h[:n], c[:n]

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        """The level loop in C++; the weight gradients are one product each over all
        nodes / edges."""
        U_iou, U_f, h, c, gates, h_tilde, fgate, tc = ctx.saved_tensors
        lv: Levels = ctx.lv
        n, hs = gates.shape[0], U_f.shape[0]
        dh, dc = _grad_buffers(dh_out, dc_out)
        dgates = torch.empty_like(gates)  # d pre-activations of i, o, u (N, 3h)
        dfgate = torch.empty_like(fgate)  # d pre-activation of f per edge (E, h)
        torch.ops.gnn_treelstm.childsum_backward(
            dh, dc, dgates, dfgate, gates, c, tc, fgate, lv.edge_src, lv.edge_dst,
            lv.node_offsets, lv.edge_offsets, U_iou.contiguous(), U_f.contiguous())
        hk_all = h.index_select(0, lv.edge_src)  # (E, h)
        dU_iou = _matmul(dgates.t(), h_tilde)  # (3h, h), one product over all nodes
        dU_f = _matmul(dfgate.t(), hk_all)  # (h, h) over all edges
        dwx_f = h.new_zeros(n, hs).index_add_(0, lv.edge_dst, dfgate)
        return torch.cat([dgates, dwx_f], dim=1), dU_iou, dU_f, None



def childsum_levels(wx: torch.Tensor, U_iou: torch.Tensor, U_f: torch.Tensor,
                    lv: Levels) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Child-Sum ``(h, c)`` in schedule order from ``wx`` (N, 4h) in schedule order, or
    ``None`` when the C++ loops cannot run for ``wx``."""
    if not available(wx):
        return None
    return _ChildSumLevels.apply(wx, U_iou, U_f, lv)


# ============================================================== N-ary (Tai eqs 9-14)
def _gate_bias(b: torch.Tensor, hs: int, k: int) -> torch.Tensor:
    """The bias (4h,) rows ``i, o, u, f`` -> one per gate column ``i, o, u, f_1..f_K``."""
    return torch.cat([b[: 3 * hs], b[3 * hs:].repeat(k)])


def gate_weight(W: torch.Tensor, hs: int, k: int) -> torch.Tensor:
    """``W`` (4h, X) rows ``i, o, u, f`` -> ((3+K) h, X), ``W^(f)`` once per forget gate."""
    return torch.cat([W[: 3 * hs], W[3 * hs:].repeat(k, 1)])



class _NaryLevels(torch.autograd.Function):
    """N-ary recurrence (Tai eqs 9-14) over all levels, input terms included.

    Inputs: ``xw`` (M, X) the inputs of the rows that have one, at schedule rows
    ``rows_w`` (sorted; ``None``: rows ``0..M-1``), the first ``m0`` of them leaves (level
    0: no child, so their forget-gate input terms are skipped); ``W`` (4h, X) and ``b``
    (4h,) rows ``i, o, u, f`` (``W^(f)`` shared by the K forget gates); ``U`` ((3+K)h, K h)
    rows ``i, o, u, f_1..f_K``, columns ``[h_j1; ...; h_jK]``; ``slots`` (N, K) children
    rows by position (padding N); ``lv``; ``perm``: ``(rank, order)`` to return node order,
    or ``None`` for schedule order. Every row gets ``b``. Outputs ``h, c`` (N, h).

    The gate columns of the internal buffers follow ``U``'s rows, ``i, o, u, f_1..f_K``
    (C = (3+K) h). The level loops run in C++ (``csrc/nary_levels.cpp``); float32 CPU
    tensors only (:func:`nary_levels` checks).
    """

    @staticmethod
    def forward(ctx, xw, W, b, U, slots, lv: Levels, rows_w, m0: int, perm):
        n, k = slots.shape
        hs = U.shape[1] // k
        cols = (3 + k) * hs
        m = xw.shape[0]
        b_all = _gate_bias(b, hs, k)  # (C,)
        use_native = True
        # (N, C) W x_j + b (eqs 9-12), then the activated gates. The native loop reads only
        # i, o, u of the leaves, so their forget columns need no value there.
        if use_native and rows_w is None and m0 > 0:
            gates = xw.new_empty(n, cols)
            gates[m0:] = b_all
        else:
            gates = b_all.expand(n, cols).clone()
        if m0:  # leaves: i, o, u only
            p0 = mm_nt(xw[:m0], W[: 3 * hs], b[: 3 * hs])  # (m0, 3h)
            if rows_w is None:
                gates[:m0, : 3 * hs] = p0
            else:
                gates[:, : 3 * hs].index_copy_(0, rows_w[:m0], p0)
        if m > m0:
            p1 = mm_nt(xw[m0:], gate_weight(W, hs, k), b_all)  # (M - m0, C)
            if rows_w is None:
                gates[m0:m] = p1
            else:
                gates.index_copy_(0, rows_w[m0:], p1)
        h = xw.new_empty(n + 1, hs)  # row n: zero padding row (missing children)
        c = xw.new_empty(n + 1, hs)
        h[n] = 0
        c[n] = 0
        tc = xw.new_empty(n, hs)  # tanh(c_j), kept for the backward
        torch.ops.gnn_treelstm.nary_forward(gates, h, c, tc, slots.contiguous(),
                                            lv.node_offsets, U.contiguous())
        ctx.lv, ctx.rows_w, ctx.m0, ctx.perm = lv, rows_w, m0, perm
        ctx.save_for_backward(xw, W, U, slots, h, c, tc, gates)
        if perm is None:
            return h[:n], c[:n]
        rank = perm[0]
        return h.index_select(0, rank), c.index_select(0, rank)

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        xw, W, U, slots, h, c, tc, gates = ctx.saved_tensors
        lv: Levels = ctx.lv
        dh, dc = _grad_buffers(dh_out, dc_out, None if ctx.perm is None else ctx.perm[1])
        dgates = torch.empty_like(gates)
        torch.ops.gnn_treelstm.nary_backward(dgates, dh, dc, gates, c, tc, slots.contiguous(),
                                             lv.node_offsets, U.contiguous())
        return _nary_param_grads(ctx, dgates, xw, W, h, slots, lv)



def _nary_param_grads(ctx, dgates, xw, W, h, slots, lv: Levels):
    """Gradients of :class:`_NaryLevels`' inputs from the pre-activation gradients (N, C)
    (one product per weight over all nodes, not one per level)."""
    rows_w, m0 = ctx.rows_w, ctx.m0
    n, k = slots.shape
    hs = h.shape[1]
    m = xw.shape[0]
    slots_flat = slots.reshape(-1)
    a0 = lv.node_offsets[1] if lv.num_levels > 1 else n
    hk_all = h.index_select(0, slots_flat[a0 * k:]).view(n - a0, k * hs)
    # ((3+K) h, K h): one product over all inner nodes
    dU = _matmul(dgates[a0:].t(), hk_all, vary_k=True, vary_m=False)
    # every row got b; f_1..f_K share b^(f) and W^(f)
    sums = dgates.sum(0)
    db = torch.cat([sums[: 3 * hs], sums[3 * hs:].view(k, hs).sum(0)])
    dxw = None
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    dx_parts, dW = [], None
    if m0:
        d0 = dgates[:m0, : 3 * hs] if rows_w is None else \
            dgates.index_select(0, rows_w[:m0])[:, : 3 * hs]
        if need_x:
            dx_parts.append(mm_nt(d0, W[: 3 * hs].t()))  # (m0, X)
        if need_w:
            dW = h.new_zeros(4 * hs, xw.shape[1])
            dW[: 3 * hs] = _matmul(d0.t(), xw[:m0], vary_k=True, vary_m=False)
    if m > m0:
        d1 = dgates[m0:m] if rows_w is None else dgates.index_select(0, rows_w[m0:])
        if need_x:
            dx_parts.append(mm_nt(d1, gate_weight(W, hs, k).t()))  # (M - m0, X)
        if need_w:
            d1w = _matmul(d1.t(), xw[m0:], vary_k=True, vary_m=False)  # (C, X)
            d1w = torch.cat([d1w[: 3 * hs], d1w[3 * hs:].view(k, hs, -1).sum(0)])
            dW = d1w if dW is None else dW + d1w
    if need_w and dW is None:  # no word rows at all
        dW = torch.zeros_like(W)
    if need_x:  # no word rows at all: an empty (0, X) gradient
        dxw = torch.cat(dx_parts, 0) if dx_parts else torch.zeros_like(xw)
    return dxw, dW, db, dU, None, None, None, None, None



def nary_levels(xw, W, b, U, slots, lv: Levels, rows_w, m0: int, perm
                ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """N-ary ``(h, c)`` (see :class:`_NaryLevels` for the arguments), or ``None`` when the
    C++ loops cannot run for ``xw``."""
    if not available(xw):
        return None
    return _NaryLevels.apply(xw, W, b, U, slots, lv, rows_w, m0, perm)


def single_source_slots(lv: Levels) -> torch.Tensor:
    """(N, 1) row of each node's only source (padding N): the previous word of a chain."""
    if lv.width == 1:
        return lv.slots
    slots = torch.full((lv.num_nodes, 1), lv.num_nodes, dtype=lv.slots.dtype,
                       device=lv.slots.device)
    return slots.index_put_((lv.edge_dst,), lv.edge_src.unsqueeze(1))
