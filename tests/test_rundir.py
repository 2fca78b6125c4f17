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
    assert os.path.exists(run / ".lock")
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
