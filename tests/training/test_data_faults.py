"""Data that changes under a running ``train``: a memory-mapped array cut short mid-epoch
(a real bus error in a real subprocess, in the training process or in a loader process),
or rewritten in place between epochs, stops the run with exit status 3 and a message
naming the file, how to put it back and how to go on; the saved state stays whole and
``--resume`` continues, once the file is back, to the run that never stopped. A real
loader process killed with ``kill -9`` stops the run with a message, not a hang."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gnn_treelstm.commands import train
from gnn_treelstm.commands.sigbus import DATA_CHANGED
from gnn_treelstm.training import rundir
from gnn_treelstm.training.batching import RECEIVED_AHEAD
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees import manifest
from gnn_treelstm.trees.packed import write_packed
from tests.tiny_data import build_tiny

ROOT = Path(__file__).resolve().parents[2]
# 16 training trees in batches of 2: 8 steps an epoch
ARGS = ["--epochs", "3", "--batch-size", "2", "--embeddings-mode", "random", "--emb-dim", "6",
        "--hidden", "5", "--threads", "1", "-q"]
# each optimizer step sleeps argv[1] seconds and prints "step"; the rest is `train`'s argv
STEPPING_TRAIN = """
import sys, time, torch
step = torch.optim.Adagrad.step
def slow(self, *a, **k):
    time.sleep(float(sys.argv[1]))
    print("step", flush=True)
    return step(self, *a, **k)
torch.optim.Adagrad.step = slow
from gnn_treelstm.commands.train import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture(scope="module")
def sealed(tmp_path_factory) -> Path:
    """A tiny SST build as ``build`` writes it: packed (memory-mapped) constituency trees,
    sealed by a manifest."""
    out = build_tiny(tmp_path_factory.mktemp("sealed"), "sst")
    meta = D.load_meta(out)
    for split in meta["splits"]:
        sp = D.load_split(out, split, "constituency")
        write_packed(out / "constituency" / f"{split}.packed", sp.graphs.arrays,
                     sp.graphs.dtypes, sp.targets)
        (out / "constituency" / f"{split}.bin").unlink()
    for tree in ("dependency", "chain"):
        shutil.rmtree(out / tree)
        (out / "relations" / f"{tree}.json").unlink()
    manifest.seal(out, {**meta, "trees": ["constituency"],
                        "num_relations": {"constituency": 2}})
    return out


@pytest.fixture
def data(sealed, tmp_path) -> Path:
    shutil.copytree(sealed, tmp_path / "sst")
    return tmp_path / "sst"


