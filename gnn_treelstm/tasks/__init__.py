"""Task heads, losses and metrics, and the ``tasks`` registry (name -> :class:`Task` class).

Names: ``sst-5``, ``sst-2`` (sentiment, Tai §4.1/§5.1; Teng eqs 16-17 for the
bidirectional model), ``sick-r`` (relatedness, Tai §4.2), ``sick-e``, ``snli`` (inference,
Tran §5.3), ``trec`` (question type). Every module of this package registers its tasks
with ``@tasks.register(name)``; :func:`build_task` resolves a name.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..registry import Registry
from .base import Encoded, Task, gather_batches

__all__ = ["tasks", "build_task", "Task", "Encoded", "gather_batches"]

tasks: Registry[type[Task]] = Registry("task")


def build_task(name: str, *, supervision: str | None = None) -> Task:
    """Instantiate the task registered as ``name``."""
    return tasks.get(name)(supervision=supervision)


for _mod in pkgutil.iter_modules(__path__):
    if _mod.name not in ("base",):
        importlib.import_module(f"{__name__}.{_mod.name}")
