"""Faults a training run meets, each ended by an error that says what the run directory
still holds and how to go on:

* NaN/inf in the loss or the gradients (:class:`FiniteChecks`, :func:`nonfinite`,
  :class:`NonFiniteError`, naming the epoch, the step and the batch's examples);
* a write of the run's files that fails, a full disk above all (:func:`writing`,
  :class:`WriteFailed`, naming the file, the error and the free space). Every file of a
  run is written atomically or appended whole (:mod:`gnn_treelstm.files`), so the last
  good checkpoint and ``state.pt`` are intact after such a failure and
  ``gnn-treelstm train --resume`` continues once there is space
  (``tests/training/test_disk_full.py``).
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from gnn_treelstm.files import free_space
from gnn_treelstm.kernels.syncs import host_buffer

__all__ = ["NonFiniteError", "FiniteChecks", "nonfinite", "total_norm", "batch_ids",
           "nonfinite_message", "WriteFailed", "writing", "free_space", "saved_files"]


class NonFiniteError(RuntimeError):
    """The loss or a gradient became NaN or infinite; the message names the epoch, the
    step and the batch's example ids, and what the run directory still holds."""


def total_norm(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all ``grads`` together: ``torch.nn.utils.get_total_norm`` (torch 2.6+),
    else the same norm of the per-tensor norms."""
    if hasattr(torch.nn.utils, "get_total_norm"):
        return torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    device = grads[0].device
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g, 2.0).to(device) for g in grads]), 2.0)


class _Check(NamedTuple):
    values: torch.Tensor  # on the host once copied: the loss, each gradient's norm
    copied: Any  # the CUDA event recorded behind the copy; None: copied already
    where: Any  # what the caller names the step by


class FiniteChecks:
    """Whether each step's loss and gradients are finite, found without making the host
    wait for the device.

    :meth:`add` computes a step's loss and joint gradient norm on the device and queues
    their copy to the host (:func:`~gnn_treelstm.kernels.syncs.host_buffer`); :meth:`faults`
    reads the checks whose copies have arrived, in the order they were added. On the CPU
    a copy arrives at once, so a step's fault is found in the step. On a GPU the host runs
    ahead of the device, so it is found a step or so later (each step reads the copies
    that have arrived), or when :meth:`faults` is asked to ``wait``, which a caller does
    before it writes the weights anywhere or needs the answer before the step: no check is
    dropped, and each fault names its own step.
    """

    def __init__(self) -> None:
        self._pending: deque[_Check] = deque()

    def add(self, loss: torch.Tensor, params: Sequence[torch.Tensor], where: Any) -> None:
        """Check ``loss`` and the (dense) gradients of ``params`` of the step ``where``."""
        grads = [p.grad for p in params if p.grad is not None and not p.grad.is_sparse]
        # (1 + P,) the loss and each gradient's norm (inf or NaN where the gradient holds
        # one): one dispatched operation for the norms, one for the copy
        norms = torch._foreach_norm(grads) if grads else []
        values = torch.stack([loss.detach().reshape(()), *norms])
        host = host_buffer(tuple(values.shape), values.dtype, values.device)
        host.copy_(values, non_blocking=True)
        self._pending.append(_Check(host, self._copied(values.device), where))

    @staticmethod
    def _copied(device: torch.device) -> Any:
        """What tells that the copies queued so far on ``device`` have run: a CUDA event
        recorded behind them (``query``, ``synchronize``), or None where they ran."""
        if device.type != "cuda":
            return None
        event = torch.cuda.Event()
        event.record()
        return event

    def faults(self, *, wait: bool = False) -> Iterator[tuple[str, Any]]:
        """``(fault, where)`` of each arrived check that is not finite (the fault as
        :func:`nonfinite` words it), the arrived ones taken off the queue; with ``wait``,
        every check added, waiting for the copies still under way."""
        while self._pending:
            check = self._pending[0]
            if check.copied is not None and not check.copied.query():
                if not wait:
                    return
                check.copied.synchronize()
            self._pending.popleft()
            loss, *norms = check.values.tolist()
            if not math.isfinite(loss):
                yield f"the training loss is {loss}", check.where
            elif not all(map(math.isfinite, norms)):
                yield "a gradient is NaN or infinite", check.where


def nonfinite(loss: torch.Tensor, params: Sequence[torch.Tensor]) -> str:
    """"" if the loss and the gradients of ``params`` are finite, else what is not (waits
    for the device: :class:`FiniteChecks` does not)."""
    checks = FiniteChecks()
    checks.add(loss, params, None)
    return next((fault for fault, _ in checks.faults(wait=True)), "")


def batch_ids(batch: Any) -> str:
    """The example ids of ``batch``, the first ten of them."""
    ids = batch.index.tolist()
    return ", ".join(map(str, ids[:10])) + (f", ... ({len(ids)} in all)" if len(ids) > 10
                                            else "")


def nonfinite_message(fault: str, epoch: int, step: int, batch: Any, best: dict,
                       ckpt: Path) -> str:
    kept = (f"{ckpt} holds the last good checkpoint (epoch {best['epoch']})" if best
            else "no checkpoint was written yet")
    return (f"{fault} at epoch {epoch}, step {step} (training examples {batch_ids(batch)}); "
            f"{kept}. Lower the learning rate (--lr), check those examples, or pass "
            "--skip-nonfinite to skip such batches and count them")


class WriteFailed(RuntimeError):
    """Writing a file of the run failed (a full disk, a quota, a lost mount); the message
    names the file, the error, the free space and the saved files a resume starts from."""


def saved_files(seed_dir: Path) -> str:
    """What ``seed_dir`` holds to go on from, each file loaded to check it: the selected
    checkpoint (``best.pt``, its epoch) and the training state (``state.pt``, where it
    stands)."""
    found = []
    for name in ("best.pt", "state.pt"):
        path = seed_dir / name
        if not path.is_file():
            continue
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            if name == "best.pt":
                found.append(f"the last good checkpoint {path} (epoch {saved['meta']['epoch']})"
                             " is intact")
            else:
                where = (f"the start of epoch {saved['epoch']}" if not saved["step"] else
                         f"epoch {saved['epoch']} after {saved['step']} batches")
                found.append(f"the training state {path} ({where}) is intact")
        except Exception as exc:  # noqa: BLE001 - reported, not raised: the write's error is
            found.append(f"{path} cannot be read ({type(exc).__name__}: {exc})")  # the one
    return "; ".join(found) if found else f"{seed_dir} holds no checkpoint or state yet"


@contextlib.contextmanager
def writing(path: Path, *, run_dir: Path, seed_dir: Path) -> Iterator[None]:
    """Turn an :class:`OSError` raised in the block, which writes ``path``, into
    :class:`WriteFailed`: the file, the error and the free space, what ``seed_dir`` still
    holds (:func:`saved_files`) and the command that continues the run in ``run_dir``."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise WriteFailed(
            f"cannot write {path}: {reason} ({free_space(path.parent)} free on the disk that "
            f"holds it); {saved_files(seed_dir)}. Free some space and continue the run with "
            f"`gnn-treelstm train --resume {run_dir}`") from exc
