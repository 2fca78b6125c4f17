r"""The level engine: Tree-LSTM cells run on a precomputed :class:`LevelSchedule`.

``level_forward(cell, graph_or_schedule, x)`` looks up the *level kernel* registered for
the cell's class name and returns the same ``(h, c)`` as the cell's ``dgl`` engine.

Design (issue 5):

* **Input terms first.** Every kernel computes ``W x + b`` of all nodes in one matrix
  product (autograd handles it; cells that read words only where there is one project
  only those rows), then permutes the rows once into *schedule order* (nodes sorted by
  level) so that each level is a contiguous block of rows.
* **Fused recurrence with a hand-written backward** (Child-Sum, N-ary, mTreeLSTM ``mult``
  and ``add``, the sequential LSTMs). The level loop runs inside a
  :class:`torch.autograd.Function`: forward writes the gates and states of each level with
  ``out=`` / in-place ops into buffers allocated once per batch (state buffers have one
  extra zero row, the padding target of missing children); backward walks the levels
  top-down, accumulating ``dh``/``dc`` of the children in place (``index_add_``) and
  writing the pre-activation gradients of each level into one buffer; the weight
  gradients of the recurrent matrices are then **one** matrix product over all nodes
  (not one per level). Autograd would instead copy a full-size gradient per level for
  every in-place write (``CopySlices`` / ``IndexCopyBackward`` clone the whole buffer),
  which costs more than the arithmetic at SST sizes.
* **Generic autograd levels** (:func:`run_levels`; Teng & Zhang's lexicalized, top-down
  and bidirectional cells, fullTreeLSTM): the cell's own plain-tensor step functions run
  per level under autograd; states live in a :class:`_Tape` whose custom write / gather
  functions keep the backward at O(level size) per level too.
* **N-ary and sequential LSTMs** take the input projection inside their custom function too
  (gate columns in the cell's order ``i, o, u, f_1..f_K``; ``tanh`` as ``2σ(2x) - 1`` on the
  CPU) and return node order by gathers (a permutation's backward is a gather, not a
  scatter).
* **Native loops** (:mod:`.native`): for float32 CPU tensors the level loops of N-ary, the
  sequential LSTMs, Child-Sum and mtree-add run in C++ (``csrc/``), each level one gather,
  one or two level-sized products and one fused element-wise pass; the Python loops here
  stay the reference and the fallback. Bulk products go through :mod:`.gemm` (oneDNN).
* **No host-device synchronisation in the loop**: level boundaries are host-side ints of
  the schedule; no ``.item()``, ``nonzero()`` or boolean masking inside the loop, so the
  same code runs on CUDA with the index tensors moved by ``LevelSchedule.to``.

Kernels read the cells' own parameters by attribute name (see each kernel); registering a
kernel for a new cell class is :func:`register_kernel`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import dgl
import torch
from torch import nn
from torch.nn import functional as F

from . import native
from .gemm import mm_nt, mm_nt_add, pack
from .schedule import Levels, LevelSchedule

logger = logging.getLogger(__name__)

__all__ = ["level_forward", "register_kernel", "KERNELS", "has_kernel", "schedule_for"]

Kernel = Callable[..., tuple[torch.Tensor, torch.Tensor]]

#: cell class name -> level kernel ``f(cell, schedule, x, graph=None, **kw) -> (h, c)``
KERNELS: dict[str, Kernel] = {}


def register_kernel(*class_names: str) -> Callable[[Kernel], Kernel]:
    """Decorator: register a level kernel for the cell classes named ``class_names``."""

    def deco(fn: Kernel) -> Kernel:
        for name in class_names:
            KERNELS[name] = fn
        return fn

    return deco


def has_kernel(cell: nn.Module) -> bool:
    return type(cell).__name__ in KERNELS


def schedule_for(
    graph_or_schedule: dgl.DGLGraph | LevelSchedule, device: torch.device | None = None,
    *, top_down: bool = True,
) -> LevelSchedule:
    """The schedule of a graph (computed on the CPU) or a given schedule, on ``device``."""
    if isinstance(graph_or_schedule, LevelSchedule):
        sched = graph_or_schedule
    elif isinstance(graph_or_schedule, dgl.DGLGraph):  # no collate-time schedule: build one
        sched = LevelSchedule.from_graph(graph_or_schedule, top_down=top_down)
    else:
        raise ValueError(
            "level_forward: expected a dgl.DGLGraph or a LevelSchedule, got "
            f"{type(graph_or_schedule).__name__}"
        )
    if device is not None and sched.device != device:
        sched = sched.to(device)
    return sched


def level_forward(
    cell: nn.Module,
    graph_or_schedule: dgl.DGLGraph | LevelSchedule,
    x: torch.Tensor,
    *,
    schedule: LevelSchedule | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``cell`` with the level engine; returns ``(h, c)`` as its ``dgl`` engine does.

    Args:
        cell: a cell whose class has a registered kernel (:data:`KERNELS`).
        graph_or_schedule: the (batched) graph, or its :class:`LevelSchedule`.
        x: node inputs (N, x_size), in node-id order.
        schedule: a precomputed schedule of the graph (e.g. from the collate function);
            when given, ``graph_or_schedule`` may still be the graph (cells that read node
            data such as ``ndata['word']`` take it from there).
        **kwargs: extra arguments of the cell's forward (``heads=`` of the Teng cells).

    The caller validates the graph (the cell's ``check_input``); the kernel does not.
    """
    name = type(cell).__name__
    kernel = KERNELS.get(name)
    if kernel is None:
        raise NotImplementedError(
            f"level engine: no kernel for {name}; kernels exist for {sorted(KERNELS)}; "
            "use engine='dgl' for this cell"
        )
    graph = graph_or_schedule if isinstance(graph_or_schedule, dgl.DGLGraph) else None
    sched = schedule_for(schedule if schedule is not None else graph_or_schedule, x.device)
    if sched.num_nodes != x.shape[0]:
        raise ValueError(
            f"level_forward: x has {x.shape[0]} rows but the schedule has {sched.num_nodes} "
            "nodes; build the schedule from the same batched graph"
        )
    return kernel(cell, sched, x, graph=graph, **kwargs)


