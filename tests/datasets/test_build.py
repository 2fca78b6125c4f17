import json
import shutil

import pytest
import torch

from gnn_treelstm.commands.build import main as build_main
from gnn_treelstm.datasets import build as B
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees.graph import IGNORE, NO_WORD, validate_tree
from gnn_treelstm.trees.vocab import Relations, Vocab


@pytest.fixture(scope="module")
def sst_built(sample_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("sst")
    meta = B.build("sst", sample_data, out)
    return out, meta


def test_sst_layout_and_meta(sst_built):
    out, meta = sst_built
    assert meta["splits"] == {"train": 200, "dev": 100, "test": 100}
    assert meta["trees"] == ["constituency", "dependency", "chain"]
    assert meta["sample"] is True and meta["pair"] is False
    assert meta["num_relations"]["constituency"] == 2
    assert meta["sst2_splits"]["dev"] == sum(
        json.loads(x)["label"] != 2 for x in (out / "text" / "dev.jsonl").open())
    assert json.loads((out / "meta.json").read_text()) == meta
    vocab = Vocab.load(out / "vocab.json")
    assert "8\u00a01/2" in vocab  # leaves split on ASCII space only, \/ unescaped
    assert Relations.load(out / "relations" / "constituency.json").names == ["left", "right"]
    assert not list(out.rglob(".*tmp*"))


def test_sst_graphs(sst_built):
    out, meta = sst_built
    vocab = Vocab.load(out / "vocab.json")
    text = [json.loads(x) for x in (out / "text" / "dev.jsonl").open()]
    for tree in meta["trees"]:
        sp = D.load_split(out, "dev", tree)
        graphs, labels = list(sp.graphs), sp.targets
        assert len(graphs) == 100
        assert labels["label"].tolist() == [t["label"] for t in text]
        for g, t, y in zip(graphs[:20], text, labels["label"].tolist()):
            validate_tree(g, num_relations=meta["num_relations"][tree])
            root = int(g.ndata["root"].nonzero())
            assert int(g.ndata["label"][root]) == y  # sentence label at the root
            words = g.ndata["word"][g.ndata["word"] != NO_WORD].tolist()
            assert sorted(words) == sorted(vocab.lookup(t["tokens"]))
            assert g.ndata["span"][root].tolist() == [0, len(t["tokens"])]
    g = D.load_split(out, "dev", "constituency").graphs[0]
    assert bool((g.ndata["label"] >= 0).all())  # gold labels on every node
    deps = list(D.load_split(out, "dev", "dependency").graphs)
    lab = torch.cat([g.ndata["label"] for g in deps])
    assert 0 < int((lab != IGNORE).sum()) < len(lab)  # only span-matching nodes


def test_second_run_skips_then_force(sst_built, sample_data, caplog):
    out, _ = sst_built
    stamp = {p: p.stat().st_mtime_ns for p in out.rglob("header.json")}
    caplog.set_level("INFO")
    B.build("sst", sample_data, out, trees=["chain"])
    assert {p: p.stat().st_mtime_ns for p in out.rglob("header.json")} == stamp
    assert "already built" in caplog.text
    B.build("sst", sample_data, out, trees=["chain"], force=True)
    header = out / "chain" / "dev.packed" / "header.json"
    assert header.stat().st_mtime_ns != stamp[header]


def test_check_counts(sample_data, tmp_path, caplog):
    B.build("sst", sample_data, tmp_path / "a", trees=["chain"], check=True)  # sample: skip
    assert "skipping --check-counts" in caplog.text
    raw = tmp_path / "raw"
    shutil.copytree(sample_data / "sst", raw / "sst")  # not marked as the sample
    with pytest.raises(B.CountMismatchError, match="train: expected 8544, got 200"):
        B.build("sst", raw, tmp_path / "b", trees=["chain"], check=True)
    assert not (tmp_path / "b" / "chain").exists()


def test_sick_pairs(sample_data, tmp_path):
    meta = B.build("sick", sample_data, tmp_path, trees=["dependency", "constituency"])
    assert meta["pair"] and meta["splits"] == {"train": 150, "dev": 50, "test": 100}
    assert meta["num_relations"]["dependency"] == 37  # Stanford rels_set
    sp = D.load_split(tmp_path, "dev", "constituency")
    a, b, labels = sp.graphs, sp.graphs_b, sp.targets
    assert len(a) == len(b) == 50
    assert not (tmp_path / "constituency" / "dev.b.packed" / "header.json").read_text().count(
        "target.")
    assert labels["score"].dtype == torch.float32 and labels["label"].dtype == torch.int64
    text = [json.loads(x) for x in (tmp_path / "text" / "dev.jsonl").open()]
    assert labels["score"].tolist() == pytest.approx([t["score"] for t in text])
    assert all(g.num_nodes() == 2 * len(t["b"]) - 1 for g, t in zip(b, text))
    meta = B.build("sick", sample_data, tmp_path, trees=["constituency-spacy"])
    assert "dependency" in meta["trees"] and "constituency-spacy" in meta["trees"]


def test_trec_and_snli(sample_data, tmp_path):
    meta = B.build("trec", sample_data, tmp_path / "trec")
    assert meta["splits"] == {"train": 225, "dev": 25, "test": 60}
    g = D.load_split(tmp_path / "trec", "dev", "constituency").graphs[0]
    validate_tree(g, max_children=2)
    meta = B.build("snli", sample_data, tmp_path / "snli", trees=["dependency"])
    assert meta["splits"] == {"dev": 10, "test": 10} and meta["pair"]


def test_cli_errors(sample_data, tmp_path, capsys):
    assert build_main(["--dataset", "trec", "--src", str(tmp_path), "--out", str(tmp_path / "o"),
                   "-q"]) == 2
    assert "trec" in capsys.readouterr().err
    rc = build_main(["--dataset", "sst", "--src", str(sample_data), "--out", str(tmp_path / "o"),
                 "--trees", "nope", "-q"])
    assert rc == 2 and "no tree kind" in capsys.readouterr().err


def test_full_counts(shared_data):
    for ds in ("sst", "sick", "trec"):
        B.check_counts(ds, B.LOADERS[ds](shared_data))


def test_the_command_draws_no_bar_where_stderr_is_no_terminal(sample_data, tmp_path, capsys):
    assert build_main(["--dataset", "sst", "--src", str(sample_data), "--out",
                   str(tmp_path / "sst"), "--trees", "chain"]) == 0
    err = capsys.readouterr().err
    assert "shard/s" not in err and "\r" not in err, err


def test_the_log_counts_one_relation_and_the_docstring_names_the_files_written(
        sample_data, tmp_path, caplog):
    import re

    caplog.set_level("INFO", logger="gnn_treelstm.datasets.build")
    B.build("sst", sample_data, tmp_path, trees=["chain"])
    assert re.search(r"chain: built in [\d.]+s \(1 relation\)", caplog.text), caplog.text
    assert "1 relations" not in caplog.text
    assert ".bin" not in B.__doc__
    for split in ("train", "dev", "test"):
        assert (tmp_path / "chain" / f"{split}.packed").is_dir()
    assert "<tree>/<split>.packed/" in B.__doc__ and "<split>.a.packed/" in B.__doc__
