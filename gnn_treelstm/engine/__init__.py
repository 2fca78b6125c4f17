"""Propagation engines of the cells' declared recurrences.

* :mod:`~gnn_treelstm.engine.recurrence` — :class:`Recurrence`, how a cell declares its math
  (named inputs, state parts and message parts; :class:`Parts`, what its functions read).
* :mod:`~gnn_treelstm.engine.propagator` — the engines by name (``ENGINES``) and the
  ``Propagator`` that runs a cell's recurrences with one.
* :mod:`~gnn_treelstm.engine.dgl_engine` — the recurrence under ``dgl.prop_nodes_topo``.
* :mod:`~gnn_treelstm.engine.level` — the recurrence level by level on a precomputed
  :class:`~gnn_treelstm.trees.schedule.LevelSchedule` (built once per batch, on the CPU).
* :mod:`~gnn_treelstm.kernels.fused` — optional C++ level loops for some cells (float32 CPU).
* :mod:`~gnn_treelstm.commands.dgl_example` — DGL's example cell, the benchmark anchor.

Nothing here imports :mod:`gnn_treelstm.cells`: cells import their engines.
"""

from gnn_treelstm.engine.recurrence import Parts, Recurrence

__all__ = ["Recurrence", "Parts"]
