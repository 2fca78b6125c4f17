"""``--patience N``: a seed stops after N epochs in a row without a better dev score, says
so in its result, and a resumed seed counts on from its saved state."""

import json

import pytest

from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.resume import TrainState
from gnn_treelstm.training.trainer import TrainHooks
from tests.training.helpers import Interrupt, ScriptedDev, stop_after, tiny_config

#: dev accuracy per epoch: best at 2, then 3 epochs without a better score (4 ties)
SCORES = [0.5, 0.6, 0.55, 0.6, 0.58, 0.9, 0.95, 0.97]


class Scripted(ScriptedDev):
    scores = SCORES


def _epochs(run_dir):
    return [json.loads(x)["epoch"] for x in (run_dir / "metrics.jsonl").read_text().split("\n")
            if x]


@pytest.mark.parametrize("patience,stopped", [(3, 5), (4, None), (1, 3)])
def test_patience_stops_at_the_right_epoch(tiny_sst, tmp_path, patience, stopped):
    cfg = tiny_config(tiny_sst, tmp_path, epochs=len(SCORES), patience=patience)
    res = Scripted(cfg).fit()
    seed = res["seeds"][0]
    last = stopped or len(SCORES)
    assert _epochs(tmp_path / "r") == list(range(1, last + 1))
    assert seed["stopped_early"] == (None if stopped is None
                                     else {"epoch": stopped, "patience": patience})
    assert seed["best_epoch"] == (2 if stopped else 8)
    written = json.loads((tmp_path / "r" / "results.json").read_text())["seeds"][0]
    assert written["stopped_early"] == seed["stopped_early"]


def test_without_patience_every_epoch_trains_and_nothing_is_added(tiny_sst, tmp_path):
    res = Scripted(tiny_config(tiny_sst, tmp_path, epochs=6)).fit()
    assert _epochs(tmp_path / "r") == [1, 2, 3, 4, 5, 6]
    assert "stopped_early" not in res["seeds"][0]


def test_stopping_at_the_last_epoch_is_not_early(tiny_sst, tmp_path):
    res = Scripted(tiny_config(tiny_sst, tmp_path, epochs=5, patience=3)).fit()
    assert res["seeds"][0]["stopped_early"] is None
    assert _epochs(tmp_path / "r") == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("stop_at", [3, 5])
def test_a_resumed_seed_counts_on_from_its_saved_state(tiny_sst, tmp_path, stop_at):
    """Interrupted after epoch 3 (two epochs without a better score counted) or after
    epoch 5 (the stop decided and saved), the resumed seed stops where an uninterrupted
    one does."""
    cfg = tiny_config(tiny_sst, tmp_path, epochs=len(SCORES), patience=3)
    with pytest.raises(Interrupt):
        Scripted(cfg, hooks=TrainHooks(on_epoch_end=stop_after(stop_at))).fit()
    saved = TrainState.load(tmp_path / "r")
    assert saved.bad_epochs == stop_at - 2
    assert saved.stopped_early == (5 if stop_at == 5 else None)
    trainer = Scripted(cfg)
    res = trainer.fit(resume=True)
    assert res["seeds"][0]["stopped_early"] == {"epoch": 5, "patience": 3}
    assert res["seeds"][0]["best_epoch"] == 2
    assert _epochs(tmp_path / "r") == [1, 2, 3, 4, 5]


def test_lower_is_better_counts_the_other_way(tiny_sst, tmp_path):
    """A task selecting on a score to minimize: the counter follows Task.better."""
    class Loss(ScriptedDev):
        scores = [0.9, 0.8, 0.85, 0.95, 0.7]

        def start_seed(self, *a, **k):
            self.task.selection_metric = "loss"  # this trainer's task object only
            super().start_seed(*a, **k)

        def evaluate_dev(self):
            metrics, s, m = super().evaluate_dev()
            return {"loss": metrics["accuracy"], "count": 1}, s, m

    res = Loss(tiny_config(tiny_sst, tmp_path, epochs=5, patience=2)).fit()
    assert res["seeds"][0]["stopped_early"] == {"epoch": 4, "patience": 2}


@pytest.mark.parametrize("value", [0, -2])
def test_a_bad_patience_is_refused(value):
    with pytest.raises(ValueError, match=f"--patience {value}: must be a positive"):
        RunConfig(patience=value).check()
