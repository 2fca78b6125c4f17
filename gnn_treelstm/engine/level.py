r"""The level engine: a cell's :class:`~.recurrence.Recurrence` on a precomputed schedule.

:func:`propagate` runs any declared recurrence level by level on a
:class:`~gnn_treelstm.trees.schedule.LevelSchedule` (built once per batch, usually in the data
loader's collate function): the inputs are permuted once into *schedule order* (nodes sorted by
level, so a level is a contiguous block of rows), and each level gathers its sources'
states, applies the cell's message (aggregated with one ``index_add`` or
``scatter_reduce``: :attr:`~.recurrence.Recurrence.aggregate`) or slots them by
position, and applies the cell's update. States and messages stay packed, one tensor each
per level; the cell's functions see them as named views (:class:`~.recurrence.Layout`).
Autograd sees each level through a :class:`_Tape` whose custom write / gather functions
keep the backward at O(rows of the level) per level (plain in-place writes into one buffer
would make autograd copy the whole buffer per level).

This general driver runs every cell on any device and dtype. Cells may name a faster
kernel beside their declaration (:meth:`gnn_treelstm.cells.base.TreeCell.level_kernel`;
the C++ level loops of :mod:`gnn_treelstm.kernels.fused`), which the registry-wide
equality test holds to this driver.

No host-device synchronisation in the loop: level boundaries are host-side ints of the
schedule, so the same code runs on CUDA with the index tensors moved by
``LevelSchedule.to``.

Under ``torch.compile`` this driver runs (not the fast kernels; see
:func:`gnn_treelstm.engine.propagator.compiling`), its level loop unrolled into the graph
with out-of-place level writes instead of the tape (:func:`run_levels`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import dgl
import torch
from torch.nn import functional as F

from gnn_treelstm.engine.recurrence import Inputs, Recurrence, lazy_parts
from gnn_treelstm.trees.schedule import Levels, LevelSchedule

logger = logging.getLogger(__name__)

__all__ = ["propagate", "schedule_for", "run_levels", "to_schedule_order", "to_node_order"]


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
            "level engine: expected a dgl.DGLGraph or a LevelSchedule, got "
            f"{type(graph_or_schedule).__name__}"
        )
    if device is not None and sched.device != device:
        sched = sched.to(device)
    return sched


def to_schedule_order(t: torch.Tensor, lv: Levels) -> torch.Tensor:
    """Rows in node order -> rows in the schedule order of ``lv``."""
    return t.index_select(0, lv.order)


def to_node_order(t: torch.Tensor, lv: Levels) -> torch.Tensor:
    """Rows in the schedule order of ``lv`` -> rows in node order."""
    return t.index_select(0, lv.rank)


def _slots(lv: Levels, k: int) -> torch.Tensor:
    """(N, K) schedule rows of every node's sources by position (padding N): the source of
    edge ``e`` sits in column ``edge_pos[e]`` of its receiving node's row."""
    n = lv.num_nodes
    if lv.direction == "up" and lv.width <= k:
        return lv.slots if lv.width == k else F.pad(lv.slots, (0, k - lv.width), value=n)
    slots = torch.full((n, k), n, dtype=torch.int64, device=lv.edge_src.device)
    return slots.index_put_((lv.edge_dst, lv.edge_pos), lv.edge_src)


