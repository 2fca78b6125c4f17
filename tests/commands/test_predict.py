"""``gnn-treelstm predict``: inputs, text and JSON-lines output, per-node records."""

import io
import json

import pytest

from gnn_treelstm.commands import predict as P
from gnn_treelstm.commands import train
from gnn_treelstm.models.inputs import Input, read_lines
from tests.tiny_data import build_tiny

TINY = ["--epochs", "1", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
        "-q"]
SST5 = ["very negative", "negative", "neutral", "positive", "very positive"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from gnn_treelstm.datasets.dependency import load_pipeline

    try:
        load_pipeline(None)
    except Exception as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"no spaCy pipeline: {e}")
    root = tmp_path_factory.mktemp("predict")
    for ds in ("sst", "sick"):
        build_tiny(root / "data", ds)
    common = ["--data", str(root / "data"), "--runs-dir", str(root / "runs"), *TINY]
    # the reference engine, so that predict's choice of the level engine shows
    assert train.main(["--task", "sst-5", "--name", "sst", "--engine", "dgl", *common]) == 0
    assert train.main(["--task", "sick-r", "--model", "childsum", "--tree", "dependency",
                       "--name", "sickr", "--engine", "dgl", *common]) == 0
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


def _fallback_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if "no counterpart in the model's relations" in r.getMessage()]


def test_spacy_labels_translated_to_stanford_and_fallbacks_warned_once(runs, caplog):
    """A SICK model on Stanford trees: spaCy's labels go through the map; a label the model
    does not know falls back (here relation 0: the tiny relation set has no 'dep'), counted,
    and named in one warning per new set of labels, not one per call."""
    import logging

    from gnn_treelstm.datasets.dependency import DepParse
    from gnn_treelstm.models.checkpoint import load_model
    from gnn_treelstm.models.predictor import Predictor

    ck = load_model(runs / "sickr")  # relations: nsubj, dobj, amod, det, neg
    predictor = Predictor(ck)
    parse = DepParse(["no", "w1", "w2", "see", "w3"], [2, 2, 3, -1, 3],
                     ["det", "compound", "nsubj", "ROOT", "dobj"])
    caplog.set_level(logging.WARNING)
    (g,) = predictor.graphs([parse])
    names = [ck.relations[r] for r in g.edata["rel"].tolist()]
    child = g.edges()[0].tolist()
    got = dict(zip(child, names))
    # det on "no" -> Stanford neg; compound -> nn (unknown to this model) -> relation 0
    assert got == {0: "neg", 1: "nsubj", 2: "nsubj", 4: "dobj"}
    assert predictor.relation_map.unmapped == {"compound": 1}
    (msg,) = _fallback_warnings(caplog)
    assert "mapped to 'nsubj' (relation 0: the model has no 'dep')" in msg
    assert "compound \u00d71 (Stanford nn)" in msg
    predictor.graphs([parse, parse])  # the same labels again: counted, not warned again
    assert predictor.relation_map.unmapped == {"compound": 3}
    assert len(_fallback_warnings(caplog)) == 1
    meta = DepParse(["w1", "w2"], [1, -1], ["meta", "ROOT"])  # no Stanford counterpart
    predictor.graphs([meta])
    assert len(_fallback_warnings(caplog)) == 2
    assert "compound \u00d73 (Stanford nn), meta \u00d71" in _fallback_warnings(caplog)[-1]


