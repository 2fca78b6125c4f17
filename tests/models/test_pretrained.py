"""``Predictor``: save a trained model as one directory, load it after the training data are
gone, and predict the records ``gnn-treelstm predict --json --nodes`` prints."""

from __future__ import annotations

import io
import json
import shutil

import pytest

from gnn_treelstm import Predictor
from gnn_treelstm.commands import predict as predict_cmd
from gnn_treelstm.commands import train
from gnn_treelstm.models.checkpoint import FASTEST, load_model
from gnn_treelstm.training.data import SAMPLE_SRC

TINY = ["--epochs", "1", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
        "-q"]
TEXTS = ["A gorgeous , witty film .", "It is dull and far too long ."]
PAIRS = ["A man is playing a guitar . ||| Nobody is playing a guitar ."]


@pytest.fixture(scope="module")
def nlp():
    from gnn_treelstm.datasets.dependency import load_pipeline

    try:
        return load_pipeline(None)
    except Exception as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"no spaCy pipeline: {e}")


def _cli_records(run, texts, monkeypatch, capsys, *extra):
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(texts) + "\n"))
    capsys.readouterr()
    assert predict_cmd.main([str(run), "--json", "-q", *extra]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("task,args,texts,nodes", [
    ("sst-5", [], TEXTS, True),
    ("sick-r", ["--model", "childsum", "--tree", "dependency"], PAIRS, False),
])
def test_saved_model_predicts_what_the_cli_prints_after_the_data_is_deleted(
        task, args, texts, nodes, nlp, tmp_path, monkeypatch, capsys):
    from gnn_treelstm.datasets.build import build

    dataset = task.split("-")[0]
    data = tmp_path / "data" / dataset
    build(dataset, SAMPLE_SRC, data)
    runs = tmp_path / "runs"
    assert train.main(["--task", task, "--data", str(data), "--runs-dir", str(runs),
                       "--name", "m", *args, *TINY]) == 0
    want = _cli_records(runs / "m", texts, monkeypatch, capsys,
                        *(["--nodes"] if nodes else []))
    assert len(want) == len(texts) and all(("nodes" in r) == nodes for r in want)

    saved = Predictor.from_pretrained(runs / "m").save_pretrained(tmp_path / "saved")
    assert sorted(p.name for p in saved.iterdir()) == ["config.json", "model.pt"]
    shutil.rmtree(tmp_path / "data")
    shutil.rmtree(runs)

    predictor = Predictor.from_pretrained(saved, nlp=nlp, engine=FASTEST)  # as the CLI
    assert predictor.predict(texts, nodes=nodes) == want
    config = json.loads((saved / "config.json").read_text())
    assert config["task"] == task and config["tree"] == predictor.tree
    assert config["trees_from"] == predictor.trees_from
    # the CLI reads the saved directory too
    assert _cli_records(saved, texts, monkeypatch, capsys,
                        *(["--nodes"] if nodes else [])) == want


def test_inputs_accept_texts_pairs_and_refuse_the_wrong_kind(nlp, tiny_sst, tmp_path):
    runs = tmp_path / "runs"
    assert train.main(["--task", "sst-5", "--data", str(tiny_sst), "--runs-dir", str(runs),
                       "--name", "m", *TINY]) == 0
    predictor = Predictor(load_model(runs / "m"), nlp=nlp)
    assert [x.a for x in predictor.inputs("w1 w2 .")] == ["w1 w2 ."]
    assert len(predictor.predict(["w1 w2 .", "w3 ."])) == 2
    with pytest.raises(ValueError, match="input 1: a tuple"):
        predictor.inputs([("a", "b")])
    with pytest.raises(ValueError, match="pair separator"):
        predictor.inputs(["a ||| b"])
    with pytest.raises(TypeError, match="input 2: expected a string"):
        predictor.inputs(["a", 3])
    with pytest.raises(ValueError, match="is a file"):
        (tmp_path / "f").write_text("")
        predictor.save_pretrained(tmp_path / "f")
    assert "sst-5" in repr(predictor)


def test_load_model_reads_a_run_directory(tiny_sst, tmp_path):
    runs = tmp_path / "runs"
    assert train.main(["--task", "sst-5", "--data", str(tiny_sst), "--runs-dir", str(runs),
                       "--name", "m", *TINY]) == 0
    assert load_model(runs / "m").path == runs / "m" / "best.pt"
