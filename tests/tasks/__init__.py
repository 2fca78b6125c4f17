"""Tests of :mod:`gnn_treelstm.tasks`: classification, relatedness, inference, custom tasks."""
