"""``gnn-treelstm predict``: inputs, text and JSON-lines output, per-node records."""

import io
import json

import pytest

from gnn_treelstm.commands import predict as P
from gnn_treelstm.commands import train
from gnn_treelstm.models.predictor import Input, read_lines
from tests.tiny_data import build_tiny

TINY = ["--epochs", "1", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
        "-q"]
SST5 = ["very negative", "negative", "neutral", "positive", "very positive"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from data_prep.dependency import load_pipeline

    try:
        load_pipeline(None)
    except Exception as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"no spaCy pipeline: {e}")
    root = tmp_path_factory.mktemp("predict")
    for ds in ("sst", "sick"):
        build_tiny(root / "data", ds)
    common = ["--data", str(root / "data"), "--runs-dir", str(root / "runs"), *TINY]
    assert train.main(["--task", "sst-5", "--name", "sst", *common]) == 0
    assert train.main(["--task", "sick-r", "--model", "childsum", "--tree", "dependency",
                       "--name", "sickr", *common]) == 0
    return root / "runs"


def test_read_lines_one_input_per_line_with_line_numbers():
    got = read_lines(["a fine film", "", "  a dull one  "], pair=False, source="f.txt")
    assert got == [Input(1, "a fine film"), Input(3, "a dull one")]
    assert read_lines(["A ||| B", "C\tD"], pair=True) == [Input(1, "A", "B"),
                                                            Input(2, "C", "D")]
    with pytest.raises(ValueError, match=r"f\.txt:2: this model reads sentence pairs"):
        read_lines(["A ||| B", "no pair"], pair=True, source="f.txt")
    with pytest.raises(ValueError, match=r"f\.txt:1: one side of the pair is empty"):
        read_lines(["A ||| "], pair=True, source="f.txt")


def test_json_nodes_schema_from_stdin(runs, monkeypatch, capsys):
    text = "A w1 and w2 film .\nw3 w4 .\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert P.main([str(runs / "sst"), "--json", "--nodes", "-q"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2  # one object per input line, never joined
    for n, line in enumerate(lines, 1):
        rec = json.loads(line)
        assert rec["line"] == n and rec["label"] in SST5
        assert list(rec["probabilities"]) == SST5
        assert sum(rec["probabilities"].values()) == pytest.approx(1, abs=1e-4)
        tokens = rec["tokens"]
        nodes = rec["nodes"]
        # binarized constituency tree of n words: 2n - 1 nodes, one root covering them all
        assert len(nodes) == 2 * len(tokens) - 1
        roots = [x for x in nodes if x["parent"] is None]
        assert len(roots) == 1 and roots[0]["span"] == [0, len(tokens)]
        assert roots[0]["label"] == rec["label"]  # the root is the sentence's prediction
        for x in nodes:
            assert set(x) == {"id", "parent", "span", "words", "label", "probabilities"}
            lo, hi = x["span"]
            assert x["words"] == " ".join(tokens[lo:hi]) and x["label"] in SST5
            if x["parent"] is not None:
                plo, phi = nodes[x["parent"]]["span"]
                assert plo <= lo < hi <= phi


def test_text_output_arguments_and_pairs(runs, tmp_path, capsys):
    assert P.main([str(runs / "sst" / "best.pt"), "w1 film .", "w2 film ."]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert [o.split("\t")[2] for o in out] == ["w1 film .", "w2 film ."]
    assert all(o.split("\t")[0] in SST5 for o in out)
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("A man w3 .\tA man w4 .\nTwo dogs run ||| No dog runs\n")
    assert P.main([str(runs / "sickr"), "--file", str(pairs), "--json"]) == 0
    recs = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert [r["text_b"] for r in recs] == ["A man w4 .", "No dog runs"]
    for r in recs:
        assert 1 <= r["score"] <= 5 and list(r["probabilities"]) == list("12345")


def test_refusals_exit_2_with_a_message(runs, tmp_path, capsys):
    assert P.main([str(runs / "sickr"), "--json", "--nodes", "A ||| B"]) == 2
    assert "predicts one label per pair" in capsys.readouterr().err
    assert P.main([str(runs / "sst"), "--nodes", "w1 ."]) == 2
    assert "--nodes needs --json" in capsys.readouterr().err
    assert P.main([str(runs / "sst"), "--file", str(tmp_path / "nope.txt")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "blank.txt").write_text("\n \n")
    assert P.main([str(runs / "sst"), "--file", str(tmp_path / "blank.txt")]) == 2
    assert "only blank lines" in capsys.readouterr().err


def test_warns_about_unknown_words_and_joined_sentences(runs, caplog, capsys):
    assert P.main([str(runs / "sst"), "zzqx qqzx", "w1 film . w2 film ."]) == 0
    text = caplog.text
    assert "line 1: every word is unknown" in text
    assert "line 2 looks like 2 sentences" in text
