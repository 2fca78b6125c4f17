"""The ``tasks`` registry: name -> :class:`~gnn_treelstm.tasks.base.Task` class."""

from __future__ import annotations

from gnn_treelstm.registry import Registry
from gnn_treelstm.tasks.base import Task

__all__ = ["tasks", "build_task"]

tasks: Registry[type[Task]] = Registry("task")


def build_task(name: str, *, supervision: str | None = None) -> Task:
    """Instantiate the task registered as ``name``."""
    return tasks.get(name)(supervision=supervision)
