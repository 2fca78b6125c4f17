"""Fast paths: the level engine's C++ level loops, Triton level kernels and oneDNN matrix
products, and the dropout the models and task heads use.

* :mod:`~gnn_treelstm.kernels.native` — builds and loads the C++ loops of ``csrc/``.
* :mod:`~gnn_treelstm.kernels.fused`, :mod:`~gnn_treelstm.kernels.fused_teng` — the loops
  behind ``torch.autograd.Function``, one per cell that has one.
* :mod:`~gnn_treelstm.kernels.fused_triton` — the Triton level kernels
  (``triton_levels``) behind ``torch.autograd.Function``: the level engine on CUDA, and
  on the CPU in triton's interpreter (``GNN_TREELSTM_BACKEND=triton``).
* :mod:`~gnn_treelstm.kernels.gemm` — the level engine's matrix products.
* :mod:`~gnn_treelstm.kernels.dropout` — dropout with a faster mask on the CPU (the model's
  and the task heads').
* :mod:`~gnn_treelstm.kernels.count` — the operations a level-engine step dispatches.
* :mod:`~gnn_treelstm.kernels.settings` — the switch, ``GNN_TREELSTM_BACKEND`` (the former
  ``GNN_TREELSTM_KERNELS``, ``GNN_TREELSTM_NATIVE``, ``GNN_TREELSTM_GEMM`` still read, with
  a warning); :mod:`~gnn_treelstm.kernels.backend` — the path a tensor takes (Triton, the
  C++ loops or the general level driver), decided once per forward.
* :mod:`~gnn_treelstm.kernels.host` — the host cost of a level-engine step
  (``gnn-treelstm bench --host-cost``); :mod:`~gnn_treelstm.kernels.syncs` — the
  operations of a step that would make the host wait for a GPU, found on the CPU.

Every kernel runs the equations its cell declares (``gnn_treelstm/cells/``);
``tests/cells/test_registry.py`` holds each equal to the declaration.
"""
