"""Tests of :mod:`gnn_treelstm.commands`: the command lines, their flags, errors and servers."""
