"""The full model and its files: embedding -> cell -> task head, checkpoints, prediction.

* :mod:`~gnn_treelstm.models.treelstm` — :class:`ModelConfig` and :class:`TreeLSTMModel`.
* :mod:`~gnn_treelstm.models.checkpoint` — checkpoints that rebuild a model on their own.
"""
