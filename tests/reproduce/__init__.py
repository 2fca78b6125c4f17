"""Tests of :mod:`gnn_treelstm.reproduce`: the rows, the runner, the ledger and the report."""
