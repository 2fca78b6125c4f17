"""The learning-rate schedule of a run (``--lr-schedule``, ``--lr-warmup-epochs``,
``--lr-step-size``, ``--lr-gamma``, ``--lr-plateau-patience``): a
``torch.optim.lr_scheduler`` object stepped once per epoch, after the epoch's dev
evaluation. Its state is saved with the training state
(:class:`~gnn_treelstm.training.resume.TrainState`), so ``--resume`` continues it exactly.

Every parameter group (the weights, the word embeddings, mtree's relation embeddings) is
scaled by the same factor of its own learning rate. With ``E`` epochs, a warm-up of ``W``
and epoch ``e`` (1-based):

* ``constant`` (the default, the papers'): the learning rates as set; no scheduler at all
  without a warm-up, so a default run is exactly the papers' loop.
* warm-up (any schedule but ``plateau``): epoch ``e <= W`` at ``e / (W + 1)``.
* ``cosine``: then ``(1 + cos(pi j / (E - W))) / 2`` with ``j = e - W - 1``: the full rate
  at the first epoch after the warm-up, falling towards 0 over the remaining epochs.
* ``step``: then ``gamma ** (j // step_size)``.
* ``plateau``: ``torch.optim.lr_scheduler.ReduceLROnPlateau`` on the dev selection score
  (the task's direction): times ``gamma`` when more than ``--lr-plateau-patience`` epochs
  in a row bring no better score (patience 1: the second such epoch decays the rates for
  the next), "better" as model selection means it (threshold 0, a NaN score is not).

The warm-up, cosine and step schedules are one ``LambdaLR`` with :func:`lr_factor`, the
closed form above (no drift of repeated multiplications).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, ReduceLROnPlateau

if TYPE_CHECKING:
    from gnn_treelstm.training.config import RunConfig

__all__ = ["Scheduler", "lr_factor", "build_scheduler", "step_scheduler", "current_lr"]

#: what :func:`build_scheduler` returns
Scheduler = LRScheduler | ReduceLROnPlateau


def lr_factor(cfg: RunConfig, epoch: int) -> float:
    """The factor of every group's learning rate during ``epoch`` (1-based) under the
    warm-up, ``cosine``, ``step`` or ``constant`` schedule of ``cfg`` (see the module)."""
    warmup = cfg.lr_warmup_epochs
    if epoch <= warmup:
        return epoch / (warmup + 1)
    j = epoch - warmup - 1
    if cfg.lr_schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * j / max(cfg.epochs - warmup, 1)))
    if cfg.lr_schedule == "step":
        return cfg.lr_gamma ** (j // cfg.lr_step_size)
    if cfg.lr_schedule == "constant":
        return 1.0
    raise ValueError(f"lr_factor: the {cfg.lr_schedule!r} schedule has no closed form")


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: RunConfig, *,
                    lower_is_better: bool = False) -> Scheduler | None:
    """The scheduler of ``cfg`` over ``optimizer`` (None: constant learning rates, no
    warm-up). ``lower_is_better``: the direction of the dev selection score
    (``plateau``). Building it sets the first epoch's learning rates."""
    if cfg.lr_schedule == "plateau":
        return ReduceLROnPlateau(optimizer, mode="min" if lower_is_better else "max",
                                 factor=cfg.lr_gamma, patience=cfg.lr_plateau_patience,
                                 threshold=0.0)
    if cfg.lr_schedule == "constant" and not cfg.lr_warmup_epochs:
        return None
    lr_factor(cfg, 1)  # an unknown schedule fails here, not at the first step

    def factor(done: int) -> float:  # LambdaLR counts the epochs done
        return lr_factor(cfg, done + 1)

    return LambdaLR(optimizer, factor)


def step_scheduler(scheduler: Scheduler | None, dev_score: float) -> None:
    """Step ``scheduler`` at an epoch's end (``plateau`` reads the epoch's dev score; a NaN
    score counts as no better)."""
    if scheduler is None:
        return
    if isinstance(scheduler, ReduceLROnPlateau):
        scheduler.step(dev_score)
    else:
        scheduler.step()


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    """The learning rate of the first parameter group (the cell's and head's weights)."""
    return float(optimizer.param_groups[0]["lr"])
