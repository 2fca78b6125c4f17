"""One run, one set of word vectors: a built data set names its raw data by an absolute
path, a run records the vectors it read (resolved path, size, SHA-256, words found) in its
config.json, config.yaml and checkpoint, the same ``train`` command from any folder reads
the same file, and pre-trained vectors that cannot be found are an error, never a silent
switch to random ones."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from gnn_treelstm.commands import evaluate, train
from gnn_treelstm.training.data import SAMPLE_SRC

SMALL = ["--task", "sst-5", "--model", "nary", "--epochs", "1", "--hidden", "4",
         "--max-train", "12", "--max-eval", "6", "-q"]
GLOVE = "glove.6B.50d.filtered.txt.gz"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The sample SST built from the relative ``--src raw`` (cwd: the returned folder)."""
    from gnn_treelstm.datasets import build as B

    root = tmp_path_factory.mktemp("vectors")
    for part in ("sst", "glove", "SAMPLE"):
        src = SAMPLE_SRC / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / "raw" / part)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        meta = B.build("sst", "raw", "built", trees=["constituency"])
    assert meta["src"] == str(root / "raw")  # resolved, not "raw" as typed
    assert json.loads((root / "built" / "meta.json").read_text())["src"] == str(root / "raw")
    return root


def _train(cwd: Path, monkeypatch, *args: str) -> int:
    monkeypatch.chdir(cwd)
    return train.main(list(args))


def test_the_same_train_command_from_two_folders_records_the_same_vectors(
        built, tmp_path, monkeypatch, capsys):
    glove = built / "raw" / "glove" / GLOVE
    sha = hashlib.sha256(glove.read_bytes()).hexdigest()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    records = []
    for k, cwd in enumerate((built, elsewhere)):
        runs = tmp_path / f"runs{k}"
        assert _train(cwd, monkeypatch, "--data", str(built / "built"), "--runs-dir",
                      str(runs), "--name", "r", *SMALL) == 0
        run = runs / "r"
        rec = json.loads((run / "config.json").read_text())["embeddings"]
        assert rec["path"] == str(glove) and rec["sha256"] == sha
        assert rec["size"] == glove.stat().st_size and rec["mode"] == "tuned"
        assert 0 < rec["words_found"] <= rec["vocab_words"]
        text = (run / "config.yaml").read_text()
        cfg = yaml.safe_load(text)
        assert cfg["embeddings"] == str(glove) and cfg["embeddings_sha256"] == sha
        assert f"sha256 {sha}" in text and f"{rec['words_found']} of" in text
        ck = torch.load(run / "best.pt", weights_only=True, map_location="cpu")
        assert ck["meta"]["vectors"] == rec
        assert ck["run_config"]["embeddings_sha256"] == sha
        records.append(rec)
    assert records[0] == records[1]
    # evaluate reports the vectors of the run, read from its checkpoint
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert evaluate.main([str(tmp_path / "runs1" / "r" / "best.pt"), "--split", "dev",
                          "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vectors"] == records[1]


def test_config_yaml_checks_its_vectors(built, tmp_path, monkeypatch, capsys):
    """Trained again from the run's config.yaml: the same file is read; another file at the
    recorded path (its digest differs) is an error naming both digests."""
    runs = tmp_path / "runs"
    assert _train(built, monkeypatch, "--data", str(built / "built"), "--runs-dir",
                  str(runs), "--name", "r", *SMALL) == 0
    yml = runs / "r" / "config.yaml"
    assert _train(tmp_path, monkeypatch, "--config", str(yml), "--name", "again", "-q") == 0
    assert json.loads((runs / "again" / "config.json").read_text())["embeddings"] == \
        json.loads((runs / "r" / "config.json").read_text())["embeddings"]
    other = tmp_path / "other.txt"
    other.write_text("the " + " ".join(["0.5"] * 50) + "\n")
    capsys.readouterr()
    assert _train(tmp_path, monkeypatch, "--config", str(yml), "--name", "x",
                  "--embeddings", str(other), "-q") == 2
    err = capsys.readouterr().err
    assert "SHA-256" in err and str(other) in err and "--embeddings-sha256" in err


def test_missing_vectors_are_an_error_when_pre_trained_ones_are_asked_for(
        built, tmp_path, monkeypatch, capsys):
    moved = tmp_path / "moved"
    shutil.copytree(built / "built", moved)
    meta = json.loads((moved / "meta.json").read_text())
    meta["src"] = str(tmp_path / "gone")
    (moved / "meta.json").write_text(json.dumps(meta))
    args = ["--data", str(moved), "--runs-dir", str(tmp_path / "runs"), *SMALL]
    for mode in ([], ["--embeddings-mode", "tuned"], ["--embeddings-mode", "fixed"]):
        capsys.readouterr()
        assert _train(tmp_path, monkeypatch, *args, "--name", f"m{len(mode)}", *mode) == 2
        err = capsys.readouterr().err
        assert str(tmp_path / "gone" / "glove" / GLOVE) in err
        assert "--embeddings-mode random" in err and "Traceback" not in err
        assert not (tmp_path / "runs" / f"m{len(mode)}" / "best.pt").exists()
    assert _train(tmp_path, monkeypatch, *args, "--name", "nofile", "--embeddings",
                  str(tmp_path / "none.txt")) == 2
    assert str(tmp_path / "none.txt") in capsys.readouterr().err
    # random only when asked for
    assert _train(tmp_path, monkeypatch, *args, "--name", "rnd", "--embeddings-mode",
                  "random", "--emb-dim", "5") == 0
    rec = json.loads((tmp_path / "runs" / "rnd" / "config.json").read_text())["embeddings"]
    assert rec == {"mode": "random", "path": None}


def test_a_relative_source_in_meta_json_is_refused(built, tmp_path, monkeypatch, capsys):
    """Data built before sources were recorded resolved names ``raw``: which folder that is
    depends on where ``train`` runs, so its default vectors are an error, not a guess."""
    old = tmp_path / "old"
    shutil.copytree(built / "built", old)
    meta = json.loads((old / "meta.json").read_text())
    meta["src"] = "raw"
    (old / "meta.json").write_text(json.dumps(meta))
    assert _train(built, monkeypatch, "--data", str(old), "--runs-dir", str(tmp_path / "r"),
                  *SMALL) == 2
    err = capsys.readouterr().err
    assert "relative path 'raw'" in err and "--force" in err
