"""Memory measurements of this process (resident set, its peak, CUDA's) for the per-epoch
records of a run. Measurement only: tuning the C heap is process-wide and belongs to the
command lines (:mod:`gnn_treelstm.commands.heap`)."""

from __future__ import annotations

import os
import resource

import torch

__all__ = ["reset_peak_memory", "memory_stats"]


def reset_peak_memory(device: torch.device | str = "cpu") -> bool:
    """Start a new peak-memory window: Linux's resident high-water mark (what
    ``getrusage``'s ``ru_maxrss`` reports; ``/proc/self/clear_refs`` ``5``) and, on CUDA,
    torch's peak are reset. A caller that wants free heap pages not to count returns them
    to the OS first (the trainer runs its ``release_heap`` hook,
    :class:`gnn_treelstm.training.trainer.TrainHooks`). Returns whether the RSS peak could be
    reset (else it is the process's)."""
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def memory_stats(device: torch.device | str = "cpu") -> dict[str, float]:
    """Memory of this process, in MiB: ``peak_rss_mb`` (the largest resident set since
    :func:`reset_peak_memory`, or since the start; ``getrusage``), ``rss_mb`` (resident now,
    from ``/proc/self/statm`` where there is one) and, on CUDA, ``cuda_peak_mb`` (most
    memory allocated by tensors since the reset) and ``cuda_allocated_mb`` (allocated now)."""
    out = {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
        out["rss_mb"] = round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    device = torch.device(device)
    if device.type == "cuda":
        out["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
        out["cuda_allocated_mb"] = round(torch.cuda.memory_allocated(device) / 2**20, 1)
    return out
