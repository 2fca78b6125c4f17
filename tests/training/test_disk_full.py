"""A full disk while a run writes: the run ends with exit 2 naming the file and the free
space, its last good checkpoint and ``state.pt`` stay intact and loadable, and
``--resume`` continues it to the same result as a run that never stopped.

Two ways of filling the disk: writes made to fail with ``ENOSPC`` (always), and a real
small filesystem (a 4 MiB tmpfs, where the tests may mount one) filled up after the first
epoch."""

from __future__ import annotations

import contextlib
import errno
import json
import subprocess
from pathlib import Path

import pytest
import torch

from gnn_treelstm import load_model
from gnn_treelstm.commands import train
from gnn_treelstm.training.resume import TrainState
from gnn_treelstm.training.trainer import Trainer

ARGS = ["--epochs", "3", "--batch-size", "4", "--embeddings-mode", "random", "--emb-dim",
        "6", "--hidden", "5", "--dropout", "0.5", "-q"]


def _results(run: Path) -> tuple:
    res = json.loads((run / "results.json").read_text())
    losses = [(r["epoch"], r["train_loss"], r["dev"]) for r in
              map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]
    return res["dev"], res["test"], res["seeds"][0]["best_epoch"], losses


@pytest.fixture(scope="module")
def reference(tiny_sst, tmp_path_factory) -> tuple:
    """The run, uninterrupted."""
    runs = tmp_path_factory.mktemp("ref")
    assert train.main(["--data", str(tiny_sst), "--runs-dir", str(runs), "--name", "ref",
                       *ARGS]) == 0
    return _results(runs / "ref")


def _no_space(*_a, **_k):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("target,nth,kept", [
    ("state.pt", 2, "the training state"),      # the end of epoch 2: epoch 1's state stays
    ("best.pt", 1, "holds no checkpoint or state yet"),  # the first checkpoint: nothing yet
])
def test_a_failed_write_ends_the_run_with_exit_2_and_resume_continues(
        tiny_sst, tmp_path, monkeypatch, capsys, reference, target, nth, kept):
    real_save = torch.save
    seen = []

    def save(obj, f, *a, **k):  # the nth write of ``target`` runs out of space part-way
        name = Path(getattr(f, "name", "")).name
        if name.startswith(f".{target}."):
            seen.append(name)
            if len(seen) == nth:
                f.write(b"\0" * 100)
                _no_space()
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save)
    run = tmp_path / "r"
    rc = train.main(["--data", str(tiny_sst), "--runs-dir", str(tmp_path), "--name", "r",
                     *ARGS])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"cannot write {run / target}: No space left on device (" in err
    assert "free on the disk that holds it" in err and kept in err
    assert f"gnn-treelstm train --resume {run}" in err and "Traceback" not in err
    assert not list(run.glob(".*.tmp"))  # the half-written file is gone
    if target == "state.pt":  # epoch 1's state and the checkpoint are there, and load
        state = TrainState.load(run)
        assert (state.epoch, state.step) == (2, 0)
        assert load_model(run / "best.pt").meta["epoch"] <= 2
    if (run / "metrics.jsonl").exists():
        for line in (run / "metrics.jsonl").read_text().splitlines():
            json.loads(line)  # whole lines only

    monkeypatch.setattr(torch, "save", real_save)  # space again
    assert train.main(["--resume", str(run), "-q"]) == 0
    assert _results(run) == reference


@contextlib.contextmanager
def _small_filesystem(path: Path, size: str = "4m"):
    path.mkdir()
    try:
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(path)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        res = subprocess.CompletedProcess([], 1, "", str(exc))
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({res.stderr.strip()}); the injected "
                    "ENOSPC test covers the same path")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def _fill(directory: Path) -> Path:
    """Fill the filesystem of ``directory`` to the last byte; the filler's path."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for chunk in (1 << 16, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * chunk)
    return filler


def test_a_real_full_disk_after_epoch_1(tiny_sst, tmp_path, monkeypatch, capsys, reference):
    with _small_filesystem(tmp_path / "small") as disk:
        filled: list[Path] = []
        end_epoch = Trainer.end_epoch

        def end_then_fill(self, epoch, *a, **k):
            record = end_epoch(self, epoch, *a, **k)
            if epoch == 1:
                filled.append(_fill(disk))
            return record

        monkeypatch.setattr(Trainer, "end_epoch", end_then_fill)
        run = disk / "r"
        rc = train.main(["--data", str(tiny_sst), "--runs-dir", str(disk), "--name", "r",
                         *ARGS])
        err = capsys.readouterr().err
        assert rc == 2 and filled, err
        assert "No space left on device" in err and f"cannot write {run}/" in err
        assert "free on the disk that holds it" in err and "Traceback" not in err
        state = TrainState.load(run)  # epoch 1's state, intact
        assert (state.epoch, state.step) == (2, 0)
        assert load_model(run / "best.pt").meta["epoch"] in (1, 2)

        monkeypatch.setattr(Trainer, "end_epoch", end_epoch)
        filled[0].unlink()  # space again
        assert train.main(["--resume", str(run), "-q"]) == 0
        assert _results(run) == reference
