"""``gnn-treelstm build --dataset jsonl``: users' own data sets."""

import json
import re

import pytest

from gnn_treelstm.commands.build import main as build_main
from gnn_treelstm.datasets import build as B
from gnn_treelstm.datasets.bracketed import BracketError, parse_bracketed
from gnn_treelstm.datasets.jsonl import JsonlError, read_jsonl
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees.graph import NO_WORD

CONLLU = ("# text = dogs bark\n"
          "1\tdogs\tdog\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n"
          "2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n")
SINGLE = [
    {"id": "s1", "tokens": ["a", "good", "film"], "heads": [3, 3, 0],
     "deprels": ["det", "amod", "root"], "ptb": "(NP (DT a) (JJ good) (NN film))",
     "amr": "(f / film :ARG1-of (g / good-02))", "label": "pos"},
    {"tokens": ["bad"], "heads": [0], "deprels": ["root"], "ptb": "(JJ bad)",
     "amr": "(b / bad-07)", "label": "neg"},
    {"conllu": CONLLU, "ptb": "(S (NP (NNS dogs)) (VP (VBP bark)))",
     "amr": "(b / bark-01 :ARG0 (d / dog))", "label": "pos", "meta": {"source": "x"}},
]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_bracketed_trees_are_binarized():
    toks, par = parse_bracketed("(ROOT (S (NP (DT a) (JJ good) (NN film)) (VP (VBZ is) "
                                "(-NONE- *T*))))")
    assert toks == ["a", "good", "film", "is"]
    # (NP a good film) right-factored: (a (good film)); VP collapses to "is";
    # nodes: words 0-3, 4 = (good film), 5 = (a 4), 6 = (5 is) the root
    assert par == [5, 4, 4, 6, 5, 6, -1]
    assert parse_bracketed("(X word)") == (["word"], [-1])
    for bad, msg in [("(S (NP a)", "not closed"), ("(S a))", "unbalanced"),
                     ("(S a) (S b)", "2 trees"), ("", "empty"), ("(S (-NONE- *))", "no words")]:
        with pytest.raises(BracketError, match=msg):
            parse_bracketed(bad, where="f:1")


def test_single_sentences_with_their_own_trees(tmp_path):
    write(tmp_path / "train.jsonl", SINGLE)
    write(tmp_path / "dev.jsonl", SINGLE[:2])
    out = tmp_path / "o"
    meta = B.build("jsonl", [tmp_path / "train.jsonl", tmp_path / "dev.jsonl"], out)
    assert meta["dataset"] == "jsonl" and meta["pair"] is False
    assert meta["trees"] == ["dependency", "constituency", "chain", "amr"]
    assert meta["label_names"] == ["neg", "pos"] and meta["targets"] == ["label"]
    assert "spacy_parse" not in meta["build_seconds"]  # every row brought its parses
    vocab = D.load_vocab(out)
    dep = D.load_split(out, "train", "dependency")
    assert dep.targets["label"].tolist() == [1, 0, 1]
    g = dep.graphs[0]  # a -> film, good -> film
    assert sorted(zip(*[t.tolist() for t in g.edges()])) == [(0, 2), (1, 2)]
    rels = D.load_relations(out, "dependency").names
    assert [rels[r] for r in g.edata["rel"].tolist()] == ["det", "amod"]
    g = D.load_split(out, "train", "dependency").graphs[2]  # from the CoNLL-U block
    assert [vocab.token(w) for w in g.ndata["word"].tolist()] == ["dogs", "bark"]
    assert g.edges()[1].tolist() == [1]
    con = D.load_split(out, "train", "constituency").graphs[0]  # (a (good film))
    assert con.num_nodes() == 5 and con.ndata["word"].tolist()[3:] == [NO_WORD, NO_WORD]
    amr = D.load_split(out, "train", "amr").graphs[0]
    assert [vocab.token(w) for w in amr.ndata["word"].tolist()] == ["film", "good"]
    text = D.load_text(out, "train")
    assert text[0] == {"id": "s1", "tokens": ["a", "good", "film"], "label": 1}
    assert text[1]["id"] == "train-2"


def test_pairs_with_text_parsed_by_spacy(tmp_path):
    rows = [{"a": "A man plays .", "b": {"tokens": ["Nobody", "plays", "."]}, "score": 2.5},
            {"a": "A dog runs .", "b": "A dog sleeps .", "score": 0.4}]
    write(tmp_path / "train.jsonl", rows)
    meta = B.build("jsonl", [tmp_path / "train.jsonl", f"dev={tmp_path / 'train.jsonl'}"],
                   tmp_path / "o", trees=["dependency", "chain"])
    assert meta["pair"] and meta["targets"] == ["score"] and meta["label_names"] is None
    assert meta["score_range"] == [0, 3] and meta["splits"] == {"train": 2, "dev": 2}
    sp = D.load_split(tmp_path / "o", "dev", "dependency")
    assert sp.targets["score"].tolist() == pytest.approx([2.5, 0.4])
    assert [g.num_nodes() for g in sp.graphs_b] == [3, 4]
    assert D.load_text(tmp_path / "o", "train")[0]["a"] == ["A", "man", "plays", "."]