# ============================================================== helpers
def _to_schedule_order(t: torch.Tensor, lv: Levels) -> torch.Tensor:
    return t.index_select(0, lv.order)


def _to_node_order(t: torch.Tensor, lv: Levels) -> torch.Tensor:
    return t.index_select(0, lv.rank)


def _word_ids(cell: nn.Module, sched: LevelSchedule, graph: dgl.DGLGraph | None
              ) -> tuple[torch.Tensor, int]:
    """Node ids with a word and how many of the first are leaves: from the schedule (built
    at collate time), else from the graph (one ``nonzero`` per batch; no leaf split)."""
    if sched.word_ids is not None:
        return sched.word_ids, sched.num_leaf_words
    if graph is None:
        raise ValueError(
            f"level_forward({type(cell).__name__}): this cell reads ndata['word']; pass the "
            "graph, or a schedule built from a graph with ndata['word']"
        )
    return torch.nonzero(cell.word_mask(graph)).flatten(), 0


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
class _ChildSumLevels(torch.autograd.Function):
    """Child-Sum recurrence (Tai eqs 2-8) over all levels, given ``W x + b``; optionally
    with the multiplicative child transform of Tran & Cheng (2018, eq 4).

    Inputs: ``wx`` (N, 4h) in schedule order, gate order ``i, o, u, f``; ``U_iou`` (3h, h);
    ``U_f`` (h, h); for mTreeLSTM ``s`` (E, m) = ``W_mr e_jk`` per edge in schedule edge
    order, ``W_mh`` (m, h), ``W_hm`` (h, m), else None; ``lv`` (up levels).
    Outputs ``h, c`` (N, h) in schedule order. The summand of ``h~_j`` is ``h_k`` (Tai eq 2)
    or ``W_hm (s_jk ⊙ W_mh h_k)`` (Tran eq 4).
    """

    @staticmethod
    def forward(ctx, wx, U_iou, U_f, s, W_mh, W_hm, lv: Levels):
        n, hs = wx.shape[0], U_f.shape[0]
        e = lv.edge_src.shape[0]
        mult = s is not None
        ctx.native = not mult and native.available(wx)
        if ctx.native:  # the loop below, in C++ (csrc/childsum_levels.cpp)
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
        h = wx.new_zeros(n + 1, hs)  # row n: zero padding row
        c = wx.new_zeros(n + 1, hs)
        gates = wx.new_empty(n, 3 * hs)  # activated i, o, u
        h_tilde = wx.new_zeros(n, hs)  # eq 2 (zeros at leaves)
        fgate = wx.new_empty(e, hs)  # f_jk per child edge, activated
        a_buf = wx.new_empty(e, W_mh.shape[0]) if mult else None  # W_mh h_k per edge
        wx_iou, wx_f = wx[:, : 3 * hs], wx[:, 3 * hs:]
        U_iou_t, U_f_t = U_iou.t(), U_f.t()
        for lvl in range(lv.num_levels):
            a, b = lv.node_offsets[lvl], lv.node_offsets[lvl + 1]
            ea, eb = lv.edge_offsets[lvl], lv.edge_offsets[lvl + 1]
            g = gates[a:b]  # (n_l, 3h)
            cl = c[a:b]
            if eb > ea:
                src, seg = lv.edge_src[ea:eb], lv.edge_seg[ea:eb]
                hk = h.index_select(0, src)  # (E_l, h) children's h
                if mult:  # Tran eq 4: m_jk = s_jk ⊙ W_mh h_k, summand W_hm m_jk
                    ak = torch.mm(hk, W_mh.t(), out=a_buf[ea:eb])  # (E_l, m)
                    t = (ak * s[ea:eb]) @ W_hm.t()  # (E_l, h)
                else:
                    t = hk
                ht = h_tilde[a:b].index_add_(0, seg, t)  # eq 2: (n_l, h)
                torch.addmm(wx_iou[a:b], ht, U_iou_t, out=g)  # eqs 3, 5, 6 pre-activations
                f = fgate[ea:eb]
                torch.addmm(wx_f.index_select(0, lv.edge_dst[ea:eb]), hk, U_f_t, out=f)
                f.sigmoid_()  # eq 4
                cl.index_add_(0, seg, f * c.index_select(0, src))  # Σ_k f_jk ⊙ c_k (eq 7)
            else:
                g.copy_(wx_iou[a:b])
            g[:, : 2 * hs].sigmoid_()
            _tanh_(g[:, 2 * hs:])
            i, o, u = g[:, :hs], g[:, hs: 2 * hs], g[:, 2 * hs:]
            cl.addcmul_(i, u)  # eq 7
            torch.mul(o, _tanh_(cl.clone()), out=h[a:b])  # eq 8
        ctx.lv = lv
        ctx.save_for_backward(U_iou, U_f, h, c, gates, h_tilde, fgate, s, W_mh, W_hm, a_buf)
        return h[:n], c[:n]

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        if ctx.native:
            return _childsum_native_backward(ctx, dh_out, dc_out)
        U_iou, U_f, h, c, gates, h_tilde, fgate, s, W_mh, W_hm, a_buf = ctx.saved_tensors
        lv: Levels = ctx.lv
        mult = s is not None
        n, hs = gates.shape[0], U_f.shape[0]
        dh, dc = _grad_buffers(dh_out, dc_out)
        dgates = h.new_empty(n, 3 * hs)  # d pre-activations of i, o, u
        dfgate = h.new_empty(fgate.shape)  # d pre-activation of f per edge
        if mult:
            dt_buf = h.new_empty(fgate.shape)  # dL/d(summand of h~) per edge
            da_buf = torch.empty_like(a_buf)  # dL/d(W_mh h_k) per edge
            ds_buf = torch.empty_like(a_buf)  # dL/ds_jk per edge
        # local derivatives of all nodes / edges at once (see _NaryLevels.backward)
        i, o, u = gates[:, :hs], gates[:, hs: 2 * hs], gates[:, 2 * hs:]
        tc = _tanh_(c[:n].clone())
        q_c = o * (1 - tc * tc)  # dL/dc_j = dc_j + dh_j q_c          (eq 8 into eq 7)
        q_o = tc * o * (1 - o)  # d pre_o = dh_j q_o                   (eq 8)
        q_i = u * i * (1 - i)  # d pre_i = dL/dc_j q_i                 (eq 7)
        q_u = i * (1 - u * u)  # d pre_u = dL/dc_j q_u                 (eq 7)
        q_f = c.index_select(0, lv.edge_src) * fgate * (1 - fgate)  # per edge (eqs 4, 7)
        for lvl in reversed(range(lv.num_levels)):
            a, b = lv.node_offsets[lvl], lv.node_offsets[lvl + 1]
            ea, eb = lv.edge_offsets[lvl], lv.edge_offsets[lvl + 1]
            dhl = dh[a:b]
            dcl = dc[a:b].addcmul_(dhl, q_c[a:b])  # dL/dc_j
            dg = dgates[a:b]
            torch.mul(dcl, q_i[a:b], out=dg[:, :hs])  # eq 3 (i)
            torch.mul(dhl, q_o[a:b], out=dg[:, hs: 2 * hs])  # eq 5 (o)
            torch.mul(dcl, q_u[a:b], out=dg[:, 2 * hs:])  # eq 6 (u)
            if eb > ea:
                src, seg = lv.edge_src[ea:eb], lv.edge_seg[ea:eb]
                dce = dcl.index_select(0, seg)  # (E_l, h)
                dc.index_add_(0, src, dce * fgate[ea:eb])  # eq 7 -> c_k
                df = torch.mul(dce, q_f[ea:eb], out=dfgate[ea:eb])  # eq 7 -> f (eq 4)
                dt = (dg @ U_iou).index_select(0, seg)  # eqs 3,5,6 via h~ (eq 2)
                if mult:  # back through W_hm (s ⊙ W_mh h_k)
                    dt_buf[ea:eb] = dt
                    dm = dt @ W_hm  # (E_l, m)
                    torch.mul(dm, a_buf[ea:eb], out=ds_buf[ea:eb])
                    da = torch.mul(dm, s[ea:eb], out=da_buf[ea:eb])
                    dhk = da @ W_mh
                else:
                    dhk = dt
                dhk.addmm_(df, U_f)  # eq 4 -> h_k
                dh.index_add_(0, src, dhk)
        hk_all = h.index_select(0, lv.edge_src)  # (E, h)
        dU_iou = dgates.t() @ h_tilde  # (3h, h), one product over all nodes
        dU_f = dfgate.t() @ hk_all  # (h, h) over all edges
        dwx_f = h.new_zeros(n, hs).index_add_(0, lv.edge_dst, dfgate)
        dwx = torch.cat([dgates, dwx_f], dim=1)
        if not mult:
            return dwx, dU_iou, dU_f, None, None, None, None
        dW_hm = dt_buf.t() @ (s * a_buf)  # (h, m)
        dW_mh = da_buf.t() @ hk_all  # (m, h)
        return dwx, dU_iou, dU_f, ds_buf, dW_mh, dW_hm, None


