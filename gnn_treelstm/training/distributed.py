"""Data-parallel training over several processes (``torch.distributed``), for ``--distributed``.

Started by ``torchrun`` (which sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``)::

    torchrun --nproc-per-node 2 -m gnn_treelstm.commands.train --distributed --batch-size 50 ...
    torchrun --nnodes 2 --node-rank 0 --master-addr HOST --master-port 29500 \\
        --nproc-per-node 1 -m gnn_treelstm.commands.train --distributed ...     # on each machine

How a run is split (the trainer in :mod:`gnn_treelstm.training.trainer` does this when
``RunConfig.distributed`` is set):

* ``--batch-size`` is the **global** batch: every process draws the batches one process
  would (same sampler, same generator) and keeps its round-robin share
  (:class:`gnn_treelstm.training.batching.ShardedBatches`); ``DistributedDataParallel`` averages
  the gradients, and each rank's objective is scaled so that the average is the global
  batch's mean (or sum). A step therefore sees the same examples and takes the same
  update as one process with the whole batch (``tests/test_distributed.py`` checks the
  parameters to 1e-5 for AdaGrad, Adam and a summed loss; with dropout the masks differ,
  as with any change of the random stream). A last batch smaller than the number of
  processes is topped up by repeating its first examples.
* The word embedding gets dense gradients (the sparse AdaGrad path is off): the update is
  the same (a zero gradient leaves an AdaGrad row as it is) and DDP reduces dense tensors on
  every backend.
* A summed batch loss (``--loss-reduction sum``) is scaled by ``W`` before DDP's average, so
  it stays the sum over the global batch.
* Rank 0 alone writes the run directory (config, metrics, checkpoints, results); the
  epoch's training loss and example counts are summed over the ranks; every rank evaluates
  the dev set itself, so all agree on model selection without messages.

Backends: ``gloo`` on CPU, ``nccl`` on CUDA.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import torch
import torch.distributed as dist

from gnn_treelstm.training.rundir import RunDirError

__all__ = ["init", "rank", "world_size", "is_main", "all_sum", "barrier", "shutdown",
           "claimed_by_main"]

log = logging.getLogger(__name__)


def init(device: torch.device) -> None:
    """Join the process group ``torchrun`` describes (no-op if already joined).

    Raises:
        ValueError: not started by ``torchrun`` (no ``RANK`` / ``WORLD_SIZE``).
    """
    if dist.is_initialized():
        return
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
               if k not in os.environ]
    if missing:
        raise ValueError(
            f"--distributed: {', '.join(missing)} not set; start the processes with torchrun, "
            "e.g. `torchrun --nproc-per-node 2 -m gnn_treelstm.commands.train --distributed ...`")
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend=backend)
    log.info("rank %d of %d joined (%s)", dist.get_rank(), dist.get_world_size(), backend)


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main() -> bool:
    """Whether this process writes files (rank 0, or the only process)."""
    return rank() == 0


def all_sum(values: list[float], device: torch.device) -> list[float]:
    """``values`` summed over the ranks (unchanged without a process group)."""
    if not dist.is_initialized():
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def claimed_by_main(claim: Callable[[], AbstractContextManager], out: Path,
                    device: torch.device) -> Iterator[None]:
    """Rank 0 enters ``claim()`` (the run directory's claim,
    :func:`gnn_treelstm.training.rundir.claim`)
    for the body and tells the other ranks whether it could; they raise
    :class:`~gnn_treelstm.training.rundir.RunDirError` if not (rank 0 raises its own error)."""
    if not is_main():
        if all_sum([0.0], device)[0] < 1:
            raise RunDirError(f"rank 0 could not take {out} (see its message)")
        yield
        return
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(claim())
        except BaseException:
            all_sum([0.0], device)  # the others stop too
            raise
        all_sum([1.0], device)
        yield
