import gzip
import json

import pytest

from gnn_treelstm.datasets.readers import (
    SICK_LABELS,
    SNLI_LABELS,
    TREC_COARSE,
    DataFormatError,
    read_sick_full,
    read_sick_semeval,
    read_snli_jsonl,
    read_snli_text,
    read_trec,
    trec_dev_split,
)

HEADER = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"


def test_sick_semeval(tmp_path):
    p = tmp_path / "s.txt"
    p.write_text(HEADER + "7\tA man runs\tA man is running\t4.5\tENTAILMENT\n", "utf-8")
    (x,) = read_sick_semeval(p)
    assert (x.pair_id, x.a, x.score, SICK_LABELS[x.label]) == ("7", "A man runs", 4.5,
                                                                "ENTAILMENT")


@pytest.mark.parametrize("row, msg", [
    ("7\tA man runs\tA man is running\t4.5\n", "missing field"),
    ("7\tA man runs\tA man is running\t7.0\tNEUTRAL\n", "outside"),
    ("7\tA man runs\tA man is running\tx\tNEUTRAL\n", "not a number"),
    ("7\tA man runs\tA man is running\t3\tMAYBE\n", "label"),
    ("7\t\tA man is running\t3\tNEUTRAL\n", "empty field"),
])
def test_sick_bad_rows(tmp_path, row, msg):
    p = tmp_path / "s.txt"
    p.write_text(HEADER + "1\ta\tb\t3\tNEUTRAL\n" + row, "utf-8")
    with pytest.raises(DataFormatError, match=msg) as e:
        read_sick_semeval(p)
    assert "s.txt:3" in str(e.value)


def test_sick_full_crlf_gzip(tmp_path):
    cols = ["pair_ID", "sentence_A", "sentence_B", "entailment_label", "relatedness_score",
            "entailment_AB", "SemEval_set"]
    rows = ["\t".join(cols), "1\tA b\tC d\tCONTRADICTION\t1.5\tx\tTRIAL"]
    p = tmp_path / "SICK.txt.gz"
    with gzip.open(p, "wb") as fh:
        fh.write("\r\n".join(rows).encode())
    (x,) = read_sick_full(p)
    assert x.b == "C d" and x.score == 1.5 and SICK_LABELS[x.label] == "CONTRADICTION"
    assert x.semeval_set == "TRIAL"


def test_trec_latin1_and_errors(tmp_path):
    p = tmp_path / "t.label"
    p.write_bytes(b"LOC:city Which sister\xf0city ?\nDESC:def What is it ?\n")
    qs = read_trec(p)
    assert qs[0].tokens == ["Which", "sister\u00f0city", "?"]
    assert TREC_COARSE[qs[1].coarse] == "DESC" and qs[1].fine == "DESC:def"
    p.write_bytes(b"LOC:city Where ?\nFOO:bar What ?\n")
    with pytest.raises(DataFormatError, match="t.label:2"):
        read_trec(p)


def test_trec_dev_split_fixed():
    tr, dev = trec_dev_split(5452)
    assert len(tr) == 4952 and len(dev) == 500 and not set(tr) & set(dev)
    assert trec_dev_split(5452) == (tr, dev)
    assert len(trec_dev_split(250)[1]) == 25


def test_snli_text_plain_and_gzip(tmp_path):
    (tmp_path / "s1.dev").write_text("A dog runs . \nA cat .\n")
    with gzip.open(tmp_path / "s2.dev.gz", "wt") as fh:
        fh.write("An animal moves .\nNo cat .\n")
    (tmp_path / "labels.dev").write_text("entailment\ncontradiction\n")
    xs = read_snli_text(tmp_path, "dev")
    assert xs[0].a == ["A", "dog", "runs", "."]
    assert [SNLI_LABELS[x.label] for x in xs] == ["entailment", "contradiction"]
    (tmp_path / "labels.dev").write_text("entailment\n")
    with pytest.raises(DataFormatError, match="differ in length"):
        read_snli_text(tmp_path, "dev")


def test_snli_jsonl(tmp_path):
    rows = [{"gold_label": "neutral", "sentence1": "x", "sentence2": "y",
             "sentence1_binary_parse": "( A ( dog runs ) )",
             "sentence2_binary_parse": "( It ( is fast ) )"},
            {"gold_label": "-", "sentence1": "a", "sentence2": "b"},
            {"gold_label": "entailment", "sentence1": "A b"}]
    p = tmp_path / "snli_1.0_dev.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n")
    (x,) = read_snli_jsonl(p)
    assert x.a == ["A", "dog", "runs"] and x.b == ["It", "is", "fast"]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DataFormatError, match=r"jsonl:3: missing field 'sentence2'"):
        read_snli_jsonl(p)


def test_sample_files(sample_data):
    s = sample_data / "sick"
    assert len(read_sick_semeval(s / "semeval2014" / "SICK_train.txt")) == 150
    assert len(read_sick_full(s / "full" / "SICK.txt.gz")) > 0
    assert len(read_trec(sample_data / "trec" / "train_5500.label")) == 250
    assert len(read_snli_text(sample_data / "snli", "dev")) == 10


def test_full_counts(shared_data):
    s = shared_data / "sick"
    assert [len(read_sick_semeval(s / "semeval2014" / f)) for f in
            ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt")] == [4500, 500, 4927]
    assert len(read_sick_full(s / "full" / "SICK.txt.gz")) == 9840
    assert len(read_trec(shared_data / "trec" / "train_5500.label")) == 5452
    assert len(read_trec(shared_data / "trec" / "TREC_10.label")) == 500
