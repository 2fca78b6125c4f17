"""Fast paths: the level engine's C++ level loops, Triton level kernels and oneDNN matrix
products, and the dropout the models and task heads use.

* :mod:`~gnn_treelstm.kernels.native` — builds and loads the C++ loops of ``csrc/``.
* :mod:`~gnn_treelstm.kernels.fused`, :mod:`~gnn_treelstm.kernels.fused_teng` — the loops
  behind ``torch.autograd.Function``, one per cell that has one.
* :mod:`~gnn_treelstm.kernels.fused_triton` — the Triton level kernels
  (``triton_levels``) behind ``torch.autograd.Function``: the level engine on CUDA, and
  on the CPU in triton's interpreter (``GNN_TREELSTM_KERNELS``).
* :mod:`~gnn_treelstm.kernels.gemm` — the level engine's matrix products.
* :mod:`~gnn_treelstm.kernels.dropout` — dropout with a faster mask on the CPU (the model's
  and the task heads').
* :mod:`~gnn_treelstm.kernels.count` — the operations a level-engine step dispatches.
* :mod:`~gnn_treelstm.kernels.settings` — the switches (``GNN_TREELSTM_NATIVE``,
  ``GNN_TREELSTM_KERNELS``, ...).

Every kernel runs the equations its cell declares (``gnn_treelstm/cells/``);
``tests/cells/test_registry.py`` holds each equal to the declaration.
"""
