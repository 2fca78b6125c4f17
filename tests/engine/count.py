"""Counting the tensor operations a step dispatches (a ``TorchDispatchMode``)."""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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