def _childsum_native_backward(ctx, dh_out, dc_out):
    """:class:`_ChildSumLevels`' backward with the level loop in C++; the weight gradients
    are one product each over all nodes / edges, as in the Python loop."""
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
    return torch.cat([dgates, dwx_f], dim=1), dU_iou, dU_f, None, None, None, None


@register_kernel("MeanVectors")
def mean_kernel(cell, sched: LevelSchedule, x: torch.Tensor, graph=None, *, own: torch.Tensor):
    """Mean vectors (:mod:`gnn_treelstm.cells.mean`): subtree sums of ``own = [w x ; w]``
    one level at a time, then the means."""
    from ..cells.mean import mean_states, subtree_sums_by_level

    lv = sched.up
    s = subtree_sums_by_level(_to_schedule_order(own, lv), lv.edge_src, lv.edge_dst,
                              lv.edge_offsets)
    return mean_states(_to_node_order(s, lv))


@register_kernel("ChildSumTreeLSTM")
def childsum_kernel(cell, sched: LevelSchedule, x: torch.Tensor, graph=None):
    """Child-Sum (Tai eqs 2-8). Reads ``cell.W_x`` (Linear x -> 4h, rows i, o, u, f, with
    the biases), ``cell.U_iou`` (h -> 3h) and ``cell.U_f`` (h -> h)."""
    lv = sched.up
    wx = F.linear(x, cell.W_x.weight, cell.W_x.bias)  # (N, 4h), all nodes at once
    h, c = _ChildSumLevels.apply(_to_schedule_order(wx, lv), cell.U_iou.weight,
                                 cell.U_f.weight, None, None, None, lv)
    return _to_node_order(h, lv), _to_node_order(c, lv)


