"""Fast level kernels of Teng & Zhang's cells (2017, §4): the C++ loops of
``csrc/teng_levels.cpp`` behind ``torch.autograd.Function``.

Optional accelerations of the level engine for float32 CPU tensors when the native library
builds (:func:`.fused.available`); each function returns ``None`` when the loops cannot run,
and the cell's ``level_kernel`` then lets the general level driver run its declaration. The
equations live in the cell files (:func:`~gnn_treelstm.cells.lexicalized.head_combine`,
:func:`~gnn_treelstm.cells.lexicalized.lex_node_update`,
:func:`~gnn_treelstm.cells.topdown.topdown_node_update`) and in the one C++ loop; Python here
does bookkeeping only: buffers, permutations between node and schedule orders, and the
weight gradients as one product per weight (block) over all nodes.

* :func:`head_levels`: head lexicons bottom-up (eqs 9-10; Table 3's left / right / average
  heads as a fixed gate), in the up schedule's order.
* :func:`lex_levels`: the ConTree(+Lex) peephole cell bottom-up (eqs 11, 12, 5, 1).
* :func:`topdown_levels`: the top-down cell over the down levels (eqs 14-15).

The cell computes its input terms ``W x_t + b`` of all nodes in one product (its own
``input_terms``) between these calls; autograd connects the pieces.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gnn_treelstm.kernels.fused import available, grad_buffers, grad_matmul, state_buffers
from gnn_treelstm.trees.schedule import Levels

__all__ = ["HEAD_MODE_IDS", "permute", "to_levels", "up_to_down", "down_sides",
           "binary_slots", "head_levels", "lex_levels", "topdown_levels"]

#: head mode -> the C++ loops' mode id (left / right / average are a fixed gate z = 1, 0, 1/2)
HEAD_MODE_IDS = {"gate": 0, "left": 1, "right": 2, "average": 3}


class _Permute(torch.autograd.Function):
    """Rows ``t[idx]`` of a permutation ``idx`` with inverse ``inv``; the backward is the
    inverse gather (not a scatter)."""

    @staticmethod
    def forward(ctx, t, idx, inv):
        ctx.inv = inv
        return t.index_select(0, idx)

    @staticmethod
    def backward(ctx, g):
        return g.index_select(0, ctx.inv), None, None


def permute(t: torch.Tensor, idx: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
    """``t[idx]`` for a permutation ``idx`` whose inverse is ``inv``."""
    return _Permute.apply(t, idx, inv)


def to_levels(t: torch.Tensor, lv: Levels) -> torch.Tensor:
    """Rows in node order -> the schedule order of ``lv``."""
    return permute(t, lv.order, lv.rank)


def up_to_down(t: torch.Tensor, up: Levels, down: Levels) -> torch.Tensor:
    """Rows in the up schedule's order -> the down schedule's order."""
    return permute(t, up.rank.index_select(0, down.order), down.rank.index_select(0, up.order))


def down_sides(down: Levels) -> torch.Tensor:
    """Side of every row of the down schedule under its parent (``pos``: 0 = L, 1 = R;
    roots 0, the left set), (N,) int64."""
    side = torch.zeros(down.num_nodes, dtype=torch.int64, device=down.order.device)
    return side.index_put_((down.edge_dst,), down.edge_pos.to(torch.int64))


def binary_slots(lv: Levels) -> torch.Tensor:
    """(N, 2) children rows by position (padding N), contiguous: the rows of a binary
    forest's level loop (the C++ loops here and :mod:`.fused_triton`'s kernels)."""
    slots = lv.slots
    if lv.width < 2:
        slots = F.pad(slots, (0, 2 - lv.width), value=lv.num_nodes)
    return slots.contiguous()


# ============================================================== head lexicon (eqs 9-10)
class _HeadLevels(torch.autograd.Function):
    """Inputs: ``x0`` (N, X) up-schedule order, the leaves' word vectors in the level-0 rows
    (other rows ignored); ``W_z`` (X, 2X), ``b_z`` (X,) (gate mode, else ``None``);
    ``slots`` (N, 2); ``lv``; ``mode`` id. Output: head lexicons (N, X), schedule order."""

    @staticmethod
    def forward(ctx, x0, W_z, b_z, slots, lv: Levels, mode: int):
        n, xs = x0.shape
        n0 = lv.node_offsets[1] if lv.num_levels else 0
        buf = x0.new_empty(n + 1, xs)
        buf[:n0] = x0[:n0]
        buf[n].zero_()
        gate = mode == 0
        z = x0.new_empty(n if gate else 0, xs)
        none = x0.new_empty(0)
        W = W_z.contiguous() if gate else none
        torch.ops.gnn_treelstm.teng_head_forward(buf, z, slots, lv.node_offsets, mode, W,
                                                 b_z.contiguous() if gate else none)
        ctx.lv, ctx.mode = lv, mode
        ctx.save_for_backward(buf, z, slots, W)
        return buf[:n]

    @staticmethod
    def backward(ctx, dheads):
        buf, z, slots, W = ctx.saved_tensors
        lv: Levels = ctx.lv
        n, xs = dheads.shape
        dx = dheads.new_empty(n + 1, xs)
        dx[:n] = dheads
        dx[n].zero_()
        dpre = torch.empty_like(z)
        torch.ops.gnn_treelstm.teng_head_backward(dx, dpre, buf, z, slots, lv.node_offsets,
                                                  ctx.mode, W)
        n0 = lv.node_offsets[1] if lv.num_levels else 0
        dx0 = dx[:n]
        dx0[n0:].zero_()  # internal rows of x0 are not read
        dW = db = None
        if ctx.mode == 0:
            pairs = buf.index_select(0, slots[n0:].reshape(-1)).view(n - n0, 2 * xs)
            dW = grad_matmul(dpre[n0:].t(), pairs)  # (X, 2X), one product over all internal nodes
            db = dpre[n0:].sum(0)
        return dx0, dW, db, None, None, None


def head_levels(x0: torch.Tensor, lv: Levels, mode: str, W_z: torch.Tensor | None = None,
                b_z: torch.Tensor | None = None) -> torch.Tensor | None:
    """Head lexicons (eqs 9-10, Table 3 modes) of every node, (N, X) in ``lv``'s (up)
    schedule order, from ``x0`` (N, X) in that order (word vectors at the leaves, zeros for
    a leaf without a word; internal rows ignored); ``None`` when the loops cannot run."""
    if not available(x0) or lv.num_nodes == 0:
        return None
    gate = mode == "gate"
    return _HeadLevels.apply(x0, W_z if gate else None, b_z if gate else None,
                             binary_slots(lv), lv, HEAD_MODE_IDS[mode])


# ============================================================== ConTree(+Lex) (eqs 11, 12, 5, 1)
class _LexLevels(torch.autograd.Function):
    """Inputs: ``xt`` (N, 5h) input terms in up-schedule order (gate columns i, fl, fr, g, o);
    ``U_h`` (5h, 2h), ``U_c`` (3h, 2h), ``W_co`` (h, h); ``slots`` (N, 2); ``lv``.
    Outputs ``h, c`` (N, h) in node order."""

    @staticmethod
    def forward(ctx, xt, U_h, U_c, W_co, slots, lv: Levels):
        n, hs = xt.shape[0], W_co.shape[0]
        gates = xt.new_empty(n, 5 * hs)
        h, c = state_buffers(xt, n, hs)
        tc = xt.new_empty(n, hs)
        U_h, U_c, W_co = U_h.contiguous(), U_c.contiguous(), W_co.contiguous()
        torch.ops.gnn_treelstm.teng_lex_forward(xt.contiguous(), gates, h, c, tc, slots,
                                                lv.node_offsets, U_h, U_c, W_co)
        ctx.lv = lv
        ctx.save_for_backward(U_h, U_c, W_co, h, c, tc, gates, slots)
        return h.index_select(0, lv.rank), c.index_select(0, lv.rank)

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        U_h, U_c, W_co, h, c, tc, gates, slots = ctx.saved_tensors
        lv: Levels = ctx.lv
        n, hs = tc.shape
        dh, dc = grad_buffers(dh_out, dc_out, lv.order)
        dg = torch.empty_like(gates)
        torch.ops.gnn_treelstm.teng_lex_backward(dg, dh, dc, gates, c, tc, slots,
                                                 lv.node_offsets, U_h, U_c, W_co)
        a0 = lv.node_offsets[1] if lv.num_levels > 1 else n
        kids = slots[a0:].reshape(-1)
        hk = h.index_select(0, kids).view(n - a0, 2 * hs)  # [h^L, h^R] of the inner nodes
        ck = c.index_select(0, kids).view(n - a0, 2 * hs)
        dU_h = grad_matmul(dg[a0:].t(), hk)  # (5h, 2h) over all inner nodes
        dU_c = grad_matmul(dg[a0:, : 3 * hs].t(), ck)  # (3h, 2h)
        dW_co = grad_matmul(dg[:, 4 * hs:].t(), c[:n])  # (h, h) over all nodes
        return dg, dU_h, dU_c, dW_co, None, None


def lex_levels(xt: torch.Tensor, U_h: torch.Tensor, U_c: torch.Tensor, W_co: torch.Tensor,
               lv: Levels) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Bottom-up ``(h, c)`` in node order from the input terms ``xt`` (N, 5h) in ``lv``'s
    (up) schedule order; ``None`` when the loops cannot run."""
    if not available(xt) or lv.num_nodes == 0:
        return None
    return _LexLevels.apply(xt, U_h, U_c, W_co, binary_slots(lv), lv)


