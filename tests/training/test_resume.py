"""``train --resume``: a run SIGKILLed mid-epoch ends with the same metrics as one that
never stopped (real subprocesses, a real ``kill -9``)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gnn_treelstm.commands import train
from tests.training.killed_runs import SLOW_TRAIN, wait_for_state

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--epochs", "3", "--seeds", "2", "--batch-size", "4", "--checkpoint-every", "1",
        "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5", "--dropout", "0.5",
        "-q"]


def _train(delay: float, args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", SLOW_TRAIN, str(delay), *args, "--threads", "1"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def test_sigkill_mid_epoch_then_resume_gives_the_same_run(tiny_sst, tmp_path):
    common = ["--data", str(tiny_sst), "--runs-dir", str(tmp_path), *ARGS]
    ref = _train(0.0, [*common, "--name", "ref"])
    assert ref.wait(120) == 0, ref.stderr.read()

    run = tmp_path / "killed"
    proc = _train(0.15, [*common, "--name", "killed"])
    # seed 1 done, seed 2 inside its second epoch
    state = wait_for_state(run / "seed-2" / "state.pt", 2, timeout=120)
    assert state is not None, "the run never reached seed 2, epoch 2"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    assert (run / "seed-1" / "seed.json").is_file() and not (run / "results.json").exists()

    rc = train.main(["--resume", str(run), "-q"])
    assert rc == 0
    got, want = (json.loads((tmp_path / n / "results.json").read_text())
                 for n in ("killed", "ref"))
    assert got["test"] == want["test"] and got["dev"] == want["dev"]
    for a, b in zip(got["seeds"], want["seeds"]):
        assert (a["best_epoch"], a["dev"], a["test"]) == (b["best_epoch"], b["dev"], b["test"])

    def losses(name):
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return [(r["seed"], r["epoch"], r["train_loss"]) for r in map(json.loads, lines)]

    assert losses("killed") == losses("ref")  # each epoch once, with the same loss
    assert not list(run.glob("seed-*/state.pt"))  # finished seeds drop their state


def test_resume_refuses_a_changed_configuration_and_a_missing_run(tiny_sst, tmp_path, capsys):
    common = ["--data", str(tiny_sst), "--runs-dir", str(tmp_path), "--name", "r", *ARGS]
    assert train.main(common) == 0
    capsys.readouterr()
    assert train.main(["--resume", str(tmp_path / "r"), "--hidden", "7"]) == 2
    assert "the configuration differs from the run's (hidden)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main(["--resume", str(tmp_path / "nope")])
    assert "no config.yaml there" in capsys.readouterr().err
    assert train.main(["--resume", str(tmp_path / "r"), "-q"]) == 0  # finished: a no-op


def test_train_state_round_trips_and_refuses_what_it_cannot_read(tmp_path):
    from gnn_treelstm.training.resume import STATE_NAME, TrainState

    state = TrainState(seed=3, epoch=2, step=5, best_score=0.5,
                       best={"epoch": 1, "dev": {"accuracy": 0.5}},
                       epochs=[{"epoch": 1}], process_peak=12.5,
                       partial={"loss_sum": 1.0, "n_ex": 4, "n_trees": 4, "skipped": 0,
                                "seconds": 0.1},
                       run_id="r1", bad_epochs=2, stopped_early=None,
                       loader=torch.Generator().get_state(),
                       rng={"torch": torch.get_rng_state()}, model={"w": torch.ones(2)},
                       optimizer={"state": {}, "param_groups": []})
    state.save(tmp_path)
    got = TrainState.load(tmp_path)
    assert (got.seed, got.epoch, got.step, got.best_score, got.best, got.epochs,
            got.process_peak, got.partial, got.run_id, got.bad_epochs) == (
        3, 2, 5, 0.5, state.best, state.epochs, 12.5, state.partial, "r1", 2)
    assert torch.equal(got.model["w"], torch.ones(2)) and torch.equal(got.loader, state.loader)
    # the file: the state's fields and the format, read without unpickling objects
    saved = torch.load(tmp_path / STATE_NAME, weights_only=True)
    assert set(saved) == {"format", "seed", "epoch", "step", "best_score", "best", "epochs",
                          "process_peak", "partial", "run_id", "bad_epochs", "stopped_early",
                          "loader", "rng", "model", "optimizer", "scheduler", "world",
                          "ranks", "digest"}
    # weights that differ from the digest written with them are refused, naming the file
    torch.save({**saved, "model": {"w": torch.tensor([1.0, 1.5])}}, tmp_path / STATE_NAME)
    with pytest.raises(ValueError, match=rf"{tmp_path / STATE_NAME}: the model weights do "
                       "not match the digest written with them"):
        TrainState.load(tmp_path)
    # a state saved before early stopping, schedules and digests existed reads with their
    # defaults
    torch.save({k: v for k, v in saved.items()
                if k not in ("bad_epochs", "stopped_early", "scheduler", "world", "ranks",
                             "digest")},
               tmp_path / STATE_NAME)
    old = TrainState.load(tmp_path)
    assert (old.bad_epochs, old.stopped_early, old.scheduler, old.epoch, old.world,
            old.ranks) == (0, None, None, 2, 1, None)
    assert TrainState.load(tmp_path / "none") is None
    torch.save({**saved, "format": 99}, tmp_path / STATE_NAME)
    with pytest.raises(ValueError, match="not a training state this version reads"):
        TrainState.load(tmp_path)
    torch.save({**saved, "extra": 1}, tmp_path / STATE_NAME)
    with pytest.raises(ValueError, match=r"fields \['extra'\]"):
        TrainState.load(tmp_path)
    (tmp_path / STATE_NAME).write_bytes(b"cut")
    with pytest.raises(ValueError, match="cannot read the saved training state"):
        TrainState.load(tmp_path)


def test_a_distributed_state_gives_each_rank_its_own_generators():
    from gnn_treelstm.training.resume import TrainState

    parts = [{"rng": {"torch": torch.full((3,), r)}, "partial": {"n_ex": 10 + r},
              "process_peak": 100.0 + r} for r in range(2)]
    state = TrainState(seed=1, rng=parts[0]["rng"], partial=parts[0]["partial"], world=2,
                       ranks=parts)
    one = state.for_rank(1, 2)
    assert torch.equal(one.rng["torch"], torch.full((3,), 1))
    assert (one.partial, one.process_peak, one.ranks) == ({"n_ex": 11}, 101.0, None)
    assert state.for_rank(0, 2).partial == {"n_ex": 10}
    with pytest.raises(ValueError, match="of a run of 2 process.*this run has 3"):
        state.for_rank(0, 3)
    single = TrainState(seed=1)
    assert single.for_rank(0, 1) is single
    with pytest.raises(ValueError, match="of a run of 1 process"):
        single.for_rank(0, 2)


def test_the_replay_passes_over_the_trained_batches_and_puts_the_generators_back(
        monkeypatch):
    """A seed stopped after batch 2 of an epoch draws batches 1-2 again without training
    them and restores the generators saved after batch 2 just before batch 3."""
    from gnn_treelstm.training import trainer

    events: list = []
    monkeypatch.setattr(trainer, "restore_rng", lambda rng: events.append(("rng", rng)))

    def drawn(n: int):
        for i in range(1, n + 1):
            events.append(("drawn", i))
            yield f"batch {i}"

    got = [(step, batch) for step, batch in trainer._after(drawn(4), 2, "saved")]
    assert got == [(3, "batch 3"), (4, "batch 4")]
    assert events == [("drawn", 1), ("drawn", 2), ("drawn", 3), ("rng", "saved"),
                      ("drawn", 4)]
    events.clear()
    assert list(trainer._after(drawn(2), 0, "unused")) == [(1, "batch 1"), (2, "batch 2")]
    assert ("rng", "unused") not in events


def test_a_trainer_refuses_its_seed_state_before_a_seed_starts(tiny_sst, tmp_path):
    from gnn_treelstm.training.config import RunConfig
    from gnn_treelstm.training.trainer import Trainer

    trainer = Trainer(RunConfig(data=str(tiny_sst), runs_dir=str(tmp_path), name="r",
                                embeddings_mode="random", emb_dim=6, hidden=5, test=False))
    with pytest.raises(RuntimeError, match="start_seed"):
        trainer.state  # noqa: B018 - the property refuses
    with pytest.raises(RuntimeError, match="fit"):
        trainer.place  # noqa: B018