@register_kernel("MultiplicativeTreeLSTM")
def mtree_kernel(cell, sched: LevelSchedule, x: torch.Tensor, graph=None):
    """Tran & Cheng (2018): Child-Sum gates with ``h~_j`` from eq 4 (``mult``), with the
    relation as node input (``add``), or from eq 2 (``full``, generic autograd levels).

    Reads ``cell.variant``, ``W_x``, ``U_iou``, ``U_f``; ``mult``: ``rel_emb``, ``W_mr``,
    ``W_mh``, ``W_hm``; ``add``: ``rel_emb``, ``W_r`` (via ``cell.input_terms``)."""
    lv = sched.up
    if cell.variant == "full":
        return _mtree_full_levels(cell, sched, x)
    if cell.variant == "add":
        # relation of each node's own edge to its parent; the root gets num_relations
        node_rel = torch.full((sched.num_nodes,), cell.num_relations, dtype=torch.int64,
                              device=x.device)
        child_ids = lv.order.index_select(0, lv.edge_src)  # node id of each edge's child
        node_rel = node_rel.index_copy(0, child_ids, lv.edge_rel)
        wx = cell.input_terms(x, node_rel)  # (N, 4h): W x + W_r e_j + b
        h, c = _ChildSumLevels.apply(_to_schedule_order(wx, lv), cell.U_iou.weight,
                                     cell.U_f.weight, None, None, None, lv)
    else:
        wx = F.linear(x, cell.W_x.weight, cell.W_x.bias)  # (N, 4h)
        s = F.linear(cell.rel_emb(lv.edge_rel), cell.W_mr.weight)  # (E, m): W_mr e_jk
        h, c = _ChildSumLevels.apply(_to_schedule_order(wx, lv), cell.U_iou.weight,
                                     cell.U_f.weight, s, cell.W_mh.weight, cell.W_hm.weight, lv)
    return _to_node_order(h, lv), _to_node_order(c, lv)


# ============================================================== N-ary (Tai eqs 9-14)
def _tanh_(t: torch.Tensor) -> torch.Tensor:
    """``tanh`` in place. On the CPU as ``2 σ(2t) - 1``: ATen's CPU ``tanh`` runs about ten
    times slower than its ``sigmoid`` (2 ns vs 0.2 ns per float32 on the project's AMD
    machine), and the identity is exact up to float rounding (absolute error ~1e-7)."""
    if t.device.type != "cpu":
        return t.tanh_()
    return t.mul_(2).sigmoid_().mul_(2).sub_(1)


def _matmul(a: torch.Tensor, b: torch.Tensor, *, vary_k: bool = False,
            vary_m: bool = True) -> torch.Tensor:
    """``a @ b`` for the weight-gradient products, whose ``a`` is a transposed view
    (``dgates^T``): the native kernel for float32 CPU tensors reads it in place (oneDNN
    would copy it), else :func:`.gemm.mm_nt` (``vary_k``/``vary_m`` as there)."""
    if native.available(a):
        return torch.ops.gnn_treelstm.matmul(a, b)
    return mm_nt(a, b.t(), vary_k=vary_k, vary_m=vary_m)


def _gate_bias(b: torch.Tensor, hs: int, k: int) -> torch.Tensor:
    """The bias (4h,) rows ``i, o, u, f`` -> one per gate column ``i, o, u, f_1..f_K``."""
    return torch.cat([b[: 3 * hs], b[3 * hs:].repeat(k)])


