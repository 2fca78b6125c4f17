"""TensorBoard scalars of a run (``gnn-treelstm train --tensorboard``): per epoch the
training loss, the dev metrics and the learning rate, written with
``torch.utils.tensorboard.SummaryWriter`` to ``RUN_DIR/tensorboard/seed-<s>/`` (one
TensorBoard run per seed: ``tensorboard --logdir RUN_DIR/tensorboard`` shows the seeds side
by side).

The trainer attaches a :class:`TensorBoardLog` through its hooks
(:class:`~gnn_treelstm.training.trainer.TrainHooks`: ``on_seed_start``, ``on_epoch_end``,
``on_seed_end``) when the run's configuration asks for it; nothing of it runs inside the
training loop. ``tensorboard`` is an optional dependency: :meth:`RunConfig.check
<gnn_treelstm.training.config.RunConfig.check>` refuses ``--tensorboard`` without it.

Scalars, with the epoch as step: ``train/loss``, ``dev/<metric>`` (every finite number of
the dev metrics but the counts), ``lr`` (the learning rate of the cell's and head's
weights). A resumed seed continues its event files: the epochs past its saved state are
purged (``purge_step``), so an epoch logged just before a kill is not shown twice.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["TensorBoardLog", "DIR_NAME", "scalars"]

#: the folder of the run directory the event files go to
DIR_NAME = "tensorboard"


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The scalars of one epoch record (what ``metrics.jsonl`` gets), by tag."""
    out = {"train/loss": float(record["train_loss"])}
    for name, value in (record.get("dev") or {}).items():
        if name.startswith("count") or isinstance(value, bool) \
                or not isinstance(value, int | float) or not math.isfinite(value):
            continue
        out[f"dev/{name}"] = float(value)
    if record.get("lr") is not None:
        out["lr"] = float(record["lr"])
    return out


class TensorBoardLog:
    """Writes the scalars of each seed's epochs under ``run_dir/tensorboard/``."""

    def __init__(self, run_dir: Path) -> None:
        self.root = Path(run_dir) / DIR_NAME
        self.writer: Any = None

    def seed_start(self, seed: int, seed_dir: Path, epoch: int) -> None:
        """Open the seed's event files; ``epoch``: the first epoch to be trained (> 1 when
        the seed resumes: later epochs already written are purged)."""
        from torch.utils.tensorboard import SummaryWriter  # the optional dependency

        self.close()
        self.writer = SummaryWriter(log_dir=str(self.root / f"seed-{seed}"),
                                    purge_step=epoch if epoch > 1 else None)

    def epoch_end(self, record: dict[str, Any]) -> None:
        """Write one epoch's scalars and flush them (the file is readable at once)."""
        if self.writer is None:
            return
        for tag, value in scalars(record).items():
            self.writer.add_scalar(tag, value, global_step=int(record["epoch"]))
        self.writer.flush()

    def seed_end(self, result: dict[str, Any]) -> None:
        """Close the seed's event files."""
        self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
