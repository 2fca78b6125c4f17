"""Tests of :mod:`gnn_treelstm.training`: the trainer, run directories, resume, faults."""