def _gate_weight(W: torch.Tensor, hs: int, k: int) -> torch.Tensor:
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
    (C = (3+K) h). The level loops run in C++ for float32 CPU tensors
    (:mod:`.native`), else in Python (:func:`_nary_forward_loop`,
    :func:`_nary_backward_loop`).
    """

    @staticmethod
    def forward(ctx, xw, W, b, U, slots, lv: Levels, rows_w, m0: int, perm):
        n, k = slots.shape
        hs = U.shape[1] // k
        cols = (3 + k) * hs
        m = xw.shape[0]
        b_all = _gate_bias(b, hs, k)  # (C,)
        use_native = native.available(xw)
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
            p1 = mm_nt(xw[m0:], _gate_weight(W, hs, k), b_all)  # (M - m0, C)
            if rows_w is None:
                gates[m0:m] = p1
            else:
                gates.index_copy_(0, rows_w[m0:], p1)
        h = xw.new_empty(n + 1, hs)  # row n: zero padding row (missing children)
        c = xw.new_empty(n + 1, hs)
        h[n] = 0
        c[n] = 0
        tc = xw.new_empty(n, hs)  # tanh(c_j), kept for the backward
        if use_native:  # the loop below, in C++ (csrc/nary_levels.cpp)
            torch.ops.gnn_treelstm.nary_forward(gates, h, c, tc, slots.contiguous(),
                                                lv.node_offsets, U.contiguous())
        else:
            _nary_forward_loop(gates, h, c, tc, slots, lv, pack(U))
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
        if native.available(gates):  # the loop below, in C++ (csrc/nary_levels.cpp)
            dgates = torch.empty_like(gates)
            torch.ops.gnn_treelstm.nary_backward(dgates, dh, dc, gates, c, tc,
                                                 slots.contiguous(), lv.node_offsets,
                                                 U.contiguous())
        else:
            dgates = _nary_backward_loop(dh, dc, gates, c, tc, slots, lv, pack(U.t()))
        return _nary_param_grads(ctx, dgates, xw, W, h, slots, lv)


def _nary_forward_loop(gates, h, c, tc, slots, lv: Levels, U_fwd) -> None:
    """The bottom-up loop of :class:`_NaryLevels` in Python (eqs 9-14): activates ``gates``
    in place and writes ``h``, ``c``, ``tc``."""
    n, k = slots.shape
    hs = tc.shape[1]
    slots_flat = slots.reshape(-1)
    for lvl in range(lv.num_levels):
        a, e = lv.node_offsets[lvl], lv.node_offsets[lvl + 1]
        g = gates[a:e]  # (n_l, C)
        cl = c[a:e]
        if lvl:
            sl = slots_flat[a * k: e * k]  # (n_l K,)
            hk = h.index_select(0, sl).view(e - a, k * hs)  # [h_j1; ...; h_jK]
            g.copy_(mm_nt_add(hk, U_fwd, g))  # pre-activations of eqs 9-12
        g[:, : 2 * hs].sigmoid_()  # i, o (eqs 9, 11)
        u = _tanh_(g[:, 2 * hs: 3 * hs])  # u (eq 12)
        if lvl == 0:  # no children: c_j = i ⊙ u (eq 13)
            torch.mul(g[:, :hs], u, out=cl)
        else:
            f = g[:, 3 * hs:].sigmoid_()  # f_jℓ (eq 10)
            ck = c.index_select(0, sl).view(e - a, k, hs)
            torch.sum(ck.mul_(f.view(e - a, k, hs)), 1, out=cl)  # Σ f c (13)
            cl.addcmul_(g[:, :hs], u)  # + i ⊙ u (eq 13)
        _tanh_(torch.mul(cl, 1, out=tc[a:e]))
        torch.mul(g[:, hs: 2 * hs], tc[a:e], out=h[a:e])  # eq 14


def _nary_backward_loop(dh, dc, gates, c, tc, slots, lv: Levels, U_bwd) -> torch.Tensor:
    """The top-down loop of :class:`_NaryLevels` in Python: fills ``dh``/``dc`` of the
    children and returns the pre-activation gradients (N, C)."""
    n, k = slots.shape
    hs = tc.shape[1]
    # Local derivatives of all nodes at once; with t = tanh(c_j), gates i, o, u, f:
    #   dL/dc_j = dc_j + dh_j o (1 - t²)                   (eq 14 into eq 13)
    #   d pre_o = dh_j t o (1 - o)    d pre_i = dL/dc_j u i (1 - i)
    #   d pre_u = dL/dc_j i (1 - u²)  d pre_fℓ = dL/dc_j c_jℓ fℓ (1 - fℓ)
    i, o, u = gates[:, :hs], gates[:, hs: 2 * hs], gates[:, 2 * hs: 3 * hs]
    q_c = o * (1 - tc * tc)  # (N, h)
    q_o = tc * o * (1 - o)
    q_i = u * i * (1 - i)
    q_uf = tc.new_zeros(n, 1 + k, hs)  # factors of dL/dc_j for u, f_1..f_K
    torch.mul(i, 1 - u * u, out=q_uf[:, 0])
    a0 = lv.node_offsets[1] if lv.num_levels > 1 else n  # leaves: no forget gates
    f = gates[a0:, 3 * hs:].view(n - a0, k, hs)
    ck_all = c.index_select(0, slots[a0:].reshape(-1)).view(n - a0, k, hs)  # c_jℓ by slot
    torch.mul(ck_all * f, 1 - f, out=q_uf[a0:, 1:])
    dgates = torch.empty_like(gates)  # d pre-activations, (N, C), order i, o, u, f
    slots_flat = slots.reshape(-1)
    for lvl in reversed(range(lv.num_levels)):
        a, e = lv.node_offsets[lvl], lv.node_offsets[lvl + 1]
        dhl = dh[a:e]
        dcl = dc[a:e].addcmul_(dhl, q_c[a:e])  # dL/dc_j
        dg = dgates[a:e]
        torch.mul(dcl, q_i[a:e], out=dg[:, :hs])  # eq 9 (i)
        torch.mul(dhl, q_o[a:e], out=dg[:, hs: 2 * hs])  # eq 11 (o)
        dcl3 = dcl.unsqueeze(1)
        torch.mul(dcl3, q_uf[a:e], out=dg[:, 2 * hs:].view(e - a, 1 + k, hs))  # eqs 12, 10
        if lvl:
            sl = slots_flat[a * k: e * k]
            fl = gates[a:e, 3 * hs:].view(e - a, k, hs)
            dc.index_add_(0, sl, (dcl3 * fl).view(-1, hs))  # eq 13 -> c_jℓ
            dh.index_add_(0, sl, mm_nt(dg, U_bwd).view(-1, hs))  # eqs 9-12 -> h_jℓ
    return dgates


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
            dx_parts.append(mm_nt(d1, _gate_weight(W, hs, k).t()))  # (M - m0, X)
        if need_w:
            d1w = _matmul(d1.t(), xw[m0:], vary_k=True, vary_m=False)  # (C, X)
            d1w = torch.cat([d1w[: 3 * hs], d1w[3 * hs:].view(k, hs, -1).sum(0)])
            dW = d1w if dW is None else dW + d1w
    if need_w and dW is None:  # no word rows at all
        dW = torch.zeros_like(W)
    if need_x:  # no word rows at all: an empty (0, X) gradient
        dxw = torch.cat(dx_parts, 0) if dx_parts else torch.zeros_like(xw)
    return dxw, dW, db, dU, None, None, None, None, None


def _nary_full_U(cell) -> torch.Tensor:
    """The untied ``U`` ((3+K) h, K h) of an N-ary cell; for ``tie_forget`` it is assembled
    from ``U_iou``, ``U_f_diag`` and ``U_f_off`` (autograd routes the gradients back)."""
    if not cell.tie_forget:
        return cell.U.weight
    k = cell.n_ary
    rows = [
        torch.cat([cell.U_f_diag[r] if r == col else cell.U_f_off.weight for col in range(k)], 1)
        for r in range(k)
    ]
    return torch.cat([cell.U_iou.weight, *rows], dim=0)


@register_kernel("NaryTreeLSTM")
def nary_kernel(cell, sched: LevelSchedule, x: torch.Tensor, graph=None):
    """N-ary (Tai eqs 9-14), children by ``edata['pos']``, full (or tied) ``U^(f)_kℓ``.

    Reads ``cell.W_x``, ``cell.U`` (untied) or ``cell.U_iou/U_f_diag/U_f_off`` (tied),
    ``cell.n_ary``, ``cell.tie_forget``; ``x`` only where ``ndata['word'] != NO_WORD``
    (``schedule.word_ids``, else ``cell.word_mask(graph)``).
    """
    lv = sched.up
    k = cell.n_ary
    if lv.width > k:
        raise ValueError(
            f"NaryTreeLSTM level engine: a child position {lv.width - 1} >= n_ary={k}"
        )
    # W x_j + b^(i,o,u,f) (eqs 9-12), x_j only where node j has a word
    word_ids, num_leaf_words = _word_ids(cell, sched, graph)
    xw = x.index_select(0, word_ids)  # (M, X)
    rows_w = None if sched.word_rows_contiguous else lv.rank.index_select(0, word_ids)
    slots = lv.slots
    if lv.width < k:
        slots = F.pad(slots, (0, k - lv.width), value=lv.num_nodes)
    return _NaryLevels.apply(xw, cell.W_x.weight, cell.W_x.bias, _nary_full_U(cell), slots,
                             lv, rows_w, num_leaf_words, (lv.rank, lv.order))


# ============================================================== sequential LSTMs (Tai eq 1)
def _single_source_slots(lv: Levels) -> torch.Tensor:
    """(N, 1) row of each node's only source (padding N): the previous word of a chain."""
    if lv.width == 1:
        return lv.slots
    slots = torch.full((lv.num_nodes, 1), lv.num_nodes, dtype=lv.slots.dtype,
                       device=lv.slots.device)
    return slots.index_put_((lv.edge_dst,), lv.edge_src.unsqueeze(1))


