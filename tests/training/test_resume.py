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


def _stopped_run(tiny_sst, runs: Path, monkeypatch, failing_state: int) -> Path:
    """A one-seed run stopped by a full disk at its ``failing_state``-th ``state.pt``
    (after that epoch's metrics line was written)."""
    import errno

    real_save, seen = torch.save, []

    def save(obj, f, *a, **k):
        if Path(getattr(f, "name", "")).name.startswith(".state.pt."):
            seen.append(1)
            if len(seen) == failing_state:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save)
    rc = train.main(["--data", str(tiny_sst), "--runs-dir", str(runs), "--name", "r",
                     "--epochs", "3", "--batch-size", "4", "--embeddings-mode", "random",
                     "--emb-dim", "6", "--hidden", "5", "--threads", "1", "-q"])
    monkeypatch.setattr(torch, "save", real_save)
    assert rc == 2
    return runs / "r"


def test_a_state_of_another_run_or_seed_is_refused(tiny_sst, tmp_path, monkeypatch, capsys):
    from gnn_treelstm.training.resume import STATE_NAME

    run = _stopped_run(tiny_sst, tmp_path, monkeypatch, failing_state=2)
    saved = torch.load(run / STATE_NAME, weights_only=True)
    own = saved["run_id"]
    assert own == json.loads((run / "config.json").read_text())["run_id"]
    capsys.readouterr()
    torch.save({**saved, "run_id": "0123456789abcdef"}, run / STATE_NAME)
    assert train.main(["--resume", str(run), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{run / STATE_NAME}: the saved training state is of the run 0123456789abcdef, " \
        f"not of this run ({own}" in err
    torch.save({**saved, "seed": 8}, run / STATE_NAME)
    assert train.main(["--resume", str(run), "-q"]) == 2
    assert "is of seed 8, not of seed 1" in capsys.readouterr().err
    torch.save(saved, run / STATE_NAME)
    assert train.main(["--resume", str(run), "-q"]) == 0


def _epochs(run: Path) -> tuple[list, list]:
    import csv

    lines = (run / "metrics.jsonl").read_text().splitlines()
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [json.loads(x)["epoch"] for x in lines], [int(r["epoch"]) for r in rows]


def test_no_epoch_twice_after_a_crash_right_after_its_metrics_line(tiny_sst, tmp_path,
                                                                   monkeypatch):
    """The disk fills right after epoch 1's metrics line, before any state.pt: the resumed
    seed starts again from epoch 1 and its records list each epoch once."""
    run = _stopped_run(tiny_sst, tmp_path, monkeypatch, failing_state=1)
    assert _epochs(run) == ([1], [1]) and not (run / "state.pt").exists()
    assert train.main(["--resume", str(run), "-q"]) == 0
    assert _epochs(run) == ([1, 2, 3], [1, 2, 3])


def test_a_resumed_run_keeps_the_threads_it_was_started_with(tiny_sst, tmp_path, monkeypatch,
                                                             capsys):
    from gnn_treelstm.training.options import parse_args

    run = _stopped_run(tiny_sst, tmp_path, monkeypatch, failing_state=2)
    record = json.loads((run / "config.json").read_text())
    assert record["torch_threads"] == 1
    assert parse_args(["--resume", str(run)]).threads == 1
    record["torch_threads"] = 3  # as a run started with --threads 3
    (run / "config.json").write_text(json.dumps(record))
    assert parse_args(["--resume", str(run)]).threads == 3
    assert parse_args(["--resume", str(run), "--threads", "3"]).threads == 3
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        parse_args(["--resume", str(run), "--threads", "2"])
    assert e.value.code == 2
    assert f"--threads 2: the run {run} was started with 3 torch thread(s)" in \
        capsys.readouterr().err
