"""Fast level kernels: the C++ level loops (``csrc/``) behind ``torch.autograd.Function``.

Optional accelerations of the level engine, for float32 CPU tensors when the native
library builds (:mod:`.native`). Each is named by the cell it accelerates, beside the cell's
declaration (``level_kernel`` in the cell's file); the cell's equations exist in the cell's
file and in the one C++ loop here, nowhere else. What Python does here is bookkeeping
around the loops: buffers, the input products ``W x + b`` of all nodes at once, and the
weight gradients as **one** matrix product per weight over all nodes or edges (not one per
level). ``tests/cells/test_registry.py`` holds every kernel equal to the general level
driver (:func:`gnn_treelstm.engine.level.propagate`) and to the DGL engine.

* :func:`childsum_levels`: Child-Sum (Tai eqs 2-8), also mtree-add (the relation enters
  the input terms only); :func:`mtree_levels` and :func:`mtree_full_levels`: the same loop
  with Tran & Cheng's relation transform of the children's ``h_k`` (eqs 4 and 2).
* :func:`nary_levels`: N-ary (Tai eqs 9-14) with the input projection inside, also the
  sequential LSTM (Tai eq 1 = N-ary with N = 1 on chains).

Each loop also runs the cells without output gate (``output_gate=False``, Tai et al.'s
relatedness models: gate rows ``i, u, f``, ``h_j = tanh(c_j)``); the C++ tells the layouts
apart by the rows of the recurrent matrix.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from gnn_treelstm.kernels import native
from gnn_treelstm.kernels.gemm import backend, mm_nt
from gnn_treelstm.trees.schedule import Levels

__all__ = ["available", "state_buffers", "grad_buffers", "grad_matmul", "childsum_levels",
           "mtree_levels", "mtree_full_levels", "NaryRows", "nary_levels", "gate_weight",
           "nary_input_gates", "nary_param_grads", "single_source_slots",
           "in_schedule_order", "in_node_order"]


def available(t: torch.Tensor) -> bool:
    """Whether the C++ loops run for tensors like ``t`` (float32, CPU, library built, not
    switched off by ``GNN_TREELSTM_NATIVE=off``)."""
    return native.available(t)


def state_buffers(like: torch.Tensor, n: int, hs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two (N + 1, h) state buffers like ``like``; row N, the padding row that missing
    children (or the root's parent) gather, is zero."""
    h = like.new_empty(n + 1, hs)
    c = like.new_empty(n + 1, hs)
    h[n].zero_()  # two operations; ``h[n] = 0`` makes a tensor of the 0 first
    c[n].zero_()
    return h, c


