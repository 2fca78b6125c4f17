"""Which device a run or an evaluation computes on, and whether its graphs can go there
(a CPU-only DGL build keeps graphs on the CPU; the level engine then moves only features
and index tensors)."""

from __future__ import annotations

from typing import Protocol

import dgl
import torch

__all__ = ["pick_device", "resolve_device"]


class _DeviceConfig(Protocol):
    device: str
    engine: str


def _dgl_cuda_ok() -> bool:
    try:
        dgl.graph(([0], [1])).to("cuda")
        return True
    except Exception:
        return False


def pick_device(device: str, engine: str) -> tuple[torch.device, bool]:
    """``(device, graphs_on_device)`` for ``--device`` and ``--engine``; refuses CUDA when
    unavailable (``ValueError`` naming the fix)."""
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device is available to torch here; "
                             "use --device cpu")
        on_device = _dgl_cuda_ok()
        if not on_device and engine == "dgl":
            raise ValueError(
                "--device cuda with --engine dgl: this DGL build is CPU-only, so "
                "prop_nodes_topo cannot run on the GPU; use --engine level (graphs stay on "
                "the CPU, features and index tensors move) or --device cpu"
            )
        return torch.device(device), on_device
    return torch.device("cpu"), True


def resolve_device(cfg: _DeviceConfig) -> tuple[torch.device, bool]:
    """``(device, graphs_on_device)`` of a :class:`~gnn_treelstm.training.config.RunConfig` (its
    ``device`` and ``engine``); refuses CUDA when unavailable."""
    return pick_device(cfg.device, cfg.engine)
