"""A run started from Python (``trainer.run``) writes ``train.log`` like the command line,
takes its handler off afterwards, and speaks of ``overwrite`` in the API's words too."""

from __future__ import annotations

import logging

from gnn_treelstm.training.trainer import run
from tests.training.helpers import tiny_config


def test_a_python_run_writes_train_log_and_leaves_the_handlers_as_they_were(
        tiny_sst, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="gnn_treelstm")
    library = logging.getLogger("gnn_treelstm")
    handlers = list(library.handlers)
    cfg = tiny_config(tiny_sst, tmp_path / "runs", epochs=1)
    res = run(cfg)
    log = (tmp_path / "runs" / "r" / "train.log").read_text()
    assert f"run {res['run_dir']}" in log and "INFO gnn_treelstm.training.trainer" in log
    assert library.handlers == handlers
    caplog.clear()
    run(cfg, overwrite=True)
    removed = [r.getMessage() for r in caplog.records if "of an earlier run" in r.getMessage()]
    assert removed and not any("--overwrite" in m for m in removed), removed
    assert "overwriting the run in" in removed[0]
    second = (tmp_path / "runs" / "r" / "train.log").read_text()
    assert second.count(f"run {res['run_dir']}") == 1  # a new log, not appended


def test_the_command_line_keeps_its_own_train_log(tiny_sst, tmp_path):
    from gnn_treelstm.commands import train

    assert train.main(["--task", "sst-5", "--data", str(tiny_sst), "--runs-dir",
                       str(tmp_path / "runs"), "--name", "c", "--epochs", "1",
                       "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
                       "-q"]) == 0
    log = (tmp_path / "runs" / "c" / "train.log").read_text()
    lines = [ln for ln in log.splitlines() if " run " in ln and "sst-5/nary" in ln]
    assert len(lines) == 1, log[:2000]   # one handler writes it, not two