def propagate(sched: LevelSchedule, rec: Recurrence, inputs: Inputs) -> torch.Tensor:
    """Run ``rec`` on ``sched``; ``inputs`` are per-node tensors in node order, in the
    order of ``rec.inputs``. Returns the packed states ``(N, rec.width)`` in node order."""
    if sched.num_nodes == 0:
        return rec.run_update(rec.input_parts(inputs), rec.sources(inputs[0], 0))
    lv = sched.up if rec.direction == "up" else sched.require_down()
    ins = tuple(to_schedule_order(t, lv) for t in inputs)
    like = ins[0]
    if rec.message is None:
        k, w = rec.slots, rec.width
        slots = _slots(lv, k)

        def step(lvl, a, b, gather):
            if lvl == 0:  # leaves (up) / roots (down): no sources
                kids = rec.sources(like, b - a)
            else:
                kids = gather(slots[a:b].reshape(-1)).view(b - a, k, w)
            return rec.run_update(rec.input_parts([t[a:b] for t in ins]), kids)
    else:
        names = rec.inputs
        by_name = dict(zip(names, ins))

        def step(lvl, a, b, gather):
            ea, eb = lv.edge_offsets[lvl], lv.edge_offsets[lvl + 1]
            msum = rec.sources(like, b - a)
            if eb > ea:
                dst = lv.edge_dst[ea:eb]
                rel = lv.edge_rel[ea:eb] if rec.uses_rel else None
                # the receivers' inputs, gathered per edge only where the message reads them
                dst_x = lazy_parts(names, lambda name: by_name[name].index_select(0, dst))
                m = rec.run_message(gather(lv.edge_src[ea:eb]), dst_x, rel)
                msum = _aggregate(rec.aggregate, msum, lv.edge_seg[ea:eb], m)
            return rec.run_update(rec.input_parts([t[a:b] for t in ins]), msum)

    return to_node_order(run_levels(lv, rec.width, like, step), lv)


def _aggregate(how: str, zeros: torch.Tensor, seg: torch.Tensor, m: torch.Tensor
               ) -> torch.Tensor:
    """The messages ``m`` (E, w) of a level aggregated per receiving row ``seg`` (E,) into
    ``zeros`` (rows, w): :attr:`Recurrence.aggregate`; rows without a message stay zero."""
    if how == "sum":
        return zeros.index_add(0, seg, m)
    if how == "mean":
        count = torch.bincount(seg, minlength=zeros.shape[0]).clamp(min=1)
        return zeros.index_add(0, seg, m) / count.to(m.dtype).unsqueeze(-1)
    # max: torch.amax's gradient rule (equal maxima share it evenly); include_self=False
    # keeps the zeros of rows without a message
    return zeros.scatter_reduce(0, seg.unsqueeze(-1).expand_as(m), m, reduce="amax",
                                include_self=False)


# ============================================================== autograd over levels
class _Tape:
    """A state buffer (N + 1, d) in schedule order (last row: zero padding) written level
    by level, with its gradient buffer. :class:`_TapeWrite` / :class:`_TapeGather` /
    :class:`_TapeRead` connect it to autograd so that per-level cell math written with
    ordinary tensor ops gets exact gradients at O(rows of the level) cost per level: a
    write's backward hands out the gradient rows of that level, a gather's backward adds
    into the gradient buffer in place. A scalar *token* threaded through every op orders
    the backward calls (a level's write runs after every gather that read it). Each
    backward pass starts at :class:`_TapeRead` with a fresh gradient buffer, so repeated
    passes (``retain_graph=True``, gradcheck) are exact too."""

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
        ctx.tape.grad = None  # a backward pass starts here: fresh gradient buffer
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
    if torch.compiler.is_compiling():
        return _run_levels_traced(lv, width, like, step)
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


def _run_levels_traced(
    lv: Levels, width: int, like: torch.Tensor,
    step: Callable[[int, int, int, Callable[[torch.Tensor], torch.Tensor]], torch.Tensor],
) -> torch.Tensor:
    """:func:`run_levels` while ``torch.compile`` traces: the same loop with each level
    written out of place (``slice_scatter``) into the state buffer, so the whole loop is
    one graph of plain tensor ops, forward and backward. (The :class:`_Tape` functions
    write into a Python object, a side effect Dynamo does not trace: it would break the
    graph at every level. Eager, each out-of-place write would copy the whole buffer,
    which is why the eager driver keeps the tape.) ``level`` cannot import
    :mod:`.propagator`, so the test is ``torch.compiler.is_compiling()`` itself."""
    buf = like.new_zeros(lv.num_nodes + 1, width)
    for lvl in range(lv.num_levels):
        a, b = lv.node_offsets[lvl], lv.node_offsets[lvl + 1]
        rows = step(lvl, a, b, lambda idx, buf=buf: buf.index_select(0, idx))  # levels < lvl
        buf = buf.slice_scatter(rows, 0, a, b)
    return buf[: lv.num_nodes]