# ============================================================== top-down (eqs 14-15)
class _TopDownLevels(torch.autograd.Function):
    """Inputs: ``xt`` (N, 4h) input terms in down-schedule order (i, f, g, o); ``U_h``
    (4h, 2h), ``U_c`` (2h, 2h), ``W_co`` (2, h, h); ``parent`` (N,) parent rows (N: root),
    ``side`` (N,); ``lv`` (down levels). Outputs ``h, c`` (N, h) in node order."""

    @staticmethod
    def forward(ctx, xt, U_h, U_c, W_co, parent, side, lv: Levels):
        n, hs = xt.shape[0], W_co.shape[1]
        gates = xt.new_empty(n, 4 * hs)
        h, c = state_buffers(xt, n, hs)
        tc = xt.new_empty(n, hs)
        U_h, U_c, W_co = U_h.contiguous(), U_c.contiguous(), W_co.contiguous()
        torch.ops.gnn_treelstm.teng_topdown_forward(xt.contiguous(), gates, h, c, tc, parent,
                                                    side, lv.node_offsets, U_h, U_c, W_co)
        ctx.lv = lv
        ctx.save_for_backward(U_h, U_c, W_co, h, c, tc, gates, parent, side)
        return h.index_select(0, lv.rank), c.index_select(0, lv.rank)

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        U_h, U_c, W_co, h, c, tc, gates, parent, side = ctx.saved_tensors
        lv: Levels = ctx.lv
        n, hs = tc.shape
        dh, dc = grad_buffers(dh_out, dc_out, lv.order)
        dg = torch.empty_like(gates)
        torch.ops.gnn_treelstm.teng_topdown_backward(dg, dh, dc, gates, c, tc, parent, side,
                                                     lv.node_offsets, U_h, U_c, W_co)
        a0 = lv.node_offsets[1] if lv.num_levels > 1 else n
        dU_h, dU_c, dW_co = torch.empty_like(U_h), torch.empty_like(U_c), torch.empty_like(W_co)
        for s in range(2):  # one product per weight block W_*^N over the nodes of side N
            rows = torch.nonzero(side == s).squeeze(1)  # (n_s,) incl. the roots for L
            dW_co[s] = grad_matmul(dg.index_select(0, rows)[:, 3 * hs:].t(),
                                   c.index_select(0, rows))
            rows = rows[rows >= a0]  # nodes with a parent
            dgs = dg.index_select(0, rows)
            par = parent.index_select(0, rows)
            dU_h[:, s * hs:(s + 1) * hs] = grad_matmul(dgs.t(), h.index_select(0, par))
            dU_c[:, s * hs:(s + 1) * hs] = grad_matmul(dgs[:, : 2 * hs].t(), c.index_select(0, par))
        return dg, dU_h, dU_c, dW_co, None, None, None


def topdown_levels(xt: torch.Tensor, U_h: torch.Tensor, U_c: torch.Tensor, W_co: torch.Tensor,
                   side: torch.Tensor, lv: Levels) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Top-down ``(h, c)`` in node order from the input terms ``xt`` (N, 4h) in ``lv``'s
    (down) schedule order, ``side`` (N,) from :func:`down_sides`; ``None`` when the loops
    cannot run."""
    if not available(xt) or lv.num_nodes == 0:
        return None
    parent = lv.slots[:, 0].contiguous()
    return _TopDownLevels.apply(xt, U_h, U_c, W_co, parent, side.contiguous(), lv)