@register_kernel("SequentialLSTM")
def sequential_kernel(cell, sched: LevelSchedule, x: torch.Tensor, graph=None):
    """Tai eq 1 over chains: the N-ary recurrence with N = 1 (``U`` = ``layers[l].U``, rows
    ``i, o, u, f``). Forward direction on the ``up`` levels, backward direction (same
    weights) on the ``down`` levels, i.e. the reversed chain.

    Reads ``cell.layers[l].W_x``, ``cell.layers[l].U``, ``cell.bidirectional``,
    ``cell.concat_layers``."""
    dirs = [sched.up] + ([sched.require_down()] if cell.bidirectional else [])
    hs, cs = [], []
    for lv in dirs:
        slots = _single_source_slots(lv)
        inp = _to_schedule_order(x, lv)
        dir_h, dir_c = [], []
        n0 = lv.node_offsets[1] if lv.num_levels > 1 else lv.num_nodes  # first words
        for layer in cell.layers:
            # every step has an input: rows 0..N-1 of the schedule, the first n0 leaves
            h, c = _NaryLevels.apply(inp, layer.W_x.weight, layer.W_x.bias, layer.U.weight,
                                     slots, lv, None, n0, None)
            dir_h.append(h)
            dir_c.append(c)
            inp = h  # layer l+1 reads layer l's h (same direction, schedule order)
        if not cell.concat_layers:
            dir_h, dir_c = dir_h[-1:], dir_c[-1:]
        hs += [_to_node_order(h, lv) for h in dir_h]
        cs += [_to_node_order(c, lv) for c in dir_c]
    return torch.cat(hs, dim=-1), torch.cat(cs, dim=-1)


# ============================================================== generic autograd levels
class _Tape:
    """A state buffer (N + 1, d) in schedule order (last row: zero padding) written level
    by level, with its gradient buffer. :class:`_TapeWrite` / :class:`_TapeGather` /
    :class:`_TapeRead` connect it to autograd so that per-level cell math written with
    ordinary tensor ops gets exact gradients at O(rows of the level) cost per level: a
    write's backward hands out the gradient rows of that level, a gather's backward adds
    into the gradient buffer in place. A scalar *token* threaded through every op orders
    the backward calls (a level's write runs after every gather that read it).
    One backward pass per forward (as with ``retain_graph=False``)."""

    def __init__(self, rows: int, width: int, like: torch.Tensor) -> None:
        self.buf = like.new_zeros(rows + 1, width)
        self.grad: torch.Tensor | None = None

    def grad_buf(self) -> torch.Tensor:
        if self.grad is None:
            self.grad = torch.zeros_like(self.buf)
        return self.grad


