"""Optional fast paths of the level engine: C++ level loops and oneDNN matrix products.

* :mod:`~gnn_treelstm.kernels.native` — builds and loads the C++ loops of ``csrc/``.
* :mod:`~gnn_treelstm.kernels.fused`, :mod:`~gnn_treelstm.kernels.fused_teng` — the loops
  behind ``torch.autograd.Function``, one per cell that has one.
* :mod:`~gnn_treelstm.kernels.gemm` — the level engine's matrix products.
* :mod:`~gnn_treelstm.kernels.settings` — the switches (``GNN_TREELSTM_NATIVE``, ...).

Every kernel runs the equations its cell declares (``gnn_treelstm/cells/``);
``tests/cells/test_registry.py`` holds each equal to the declaration.
"""
