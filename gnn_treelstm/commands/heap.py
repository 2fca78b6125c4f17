"""C heap tuning for the command lines (glibc ``mallopt`` / ``malloc_trim``).

Process-wide settings, so only the CLIs use this module (``train.py``, the reproduce
runner, the benchmark), never the library: a CLI calls :func:`keep_heap_pages` once at
start and hands :func:`release_free_heap` to the trainer as its ``release_heap`` hook
(:class:`gnn_treelstm.training.trainer.TrainHooks`), which runs it before every peak-memory
window (each epoch's training and its dev evaluation).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

__all__ = ["release_free_heap", "keep_heap_pages"]


def release_free_heap() -> bool:
    """Return the C heap's free pages to the OS (glibc ``malloc_trim(0)``; False where
    there is no glibc). PyTorch's CPU tensors come from ``malloc``: batches of different
    sizes leave holes in the heap, and without this the resident set drifts upwards by
    10-30 MB an epoch although the live memory does not grow."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if not _MALLOC_TRIM:
        return False
    _MALLOC_TRIM(0)
    return True


_MALLOC_TRIM = None

#: glibc ``mallopt`` parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_heap_pages(threshold_mb: int = 1024, top_pad_mb: int = 64) -> bool:
    """Let freed tensor memory stay in the C heap between batches (glibc ``mallopt``;
    False where there is no glibc). Process-wide, so the CLIs call it, not the library.

    By default glibc serves allocations above its mmap threshold (128 KB, rising to at most
    32 MB) with fresh ``mmap`` pages and gives the heap's top back to the OS when it frees;
    every batch then allocates its buffers on new pages and pays a page fault per 4 KB
    (about 900 faults and 0.5 ms per batch of 25 SST trees with the level engine, ~10%).
    Raising the mmap and trim thresholds to ``threshold_mb`` and padding heap growth by
    ``top_pad_mb`` keeps those pages; :func:`release_free_heap`, which the CLIs have the
    trainer run before every epoch, still returns the free ones to the OS."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    ok = all(mallopt(param, value << 20) == 1 for param, value in (
        (_M_MMAP_THRESHOLD, threshold_mb), (_M_TRIM_THRESHOLD, threshold_mb),
        (_M_TOP_PAD, top_pad_mb)))
    log.info("heap: mmap/trim thresholds %d MB, top pad %d MB (%s)", threshold_mb,
             top_pad_mb, "set" if ok else "mallopt refused")
    return ok
