"""``--distributed``: two CPU processes (gloo on 127.0.0.1, started by torchrun) train the
same parameters as one process with the same global batch, and a run SIGKILLed in its
second epoch resumes (``--resume``) to the same run as one that never stopped."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch

from gnn_treelstm.commands import train
from tests.tiny_data import build_tiny
from tests.training.killed_runs import SLOW_TRAIN, wait_for_state

ROOT = Path(__file__).resolve().parents[2]
# no dropout: DDP ranks draw other dropout masks than one process (a different stream)
ARGS = ["--epochs", "2", "--batch-size", "7", "--embeddings-mode", "random", "--emb-dim",
        "6", "--hidden", "5", "--dropout", "0", "--no-test", "-q"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("task,extra", [
    ("sst-5", ["--engine", "level"]),                                   # AdaGrad, phrases
    ("sick-e", ["--model", "childsum", "--tree", "dependency"]),         # Adam, pairs
    ("sick-r", ["--model", "mtree", "--tree", "dependency", "--loss-reduction", "sum"]),
])
def test_two_processes_equal_one_with_the_same_global_batch(tmp_path, task, extra):
    data = tmp_path / "data"
    build_tiny(data, "sst" if task.startswith("sst") else "sick")
    common = ["--data", str(data), "--runs-dir", str(tmp_path / "runs"), "--task", task,
              *ARGS, *extra]
    assert train.main([*common, "--name", "one", "--threads", "1"]) == 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
           "-m", "gnn_treelstm.commands.train", *common, "--name", "two", "--distributed"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    one, two = (torch.load(tmp_path / "runs" / n / "best.pt", weights_only=True)
                for n in ("one", "two"))
    assert one["meta"]["epoch"] == two["meta"]["epoch"]
    for k, v in one["state_dict"].items():
        torch.testing.assert_close(two["state_dict"][k], v, atol=1e-5, rtol=1e-5)
    # rank 0 alone wrote the run; the epoch's loss is over both ranks' examples
    runs = tmp_path / "runs" / "two"
    recs = [json.loads(x) for x in (runs / "metrics.jsonl").read_text().splitlines()]
    ref = [json.loads(x) for x in (tmp_path / "runs" / "one" / "metrics.jsonl")
           .read_text().splitlines()]
    assert [r["examples"] for r in recs] == [r["examples"] for r in ref]
    assert [r["train_loss"] for r in recs] == pytest.approx([r["train_loss"] for r in ref],
                                                            rel=1e-5)


def test_distributed_without_torchrun_is_a_clear_error(tmp_path, capsys, monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    build_tiny(tmp_path / "data", "sst")
    rc = train.main(["--data", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "r"),
                     "--distributed", *ARGS])
    err = capsys.readouterr().err
    assert rc == 2 and "start the processes with torchrun" in err


def _torchrun(target: list[str], **popen) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), *target],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        **popen)


def test_sigkill_of_a_two_process_run_in_epoch_2_then_resume_gives_the_same_run(
        tiny_sst, tmp_path):
    # dropout on: each rank's own random stream must continue where it stopped
    common = ["--data", str(tiny_sst), "--runs-dir", str(tmp_path), "--epochs", "3",
              "--batch-size", "4", "--checkpoint-every", "1", "--embeddings-mode", "random",
              "--emb-dim", "6", "--hidden", "5", "--dropout", "0.5", "-q", "--distributed"]
    ref = _torchrun(["-m", "gnn_treelstm.commands.train", *common, "--name", "ref"])
    assert ref.wait(300) == 0, ref.stderr.read()[-3000:]

    slow = tmp_path / "slow_train.py"
    slow.write_text(SLOW_TRAIN)
    run = tmp_path / "killed"
    proc = _torchrun([str(slow), "0.3", *common, "--name", "killed"])
    state = wait_for_state(run / "state.pt", 2, timeout=300)  # inside epoch 2
    assert state is not None and state["epoch"] == 2, "the run never reached epoch 2"
    assert state["world"] == 2 and len(state["ranks"]) == 2
    everyone = [proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(recursive=True))]
    for pid in everyone:  # the whole job dies at once, as when a machine goes down
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    assert not (run / "results.json").exists()

    res = _torchrun(["-m", "gnn_treelstm.commands.train", "--resume", str(run), "-q"])
    assert res.wait(300) == 0, res.stderr.read()[-3000:]
    got, want = (json.loads((tmp_path / n / "results.json").read_text())
                 for n in ("killed", "ref"))
    assert got["seeds"][0]["best_epoch"] == want["seeds"][0]["best_epoch"]
    assert got["dev"] == want["dev"] and got["test"] == want["test"]

    def losses(name):
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return [(r["epoch"], r["examples"], r["train_loss"]) for r in map(json.loads, lines)]

    assert losses("killed") == losses("ref")  # each epoch once, with the same loss
    one, two = (torch.load(tmp_path / n / "best.pt", weights_only=True)
                for n in ("killed", "ref"))
    for k, v in one["state_dict"].items():
        assert torch.equal(two["state_dict"][k], v), k
    assert not (run / "state.pt").exists()


def test_resume_with_another_number_of_processes_is_refused(tiny_sst, tmp_path):
    from gnn_treelstm.training.resume import TrainState

    common = ["--data", str(tiny_sst), "--runs-dir", str(tmp_path), "--epochs", "1",
              "--batch-size", "4", "--embeddings-mode", "random", "--emb-dim", "6",
              "--hidden", "5", "-q", "--distributed", "--name", "r"]
    first = _torchrun(["-m", "gnn_treelstm.commands.train", *common])
    assert first.wait(300) == 0, first.stderr.read()[-3000:]
    # as if the run had been stopped by three processes after its first epoch
    (tmp_path / "r" / "seed.json").unlink()
    TrainState(seed=1, epoch=2, world=3).save(tmp_path / "r")
    again = _torchrun(["-m", "gnn_treelstm.commands.train", "--resume", str(tmp_path / "r")])
    assert again.wait(300) != 0
    err = again.stderr.read()
    assert "of a run of 3 process(es) and this run has 2" in err


def test_each_share_carries_its_global_batch_size_with_loader_processes(tmp_path):
    from gnn_treelstm.training.batching import make_loader
    from gnn_treelstm.trees.data import load_split

    # 16 training examples: global batches of 7, 7, 2
    split = load_split(build_tiny(tmp_path, "sst"), "train", "constituency")

    def sizes(workers):
        loader = make_loader(split, 7, shuffle=True, seed=3, shard=(1, 2), workers=workers)
        return [(len(b), b.global_size, b.index.tolist()) for b in loader]

    want = sizes(0)
    assert [g for _, g, _ in want] == [7, 7, 2]
    assert sizes(2) == want


def test_two_processes_with_loader_workers_equal_the_run_without(tmp_path):
    # the last global batch (16 = 7 + 7 + 2) is smaller: its share must be scaled by its
    # own size, although the loader processes have drawn it long before it is trained
    data = tmp_path / "data"
    build_tiny(data, "sst")
    common = ["--data", str(data), "--runs-dir", str(tmp_path / "runs"), "--task", "sst-5",
              *ARGS, "--distributed"]
    for workers in ("0", "2"):
        res = _torchrun(["-m", "gnn_treelstm.commands.train", *common,
                         "--name", f"w{workers}", "--workers", workers])
        assert res.wait(300) == 0, res.stderr.read()[-3000:]

    def losses(name):
        lines = (tmp_path / "runs" / name / "metrics.jsonl").read_text().splitlines()
        return [(r["epoch"], r["examples"], r["train_loss"]) for r in map(json.loads, lines)]

    assert losses("w2") == losses("w0")
    w0, w2 = (torch.load(tmp_path / "runs" / n / "best.pt", weights_only=True)
              for n in ("w0", "w2"))
    for k, v in w0["state_dict"].items():
        assert torch.equal(w2["state_dict"][k], v), k
