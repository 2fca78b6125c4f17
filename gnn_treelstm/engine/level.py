r"""The level engine: Tree-LSTM cells run on a precomputed :class:`LevelSchedule`.

``level_forward(cell, graph_or_schedule, x)`` looks up the *level kernel* registered for
the cell's class name and returns the same ``(h, c)`` as the cell's ``dgl`` engine.

Design (issue 5):

* **Input terms first.** Every kernel computes ``W x + b`` of all nodes in one matrix
  product (autograd handles it), then permutes the rows once into *schedule order*
  (nodes sorted by level) so that each level is a contiguous block of rows.
* **Fused recurrence with a hand-written backward.** The level loop runs inside a
  :class:`torch.autograd.Function`: forward writes the gates and states of each level with
  ``out=`` / in-place ops into buffers allocated once per batch (state buffers have one
  extra zero row, the padding target of missing children); backward walks the levels
  top-down, accumulating ``dh``/``dc`` of the children in place (``index_add_``) and
  writing the pre-activation gradients of each level into one buffer; the weight
  gradients of the recurrent matrices are then **one** matrix product over all nodes
  (not one per level). Autograd would instead copy a full-size gradient per level for
  every in-place write (``CopySlices`` / ``IndexCopyBackward`` clone the whole buffer),
  which costs more than the arithmetic at SST sizes.
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

from .schedule import Levels, LevelSchedule

logger = logging.getLogger(__name__)

__all__ = ["level_forward", "register_kernel", "KERNELS", "has_kernel", "schedule_for"]

Kernel = Callable[[nn.Module, LevelSchedule, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

#: cell class name -> level kernel ``f(cell, schedule, x) -> (h, c)``
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
    *, top_down: bool = False,
) -> LevelSchedule:
    """The schedule of a graph (computed on the CPU) or a given schedule, on ``device``."""
    if isinstance(graph_or_schedule, LevelSchedule):
        sched = graph_or_schedule
    elif isinstance(graph_or_schedule, dgl.DGLGraph):
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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``cell`` with the level engine; returns ``(h, c)`` as its ``dgl`` engine does.

    Args:
        cell: a cell whose class has a registered kernel (:data:`KERNELS`).
        graph_or_schedule: the (batched) graph, or its :class:`LevelSchedule`.
        x: node inputs (N, x_size), in node-id order.
        schedule: a precomputed schedule of the graph (e.g. from the collate function);
            when given, ``graph_or_schedule`` may still be the graph (cells that read node
            data such as ``ndata['word']`` take it from there).

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
    return kernel(cell, sched, x, graph=graph)


# ============================================================== helpers
def _to_schedule_order(t: torch.Tensor, lv: Levels) -> torch.Tensor:
    return t.index_select(0, lv.order)


def _to_node_order(t: torch.Tensor, lv: Levels) -> torch.Tensor:
    return t.index_select(0, lv.rank)


def _word_mask(cell: nn.Module, graph: dgl.DGLGraph | None, n: int) -> torch.Tensor:
    if graph is None:
        raise ValueError(
            f"level_forward({type(cell).__name__}): this cell reads ndata['word']; pass the "
            "graph (and the schedule as schedule=...)"
        )
    return cell.word_mask(graph)


# ============================================================== Child-Sum (Tai eqs 2-8)
class _ChildSumLevels(torch.autograd.Function):
    """Child-Sum recurrence (Tai eqs 2-8) over all levels, given ``W x + b``.

    Inputs: ``wx`` (N, 4h) in schedule order, gate order ``i, o, u, f``; ``U_iou`` (3h, h);
    ``U_f`` (h, h); ``lv`` (up levels). Outputs ``h, c`` (N, h) in schedule order.
    """

    @staticmethod
    def forward(ctx, wx, U_iou, U_f, lv: Levels):  # noqa: D401
        n, hs = wx.shape[0], U_f.shape[0]
        e = lv.edge_src.shape[0]
        h = wx.new_zeros(n + 1, hs)  # row n: zero padding row
        c = wx.new_zeros(n + 1, hs)
        gates = wx.new_empty(n, 3 * hs)  # activated i, o, u
        h_tilde = wx.new_zeros(n, hs)  # eq 2 (zeros at leaves)
        fgate = wx.new_empty(e, hs)  # f_jk per child edge, activated
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
                ht = h_tilde[a:b].index_add_(0, seg, hk)  # eq 2: (n_l, h)
                torch.addmm(wx_iou[a:b], ht, U_iou_t, out=g)  # eqs 3, 5, 6 pre-activations
                f = fgate[ea:eb]
                torch.addmm(wx_f.index_select(0, lv.edge_dst[ea:eb]), hk, U_f_t, out=f)
                f.sigmoid_()  # eq 4
                cl.index_add_(0, seg, f * c.index_select(0, src))  # Σ_k f_jk ⊙ c_k (eq 7)
            else:
                g.copy_(wx_iou[a:b])
            g[:, : 2 * hs].sigmoid_()
            g[:, 2 * hs:].tanh_()
            i, o, u = g[:, :hs], g[:, hs: 2 * hs], g[:, 2 * hs:]
            cl.addcmul_(i, u)  # eq 7
            torch.mul(o, torch.tanh(cl), out=h[a:b])  # eq 8
        ctx.lv = lv
        ctx.save_for_backward(U_iou, U_f, h, c, gates, h_tilde, fgate)
        return h[:n], c[:n]

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        U_iou, U_f, h, c, gates, h_tilde, fgate = ctx.saved_tensors
        lv: Levels = ctx.lv
        n, hs = gates.shape[0], U_f.shape[0]
        dh = h.new_zeros(n + 1, hs)
        dc = h.new_zeros(n + 1, hs)
        if dh_out is not None:
            dh[:n] = dh_out
        if dc_out is not None:
            dc[:n] = dc_out
        dgates = h.new_empty(n, 3 * hs)  # d pre-activations of i, o, u
        dfgate = h.new_empty(fgate.shape)  # d pre-activation of f per edge
        for lvl in reversed(range(lv.num_levels)):
            a, b = lv.node_offsets[lvl], lv.node_offsets[lvl + 1]
            ea, eb = lv.edge_offsets[lvl], lv.edge_offsets[lvl + 1]
            g = gates[a:b]
            i, o, u = g[:, :hs], g[:, hs: 2 * hs], g[:, 2 * hs:]
            tc = torch.tanh(c[a:b])
            dhl = dh[a:b]
            dcl = dc[a:b].addcmul_(dhl * o, 1 - tc * tc)  # dL/dc_j (eq 8 into eq 7)
            dg = dgates[a:b]
            torch.mul(dhl * tc, o * (1 - o), out=dg[:, hs: 2 * hs])  # eq 8 -> o
            torch.mul(dcl * u, i * (1 - i), out=dg[:, :hs])  # eq 7 -> i
            torch.mul(dcl * i, 1 - u * u, out=dg[:, 2 * hs:])  # eq 7 -> u
            if eb > ea:
                src, seg = lv.edge_src[ea:eb], lv.edge_seg[ea:eb]
                f = fgate[ea:eb]
                dce = dcl.index_select(0, seg)  # (E_l, h)
                dc.index_add_(0, src, dce * f)  # eq 7 -> c_k
                df = dfgate[ea:eb]
                torch.mul(dce * c.index_select(0, src), f * (1 - f), out=df)  # eq 7 -> f
                dhk = (dg @ U_iou).index_select(0, seg)  # eqs 3,5,6 via h~ (eq 2)
                dhk.addmm_(df, U_f)  # eq 4 -> h_k
                dh.index_add_(0, src, dhk)
        dU_iou = dgates.t() @ h_tilde  # (3h, h), one product over all nodes
        dU_f = dfgate.t() @ h.index_select(0, lv.edge_src)  # (h, h) over all edges
        dwx_f = h.new_zeros(n, hs).index_add_(0, lv.edge_dst, dfgate)
        dwx = torch.cat([dgates, dwx_f], dim=1)
        return dwx, dU_iou, dU_f, None


@register_kernel("ChildSumTreeLSTM")
def childsum_kernel(cell, sched: LevelSchedule, x: torch.Tensor, graph=None):
    """Child-Sum (Tai eqs 2-8). Reads ``cell.W_x`` (Linear x -> 4h, rows i, o, u, f, with
    the biases), ``cell.U_iou`` (h -> 3h) and ``cell.U_f`` (h -> h)."""
    lv = sched.up
    wx = F.linear(x, cell.W_x.weight, cell.W_x.bias)  # (N, 4h), all nodes at once
    h, c = _ChildSumLevels.apply(_to_schedule_order(wx, lv), cell.U_iou.weight,
                                 cell.U_f.weight, lv)
    return _to_node_order(h, lv), _to_node_order(c, lv)


# ============================================================== N-ary (Tai eqs 9-14)
class _NaryLevels(torch.autograd.Function):
    """N-ary recurrence (Tai eqs 9-14) over all levels, given ``W x + b``.

    Inputs: ``wx`` (N, 4h) schedule order, gates ``i, o, u, f``; ``U`` ((3+K)h, K h) with
    output rows ``i, o, u, f_1..f_K`` and input columns ``[h_j1; ...; h_jK]``; ``slots``
    (N, K) rows of the children by position (padding = N); ``lv``.
    """

    @staticmethod
    def forward(ctx, wx, U, slots, lv: Levels):
        n, k = slots.shape
        hs = wx.shape[1] // 4
        h = wx.new_zeros(n + 1, hs)
        c = wx.new_zeros(n + 1, hs)
        # W^(f) x_j + b^(f) is shared by the K forget gates: (N, (3+K) h)
        wx_ext = torch.cat([wx[:, : 3 * hs], wx[:, 3 * hs:].repeat(1, k)], dim=1)
        gates = wx_ext  # activated in place, level by level: i, o, u, f_1..f_K
        U_t = U.t()
        for lvl in range(lv.num_levels):
            a, b = lv.node_offsets[lvl], lv.node_offsets[lvl + 1]
            ea, eb = lv.edge_offsets[lvl], lv.edge_offsets[lvl + 1]
            g = gates[a:b]  # (n_l, (3+K) h)
            cl = c[a:b]
            if eb > ea:
                sl = slots[a:b].reshape(-1)  # (n_l*K,)
                hk = h.index_select(0, sl).view(b - a, k * hs)  # [h_j1; ...; h_jK]
                g.addmm_(hk, U_t)  # eqs 9-12 pre-activations
                g[:, : 2 * hs].sigmoid_()
                g[:, 2 * hs: 3 * hs].tanh_()
                f = g[:, 3 * hs:].sigmoid_().view(b - a, k, hs)  # eq 10
                ck = c.index_select(0, sl).view(b - a, k, hs)
                torch.sum(f * ck, dim=1, out=cl)  # Σ_ℓ f_jℓ ⊙ c_jℓ (eq 13)
            else:
                g[:, : 2 * hs].sigmoid_()
                g[:, 2 * hs: 3 * hs].tanh_()
                g[:, 3 * hs:].sigmoid_()
            cl.addcmul_(g[:, :hs], g[:, 2 * hs: 3 * hs])  # eq 13
            torch.mul(g[:, hs: 2 * hs], torch.tanh(cl), out=h[a:b])  # eq 14
        ctx.lv = lv
        ctx.save_for_backward(U, slots, h, c, gates)
        return h[:n], c[:n]

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        U, slots, h, c, gates = ctx.saved_tensors
        lv: Levels = ctx.lv
        n, k = slots.shape
        hs = h.shape[1]
        dh = h.new_zeros(n + 1, hs)
        dc = h.new_zeros(n + 1, hs)
        if dh_out is not None:
            dh[:n] = dh_out
        if dc_out is not None:
            dc[:n] = dc_out
        dgates = torch.empty_like(gates)  # d pre-activations, (N, (3+K) h)
        for lvl in reversed(range(lv.num_levels)):
            a, b = lv.node_offsets[lvl], lv.node_offsets[lvl + 1]
            ea, eb = lv.edge_offsets[lvl], lv.edge_offsets[lvl + 1]
            g = gates[a:b]
            i, o, u = g[:, :hs], g[:, hs: 2 * hs], g[:, 2 * hs: 3 * hs]
            tc = torch.tanh(c[a:b])
            dhl = dh[a:b]
            dcl = dc[a:b].addcmul_(dhl * o, 1 - tc * tc)  # eq 14 into eq 13
            dg = dgates[a:b]
            torch.mul(dcl * u, i * (1 - i), out=dg[:, :hs])  # eq 13 -> i (eq 9)
            torch.mul(dhl * tc, o * (1 - o), out=dg[:, hs: 2 * hs])  # eq 14 -> o (eq 11)
            torch.mul(dcl * i, 1 - u * u, out=dg[:, 2 * hs: 3 * hs])  # eq 13 -> u (eq 12)
            dgf = dg[:, 3 * hs:].view(b - a, k, hs)
            f = g[:, 3 * hs:].view(b - a, k, hs)
            if eb > ea:
                sl = slots[a:b].reshape(-1)
                ck = c.index_select(0, sl).view(b - a, k, hs)
                torch.mul(dcl.unsqueeze(1) * ck, f * (1 - f), out=dgf)  # eq 13 -> f (eq 10)
                dc.index_add_(0, sl, (dcl.unsqueeze(1) * f).view(-1, hs))  # eq 13 -> c_jℓ
                dh.index_add_(0, sl, (dg @ U).view(-1, hs))  # eqs 9-12 -> h_jℓ
            else:
                dgf.zero_()  # no children: c_jℓ = 0, f has no effect
        # level 0 of the bottom-up schedule holds exactly the leaves (all-zero children)
        a0 = lv.node_offsets[1] if lv.num_levels > 1 else n
        hk_all = h.index_select(0, slots[a0:].reshape(-1)).view(n - a0, k * hs)
        dU = dgates[a0:].t() @ hk_all  # ((3+K) h, K h), one product over all inner nodes
        dwx = torch.cat([dgates[:, : 3 * hs], dgates[:, 3 * hs:].view(n, k, hs).sum(1)], 1)
        return dwx, dU, None, None


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
    ``cell.n_ary``, ``cell.tie_forget``, ``cell.word_mask(graph)`` (x only where a word).
    """
    lv = sched.up
    k = cell.n_ary
    if lv.width > k:
        raise ValueError(
            f"NaryTreeLSTM level engine: a child position {lv.width - 1} >= n_ary={k}"
        )
    wx = cell.input_terms(x, _word_mask(cell, graph, x.shape[0]))  # (N, 4h)
    slots = lv.slots
    if lv.width < k:
        slots = F.pad(slots, (0, k - lv.width), value=lv.num_nodes)
    h, c = _NaryLevels.apply(_to_schedule_order(wx, lv), _nary_full_U(cell), slots, lv)
    return _to_node_order(h, lv), _to_node_order(c, lv)