def test_predict_warns_about_fallback_labels_once_per_run(runs, tmp_path, caplog, capsys):
    """predict over several batches: one warning at the end with the run's counts."""
    import logging

    from gnn_treelstm.models.predictor import Predictor

    caplog.set_level(logging.WARNING)
    lines = ["The young man is playing the electric guitar ||| No man is playing a guitar",
             "A brown dog is running in the tall grass ||| The dog is not running"] * 3
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("\n".join(lines) + "\n")
    assert P.main([str(runs / "sickr"), "--file", str(pairs), "--json",
                   "--batch-size", "2"]) == 0
    recs = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert len(recs) == 6
    warned = _fallback_warnings(caplog)
    assert len(warned) == 1  # three batches, one warning
    predictor = Predictor.from_pretrained(runs / "sickr")
    caplog.clear()
    first = predictor.predict(lines, batch_size=2)
    counts = predictor.unmapped_relations
    assert counts and all(n % 3 == 0 for n in counts.values())  # every line thrice
    assert len(_fallback_warnings(caplog)) == 1
    assert first[:2] == predictor.predict(lines[:2])  # same records; nothing new to report
    assert len(_fallback_warnings(caplog)) == 1
    assert predictor.unmapped_relations == {k: n + n // 3 for k, n in counts.items()}
    assert [{k: r[k] for k in ("line", "text", "score")} for r in recs] == \
        [{k: r[k] for k in ("line", "text", "score")} for r in first]


def test_relation_map_translates_only_for_stanford_relations():
    from gnn_treelstm.datasets.text import RelationMap

    sick = RelationMap(["dep", "nn", "neg", "nsubj"], stanford=True)
    assert [sick.name("compound", "rock"), sick.name("det", "no"), sick.name("attr", "man"),
            sick.name("quantmod", "about"), sick.name("meta", "x")] == \
        ["nn", "neg", "nsubj", "dep", "dep"]
    assert sick.unmapped == {"quantmod": 1, "meta": 1}
    assert sick.summary() == ("spaCy labels with no counterpart in the model's relations, "
                              "mapped to 'dep': meta \u00d71, quantmod \u00d71")
    spacy = RelationMap(["compound", "dep"], stanford=False)  # trained on spaCy's own trees
    assert [spacy.name("compound", "rock"), spacy.name("obl", "x")] == ["compound", "dep"]
    assert spacy.summary() == "spaCy labels unseen in training, mapped to 'dep': obl \u00d71"
    assert RelationMap([], stanford=True).name("compound") == "compound"  # grows instead


def test_a_line_break_inside_an_argument_is_refused(runs, capsys):
    assert P.main([str(runs / "sst"), "w1 film .", "w2 film .\nw3 film ."]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert ("error: argument 2 ('w2 film .\\nw3 film .'...) holds a line break ('\\n' at "
            "character 10); each argument is one sentence: give the lines as separate "
            "arguments, or put them in a file for --file") in err
    assert P.main([str(runs / "sst"), "w1 film .\u2028w2"]) == 2  # any line break
    assert "holds a line break ('\\u2028'" in capsys.readouterr().err


def test_a_sentence_longer_than_max_chars_is_refused_naming_its_line(runs, tmp_path, capsys):
    f = tmp_path / "long.txt"
    f.write_text("w1 film .\n" + "w2 " * 4000 + "\n")
    assert P.main([str(runs / "sst"), "--file", str(f)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert (f"error: {f}:2: the sentence is 11,999 characters long; the limit is 10,000 "
            "(--max-chars): split it into sentences, one per line, or raise --max-chars") in err
    assert P.main([str(runs / "sst"), "--file", str(f), "--max-chars", "12000", "-q"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_predict_and_serve_run_the_level_engine_unless_asked(runs, monkeypatch, capsys):
    """The tiny runs trained on the dgl engine; predict runs them on the level engine (the
    same math) unless --engine says otherwise, and serve's default is the same."""
    from gnn_treelstm.commands import serve
    from gnn_treelstm.models import checkpoint as C
    from gnn_treelstm.models.predictor import Predictor

    engines, real = [], Predictor.from_pretrained.__func__

    def spy(cls, path, **kw):
        predictor = real(cls, path, **kw)
        engines.append(predictor.checkpoint.model.cell.engine)
        return predictor

    monkeypatch.setattr(Predictor, "from_pretrained", classmethod(spy))
    got = {}
    for flags in ([], ["--engine", "dgl"]):
        assert P.main([str(runs / "sst"), "w1 and w2 film .", "--json", *flags]) == 0
        got[tuple(flags)] = json.loads(capsys.readouterr().out)["probabilities"]
    assert C.load_model(runs / "sst").model.cell.engine == "dgl"  # as trained
    assert engines == ["level", "dgl"] and C.FASTEST_ENGINE == "level"
    assert got[()] == pytest.approx(got[("--engine", "dgl")], abs=1e-5)  # the same math
    assert serve.build_parser().parse_args(["r"]).engine == C.FASTEST
    assert serve.build_parser().parse_args(["r", "--engine", "dgl"]).engine == "dgl"


def test_the_fastest_engine_falls_back_to_the_checkpoints_where_the_cell_refuses_it(
        runs, monkeypatch, caplog):
    from gnn_treelstm.models import checkpoint as C

    real = C.build_cell

    def level_refused(name, x, h, *, engine, **kw):
        if engine == "level":
            raise ValueError("this option has no level kernel")
        return real(name, x, h, engine=engine, **kw)

    monkeypatch.setattr(C, "build_cell", level_refused)
    with caplog.at_level("INFO", logger="gnn_treelstm.models.checkpoint"):
        ck = C.load_model(runs / "sst", engine=C.FASTEST)
    assert ck.model.cell.engine == "dgl"
    assert "does not run on the level engine (this option has no level kernel); using the " \
        "checkpoint's dgl engine" in caplog.text


class _Stdin:
    """Standard input that never ends by itself: ``lines`` lines, then end of input; it
    notes how many output lines were written when each batch after the first was asked
    for."""

    def __init__(self, capsys, lines: int, batch: int):
        self.capsys, self.lines, self.batch = capsys, lines, batch
        self.read, self.out, self.seen = 0, [], []

    def isatty(self) -> bool:
        return False

    def readline(self, limit: int = -1) -> str:
        if self.read and self.read % self.batch == 0:
            self.out += self.capsys.readouterr().out.splitlines()
            self.seen.append((self.read, len(self.out)))
        if self.read == self.lines:
            return ""
        self.read += 1
        return "w1 film .\n"


def test_predict_streams_stdin_in_batches(runs, monkeypatch, capsys):
    """A batch is written before the next is read: bounded memory, output as it goes."""
    feed = _Stdin(capsys, lines=10, batch=4)
    monkeypatch.setattr("sys.stdin", feed)
    assert P.main([str(runs / "sst"), "--json", "--batch-size", "4", "-q"]) == 0
    out = feed.out + capsys.readouterr().out.splitlines()
    assert feed.seen == [(4, 4), (8, 8)]  # never more than a batch ahead
    assert [json.loads(x)["line"] for x in out] == list(range(1, 11))


def test_a_stdin_line_longer_than_the_limit_is_refused_as_it_is_read(runs, monkeypatch,
                                                                     capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("w1 film .\n" + "w2 " * 5000 + "\n"))
    assert P.main([str(runs / "sst"), "--max-chars", "100", "-q"]) == 2
    err = capsys.readouterr().err
    assert "stdin:2: the line is longer than 208 characters" in err
