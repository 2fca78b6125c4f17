"""Run directories: one writer, no mixing of runs, no debris (``gnn_treelstm.training.rundir``)."""

import json
import multiprocessing as mp
import os

import pytest

from gnn_treelstm.commands import train
from gnn_treelstm.training import rundir as RD
from tests.tiny_data import build_tiny

TINY = ["--epochs", "1", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
        "-q"]


def _hold(path, ready, release):
    with RD.claim(path):
        ready.set()
        release.wait(30)


def test_a_second_writer_fails_at_once_naming_the_holder(tmp_path):
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold, args=(tmp_path / "r", ready, release))
    p.start()
    try:
        assert ready.wait(30)
        with pytest.raises(RD.RunDirError, match=rf"being written by pid {p.pid}"):
            with RD.claim(tmp_path / "r"):
                pass
        with pytest.raises(RD.RunDirError, match="being written"):
            RD.check_free(tmp_path / "r")
    finally:
        release.set()
        p.join(30)
    with RD.claim(tmp_path / "r"):  # the lock died with its holder
        pass


def test_a_directory_with_a_run_is_refused_unless_overwrite(tmp_path):
    run = tmp_path / "r"
    (run / "seed-2").mkdir(parents=True)
    (run / "best.pt").write_bytes(b"old")
    (run / ".best.pt.abc.tmp").write_bytes(b"half")          # debris of a killed write
    with pytest.raises(RD.RunDirError, match=r"already holds a run \(best.pt, seed-2\)"):
        with RD.claim(run):
            pass
    assert (run / "best.pt").read_bytes() == b"old"       # refused: nothing touched
    (run / "train.log").write_text("this run's log")
    with RD.claim(run, overwrite=True, keep=("train.log",)):
        assert sorted(p.name for p in run.iterdir()) == [".lock", "train.log"]


def test_check_same_run():
    assert RD.check_same_run("r", {"config.json": {"run_id": "a"},
                                   "results.json": {"run_id": "a"}}) == "a"
    assert RD.check_same_run("r", {"config.json": {}}) is None
    with pytest.raises(RD.RunDirError, match="mixes files of different runs"):
        RD.check_same_run("r", {"config.json": {"run_id": "a"},
                                "results.json": {"run_id": "b"}})


def test_train_refuses_a_rerun_and_keeps_the_first_runs_files(tmp_path, capsys):
    build_tiny(tmp_path / "data", "sst")
    common = ["--data", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "runs"),
              "--name", "x", *TINY]
    assert train.main(common) == 0
    run = tmp_path / "runs" / "x"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    capsys.readouterr()
    assert train.main(common) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert train.main([*common, "--overwrite"]) == 0
    ids = {json.loads((run / f).read_text())["run_id"] for f in ("config.json",
                                                                 "results.json")}
    ids |= {json.loads(line)["run_id"] for line in (run / "metrics.jsonl").open()}
    assert len(ids) == 1 and ids != {json.loads(before["config.json"])["run_id"]}
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    assert not os.path.exists(run / ".lock")  # a finished run releases and removes it
    assert not os.path.exists(run / RD.STATUS_NAME)
    # a mix made by hand (the first run's results beside the second's config) is caught
    from gnn_treelstm.commands import evaluate

    (run / "results.json").write_bytes(before["results.json"])
    capsys.readouterr()
    assert evaluate.main(["--table", str(run)]) == 2
    assert "mixes files of different runs" in capsys.readouterr().err


def test_a_lone_log_of_a_failed_start_does_not_block_the_name(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "train.log").write_text("error: the data is missing\n")
    RD.check_free(tmp_path / "r")  # no run there yet: free
    with RD.claim(tmp_path / "r"):
        pass


def test_a_claim_that_ends_removes_its_lock_and_one_that_raises_records_it(tmp_path):
    run = tmp_path / "r"
    with RD.claim(run):
        assert (run / RD.LOCK_NAME).is_file()
    assert not (run / RD.LOCK_NAME).exists()
    with pytest.raises(RuntimeError, match="boom"):
        with RD.claim(run):
            (run / "config.json").write_text("{}")
            raise RuntimeError("boom")
    assert not (run / RD.LOCK_NAME).exists()
    assert RD.read_status(run) == {"status": "failed", "error": "RuntimeError: boom"}
    # a block that wrote nothing leaves nothing to record
    with pytest.raises(RuntimeError):
        with RD.claim(tmp_path / "empty"):
            raise RuntimeError("before any file")
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == []


def test_the_leftovers_of_a_failed_start_are_replaced_without_overwrite(tmp_path, caplog):
    run = tmp_path / "r"
    with pytest.raises(ValueError):
        with RD.claim(run):
            (run / "config.json").write_text("{}")
            (run / "seed-1").mkdir()
            raise ValueError("the first forward failed")
    (run / "train.log").write_text("the new run's log")
    RD.check_free(run)  # no run there: free, and no lock left behind by the check
    assert not (run / RD.LOCK_NAME).exists()
    with caplog.at_level("INFO", logger=RD.__name__):
        with RD.claim(run, keep=("train.log",)):
            assert sorted(p.name for p in run.iterdir()) == [RD.LOCK_NAME, "train.log"]
            (run / "config.json").write_text('{"run": 2}')
    assert "left by a run that failed before finishing an epoch" in caplog.text
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "train.log"]


@pytest.mark.parametrize("epoch_file", ["metrics.jsonl", "best.pt", "state.pt",
                                        "seed-1/seed.json", "seed-2/state.pt"])
def test_a_failed_run_with_a_finished_epoch_stays_protected(tmp_path, epoch_file):
    run = tmp_path / "r"
    with pytest.raises(ValueError):
        with RD.claim(run):
            (run / "config.json").write_text("{}")
            (run / epoch_file).parent.mkdir(exist_ok=True)
            (run / epoch_file).write_bytes(b"kept")
            raise ValueError("a later epoch failed")
    assert RD.read_status(run)["status"] == "failed"
    with pytest.raises(RD.RunDirError, match="already holds a run"):
        RD.check_free(run)
    with pytest.raises(RD.RunDirError, match="already holds a run"):
        with RD.claim(run):
            pass
    assert (run / epoch_file).read_bytes() == b"kept"
    with RD.claim(run, resume=True):  # --resume continues it; its end clears the status
        pass
    assert RD.read_status(run) is None and (run / epoch_file).is_file()


def test_a_lock_file_removed_between_open_and_flock_is_taken_again(tmp_path, monkeypatch):
    """A writer that ends removes ``.lock``; a claimant that opened the old file just before
    must not hold a lock on a file no longer at that name (two writers)."""
    run = tmp_path / "r"
    run.mkdir()
    real_open, calls = os.open, []

    def open_then_lose_the_name(path, *args):
        fd = real_open(path, *args)
        if not calls:  # the holder removes .lock right after this claimant opened it
            os.unlink(path)
        calls.append(path)
        return fd

    monkeypatch.setattr(RD.os, "open", open_then_lose_the_name)
    with RD.claim(run):
        monkeypatch.setattr(RD.os, "open", real_open)
        assert len(calls) == 2  # the first file was let go, the second one is held
        with pytest.raises(RD.RunDirError, match="being written by"):
            with RD.claim(run):
                pass
    assert not (run / RD.LOCK_NAME).exists()


_KILLED_WITH_A_LOADER = """
import multiprocessing as mp, os, signal, sys, time
from gnn_treelstm.training import rundir
def load():
    os.write(1, b"running\\n")  # the fork's hooks have run (one write: no interleaving)
    time.sleep(120)
with rundir.claim(sys.argv[1]):
    loader = mp.get_context("fork").Process(target=load)
    loader.start()
    os.write(1, f"{loader.pid}\\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_next_run_takes_over_at_once_after_kill_9_with_a_live_orphan_loader(tmp_path):
    """A loader process forked by the run does not keep its lock: the run's ``kill -9``
    frees the directory although the loader lives on."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WITH_A_LOADER, str(tmp_path / "r")],
                            cwd=root, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(root)})
    # the loader keeps the pipe open: read its line and its parent's, in either order (on
    # a loaded machine the loader may start running after its parent is gone)
    lines = {proc.stdout.readline().strip() for _ in range(2)}
    assert "running" in lines, lines
    loader = int((lines - {"running"}).pop())
    try:
        assert proc.wait(60) == -signal.SIGKILL
        os.kill(loader, 0)  # the orphan is alive
        t0 = time.monotonic()
        with RD.claim(tmp_path / "r", resume=True):
            pass
        assert time.monotonic() - t0 < 1
    finally:
        os.kill(loader, signal.SIGKILL)
        proc.stdout.close()
