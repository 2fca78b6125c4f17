"""``Predictor.trees`` / ``Predictor.draw``: the tree a model predicted on, from raw text,
as graphs and as a picture."""

from __future__ import annotations

import pytest

from gnn_treelstm import Predictor
from gnn_treelstm.commands import train


@pytest.fixture(scope="module")
def predictor(tiny_sst, tmp_path_factory):
    runs = tmp_path_factory.mktemp("draw") / "runs"
    assert train.main(["--task", "sst-5", "--tree", "dependency", "--model", "childsum",
                       "--data", str(tiny_sst), "--runs-dir", str(runs), "--name", "d",
                       "--epochs", "1", "--embeddings-mode", "random", "--emb-dim", "6",
                       "--hidden", "5", "-q"]) == 0
    return Predictor.from_pretrained(runs / "d")


def test_trees_are_what_predict_reads(predictor):
    rec, graphs = predictor.trees("a witty and moving film")
    assert rec == predictor.predict("a witty and moving film")[0]
    assert len(graphs) == 1 and graphs[0].num_nodes() == len(rec["tokens"])


def test_draw_writes_the_predicted_tree(predictor, tmp_path):
    png = predictor.draw("a witty and moving film", tmp_path / "tree.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = predictor.draw("a witty and moving film", tmp_path / "tree.svg")
    text = svg.read_text()
    label = predictor.predict("a witty and moving film")[0]["label"]
    assert "witty" in text and f"[{label}]" in text
    with pytest.raises(ValueError, match="side=1: this input has 1 sentence"):
        predictor.draw("a witty film", tmp_path / "b.png", side=1)


def test_draw_shows_every_nodes_predicted_label(predictor, tmp_path):
    import re

    text = "a witty and moving film"
    rec = predictor.predict(text, nodes=True)[0]
    svg = predictor.draw(text, tmp_path / "nodes.svg").read_text()
    names = list(rec["probabilities"])
    shown = set(re.findall(r"<!-- (\d) (.*?) -->", svg))  # the legend: "id name"
    want = {(str(names.index(n["label"])), n["label"]) for n in rec["nodes"]}
    assert shown == want and len(rec["nodes"]) == len(rec["tokens"])