class _TapeWrite(torch.autograd.Function):
    @staticmethod
    def forward(ctx, token, rows, tape: _Tape, a: int):
        tape.buf[a: a + rows.shape[0]] = rows
        ctx.tape, ctx.a, ctx.n = tape, a, rows.shape[0]
        return token.clone()

    @staticmethod
    def backward(ctx, g_token):
        g = ctx.tape.grad_buf()[ctx.a: ctx.a + ctx.n].clone()
        return g_token, g, None, None


class _TapeGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, token, tape: _Tape, idx):
        ctx.tape = tape
        ctx.save_for_backward(idx)
        return tape.buf.index_select(0, idx)

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        ctx.tape.grad_buf().index_add_(0, idx, g)
        return None, None, None


class _TapeRead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, token, tape: _Tape, n: int):
        ctx.tape, ctx.n = tape, n
        return tape.buf[:n].clone()

    @staticmethod
    def backward(ctx, g):
        ctx.tape.grad_buf()[: ctx.n] += g
        return None, None, None


def run_levels(
    lv: Levels, width: int, like: torch.Tensor,
    step: Callable[[int, int, int, Callable[[torch.Tensor], torch.Tensor]], torch.Tensor],
) -> torch.Tensor:
    """Generic level loop with autograd: ``step(level, a, b, gather) -> rows (b - a, width)``
    computes the states of the level's nodes (schedule rows ``a:b``); ``gather(idx)`` reads
    states of earlier rows (``idx`` may hold the padding row N, which reads zeros). Returns
    all states (N, width) in schedule order."""
    n = lv.num_nodes
    tape = _Tape(n, width, like)
    token = like.new_zeros(()).requires_grad_()

    for lvl in range(lv.num_levels):
        a, b = lv.node_offsets[lvl], lv.node_offsets[lvl + 1]
        tok = token

        def gather(idx, tok=tok):
            return _TapeGather.apply(tok, tape, idx)

        rows = step(lvl, a, b, gather)
        token = _TapeWrite.apply(token, rows, tape, a)
    return _TapeRead.apply(token, tape, n)


def _slots_to(slots: torch.Tensor, width: int, n: int) -> torch.Tensor:
    if slots.shape[1] > width:
        raise ValueError(f"level engine: a child position >= {width} (the cell is {width}-ary)")
    return F.pad(slots, (0, width - slots.shape[1]), value=n) if slots.shape[1] < width else slots


# ============================================================== Teng & Zhang 2017
def _leaf_words_sched(x: torch.Tensor, sched: LevelSchedule, graph) -> torch.Tensor:
    """``x`` at leaves with a word, zeros elsewhere, in up-schedule order (N, x)."""
    lv = sched.up
    mask = x.new_zeros(x.shape[0])
    word_ids = sched.word_ids if sched.word_ids is not None else (
        torch.arange(x.shape[0], device=x.device) if graph is None
        else torch.nonzero(graph.ndata["word"] != -1).flatten())
    mask = mask.index_fill(0, word_ids, 1.0).index_select(0, lv.order)
    leaf_rows = lv.node_offsets[1] if lv.num_levels > 1 else lv.num_nodes
    mask[leaf_rows:] = 0  # level 0 of the up schedule = the leaves
    return _to_schedule_order(x, lv) * mask.unsqueeze(-1)


def _head_lexicon_levels(module, x_leaf_s: torch.Tensor, lv: Levels) -> torch.Tensor:
    """Teng eqs 9-10 bottom-up (HeadLexicon ``module``), schedule order (N, x)."""
    from ..cells.lexicalized import head_combine

    slots = _slots_to(lv.slots, 2, lv.num_nodes)
    W_z = module.W_z if module.mode == "gate" else None
    b_z = module.b_z if module.mode == "gate" else None
    xs = x_leaf_s.shape[1]

    def step(lvl, a, b, gather):
        if lvl == 0:  # leaves keep their word vector
            return x_leaf_s[a:b]
        kids = gather(slots[a:b].reshape(-1)).view(b - a, 2, xs)  # (n, 2, x) [x^L, x^R]
        return head_combine(kids, module.mode, W_z, b_z)  # eqs 9-10

    return run_levels(lv, xs, x_leaf_s, step)


def _lex_up_levels(cell, x_in_s: torch.Tensor, lv: Levels) -> tuple[torch.Tensor, torch.Tensor]:
    """Teng eqs 11, 12, 5, 1 (or ConTree eqs 5-8) bottom-up; schedule order."""
    from ..cells.lexicalized import lex_node_update

    hs = cell.h_size
    slots = _slots_to(lv.slots, 2, lv.num_nodes)
    x_terms = cell.input_terms(x_in_s)  # (N, 5h), one product for all nodes

    def step(lvl, a, b, gather):
        if lvl == 0:
            kids = x_terms.new_zeros(b - a, 2, 2 * hs)
        else:
            kids = gather(slots[a:b].reshape(-1)).view(b - a, 2, 2 * hs)  # [[h,c]^L, [h,c]^R]
        h, c = lex_node_update(x_terms[a:b], kids, cell.U_h, cell.U_c, cell.W_co)
        return torch.cat([h, c], dim=-1)

    hc = run_levels(lv, 2 * hs, x_terms, step)
    return hc[:, :hs], hc[:, hs:]


