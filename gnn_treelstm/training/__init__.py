"""Training runs: configuration, data, the loop, checkpoints of state, run directories.

* :mod:`~gnn_treelstm.training.config` — :class:`RunConfig`, the run's options, each
  declared once as a field (:mod:`~gnn_treelstm.training.flags`: how a field declares its
  flag); :mod:`~gnn_treelstm.training.options` — the ``train`` parser and ``--config``
  files derived from them.
* :mod:`~gnn_treelstm.training.data` — the data set, splits and word vectors of a run.
* :mod:`~gnn_treelstm.training.trainer` — the training loop (:class:`Trainer`,
  :class:`TrainHooks`).
* :mod:`~gnn_treelstm.training.optim`, :mod:`~gnn_treelstm.training.schedule`,
  :mod:`~gnn_treelstm.training.batching`, :mod:`~gnn_treelstm.training.evaluation` —
  optimizer and gradient clipping, learning-rate schedules, minibatches, dev/test metrics;
  :mod:`~gnn_treelstm.training.adagrad` — AdaGrad over one buffer per parameter group
  (the GPU's, where torch has no fused AdaGrad).
* :mod:`~gnn_treelstm.training.tensorboard_log` — TensorBoard scalars of a run (a hook).
* :mod:`~gnn_treelstm.training.resume`, :mod:`~gnn_treelstm.training.rundir`,
  :mod:`~gnn_treelstm.training.records` — resumable state (:class:`TrainState`), run
  directories, what a run writes.
* :mod:`~gnn_treelstm.training.faults`, :mod:`~gnn_treelstm.training.zerowatch`,
  :mod:`~gnn_treelstm.training.memory`, :mod:`~gnn_treelstm.training.devices`,
  :mod:`~gnn_treelstm.training.distributed`, :mod:`~gnn_treelstm.training.provenance` —
  NaN/inf checks, zeroed weights, memory, devices, data parallel runs, code fingerprints.
"""
