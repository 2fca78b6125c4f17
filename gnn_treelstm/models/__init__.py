"""The full model and its files: embedding -> cell -> task head, checkpoints, prediction.

* :mod:`~gnn_treelstm.models.treelstm` — :class:`ModelConfig` and :class:`TreeLSTMModel`.
* :mod:`~gnn_treelstm.models.checkpoint` — checkpoints that rebuild a model on their own.
* :mod:`~gnn_treelstm.models.predictor` — :class:`Predictor`: raw text in, one record per
  input out; beside it :mod:`~gnn_treelstm.models.inputs` (reading the texts),
  :mod:`~gnn_treelstm.models.provenance` (where a model's trees came from) and
  :mod:`~gnn_treelstm.models.picture` (a prediction drawn).
"""