@register_kernel("LexicalizedTreeLSTM")
def lex_kernel(cell, sched: LevelSchedule, x: torch.Tensor, graph=None, heads=None):
    """Teng & Zhang §4.1-4.2: head lexicon (eqs 9-10) and the peephole cell (eqs 11, 12,
    5, 1; ConTree eqs 5-8 when ``lexicalized=False``), both on the up levels. Reads
    ``cell.W_x, b, U_h, U_c, W_co, lexicalized, head_lexicon_module (W_z, b_z, mode)``."""
    lv = sched.up
    x_leaf = _leaf_words_sched(x, sched, graph)
    if cell.lexicalized:
        x_in = (_head_lexicon_levels(cell.head_lexicon_module, x_leaf, lv) if heads is None
                else _to_schedule_order(heads, lv))
    else:
        x_in = x_leaf
    h, c = _lex_up_levels(cell, x_in, lv)
    return _to_node_order(h, lv), _to_node_order(c, lv)


def _topdown_levels(cell, heads: torch.Tensor, sched: LevelSchedule
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Teng eqs 14-15 on the down levels; ``heads`` (N, x) node order -> node order."""
    from ..cells.topdown import topdown_node_update

    lv = sched.require_down()
    n, hs = lv.num_nodes, cell.h_size
    side = torch.zeros(n, dtype=torch.int64, device=heads.device).index_put_(
        (lv.edge_dst,), lv.edge_pos)  # (N,) schedule order; roots 0 (left set)
    slots = torch.full((n, 2), n, dtype=torch.int64, device=heads.device).index_put_(
        (lv.edge_dst, lv.edge_pos), lv.edge_src)  # parent in the slot of the node's side
    x_terms = cell.input_terms(_to_schedule_order(heads, lv), side)  # (N, 4h)

    def step(lvl, a, b, gather):
        if lvl == 0:  # roots: no predecessor
            par = x_terms.new_zeros(b - a, 2, 2 * hs)
        else:
            par = gather(slots[a:b].reshape(-1)).view(b - a, 2, 2 * hs)
        h, c = topdown_node_update(x_terms[a:b], par, cell.U_h, cell.U_c, cell.W_co,
                                   side[a:b])
        return torch.cat([h, c], dim=-1)

    hc = run_levels(lv, 2 * hs, x_terms, step)
    return _to_node_order(hc[:, :hs], lv), _to_node_order(hc[:, hs:], lv)


@register_kernel("TopDownTreeLSTM")
def topdown_kernel(cell, sched: LevelSchedule, x: torch.Tensor, graph=None, heads=None):
    """Teng & Zhang §4.3 (eqs 14-15) on the reversed (down) schedule, heads from the cell's
    own HeadLexicon (up schedule) unless given. Reads ``cell.W_x, b, U_h, U_c, W_co,
    head_lexicon_module``, ``cell.input_terms``."""
    if heads is None:
        if cell.head_lexicon_module is None:
            raise ValueError("TopDownTreeLSTM(head=None) needs heads=...")
        lv = sched.up
        heads = _to_node_order(_head_lexicon_levels(
            cell.head_lexicon_module, _leaf_words_sched(x, sched, graph), lv), lv)
    return _topdown_levels(cell, heads, sched)


@register_kernel("BidirectionalTreeLSTM")
def bitree_kernel(cell, sched: LevelSchedule, x: torch.Tensor, graph=None):
    """Teng & Zhang §4: heads once (eqs 9-10), bottom-up cell (eqs 11-12, 5, 1) on the up
    levels, top-down cell (eqs 14-15) on the down levels; ``[h↑ ; h↓]``, ``[c↑ ; c↓]``."""
    lv = sched.up
    heads_s = _head_lexicon_levels(cell.up.head_lexicon_module,
                                   _leaf_words_sched(x, sched, graph), lv)
    h_up, c_up = _lex_up_levels(cell.up, heads_s, lv)
    h_dn, c_dn = _topdown_levels(cell.down, _to_node_order(heads_s, lv), sched)
    return (torch.cat([_to_node_order(h_up, lv), h_dn], dim=-1),
            torch.cat([_to_node_order(c_up, lv), c_dn], dim=-1))


def _mtree_full_levels(cell, sched: LevelSchedule, x: torch.Tensor):
    """fullTreeLSTM (Tran eq 2 in Child-Sum gates) with generic autograd levels."""
    from ..cells.multiplicative import forget_terms, full_transform, lstm_node_update

    lv = sched.up
    hs = cell.h_size
    wx = _to_schedule_order(F.linear(x, cell.W_x.weight, cell.W_x.bias), lv)  # (N, 4h)

    def step(lvl, a, b, gather):
        ea, eb = lv.edge_offsets[lvl], lv.edge_offsets[lvl + 1]
        h_tilde = wx.new_zeros(b - a, hs)
        fc = wx.new_zeros(b - a, hs)
        if eb > ea:
            src, seg = lv.edge_src[ea:eb], lv.edge_seg[ea:eb]
            kids = gather(src)  # (E_l, 2h) = [h_k ; c_k]
            hk, ck = kids[:, :hs], kids[:, hs:]
            t = full_transform(hk, lv.edge_rel[ea:eb], cell.W_hh)  # eq 2 summand
            h_tilde = h_tilde.index_add(0, seg, t)
            f = forget_terms(hk, ck, wx[:, 3 * hs:].index_select(0, lv.edge_dst[ea:eb]),
                             cell.U_f.weight)  # Tai eqs 4, 7 summand
            fc = fc.index_add(0, seg, f)
        h, c = lstm_node_update(wx[a:b, : 3 * hs], h_tilde, fc, cell.U_iou.weight)
        return torch.cat([h, c], dim=-1)

    hc = run_levels(lv, 2 * hs, wx, step)
    return _to_node_order(hc[:, :hs], lv), _to_node_order(hc[:, hs:], lv)
