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
  batch's mean (or sum); each share carries the size of its global batch
  (``Batch.global_size``), so loader processes (``--workers``) drawing batches ahead scale
  every step as ``--workers 0`` does. A step therefore sees the same examples and takes the same
  update as one process with the whole batch (``tests/training/test_distributed.py`` checks the
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
* ``--resume`` (``torchrun ... -m gnn_treelstm.commands.train --resume runs/NAME``, with the
  same number of processes): rank 0 saves one ``state.pt`` holding the weights, optimizer
  and scheduler states, the loader's shuffle generator and where the run is, and every
  rank's own random generators and partial epoch sums (gathered with
  :func:`gather_to_main`); on resume rank 0 reads it and hands each rank the whole state
  (:func:`from_main`), each taking its own generators back. The resumed run equals an
  uninterrupted one (``tests/training/test_distributed.py`` SIGKILLs a 2-process run in its second
  epoch). Every rank reads the run's ``config.yaml`` itself (the CLI builds its
  configuration from it), so a run over several machines resumes from a run directory
  that every machine can read.

Backends: ``gloo`` on CPU, ``nccl`` on CUDA.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from gnn_treelstm.training.rundir import RunDirError

__all__ = ["init", "rank", "world_size", "is_main", "all_sum", "barrier", "shutdown",
           "claimed_by_main", "from_main", "gather_to_main"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def init(device: torch.device) -> bool:
    """Join the process group ``torchrun`` describes; whether this call created it (False:
    the caller's program had joined one already, and keeps it).

    Raises:
        ValueError: not started by ``torchrun`` (no ``RANK`` / ``WORLD_SIZE``).
    """
    if dist.is_initialized():
        return False
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
    return True


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
    _hold(t)
    return t.tolist()


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def shutdown() -> None:
    """Leave the process group, once every rank got here (a process that exits inside the
    group may abort in gloo's threads; one that tears it down while a gloo thread still
    releases a finished collective's tensors would wait on it forever, see :func:`_hold`)."""
    if dist.is_initialized():
        dist.barrier()
        time.sleep(0.2)  # the GIL free a moment: gloo's threads finish releasing the works
        dist.destroy_process_group()


# The tensors of the last collectives stay referenced from Python: gloo's worker threads
# release a finished collective's work after it completes, and if theirs were the last
# reference to a tensor made in Python, that release needs the GIL; were the group being
# torn down then (its destructor holding the GIL, waiting for those threads), both would
# wait forever (seen with torch 2.13 and 2 CPU processes: a hang as a run ended). They are
# kept past :func:`shutdown` too: a barrier's work releases the collectives before it.
_recent: collections.deque[torch.Tensor] = collections.deque(maxlen=32)


def _hold(*tensors: torch.Tensor) -> None:
    _recent.extend(tensors)


def _encode(obj: Any, device: torch.device) -> torch.Tensor:
    """``obj`` (tensors and plain containers) as bytes in a uint8 tensor on ``device``."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8).to(device)


def _decode(data: torch.Tensor) -> Any:
    return torch.load(io.BytesIO(data.cpu().numpy().tobytes()), map_location="cpu",
                      weights_only=True)


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


def from_main(read: Callable[[], T], device: torch.device) -> T:
    """Rank 0's ``read()``, handed to every rank (``read()`` itself without a process group).

    Files of the run (its ``state.pt``, a seed's ``seed.json``) are read by rank 0 alone,
    so that every rank starts from the same bytes. The value must be tensors and plain
    containers (it travels as ``torch.save`` bytes, read back with ``weights_only=True``).
    An error in rank 0's ``read()`` is raised there and, as :class:`ValueError` naming it,
    on the other ranks."""
    if not dist.is_initialized():
        return read()
    error: BaseException | None = None
    data = torch.zeros(0, dtype=torch.uint8, device=device)
    if is_main():
        try:
            data = _encode(("ok", read()), device)
        except Exception as exc:  # noqa: BLE001 - raised below, once the others know
            error = exc
            data = _encode(("error", f"{type(exc).__name__}: {exc}"), device)
    size = torch.tensor([data.numel()], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)
    if not is_main():
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(data, src=0)
    _hold(size, data)
    if error is not None:
        raise error
    kind, value = _decode(data)
    if kind == "error":
        raise ValueError(f"rank 0 could not read the run's files: {value}")
    return value


def gather_to_main(value: Any, device: torch.device) -> list[Any] | None:
    """Every rank's ``value`` (tensors and plain containers), in rank order, on rank 0;
    None on the others; ``[value]`` without a process group."""
    if not dist.is_initialized():
        return [value]
    mine, world, me = _encode(value, device), world_size(), rank()
    sizes = torch.zeros(world, dtype=torch.int64, device=device)
    sizes[me] = mine.numel()
    dist.all_reduce(sizes)
    rows = torch.zeros(world, int(sizes.max().item()), dtype=torch.uint8, device=device)
    rows[me, :mine.numel()] = mine
    dist.all_reduce(rows)  # each row is one rank's bytes, zeros elsewhere: the sum is all
    _hold(sizes, rows)
    if not is_main():
        return None
    return [_decode(rows[r, :int(sizes[r])]) for r in range(world)]
