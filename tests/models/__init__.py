"""Tests of :mod:`gnn_treelstm.models`: the model, its checkpoints, dropout, from_pretrained."""
