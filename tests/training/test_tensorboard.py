"""``--tensorboard``: event files with the train loss, dev metrics and learning rate of
every epoch; without the tensorboard package, a refusal naming the install command."""

import importlib.util
import json

import pytest

from gnn_treelstm.commands import train
from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.tensorboard_log import scalars
from gnn_treelstm.training.trainer import Trainer, TrainHooks, chain_hooks
from tests.training.helpers import Interrupt, stop_after, tiny_config


def _read(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
            for tag in acc.Tags()["scalars"]}


def _records(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().split("\n") if x]


def test_event_files_hold_every_epochs_scalars(tiny_sst, tmp_path):
    pytest.importorskip("tensorboard")
    seen = []
    cfg = tiny_config(tiny_sst, tmp_path, epochs=3, seeds=2, tensorboard=True,
                      lr_schedule="step", lr_step_size=1, lr_gamma=0.5)
    Trainer(cfg, hooks=TrainHooks(on_epoch_end=seen.append)).fit()
    records = _records(tmp_path / "r")
    assert seen == records                        # the caller's hook still runs
    for seed in (1, 2):
        got = _read(tmp_path / "r" / "tensorboard" / f"seed-{seed}")
        mine = [r for r in records if r["seed"] == seed]
        assert set(got) == {"train/loss", "dev/accuracy", "dev/phrase_accuracy", "lr"}
        assert got["train/loss"] == [(r["epoch"], pytest.approx(r["train_loss"]))
                                     for r in mine]
        assert got["dev/accuracy"] == [(r["epoch"], pytest.approx(r["dev"]["accuracy"]))
                                       for r in mine]
        assert got["lr"] == [(1, pytest.approx(0.05)), (2, pytest.approx(0.025)),
                             (3, pytest.approx(0.0125))]


def test_a_resumed_seed_writes_each_epoch_once(tiny_sst, tmp_path):
    pytest.importorskip("tensorboard")
    cfg = tiny_config(tiny_sst, tmp_path, epochs=3, tensorboard=True)
    with pytest.raises(Interrupt):
        Trainer(cfg, hooks=TrainHooks(on_epoch_end=stop_after(2))).fit()
    Trainer(cfg).fit(resume=True)
    got = _read(tmp_path / "r" / "tensorboard" / "seed-1")
    assert [step for step, _ in got["train/loss"]] == [1, 2, 3]


def test_without_tensorboard_the_option_is_refused(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec

    def no_tensorboard(name, *a, **k):
        return None if name == "tensorboard" else real(name, *a, **k)

    monkeypatch.setattr(importlib.util, "find_spec", no_tensorboard)
    with pytest.raises(ValueError, match="pip install tensorboard"):
        RunConfig(tensorboard=True).check()
    RunConfig().check()  # off by default: nothing needed
    assert train.main(["--tensorboard", "--runs-dir", str(tmp_path), "-q"]) == 2
    assert "pip install tensorboard" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())           # refused before anything is written


def test_scalars_of_a_record():
    record = {"epoch": 2, "train_loss": 1.5, "lr": 0.01,
              "dev": {"accuracy": 0.5, "count": 10, "pearson": float("nan"), "note": "x"}}
    assert scalars(record) == {"train/loss": 1.5, "dev/accuracy": 0.5, "lr": 0.01}


def test_chained_hooks_call_each_in_order():
    calls = []
    a = TrainHooks(progress=lambda b, **k: b, on_epoch_end=lambda r: calls.append(("a", r)),
                   on_seed_end=lambda r: calls.append(("a-end", r)))
    b = TrainHooks(on_epoch_end=lambda r: calls.append(("b", r)),
                   on_seed_start=lambda *x: calls.append(("b-start", x)))
    both = chain_hooks(a, b)
    assert both.progress is a.progress and both.release_heap is None
    both.on_epoch_end(1)
    both.on_seed_start(1, "d", 1)
    both.on_seed_end(2)
    assert calls == [("a", 1), ("b", 1), ("b-start", (1, "d", 1)), ("a-end", 2)]
