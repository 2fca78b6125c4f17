"""Tests of :mod:`gnn_treelstm.kernels`: the native (C++) kernels."""
