"""The level-scheduled engine (issue 5): precomputed schedules and fused level kernels.

* :class:`~gnn_treelstm.engine.schedule.LevelSchedule` — bottom-up / top-down frontiers of a
  batched graph as flat index tensors, built once per batch on the CPU (collate function).
* :func:`~gnn_treelstm.engine.level.level_forward` — run a cell on a schedule with its
  registered level kernel (:data:`~gnn_treelstm.engine.level.KERNELS`).
* :mod:`~gnn_treelstm.engine.dgl_example` — DGL's example cell, the benchmark anchor.
"""

from .level import KERNELS, has_kernel, level_forward, register_kernel
from .schedule import Levels, LevelSchedule

__all__ = ["LevelSchedule", "Levels", "level_forward", "register_kernel", "has_kernel", "KERNELS"]
