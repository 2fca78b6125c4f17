"""Tests of :mod:`gnn_treelstm.datasets`: readers, parsers and the build of data sets."""
