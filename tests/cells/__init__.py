"""Tests of :mod:`gnn_treelstm.cells`: every cell against its per-node reference, the registry."""