def _stepping(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", STEPPING_TRAIN, "0.1", *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _at_step(proc: subprocess.Popen, n: int, action) -> tuple[int, str]:
    """Run ``action()`` once the run made ``n`` optimizer steps; its exit status and
    standard error."""
    seen = 0
    for line in proc.stdout:
        seen += line.startswith("step")
        if seen == n:
            action()
            break
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the run did not stop after step {n}: it hangs")
    return proc.returncode, err


def _losses(run: Path) -> list[tuple[int, float]]:
    return [(r["epoch"], r["train_loss"])
            for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


@pytest.mark.parametrize("workers", ["0", "1"])
def test_an_array_cut_short_mid_epoch_is_exit_3_then_resume_finishes_the_run(
        data, tmp_path, workers):
    """``n.word.npy`` of the training split cut to 0 bytes inside epoch 2 (a bus error at
    the next batch: in the training process, or in its loader process). With a loader
    process, batches of one tree: 16 an epoch, more than are made ahead of the step (the
    data loader's 2 and the receiving thread's RECEIVED_AHEAD), so the process reads the
    file after the cut."""
    npy = data / "constituency" / "train.packed" / "n.word.npy"
    whole = npy.read_bytes()
    one = ["--batch-size", "1"] if workers == "1" else []  # (the last of ARGS' wins)
    common = ["--data", str(data), "--runs-dir", str(tmp_path / "runs"), *ARGS, *one]
    assert 2 + 2 + RECEIVED_AHEAD < 16
    run = tmp_path / "runs" / "cut"
    proc = _stepping([*common, "--name", "cut", "--workers", workers])
    per_epoch = 16 if one else 8
    rc, err = _at_step(proc, per_epoch + 2, lambda: os.truncate(npy, 0))  # epoch 2, step 2
    assert rc == DATA_CHANGED, err[-3000:]
    assert "Traceback" not in err
    assert f"error: {npy}: changed on disk while this process was reading it (cut short, " \
        "rewritten or replaced after it was mapped)" in err, err
    assert "put the file back as the build wrote it" in err
    assert f"`gnn-treelstm train --resume {run}` once the data is back" in err
    assert ("(SIGBUS)" if workers == "0" else "is killed by signal: Bus error") in err
    status = rundir.read_status(run)
    assert status["status"] == "failed" and str(npy) in status["error"]
    state = torch.load(run / "state.pt", weights_only=True)
    assert (state["epoch"], state["step"]) == (2, 0)  # epoch 1's end: whole

    npy.write_bytes(whole)  # the file put back (in place, as `cp` does)
    assert train.main(["--resume", str(run), "-q"]) == 0
    assert rundir.read_status(run) is None
    if workers == "0":  # the run that never stopped (the same with a loader process)
        assert train.main([*common, "--name", "ref"]) == 0
        assert _losses(run) == _losses(tmp_path / "runs" / "ref")  # epochs 1, 2, 3 once each
    else:
        assert [e for e, _ in _losses(run)] == [1, 2, 3]


def test_an_array_rewritten_in_place_is_refused_at_the_next_epoch(data, tmp_path, capsys,
                                                                   monkeypatch):
    """The same size, other bytes: the mapping reads them without a fault (every word id
    shifted by one), so the next epoch's check stops the run before it reads a batch."""
    from gnn_treelstm.training.trainer import Trainer

    npy = data / "constituency" / "train.packed" / "n.word.npy"
    whole = npy.read_bytes()
    real_save, saves = Trainer.save_state, []

    def save_then_rewrite(self, loader_state):
        real_save(self, loader_state)
        saves.append(self.state.epoch)
        if len(saves) == 1:  # after epoch 1's state: other word ids, the same size
            import numpy as np

            arr = np.load(npy)
            np.save(npy, np.where(arr >= 0, (arr + 1) % 40, arr).astype(arr.dtype))
            assert npy.stat().st_size == len(whole)

    monkeypatch.setattr(Trainer, "save_state", save_then_rewrite)
    common = ["--data", str(data), "--runs-dir", str(tmp_path / "runs"), *ARGS]
    run = tmp_path / "runs" / "r"
    assert train.main([*common, "--name", "r"]) == DATA_CHANGED
    err = capsys.readouterr().err
    assert f"error: {npy}: changed on disk while this process was reading it" in err, err
    assert f"the training state {run / 'state.pt'} (the start of epoch 2) is intact" in err
    assert f"`gnn-treelstm train --resume {run}` once the data is back" in err
    assert [r["epoch"] for r in map(json.loads, (run / "metrics.jsonl").open())] == [1]

    monkeypatch.setattr(Trainer, "save_state", real_save)
    npy.write_bytes(whole)
    assert train.main(["--resume", str(run), "-q"]) == 0
    assert train.main([*common, "--name", "ref"]) == 0
    assert _losses(run) == _losses(tmp_path / "runs" / "ref")


def _loader_pids(pid: int) -> list[int]:
    """The processes forked by ``pid`` (its loader processes)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        pytest.skip("/proc/PID/task/PID/children is not readable here")
    return [int(k) for k in kids]


def test_a_killed_loader_process_stops_the_run_with_a_message(data, tmp_path):
    """``kill -9`` of the real loader process of ``--workers 1`` inside epoch 2: exit 2
    with a message (not a hang, not a traceback), and ``--resume`` finishes the run."""
    run = tmp_path / "runs" / "k"
    common = ["--data", str(data), "--runs-dir", str(tmp_path / "runs"), *ARGS]
    proc = _stepping([*common, "--name", "k", "--workers", "1"])
    killed = []

    def kill_the_loader():
        pids = []
        for _ in range(100):
            pids = _loader_pids(proc.pid)
            if pids:
                break
            time.sleep(0.05)
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGKILL)
        killed.append(pids[0])

    rc, err = _at_step(proc, 8 + 2, kill_the_loader)
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    assert f"error: a data loader process stopped (DataLoader worker (pid(s) {killed[0]}) " \
        "exited unexpectedly)" in err or f"(DataLoader worker (pid {killed[0]}) is killed " \
        "by signal: Killed)" in err, err
    assert f"continue the run with `gnn-treelstm train --resume {run}`" in err
    assert rundir.read_status(run)["status"] == "failed"
    assert train.main(["--resume", str(run), "-q"]) == 0
    assert [e for e, _ in _losses(run)] == [1, 2, 3]
