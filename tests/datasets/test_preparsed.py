import pytest

from gnn_treelstm.datasets.preparsed import (
    PreParsedError,
    cparents_tree,
    preparsed_constituency_graph,
    preparsed_dependency_graph,
    read_preparsed,
    read_relation_set,
)
from gnn_treelstm.trees.graph import NO_WORD, validate_tree
from gnn_treelstm.trees.vocab import Relations


def _write(d, side="a", toks="A dog runs", parents="2 3 0", rels="det nsubj root",
           cparents="4 4 5 5 0"):
    d.mkdir(exist_ok=True)
    for ext, text in (("toks", toks), ("parents", parents), ("rels", rels),
                      ("cparents", cparents)):
        (d / f"{side}.{ext}").write_text(text + "\n", encoding="utf-8")


def test_read_and_graphs(tmp_path):
    _write(tmp_path)
    (s,) = read_preparsed(tmp_path, "a")
    assert s.tokens == ["A", "dog", "runs"]
    assert s.heads == [1, 2, -1] and s.cparents == [3, 3, 4, 4, -1]
    rels = Relations(["root", "det", "nsubj"])
    g = preparsed_dependency_graph(s, [5, 6, 7], rels, add_relations=False)
    validate_tree(g, num_relations=3)
    assert g.edata["rel"].tolist() == [1, 2]
    c = preparsed_constituency_graph(s, [5, 6, 7])
    validate_tree(c, max_children=2)
    assert c.ndata["word"].tolist() == [5, 6, 7, NO_WORD, NO_WORD]
    assert c.ndata["span"].tolist() == [[0, 1], [1, 2], [2, 3], [0, 2], [0, 3]]
    src = c.edges()[0].tolist()
    assert dict(zip(src, c.edata["pos"].tolist())) == {0: 0, 1: 1, 2: 1, 3: 0}


def test_children_ordered_by_span_not_index():
    # internal node 4 (1-based 5) covers word 3 and internal node 3 = (w1 w2)
    parents, positions, spans = cparents_tree([3, 3, 4, 4, -1], 3)
    assert positions[2] == 1 and positions[3] == 0
    parents, positions, spans = cparents_tree([4, 3, 3, 4, -1], 3)  # (w1 (w2 w3))
    assert spans[3] == (1, 3) and positions[0] == 0 and positions[3] == 1


@pytest.mark.parametrize("kw, msg", [
    ({"parents": "2 3"}, "3 tokens but 2 parents"),
    ({"parents": "2 0 0"}, "exactly one 0"),
    ({"cparents": "4 4 5 5"}, "exactly one 0"),
    ({"toks": ""}, "empty sentence"),
    ({"parents": "2 x 0"}, "integers"),
])
def test_malformed(tmp_path, kw, msg):
    _write(tmp_path, **kw)
    with pytest.raises(PreParsedError, match=msg) as e:
        read_preparsed(tmp_path)
    assert ":1:" in str(e.value)


def test_line_count_mismatch(tmp_path):
    _write(tmp_path)
    (tmp_path / "a.rels").write_text("det nsubj root\ndet\n", encoding="utf-8")
    with pytest.raises(PreParsedError, match="different line counts"):
        read_preparsed(tmp_path)


def test_non_tree_cparents():
    with pytest.raises(ValueError, match="word node 1 has children"):
        cparents_tree([-1, 0, 0], 3)
    with pytest.raises(ValueError, match="3 children"):
        cparents_tree([3, 3, 3, -1], 3)


def test_sample(sample_data):
    d = sample_data / "sick" / "stanford_parsed"
    rels = read_relation_set(d / "rels_set.txt")
    assert len(rels) == 37
    for side in "ab":
        sents = read_preparsed(d / "dev", side)
        assert len(sents) == 50
        for s in sents:
            ids = list(range(len(s.tokens)))
            validate_tree(preparsed_constituency_graph(s, ids), max_children=2)
            preparsed_dependency_graph(s, ids, rels, add_relations=False)
