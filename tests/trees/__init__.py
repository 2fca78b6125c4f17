"""Tests of :mod:`gnn_treelstm.trees`: the graph schema, data sets, drawing, vocabularies."""
