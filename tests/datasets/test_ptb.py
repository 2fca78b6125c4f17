import pytest

from gnn_treelstm.commands.build import main as build_main
from gnn_treelstm.datasets.ptb import PTBError, parse_ptb, read_ptb_file, tree_to_graph
from gnn_treelstm.trees.graph import NO_WORD, validate_tree


def test_parse_small_tree_layout():
    t = parse_ptb("(3 (2 It) (4 (2 's) (3 good)))")
    assert t.tokens == ["It", "'s", "good"]
    # words first, internal nodes in post-order, root last
    assert t.parents == [4, 3, 3, 4, -1]
    assert t.labels == [2, 2, 3, 4, 3]
    assert t.spans == [(0, 1), (1, 2), (2, 3), (1, 3), (0, 3)]
    assert t.positions == [0, 0, 1, 1, 0]
    assert t.label == 3
    assert t.span_labels()[(1, 3)] == 4


def test_graph_fields():
    t = parse_ptb("(1 (2 a) (0 (2 b) (1 c)))")
    g = tree_to_graph(t, {"a": 5, "b": 6, "c": 7}.__getitem__)
    validate_tree(g, max_children=2)
    assert g.ndata["word"].tolist() == [5, 6, 7, NO_WORD, NO_WORD]
    assert g.ndata["leaf"].tolist() == [True, True, True, False, False]
    assert g.ndata["root"].tolist() == [False] * 4 + [True]
    assert g.ndata["label"].tolist() == [2, 2, 1, 0, 1]
    src, dst = (x.tolist() for x in g.edges())
    pos = dict(zip(src, g.edata["pos"].tolist()))
    assert dict(zip(src, dst)) == {0: 4, 1: 3, 2: 3, 3: 4}
    assert pos == {0: 0, 1: 0, 2: 1, 3: 1}
    assert g.edata["rel"].tolist() == g.edata["pos"].tolist()


def test_single_word_and_unescape_and_nbsp():
    t = parse_ptb("(2 a\\/b)")
    assert t.tokens == ["a/b"] and t.parents == [-1]
    t = parse_ptb("(2 (2 2\u00a01\\/2) (2 hours))")
    assert t.tokens == ["2\u00a01/2", "hours"]  # split on ASCII space only


@pytest.mark.parametrize("text, msg", [
    ("(3 (2 a) (2 b)", "unbalanced"),
    ("(3 (2 a) (2 b)))", "unbalanced"),
    ("(7 (2 a) (2 b))", "outside 0-4"),
    ("(x (2 a) (2 b))", "not an integer"),
    ("(3 (2 a) (2 b) (2 c))", "3 children"),
    ("", "empty"),
    ("(3 )", "no children"),
])
def test_malformed(text, msg):
    with pytest.raises(PTBError, match=msg) as e:
        parse_ptb(text, source="f.txt", lineno=7)
    assert "f.txt:7" in str(e.value)


def test_non_binary_allowed_when_not_required():
    t = parse_ptb("(3 (2 a) (2 b) (2 c))", binary=False)
    assert t.parents == [3, 3, 3, -1]


def test_read_file_names_line(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("(2 (2 a) (2 b))\n(2 (9 a) (2 b))\n", encoding="utf-8")
    with pytest.raises(PTBError, match=r"t.txt:2: label 9"):
        read_ptb_file(p)


def test_sample_file(sample_data):
    trees = read_ptb_file(sample_data / "sst" / "trees" / "dev.txt")
    assert len(trees) == 100
    for t in trees:
        assert len(t.parents) == 2 * len(t.tokens) - 1  # strictly binary
        assert t.spans[-1] == (0, len(t.tokens))


def test_full_sst_counts(shared_data):
    trees = read_ptb_file(shared_data / "sst" / "trees" / "dev.txt")
    assert len(trees) == 1101
    assert sum(t.num_nodes for t in trees) == 41447
    assert sum(t.label != 2 for t in trees) == 872


def test_a_tree_10000_deep_parses():
    """The parser is iterative: no recursion limit, whatever the depth."""
    text = "(2 w)"
    for i in range(9_999):
        text = f"(1 (3 v{i}) {text})"
    t = parse_ptb(text)
    assert len(t.tokens) == 10_000 and t.num_nodes == 19_999
    assert t.tokens[0] == "v9998" and t.tokens[-1] == "w"
    assert t.parents[-1] == -1 and t.spans[-1] == (0, 10_000) and t.labels[-1] == 1
    assert t.parents[0] == t.num_nodes - 1 and t.positions[0] == 0  # the first word: left
    validate_tree(tree_to_graph(t, lambda w: 0))


def test_build_reads_an_sst_file_holding_a_tree_10000_deep(tmp_path, capsys):
    """`build` of the sample SST with a right-branching tree 10,000 words deep appended to
    its training file: exit 0, the tree counted with the others."""
    import json
    import shutil

    from gnn_treelstm.training.data import SAMPLE_SRC

    src = tmp_path / "src"
    shutil.copytree(SAMPLE_SRC / "sst", src / "sst")
    train = src / "sst" / "trees" / "train.txt"
    n = len(train.read_text().splitlines())
    deep = "(2 w)"
    for i in range(9_999):
        deep = f"(2 (2 v{i}) {deep})"
    with open(train, "a") as f:
        f.write(deep + "\n")
    out = tmp_path / "out"
    assert build_main(["--dataset", "sst", "--src", str(src), "--out", str(out), "--trees",
                       "constituency", "-q"]) == 0, capsys.readouterr().err
    assert json.loads((out / "meta.json").read_text())["splits"]["train"] == n + 1
