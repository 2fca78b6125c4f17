"""Faults a training run meets, each ended by an error that says what the run directory
still holds and how to go on:

* NaN/inf in the loss or the gradients (:func:`nonfinite`, :class:`NonFiniteError`, naming
  the epoch, the step and the batch's examples);
* a write of the run's files that fails, a full disk above all (:func:`writing`,
  :class:`WriteFailed`, naming the file, the error and the free space). Every file of a
  run is written atomically or appended whole (:mod:`gnn_treelstm.files`), so the last
  good checkpoint and ``state.pt`` are intact after such a failure and
  ``gnn-treelstm train --resume`` continues once there is space
  (``tests/training/test_disk_full.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from gnn_treelstm.files import free_space

__all__ = ["NonFiniteError", "nonfinite", "total_norm", "batch_ids", "nonfinite_message",
           "WriteFailed", "writing", "free_space", "saved_files"]


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


def nonfinite(loss: torch.Tensor, params: Sequence[torch.Tensor]) -> str:
    """"" if the loss and the gradients of ``params`` are finite, else what is not."""
    if not bool(torch.isfinite(loss.detach())):
        return f"the training loss is {float(loss.detach())}"
    grads = [p.grad for p in params if p.grad is not None and not p.grad.is_sparse]
    if grads and not bool(torch.isfinite(total_norm(grads))):
        return "a gradient is NaN or infinite"
    return ""


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
