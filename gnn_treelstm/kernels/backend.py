"""Which path of the level engine runs for a tensor: the one decision.

:func:`path` gives ``"triton"`` (the Triton level kernels, :mod:`.fused_triton`),
``"loops"`` (the C++ level loops, :mod:`.fused`, :mod:`.fused_teng`) or ``"general"`` (the
general level driver running the cell's declared recurrences), from the settings of
``GNN_TREELSTM_BACKEND`` (:mod:`.settings`), the tensor's device and dtype, and what is
installed and built. :meth:`gnn_treelstm.cells.base.TreeCell.forward` asks once per
forward and keeps the answer on the forward's propagator (``prop.path``).
"""

from __future__ import annotations

import torch

from gnn_treelstm.kernels import fused_triton, native

__all__ = ["PATHS", "path"]

PATHS = ("triton", "loops", "general")


def path(t: torch.Tensor) -> str:
    """The path for tensors like ``t`` (see the module docstring); the errors of
    :func:`.fused_triton.selected` and :func:`.native.available` where a setting asks for
    what cannot run."""
    if fused_triton.selected(t):
        return "triton"
    if native.available(t):
        return "loops"
    return "general"
