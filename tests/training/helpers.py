"""What the tests of the training options share: a tiny run configuration and a trainer
whose dev scores are scripted."""

from __future__ import annotations

from pathlib import Path

from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.trainer import Trainer


def tiny_config(data: Path, runs: Path, **kw) -> RunConfig:
    """A run of a few seconds on the tiny SST data (``tiny_sst``), no test split."""
    base = dict(task="sst-5", data=str(data), runs_dir=str(runs), name="r", epochs=3,
                batch_size=4, embeddings_mode="random", emb_dim=6, hidden=5, test=False)
    return RunConfig(**{**base, **kw})


class ScriptedDev(Trainer):
    """A trainer whose dev accuracy at epoch ``e`` is ``scores[e - 1]`` (training runs for
    real; only the dev evaluation is replaced)."""

    scores: list[float] = []

    def evaluate_dev(self):
        score = self.scores[self.state.epoch - 1]
        return {"accuracy": score, "count": 1}, 0.0, {"peak_rss_mb": 0.0}


class Interrupt(Exception):
    """Raised by a hook to stop a run the way a kill after an epoch's save would."""


def stop_after(epoch: int):
    """An ``on_epoch_end`` hook that interrupts the run after ``epoch``."""
    def hook(record: dict) -> None:
        if record["epoch"] == epoch:
            raise Interrupt(epoch)
    return hook
