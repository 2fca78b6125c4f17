"""Counting the tensor operations a level-engine step dispatches (a ``TorchDispatchMode``):
the count that decides a GPU step's launch overhead. ``scripts/count_level_ops.py`` reports
it per level, ``tests/engine/test_triton.py`` bounds it."""

from __future__ import annotations

from collections import Counter

import dgl
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gnn_treelstm.kernels import fused_triton, native
from gnn_treelstm.trees.schedule import LevelSchedule

__all__ = ["METADATA", "OpCounter", "count_step"]

#: ops that only make another view or read metadata: not launches of work
METADATA = {torch.ops.aten.detach.default, torch.ops.aten.alias.default,
            torch.ops.aten.lift_fresh.default, torch.ops.aten.sym_size.int,
            torch.ops.aten.sym_stride.int, torch.ops.aten.sym_numel.default,
            torch.ops.aten.is_same_size.default}


class OpCounter(TorchDispatchMode):
    """Counts, by name (``aten::mm``, ``gnn_treelstm_triton::nary_forward``), the operations
    dispatched while active, views and metadata ops left out. An operation's own inner
    operations are not seen (the mode is off while it runs), so a custom op counts once."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func not in METADATA:
            self.ops[func.name()] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def count_step(cell: torch.nn.Module, graph: dgl.DGLGraph, x: torch.Tensor,
               schedule: LevelSchedule, *, kernels: str | None = None,
               native_choice: str | None = None) -> OpCounter:
    """The operations of one forward + backward step of ``cell`` on ``graph`` (inputs
    ``x``, the given ``schedule``; loss ``h.sum() + c.sum()``), with the level kernels
    ``kernels`` (:func:`.fused_triton.set_choice`) and the C++ loops ``native_choice``
    (:func:`.native.set_choice`) for the step; both choices go back to their environment
    variables after it."""
    fused_triton.set_choice(kernels)
    native.set_choice(native_choice)
    try:
        with OpCounter() as count:
            h, c = cell(graph, x, schedule=schedule)
            (h.sum() + c.sum()).backward()
    finally:
        fused_triton.set_choice(None)
        native.set_choice(None)
    return count
