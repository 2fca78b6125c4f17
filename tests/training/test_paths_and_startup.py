"""A run records its data and vectors paths absolute (a checkpoint evaluates from any
directory; old relative records still compare equal), says what it does while it starts,
and its ``--help`` shows every default."""

import json
import os

import pytest
import torch

from gnn_treelstm.commands import evaluate, train
from gnn_treelstm.training.config import RunConfig, config_changes
from gnn_treelstm.training.options import build_parser
from gnn_treelstm.training.resume import resumed_run_id

TINY = ["--epochs", "1", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
        "-q"]


def test_a_relative_data_path_is_recorded_absolute(tmp_path, monkeypatch, capsys):
    """Trained from the data's parent with ``--data data``, the checkpoint evaluates from
    another directory; config.json keeps what was typed beside the absolute path."""
    from tests.tiny_data import build_tiny

    work = tmp_path / "work"
    build_tiny(work / "data", "sst")
    monkeypatch.chdir(work)
    assert train.main(["--data", "data", "--runs-dir", "runs", "--name", "r", *TINY]) == 0
    run = work / "runs" / "r"
    record = json.loads((run / "config.json").read_text())
    assert record["run_config"]["data"] == str(work / "data")
    assert record["data"]["given"] == "data"
    assert record["data"]["dir"] == str(work / "data" / "sst")
    ck = torch.load(run / "best.pt", weights_only=False, map_location="cpu")
    assert ck["meta"]["data_dir"] == str(work / "data" / "sst")
    assert ck["run_config"]["data"] == str(work / "data")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert evaluate.main([str(run / "best.pt"), "--split", "dev", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip())
    assert out["split"] == "dev" and out["count"] > 0
    # config.yaml trains the same run again from here too
    assert train.main(["--config", str(run / "config.yaml"), "--name", "again",
                       "--runs-dir", str(elsewhere / "runs"), "-q"]) == 0


def test_relative_and_absolute_paths_of_the_same_file_are_no_change(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "built").mkdir()
    (tmp_path / "v.txt").write_text("a 1\n")
    now = RunConfig(data=str(tmp_path / "built"), embeddings=str(tmp_path / "v.txt"))
    old = RunConfig(data="built", embeddings="./v.txt").to_dict()
    assert config_changes(old, now) == []
    assert config_changes({**old, "data": "other"}, now) == [
        ("data", "other", str(tmp_path / "built"))]
    assert config_changes({**old, "data": None}, now)[0][0] == "data"
    assert RunConfig(data="~/x").with_absolute_paths().data == os.path.expanduser("~/x")
    assert RunConfig(data="a/../b").with_absolute_paths().data == str(tmp_path / "b")
    assert RunConfig().with_absolute_paths() == RunConfig()


def test_a_run_recorded_with_a_relative_path_resumes(tiny_sst, tmp_path, monkeypatch):
    """config.json of a run made before paths were recorded absolute: ``--resume`` from
    the same directory accepts it."""
    monkeypatch.chdir(tiny_sst.parent)
    out = tmp_path / "r"
    out.mkdir()
    had = RunConfig(data=tiny_sst.name, epochs=2).resolved()
    (out / "config.json").write_text(json.dumps({"run_id": "x1", "run_config":
                                                 had.to_dict()}))
    now = RunConfig(data=tiny_sst.name, epochs=2).resolved().with_absolute_paths()
    assert resumed_run_id(out, now) == "x1"


def test_start_up_lines_are_shown_by_default(tiny_sst, tmp_path, capsys):
    args = ["--data", str(tiny_sst), "--runs-dir", str(tmp_path), *TINY]
    assert train.main([*args, "--name", "a", "--engine", "level"]) == 0
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.split(":")[0] in
             ("data", "word vectors", "model", "native level loops")]
    assert [x.split(":")[0] for x in lines] == ["data", "word vectors",
                                                "native level loops", "model"]
    assert f"data: {tiny_sst / 'sst'} (constituency trees): train " in lines[0]
    assert "word vectors: random (--embeddings-mode random)" in lines[1]
    assert "parameters (" in lines[3] and "nary cell" in lines[3]
    log = (tmp_path / "a" / "train.log").read_text()
    assert "word vectors: random" in log          # and in the run's log
    assert train.main([*args, "--name", "b", "--log-level", "ERROR"]) == 0
    assert "word vectors" not in capsys.readouterr().err
    assert train.main([*args, "--name", "c", "-v"]) == 0
    err = capsys.readouterr().err
    assert err.count("word vectors: random") == 1  # once, not again by the INFO console


def test_help_shows_every_default_and_no_markup():
    parser = build_parser()
    text = parser.format_help()
    assert "`" not in text
    for group in parser._action_groups:
        assert "`" not in (group.title or "")
    for action in parser._actions:
        d = action.default
        if d is None or d is False or d == [] or action.nargs == 0 or not action.option_strings:
            continue
        if action.dest == "help":
            continue
        shown = parser._get_formatter()._get_help_string(action) % {"default": d}
        assert "default" in shown, f"{action.option_strings[0]} does not show its default"
    assert "--lr-warmup-epochs N" in text and "(default: 0)" in text
    assert "--batch-size BATCH_SIZE\n" in text or "(default: 25)" in text


@pytest.mark.parametrize("flag", ["--epochs", "--seed", "--batch-size", "--device",
                                  "--runs-dir", "--lr-schedule", "--lr-gamma"])
def test_each_flag_with_a_default_says_it(flag):
    parser = build_parser()
    action = next(a for a in parser._actions if flag in a.option_strings)
    shown = parser._get_formatter()._get_help_string(action) % {"default": action.default}
    assert f"(default: {action.default})" in shown
