"""Progress bars only on a terminal: ``gnn-treelstm train ... 2> log`` writes log lines, never
bar frames."""

from __future__ import annotations

import subprocess
import sys

from gnn_treelstm.commands.cli import progress_bar


def test_train_into_a_log_file_writes_no_bar_frames(tiny_sst, tmp_path):
    log = tmp_path / "log"
    with log.open("wb") as err:
        proc = subprocess.run(
            [sys.executable, "-m", "gnn_treelstm", "train", "--task", "sst-5", "--data",
             str(tiny_sst), "--runs-dir", str(tmp_path / "runs"), "--epochs", "2",
             "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
             "--batch-size", "2"],
            stdout=subprocess.PIPE, stderr=err, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, log.read_text()
    text = log.read_text()
    assert "\r" not in text and "batch/s" not in text and "it/s" not in text, text[:2000]
    assert "\r" not in proc.stdout.decode()
    assert len(text) < 4000  # lines, not frames


def test_no_bar_off_a_terminal(monkeypatch):
    class Pipe:
        def isatty(self) -> bool:
            return False

    monkeypatch.setattr(sys, "stderr", Pipe())
    assert progress_bar() is None