def grad_buffers(dh_out: torch.Tensor, dc_out: torch.Tensor,
                 order: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward's ``dh``, ``dc`` buffers (N + 1, h) in schedule order, from the output
    gradients (N, h) in schedule order, or in node order gathered by ``order`` (a
    permutation's backward is a gather, not a scatter); row N (the padding row of missing
    children) is zero."""
    n, hs = dh_out.shape
    dh, dc = state_buffers(dh_out, n, hs)
    _rows_into(dh[:n], dh_out, order)
    _rows_into(dc[:n], dc_out, order)
    return dh, dc


def _rows_into(out: torch.Tensor, t: torch.Tensor, order: torch.Tensor | None) -> None:
    """:func:`rows_in_order` written into ``out``."""
    if _gathered(t, order):
        torch.index_select(t, 0, order, out=out)
    else:
        out.copy_(t)


def _gathered(t: torch.Tensor, order: torch.Tensor | None) -> bool:
    """Whether ``t``'s rows in ``order`` need a gather: an order is given and ``t``'s rows
    are not one row repeated (stride 0 along the rows: the gradient of a sum,
    ``expand``ed), which any permutation leaves as it is, so copied instead (a gather of
    such a tensor costs about ten times a copy)."""
    return order is not None and not (t.dim() > 0 and t.stride(0) == 0)


def rows_in_order(t: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    """``t``'s rows gathered by the permutation ``order`` (``None``: as they are), contiguous
    (a tensor of one repeated row is only made contiguous, :func:`_gathered`)."""
    return t.index_select(0, order) if _gathered(t, order) else t.contiguous()


def in_schedule_order(t: torch.Tensor, lv: Levels) -> torch.Tensor:
    """Rows in node order -> the schedule order of ``lv`` (:func:`rows_in_order`), inside a
    level loop's ``autograd.Function``, whose backward takes the gradient back with
    :func:`in_node_order`: a gather each way."""
    return rows_in_order(t, lv.order)


def in_node_order(t: torch.Tensor, lv: Levels) -> torch.Tensor:
    """Rows in the schedule order of ``lv`` -> node order (see :func:`in_schedule_order`)."""
    return rows_in_order(t, lv.rank)


def grad_matmul(a: torch.Tensor, b: torch.Tensor, *, vary_k: bool = False,
                vary_m: bool = True) -> torch.Tensor:
    """``a @ b`` for the weight-gradient products, whose ``a`` is a transposed view
    (``dgates^T``): where :func:`.gemm.backend` is oneDNN, the native kernel for float32
    CPU tensors reads it in place (oneDNN would copy it); else :func:`.gemm.mm_nt`
    (``vary_k``/``vary_m`` as there; ``torch.mm`` reads the view in place too, and on an
    Intel CPU takes a quarter to two thirds of the native kernel's time)."""
    if backend(a) == "onednn" and native.available(a):
        return torch.ops.gnn_treelstm.matmul(a, b)
    return mm_nt(a, b.t(), vary_k=vary_k, vary_m=vary_m)


def _torch_grad_matmul(a: torch.Tensor, b: torch.Tensor, **_: bool) -> torch.Tensor:
    """``a @ b`` with ``torch.mm`` (the signature of :func:`grad_matmul`)."""
    return torch.mm(a, b)


# ============================================================== Child-Sum (Tai eqs 2-8)
def _childsum_buffers(wx, U_iou, U_f, lv: Levels):
    """``h, c`` (N + 1, h) with the zero padding row N, and the forward's saved buffers:
    ``gates`` (N, G h), ``h_tilde`` (N, h), ``fgate`` (E, h), ``tc`` (N, h)."""
    n, hs = wx.shape[0], U_f.shape[0]
    h, c = state_buffers(wx, n, hs)
    return (h, c, wx.new_empty(n, U_iou.shape[0]), wx.new_empty(n, hs),
            wx.new_empty(lv.edge_src.shape[0], hs), wx.new_empty(n, hs))


def _childsum_grads(dgates, dfgate, h_tilde, lv: Levels):
    """Gradients of ``wx`` (N, (G+1) h) and ``U_iou`` from the pre-activation gradients of
    ``i, (o,) u`` (N, G h) and of ``f_jk`` (E, h): one product over all nodes."""
    dwx_f = dfgate.new_zeros(dgates.shape[0], dfgate.shape[1]).index_add_(0, lv.edge_dst, dfgate)
    return torch.cat([dgates, dwx_f], dim=1), grad_matmul(dgates.t(), h_tilde)


class _ChildSumLevels(torch.autograd.Function):
    """Child-Sum recurrence over all levels given ``W x + b``, in C++
    (``csrc/childsum_levels.cpp``).

    Inputs: ``wx`` (N, 4h) in node order, gate order ``i, o, u, f``; ``U_iou`` (3h, h);
    ``U_f`` (h, h); ``lv`` (up levels). Without output gate (Tai's relatedness models,
    ``h_j = tanh(c_j)``): ``wx`` (N, 3h) ``i, u, f`` and ``U_iu`` (2h, h) in place of
    ``U_iou``. Outputs ``h, c`` (N, h) in node order: the loops run in schedule order, and
    the rows are gathered into it and back inside (:func:`in_schedule_order`,
    :func:`in_node_order`), so that a permutation's gradient is a gather too, not
    autograd's scatter into zeros.
    """

    @staticmethod
    def forward(ctx, wx, U_iou, U_f, lv: Levels):
        wx = in_schedule_order(wx, lv)
        h, c, gates, h_tilde, fgate, tc = _childsum_buffers(wx, U_iou, U_f, lv)
        torch.ops.gnn_treelstm.childsum_forward(
            wx, h, c, gates, h_tilde, fgate, tc, lv.edge_src, lv.edge_dst,
            lv.node_offsets, lv.edge_offsets, U_iou.contiguous(), U_f.contiguous())
        ctx.lv = lv
        ctx.save_for_backward(U_iou, U_f, h, c, gates, h_tilde, fgate, tc)
        n = gates.shape[0]
        return in_node_order(h[:n], lv), in_node_order(c[:n], lv)

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        """The level loop in C++; the weight gradients are one product each over all
        nodes / edges."""
        U_iou, U_f, h, c, gates, h_tilde, fgate, tc = ctx.saved_tensors
        lv: Levels = ctx.lv
        dh, dc = grad_buffers(dh_out, dc_out, lv.order)
        dgates = torch.empty_like(gates)  # d pre-activations of i, (o,) u (N, G h)
        dfgate = torch.empty_like(fgate)  # d pre-activation of f per edge (E, h)
        torch.ops.gnn_treelstm.childsum_backward(
            dh, dc, dgates, dfgate, gates, c, tc, fgate, lv.edge_src, lv.edge_dst,
            lv.node_offsets, lv.edge_offsets, U_iou.contiguous(), U_f.contiguous())
        dwx, dU_iou = _childsum_grads(dgates, dfgate, h_tilde, lv)
        dU_f = grad_matmul(dfgate.t(), h.index_select(0, lv.edge_src))  # (h, h) over all edges
        return in_node_order(dwx, lv), dU_iou, dU_f, None


def childsum_levels(wx: torch.Tensor, U_iou: torch.Tensor, U_f: torch.Tensor,
                    lv: Levels) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Child-Sum ``(h, c)`` in node order from ``wx`` (N, 4h) in node order (or (N, 3h)
    with ``U_iu`` (2h, h) without output gate), or ``None`` when the C++ loops cannot run
    for ``wx``."""
    if not available(wx):
        return None
    return _ChildSumLevels.apply(wx, U_iou, U_f, lv)


# ====================================== mTreeLSTM (Tran & Cheng 2018 eqs 2, 4 on Child-Sum)
class _MTreeLevels(torch.autograd.Function):
    """mTreeLSTM (Tran eq 4): Child-Sum's loop with ``h~_j = W_hm Σ_k s_jk ⊙ (W_mh h_k)``,
    in C++ (``csrc/childsum_levels.cpp``).

    Inputs: ``wx``, ``U_iou``, ``U_f``, ``lv`` as :class:`_ChildSumLevels`; ``s`` (E, m)
    ``W_mr e_jk`` per edge in schedule edge order (its gradient is returned, autograd takes
    it back to ``W_mr`` and the embeddings); ``W_mh`` (m, h); ``W_hm`` (h, m).
    """

    @staticmethod
    def forward(ctx, wx, U_iou, U_f, s, W_mh, W_hm, lv: Levels):
        wx = in_schedule_order(wx, lv)
        h, c, gates, h_tilde, fgate, tc = _childsum_buffers(wx, U_iou, U_f, lv)
        s = s.contiguous()
        a = torch.empty_like(s)  # W_mh h_k per edge
        msum = wx.new_empty(wx.shape[0], s.shape[1])  # M_j = Σ_k s_jk ⊙ a_jk
        torch.ops.gnn_treelstm.mtree_forward(
            wx, h, c, gates, h_tilde, fgate, tc, lv.edge_src, lv.edge_dst,
            lv.node_offsets, lv.edge_offsets, U_iou.contiguous(), U_f.contiguous(), s, a,
            msum, W_mh.contiguous(), W_hm.contiguous())
        ctx.lv = lv
        ctx.save_for_backward(U_iou, U_f, W_mh, W_hm, s, a, msum, h, c, gates, h_tilde,
                              fgate, tc)
        n = gates.shape[0]
        return in_node_order(h[:n], lv), in_node_order(c[:n], lv)

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        U_iou, U_f, W_mh, W_hm, s, a, msum, h, c, gates, h_tilde, fgate, tc = ctx.saved_tensors
        lv: Levels = ctx.lv
        hs = h.shape[1]
        dh, dc = grad_buffers(dh_out, dc_out, lv.order)
        dgates = torch.empty_like(gates)
        dfa = h.new_empty(fgate.shape[0], hs + s.shape[1])  # [d pre_f | d(W_mh h_k)] per edge
        dht = h.new_empty(gates.shape[0], hs)  # dL/dh~_j
        ds = torch.empty_like(s)
        torch.ops.gnn_treelstm.mtree_backward(
            dh, dc, dgates, dfa, gates, c, tc, fgate, lv.edge_src, lv.edge_dst,
            lv.node_offsets, lv.edge_offsets, U_iou.contiguous(), U_f.contiguous(), s, a,
            W_mh.contiguous(), W_hm.contiguous(), dht, ds)
        dwx, dU_iou = _childsum_grads(dgates, dfa[:, :hs], h_tilde, lv)
        dUf_mh = grad_matmul(dfa.t(), h.index_select(0, lv.edge_src))  # [dU_f ; dW_mh] over edges
        dW_hm = grad_matmul(dht.t(), msum)  # (h, m) over all nodes
        return in_node_order(dwx, lv), dU_iou, dUf_mh[:hs], ds, dUf_mh[hs:], dW_hm, None


def mtree_levels(wx: torch.Tensor, U_iou: torch.Tensor, U_f: torch.Tensor, s: torch.Tensor,
                 W_mh: torch.Tensor, W_hm: torch.Tensor,
                 lv: Levels) -> tuple[torch.Tensor, torch.Tensor] | None:
    """mTreeLSTM ``(h, c)`` in node order (see :class:`_MTreeLevels`), or ``None`` when
    the C++ loops cannot run for ``wx``."""
    if not available(wx):
        return None
    return _MTreeLevels.apply(wx, U_iou, U_f, s, W_mh, W_hm, lv)


class _MTreeFullLevels(torch.autograd.Function):
    """fullTreeLSTM (Tran eq 2): Child-Sum's loop with ``h~_j = Σ_k W_hh[r(j,k)] h_k``, in
    C++ (per level, the edges of each relation as one product). Inputs as
    :class:`_ChildSumLevels` plus ``W_hh`` (R, h, h); relations from ``lv.edge_rel``."""

    @staticmethod
    def forward(ctx, wx, U_iou, U_f, W_hh, lv: Levels):
        wx = in_schedule_order(wx, lv)
        h, c, gates, h_tilde, fgate, tc = _childsum_buffers(wx, U_iou, U_f, lv)
        rel = lv.edge_rel.long().contiguous()
        torch.ops.gnn_treelstm.mtree_full_forward(
            wx, h, c, gates, h_tilde, fgate, tc, lv.edge_src, lv.edge_dst,
            lv.node_offsets, lv.edge_offsets, U_iou.contiguous(), U_f.contiguous(), rel,
            W_hh.contiguous())
        ctx.lv, ctx.rel = lv, rel
        ctx.save_for_backward(U_iou, U_f, W_hh, h, c, gates, h_tilde, fgate, tc)
        n = gates.shape[0]
        return in_node_order(h[:n], lv), in_node_order(c[:n], lv)

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        U_iou, U_f, W_hh, h, c, gates, h_tilde, fgate, tc = ctx.saved_tensors
        lv: Levels = ctx.lv
        rel = ctx.rel
        dh, dc = grad_buffers(dh_out, dc_out, lv.order)
        dgates, dfgate = torch.empty_like(gates), torch.empty_like(fgate)
        dht = h.new_empty(gates.shape[0], h.shape[1])  # dL/dh~_j
        torch.ops.gnn_treelstm.mtree_full_backward(
            dh, dc, dgates, dfgate, gates, c, tc, fgate, lv.edge_src, lv.edge_dst,
            lv.node_offsets, lv.edge_offsets, U_iou.contiguous(), U_f.contiguous(), rel,
            W_hh.contiguous(), dht)
        dwx, dU_iou = _childsum_grads(dgates, dfgate, h_tilde, lv)
        hk_all = h.index_select(0, lv.edge_src)
        dU_f = grad_matmul(dfgate.t(), hk_all)
        # dW_hh[r] = Σ_{edges of r} dL/dh~_j ⊗ h_k: one product per relation over its edges
        by_rel = torch.argsort(rel, stable=True)
        dt = dht.index_select(0, lv.edge_dst.index_select(0, by_rel))
        hk = hk_all.index_select(0, by_rel)
        dW_hh = torch.zeros_like(W_hh)
        lo = 0
        for r, cnt in enumerate(torch.bincount(rel, minlength=W_hh.shape[0]).tolist()):
            if cnt:
                dW_hh[r] = grad_matmul(dt[lo:lo + cnt].t(), hk[lo:lo + cnt])
            lo += cnt
        return in_node_order(dwx, lv), dU_iou, dU_f, dW_hh, None


def mtree_full_levels(wx: torch.Tensor, U_iou: torch.Tensor, U_f: torch.Tensor,
                      W_hh: torch.Tensor, lv: Levels) -> tuple[torch.Tensor, torch.Tensor] | None:
    """fullTreeLSTM ``(h, c)`` in node order (see :class:`_MTreeFullLevels`), or ``None``
    when the C++ loops cannot run for ``wx``."""
    if not available(wx):
        return None
    return _MTreeFullLevels.apply(wx, U_iou, U_f, W_hh, lv)


# ============================================================== N-ary (Tai eqs 9-14)
def _gate_bias(b: torch.Tensor, hs: int, k: int) -> torch.Tensor:
    """The bias (4h,) rows ``i, o, u, f`` (or (3h,) ``i, u, f`` without output gate) -> one
    per gate column ``i, (o,) u, f_1..f_K``."""
    g = b.shape[0] - hs
    return torch.cat([b[:g], b[g:].expand(k, hs).reshape(-1)])  # expand: repeat's values


def gate_weight(W: torch.Tensor, hs: int, k: int) -> torch.Tensor:
    """``W`` (4h, X) rows ``i, o, u, f`` (or (3h, X) ``i, u, f`` without output gate) ->
    ((3+K) h, X) (or ((2+K) h, X)), ``W^(f)`` once per forget gate."""
    g = W.shape[0] - hs
    return torch.cat([W[:g], W[g:].expand(k, hs, W.shape[1]).reshape(k * hs, -1)])


class NaryRows(NamedTuple):
    """The rows an N-ary level loop reads and writes (:class:`_NaryLevels`): ``slots``
    (N, K) children rows by position (padding N); ``lv``; ``rows_w`` the schedule rows of
    the inputs' rows (sorted; ``None``: rows ``0..M-1``), the first ``m0`` of them leaves;
    ``perm`` ``(rank, order)`` to return node order, ``None`` for schedule order."""

    slots: torch.Tensor
    lv: Levels
    rows_w: torch.Tensor | None
    m0: int
    perm: tuple[torch.Tensor, torch.Tensor] | None = None


def nary_input_gates(xw: torch.Tensor, W: torch.Tensor, b: torch.Tensor, hs: int,
                     rows: NaryRows, *, leaf_forget: bool = True) -> torch.Tensor:
    """(N, (G+K) h) ``W x_j + b`` of every schedule row (arguments as
    :class:`_NaryLevels`), gate columns ``i, (o,) u, f_1..f_K``: one product for the leaves'
    ``i, (o,) u`` and one for the other rows with a word; rows without a word get ``b``.
    ``leaf_forget=False`` (for a loop that never reads them) leaves the leaves' forget
    columns unset when the word rows are contiguous."""
    n, k = rows.slots.shape
    rows_w, m0 = rows.rows_w, rows.m0
    gh = W.shape[0] - hs  # G h: the columns of i, (o,) u
    cols = gh + k * hs
    m = xw.shape[0]
    b_all = _gate_bias(b, hs, k)  # (C,)
    if not leaf_forget and rows_w is None and m0 > 0:
        gates = xw.new_empty(n, cols)
        gates[m0:] = b_all
    else:
        gates = b_all.expand(n, cols).clone()
    if m0:  # leaves: i, o, u only
        p0 = mm_nt(xw[:m0], W[:gh], b[:gh])  # (m0, G h)
        if rows_w is None:
            gates[:m0, :gh] = p0
        else:
            gates[:, :gh].index_copy_(0, rows_w[:m0], p0)
    if m > m0:
        p1 = mm_nt(xw[m0:], gate_weight(W, hs, k), b_all)  # (M - m0, C)
        if rows_w is None:
            gates[m0:m] = p1
        else:
            gates.index_copy_(0, rows_w[m0:], p1)
    return gates


class _NaryLevels(torch.autograd.Function):
    """N-ary recurrence (Tai eqs 9-14) over all levels, input terms included.

    Inputs: ``xw`` (M, X) the inputs of the rows that have one, at schedule rows
    ``rows.rows_w`` (:class:`NaryRows`), the first ``rows.m0`` of them leaves (level
    0: no child, so their forget-gate input terms are skipped); ``W`` (4h, X) and ``b``
    (4h,) rows ``i, o, u, f`` (``W^(f)`` shared by the K forget gates); ``U`` ((3+K)h, K h)
    rows ``i, o, u, f_1..f_K``, columns ``[h_j1; ...; h_jK]``. Without output gate (Tai's
    relatedness models, ``h_j = tanh(c_j)``) ``W``, ``b`` have 3h rows ``i, u, f`` and ``U``
    (2+K)h rows ``i, u, f_1..f_K`` (the C++ loop tells the two apart by ``U``'s rows);
    ``rows``: the children's rows, the schedule and the order of the outputs
    (:class:`NaryRows`). Every row gets ``b``. Outputs ``h, c`` (N, h).

    The gate columns of the internal buffers follow ``U``'s rows, ``i, (o,) u, f_1..f_K``
    (C = (G+K) h, G = 3 or 2). The level loops run in C++ (``csrc/nary_levels.cpp``); float32 CPU
    tensors only (:func:`nary_levels` checks).
    """

    @staticmethod
    def forward(ctx, xw, W, b, U, rows: NaryRows):
        slots, lv, perm = rows.slots, rows.lv, rows.perm
        n, k = slots.shape
        hs = U.shape[1] // k
        # (N, C) W x_j + b (eqs 9-12), then the activated gates. The native loop reads only
        # i, o, u of the leaves, so their forget columns need no value there.
        gates = nary_input_gates(xw, W, b, hs, rows, leaf_forget=False)
        h, c = state_buffers(xw, n, hs)
        tc = xw.new_empty(n, hs)  # tanh(c_j), kept for the backward
        torch.ops.gnn_treelstm.nary_forward(gates, h, c, tc, slots.contiguous(),
                                            lv.node_offsets, U.contiguous())
        ctx.rows = rows
        ctx.save_for_backward(xw, W, U, h, c, tc, gates)
        if perm is None:
            return h[:n], c[:n]
        rank = perm[0]
        return h.index_select(0, rank), c.index_select(0, rank)

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        xw, W, U, h, c, tc, gates = ctx.saved_tensors
        rows: NaryRows = ctx.rows
        dh, dc = grad_buffers(dh_out, dc_out, None if rows.perm is None else rows.perm[1])
        dgates = torch.empty_like(gates)
        torch.ops.gnn_treelstm.nary_backward(dgates, dh, dc, gates, c, tc,
                                             rows.slots.contiguous(), rows.lv.node_offsets,
                                             U.contiguous())
        return nary_param_grads(ctx, dgates, xw, W, h)


def nary_param_grads(ctx, dgates: torch.Tensor, xw: torch.Tensor, W: torch.Tensor,
                     h: torch.Tensor, hk_rows: torch.Tensor | None = None, *,
                     loops: bool = True) -> tuple:
    """Gradients of :class:`_NaryLevels`' inputs from the pre-activation gradients (N, C)
    (one product per weight over all nodes, not one per level); ``ctx.rows`` the loop's
    :class:`NaryRows`. ``loops=False``: the weight products are ``torch.mm`` (the Triton
    path's, as on CUDA), not the C++ product of :func:`grad_matmul`."""
    gmm = grad_matmul if loops else _torch_grad_matmul
    rows: NaryRows = ctx.rows
    rows_w, m0, slots, lv = rows.rows_w, rows.m0, rows.slots, rows.lv
    n, k = slots.shape
    hs = h.shape[1]
    gh = W.shape[0] - hs  # G h: the columns of i, (o,) u
    m = xw.shape[0]
    slots_flat = slots.reshape(-1)
    a0 = lv.node_offsets[1] if lv.num_levels > 1 else n
    if hk_rows is None:  # the children's h by slot, gathered from h (N + 1, h)
        hk_all = h.index_select(0, slots_flat[a0 * k:]).view(n - a0, k * hs)
    else:  # given: (N, K h), rows in schedule order
        hk_all = hk_rows[a0:n]
    # ((G+K) h, K h): one product over all inner nodes
    dU = gmm(dgates[a0:].t(), hk_all, vary_k=True, vary_m=False)
    # every row got b; f_1..f_K share b^(f) and W^(f)
    sums = dgates.sum(0)
    db = torch.cat([sums[:gh], sums[gh:].view(k, hs).sum(0)])
    dxw = None
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    dx_parts, dW = [], None
    if m0:
        d0 = dgates[:m0, :gh] if rows_w is None else \
            dgates.index_select(0, rows_w[:m0])[:, :gh]
        if need_x:
            dx_parts.append(mm_nt(d0, W[:gh].t()))  # (m0, X)
        if need_w:
            dW = h.new_zeros(W.shape[0], xw.shape[1])
            dW[:gh] = gmm(d0.t(), xw[:m0], vary_k=True, vary_m=False)
    if m > m0:
        d1 = dgates[m0:m] if rows_w is None else dgates.index_select(0, rows_w[m0:])
        if need_x:
            dx_parts.append(mm_nt(d1, gate_weight(W, hs, k).t()))  # (M - m0, X)
        if need_w:
            d1w = gmm(d1.t(), xw[m0:], vary_k=True, vary_m=False)  # (C, X)
            d1w = torch.cat([d1w[:gh], d1w[gh:].view(k, hs, -1).sum(0)])
            dW = d1w if dW is None else dW + d1w
    if need_w and dW is None:  # no word rows at all
        dW = torch.zeros_like(W)
    if need_x and not dx_parts:  # no word rows at all: an empty (0, X) gradient
        dxw = torch.zeros_like(xw)
    elif need_x:  # one part (every word at a leaf, as in PTB trees) is not copied
        dxw = dx_parts[0] if len(dx_parts) == 1 else torch.cat(dx_parts, 0)
    return dxw, dW, db, dU, None


def nary_levels(xw: torch.Tensor, W: torch.Tensor, b: torch.Tensor, U: torch.Tensor,
                rows: NaryRows) -> tuple[torch.Tensor, torch.Tensor] | None:
    """N-ary ``(h, c)`` (see :class:`_NaryLevels` for the arguments), or ``None`` when the
    C++ loops cannot run for ``xw``."""
    if not available(xw):
        return None
    return _NaryLevels.apply(xw, W, b, U, rows)


def single_source_slots(lv: Levels) -> torch.Tensor:
    """(N, 1) row of each node's only source (padding N): the previous word of a chain."""
    if lv.width == 1:
        return lv.slots
    slots = torch.full((lv.num_nodes, 1), lv.num_nodes, dtype=lv.slots.dtype,
                       device=lv.slots.device)
    return slots.index_put_((lv.edge_dst,), lv.edge_src.unsqueeze(1))
