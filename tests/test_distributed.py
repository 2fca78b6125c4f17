"""``--distributed``: two CPU processes (gloo on 127.0.0.1, started by torchrun) train the
same parameters as one process with the same global batch."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gnn_treelstm.commands import train
from tests.tiny_data import build_tiny

ROOT = Path(__file__).resolve().parents[1]
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
