"""The checkout's data-building entry points: ``python -m data_prep.build`` and
``python -m data_prep.fetch`` run ``gnn-treelstm build`` and ``gnn-treelstm fetch``.

The readers, parsers and the build itself are :mod:`gnn_treelstm.datasets`, part of the
installed package; nothing of the library imports this folder.
"""
