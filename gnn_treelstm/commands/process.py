"""The process-wide settings of a training command line, made once at its start.

``gnn-treelstm train``, the reproduce runner (when it trains) and ``gnn-treelstm bench``
call :func:`setup_training` before any tensor work, so that a seed trained by any of them
runs under the same settings: denormal floats flushed (:mod:`.denormals`), torch's CPU
threads, freed heap pages kept (:mod:`.heap`). Library code never calls it.
"""

from __future__ import annotations

from gnn_treelstm.commands import denormals, heap

__all__ = ["setup_training"]


def setup_training(threads: int | None = None) -> None:
    """Flush denormal floats (first: torch's worker threads, started later, inherit it), set
    torch's CPU threads to ``threads`` (None keeps torch's default) and keep freed heap pages.

    A bad ``$GNN_TREELSTM_DENORMALS`` or ``threads`` below 1 is a ``ValueError`` naming it,
    before anything is set."""
    if threads is not None and threads <= 0:
        raise ValueError(f"--threads must be positive, got {threads}")
    denormals.flush_denormals()
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    heap.keep_heap_pages()