def test_labels_order_and_score_range_options(tmp_path):
    rows = [{"text": "x y", "label": 2, "score": 3}, {"text": "y", "label": 0, "score": 1}]
    data = read_jsonl([write(tmp_path / "train.jsonl", rows)])
    assert data.label_names == ["0", "2"] and data.score_range == [1, 3]
    assert [ex.targets for ex in data.splits["train"]] == [{"label": 1, "score": 3.0},
                                                          {"label": 0, "score": 1.0}]
    data = read_jsonl([tmp_path / "train.jsonl"], labels=["2", "1", "0"], score_range=[0, 5])
    assert [ex.targets["label"] for ex in data.splits["train"]] == [0, 2]
    with pytest.raises(JsonlError, match=r"train.jsonl:1: score 3.0 is outside --score-range"):
        read_jsonl([tmp_path / "train.jsonl"], score_range=[0, 2])
    with pytest.raises(JsonlError, match=r"train.jsonl:1: label 2 is not one of --labels"):
        read_jsonl([tmp_path / "train.jsonl"], labels=["0", "1"])


BAD = [
    ([{"text": "x", "label": "a"}, {"text": "y"}], r"train.jsonl:2: no 'label' or 'score'"),
    ([{"text": "x", "label": "a"}, {"text": "y", "score": 1}],
     r"train.jsonl:2: has \['score'\] but the first row \(.*train.jsonl:1\) has \['label'\]"),
    ([{"text": "x", "label": "a"}, "not an object"], r"train.jsonl:2: a row is a JSON object"),
    ([{"text": "x", "label": "a"}, {"a": "x", "b": "y", "label": "b"}],
     r"train.jsonl:2: a pair but the rows before are single sentences"),
    ([{"a": "x", "label": "a"}], r"train.jsonl:1: a pair needs both 'a' and 'b'"),
    ([{"a": "x", "b": {"txt": "y"}, "label": "a"}],
     r"train.jsonl:1 \(b\): unknown field\(s\) \['txt'\]"),
    ([{"tokens": ["a", "b"], "heads": [2, 1], "deprels": ["x", "y"], "label": 1}],
     r"train.jsonl:1: 0 heads are 0"),
    ([{"tokens": ["a", "b", "c"], "heads": [2, 3, 0, 1], "deprels": ["x"] * 4, "label": 1}],
     r"train.jsonl:1: 3 tokens, 4 heads and 4 deprels"),
    ([{"tokens": ["a", "b", "c"], "heads": [2, 1, 0], "deprels": ["x"] * 3, "label": 1}],
     r"train.jsonl:1: the heads contain a cycle"),
    ([{"tokens": ["a", "b"], "ptb": "(S (X a) (X c))", "label": 1}],
     r"train.jsonl:1: the PTB tree's words \['a', 'c'\] differ"),
    ([{"text": "a b", "ptb": "(S (X a) (X b)", "label": 1}], r"train.jsonl:1: ptb: 1 '\(' not"),
    ([{"text": "a", "amr": "(a / b :ARG0 (c / d)", "label": 1}],
     r"train.jsonl:1: amr:1 \(graph 1\): the graph is not closed"),
    ([{"text": "a", "amr": "()", "label": 1}], r"train.jsonl:1: amr: empty graph"),
    ([{"text": "a", "label": True}], r"train.jsonl:1: 'label' must be a class name or an integer"),
    ([{"text": "a", "label": "x"}, {"text": "b", "label": 1}], r"labels mix class names and"),
    ([{"text": "a", "label": "x"}, {"text": "b", "label": "x"}], r"1 class \(x\)"),
    ([{"text": "a", "score": float("nan")}], r"'score' must be a finite number"),
    ([{"label": 1}], r"train.jsonl:1: no sentence"),
    ([{"text": "a \ud800 b", "label": 1}], r"train.jsonl:1: '\\\\ud800' at column 13 is a lone "
     r"UTF-16 surrogate, not a character \(it cannot be written as UTF-8\); write the"),
    (['{"text": "a", "label": 1, "meta": ' + "[" * 100_000 + "]" * 100_000 + "}"],
     r"train.jsonl:1: the row nests more than 100 levels of \[ \] / \{ \} \(at column 134\); "
     r"rows are read up to 100 levels deep: flatten its 'meta'"),
    ([{"text": "a man plays", "ptb": "(S (NP (DT a) (NN man)) (VP (VBZ sings)))", "label": 1}],
     r"train.jsonl:1: the PTB tree's words differ from 'text' \('sings' is not next in 'a "
     r"man plays'\)"),
    ([{"text": "a man", "ptb": "(S (NP (DT a) (NN man)) (VP (VBZ sings)))", "label": 1}],
     r"train.jsonl:1: the PTB tree's words differ from 'text' \('sings'"),
    ([{"text": "a man sings loudly", "ptb": "(S (NP (DT a) (NN man)) (VP (VBZ sings)))",
       "label": 1}], r"differ from 'text' \(\"\(the text goes on: 'loudly'\)\""),
    ([{"text": "a", "amr": "(x0 / t" + "".join(f" :ARG0 (x{i} / t" for i in range(1, 500))
       + ")" * 500, "label": 1}],
     r"train.jsonl:1: amr:1 \(graph 1\): the graph is nested more than 200 levels deep at "
     r"column 3091; graphs are read up to 200 levels"),
]


