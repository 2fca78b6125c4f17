"""Tests of :mod:`gnn_treelstm.analyze`: the analyses and their plots."""
