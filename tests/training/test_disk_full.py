"""A full disk while a run writes: the run ends with exit 2 naming the file and the free
space, its last good checkpoint and ``state.pt`` stay intact and loadable, and
``--resume`` continues it to the same result as a run that never stopped.

Two ways of filling the disk: writes made to fail with ``ENOSPC`` (always), and a real
small filesystem (a 4 MiB tmpfs, where the tests may mount one) filled up after the first
epoch."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch

from gnn_treelstm import load_model
from gnn_treelstm.commands import train
from gnn_treelstm.training.resume import TrainState
from gnn_treelstm.training.trainer import Trainer
from tests.disks import fill, small_filesystem

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


def test_a_real_full_disk_after_epoch_1(tiny_sst, tmp_path, monkeypatch, capsys, reference):
    with small_filesystem(tmp_path / "small") as disk:
        filled: list[Path] = []
        end_epoch = Trainer.end_epoch

        def end_then_fill(self, epoch, *a, **k):
            record = end_epoch(self, epoch, *a, **k)
            if epoch == 1:
                filled.append(fill(disk))
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


class _FillsUp:
    """A file that takes ``room`` bytes, then raises ``ENOSPC`` as a full disk does."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def write(self, data) -> int:
        if len(data) > self.room:
            self.f.write(bytes(data[:self.room]))
            self.room = 0
            _no_space()
        self.room -= len(data)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)


def test_torch_zip_writer_runtime_error_after_enospc_is_exit_2(
        tiny_sst, tmp_path, monkeypatch, capsys, reference):
    """torch's zip writer turns its file's ``ENOSPC`` into ``RuntimeError: [enforce fail at
    inline_container.cc] unexpected pos``: still the full-disk message, exit 2."""
    real_save = torch.save
    seen = []

    def save(obj, f, *a, **k):  # the second state.pt runs out of space after 1000 bytes
        if Path(getattr(f, "name", "")).name.startswith(".state.pt."):
            seen.append(1)
            if len(seen) == 2:
                return real_save(obj, _FillsUp(f, 1000), *a, **k)
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save)
    run = tmp_path / "r"
    rc = train.main(["--data", str(tiny_sst), "--runs-dir", str(tmp_path), "--name", "r",
                     *ARGS])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"cannot write {run / 'state.pt'}: No space left on device (" in err
    assert "Traceback" not in err and "unexpected pos" not in err
    assert "the training state" in err and not list(run.glob(".*.tmp"))
    assert "No space left on device" in json.loads((run / "status.json").read_text())["error"]
    assert TrainState.load(run).epoch == 2  # epoch 1's state, intact
    monkeypatch.setattr(torch, "save", real_save)
    assert train.main(["--resume", str(run), "-q"]) == 0
    assert _results(run) == reference


def test_a_real_disk_that_fills_partway_through_a_checkpoint(tiny_sst, tmp_path, capsys):
    """A real 3 MiB tmpfs left with 40 KiB free: the first checkpoint (about 100 KiB)
    fills it part-way through torch's zip writer."""
    with small_filesystem(tmp_path / "small", "3m") as disk:
        fill(disk, leave=40 * 1024)
        run = disk / "r"
        rc = train.main(["--data", str(tiny_sst), "--runs-dir", str(disk), "--name", "r",
                         *ARGS[:-3], "--hidden", "60", "-q"])
        err = capsys.readouterr().err
        assert rc == 2, err
        assert f"cannot write {run}/" in err and "No space left on device" in err, err
        assert "free on the disk that holds it" in err and "Traceback" not in err
        assert not list(run.glob(".*.tmp"))


def test_train_building_its_sample_data_on_a_full_disk(tmp_path, capsys, monkeypatch):
    """The embedded sample (about 400 KB built) built on the fly into a 256 KiB tmpfs: the
    build's first write that does not fit is exit 2 naming the file, no traceback."""
    monkeypatch.delenv("GNN_TREELSTM_DATA", raising=False)
    with small_filesystem(tmp_path / "small", "256k") as disk:
        rc = train.main(["--runs-dir", str(disk), "--name", "r", *ARGS])
        err = capsys.readouterr().err
        assert rc == 2, err
        assert f"cannot write {disk / '_sample_data'}/" in err, err
        assert "no space left on the disk that holds it" in err and " free" in err
        assert "Traceback" not in err and "\n  [bt]" not in err
        assert not list(disk.rglob(".*.tmp"))
