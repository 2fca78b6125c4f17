"""Task heads, losses and metrics, and the ``tasks`` registry (name -> :class:`Task` class).

Names: ``sst-5``, ``sst-2`` (sentiment, Tai §4.1/§5.1; Teng eqs 16-17 for the
bidirectional model), ``sick-r`` (relatedness, Tai §4.2), ``sick-e``, ``snli`` (inference,
Tran §5.3), ``trec`` (question type). Every task module registers its tasks
with ``@tasks.register(name)`` (:mod:`~gnn_treelstm.tasks.registry`) and is imported here;
:func:`build_task` resolves a name.
"""

from gnn_treelstm.tasks import (  # noqa: F401  (each module registers its tasks)
    classification,
    custom,
    inference,
    relatedness,
)
from gnn_treelstm.tasks.base import Encoded, Task, gather_batches
from gnn_treelstm.tasks.registry import build_task, tasks

__all__ = ["tasks", "build_task", "Task", "Encoded", "gather_batches"]
