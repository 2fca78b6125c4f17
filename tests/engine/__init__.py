"""Tests of :mod:`gnn_treelstm.engine`: the DGL and level engines, schedules, compilation."""