@pytest.mark.parametrize("rows, message", BAD)
def test_bad_rows_exit_2_naming_file_and_line(tmp_path, capsys, rows, message):
    p = tmp_path / "train.jsonl"
    p.write_text("".join((json.dumps(r) if not isinstance(r, str) or r == "not an object"
                          else r) + "\n" for r in rows), encoding="utf-8")
    rc = build_main(["--dataset", "jsonl", "--src", str(p), "--out", str(tmp_path / "o"), "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and "Traceback" not in err
    assert re.search(message, err), err
    assert not (tmp_path / "o").exists()


def test_not_json_and_unnamed_split(tmp_path, capsys):
    p = tmp_path / "train.jsonl"
    p.write_text('{"text": "a", "label": 1}\n\n{"text": "b", label: 2}\n', encoding="utf-8")
    with pytest.raises(JsonlError, match=r"train.jsonl:3: not JSON \(Expecting property name"):
        read_jsonl([p])
    q = write(tmp_path / "mine.jsonl", [{"text": "a", "label": 1}])
    assert build_main(["--dataset", "jsonl", "--src", str(q), "--out", str(tmp_path / "o")]) == 2
    assert "cannot tell which split mine.jsonl is" in capsys.readouterr().err
    assert build_main(["--dataset", "sst", "--src", str(q), "--out", str(tmp_path / "o"),
                   "--labels", "a"]) == 2
    assert "--labels is for --dataset jsonl" in capsys.readouterr().err


def test_amr_trees_need_an_amr_per_sentence(tmp_path):
    rows = [{"text": "a b", "amr": "(a / a)", "label": 0}, {"text": "c", "label": 1}]
    write(tmp_path / "train.jsonl", rows)
    meta = B.build("jsonl", tmp_path / "train.jsonl", tmp_path / "o", trees=["chain"])
    assert meta["trees"] == ["chain"]
    assert read_jsonl([tmp_path / "train.jsonl"]).default_trees() == ["dependency",
                                                                     "constituency", "chain"]
    with pytest.raises(ValueError, match=r"train.jsonl:2: no AMR for this sentence"):
        B.build("jsonl", tmp_path / "train.jsonl", tmp_path / "o2", trees=["amr"])


def test_deep_trees_and_the_text_they_spell(tmp_path):
    """A right-branching PTB tree 10,000 deep is read (the reader is iterative); PTB
    escapes and quotes count as the characters they stand for when a tree's words are
    compared with the row's text; nesting up to MAX_NESTING is read."""
    from gnn_treelstm.datasets.jsonl import MAX_NESTING

    deep = "(W w)"
    for i in range(9999):
        deep = f"(X (W v{i}) {deep})"
    meta = "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1)  # the row is a level too
    p = tmp_path / "train.jsonl"
    p.write_text(json.dumps({"ptb": deep, "label": 1}) + "\n"
                 + json.dumps({"text": 'He said "hi" (twice) and/or',
                               "ptb": "(S (NP (PRP He)) (VP (VBD said) (`` ``) (UH hi) ('' '') "
                                      "(-LRB- -LRB-) (RB twice) (-RRB- -RRB-) (CC and\\/or)))",
                               "label": 0}) + "\n"
                 + '{"text": "x", "label": 0, "meta": ' + meta + "}\n", encoding="utf-8")
    data = read_jsonl([p])
    first, second, _ = (ex.sources[0] for ex in data.splits["train"])
    assert len(first.tokens) == 10_000 and len(first.cparents) == 19_999
    assert first.tokens[:2] == ["v9998", "v9997"] and first.cparents.count(-1) == 1
    assert second.tokens[2:4] == ["``", "hi"] and second.tokens[-1] == "and\\/or"
