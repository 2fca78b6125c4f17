"""NaN/inf detection in training: which of the loss and the gradients is not finite, and
the error that names the epoch, the step, the batch's examples and what the run directory
still holds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

__all__ = ["NonFiniteError", "nonfinite", "batch_ids", "nonfinite_message"]


class NonFiniteError(RuntimeError):
    """The loss or a gradient became NaN or infinite; the message names the epoch, the
    step and the batch's example ids, and what the run directory still holds."""


def nonfinite(loss: torch.Tensor, params: Sequence[torch.Tensor]) -> str:
    """"" if the loss and the gradients of ``params`` are finite, else what is not."""
    if not bool(torch.isfinite(loss.detach())):
        return f"the training loss is {float(loss.detach())}"
    grads = [p.grad for p in params if p.grad is not None and not p.grad.is_sparse]
    if grads and not bool(torch.isfinite(torch.nn.utils.get_total_norm(grads))):
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
