import random

import dgl
import networkx as nx
import pytest

from gnn_treelstm.trees.drawing import SST_LABEL_NAMES, draw_tree, to_networkx, tree_layout
from gnn_treelstm.trees.graph import NO_WORD, make_tree
from tests.handbuilt import random_dependency_tree, random_tree

VOCAB = ["<unk>", "It", "'s", "a", "lovely", "film"]
RELS = ["left", "right"]


def sst_tree():
    # (3 (2 It) (4 (2 's) (4 (3 a) (4 (4 lovely) (2 film)))))
    parents = [8, 7, 6, 5, 5, 6, 7, 8, -1]
    words = [1, 2, 3, 4, 5, NO_WORD, NO_WORD, NO_WORD, NO_WORD]
    labels = [2, 2, 3, 4, 2, 4, 4, 4, 3]
    pos = [0, 0, 0, 0, 1, 1, 1, 1, 0]
    spans = [[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [3, 5], [2, 5], [1, 5], [0, 5]]
    return make_tree(parents, words, labels=labels, rels=pos, positions=pos, spans=spans)


def test_to_networkx_attributes():
    t = to_networkx(sst_tree(), vocab=VOCAB, relations=RELS, label_names=list("abcde"))
    assert isinstance(t, nx.DiGraph) and t.number_of_nodes() == 9 and t.number_of_edges() == 8
    assert t.graph["root"] == 8
    assert t.nodes[3] == {"word": "lovely", "word_id": 4, "label": 4, "label_name": "e",
                          "leaf": True, "root": False, "span": (3, 4)}
    assert t.nodes[5]["word"] is None and t.nodes[5]["label"] == 4 and not t.nodes[5]["leaf"]
    assert t.nodes[8]["root"] and t.nodes[8]["span"] == (0, 5)
    assert t.has_edge(4, 5) and not t.has_edge(5, 4)  # child -> parent
    assert t.edges[4, 5] == {"relation": "right", "rel": 1, "position": 1}
    assert t.edges[3, 5]["relation"] == "left"


def test_to_networkx_without_vocab_and_ignore_labels():
    g = make_tree([-1, 0, 0], [7, 8, 9], rels=[0, 2, 3])
    t = to_networkx(g)
    assert t.nodes[1]["word"] == 8 and t.nodes[1]["label"] is None
    assert t.edges[2, 0]["relation"] == 3 and t.edges[2, 0]["position"] == 1


def test_batched_graph_index():
    rng = random.Random(0)
    graphs = [random_tree(rng, n) for n in (3, 5, 2)]
    b = dgl.batch(graphs)
    t = to_networkx(b, 1)
    assert t.number_of_nodes() == graphs[1].num_nodes()
    assert sorted(t.edges) == sorted(zip(*(x.tolist() for x in graphs[1].edges())))
    with pytest.raises(ValueError, match="pass index="):
        to_networkx(b)
    with pytest.raises(ValueError, match="out of range"):
        to_networkx(b, 3)


def test_layout_is_tidy():
    t = to_networkx(sst_tree())
    pos = tree_layout(t)
    # leaves on the bottom row, in sentence order
    assert [pos[i] for i in range(5)] == [(float(i), -4.0) for i in range(5)]
    assert pos[8][1] == 0.0 and pos[8][0] == pytest.approx((0 + pos[7][0]) / 2)
    for v in range(5, 9):  # parents centred over first and last child
        kids = sorted(t.predecessors(v), key=lambda c: t.edges[c, v]["position"])
        assert pos[v][0] == pytest.approx((pos[kids[0]][0] + pos[kids[-1]][0]) / 2)
        assert all(pos[c][1] < pos[v][1] for c in kids)


@pytest.mark.parametrize("seed", range(5))
def test_layout_no_collisions_random(seed):
    rng = random.Random(seed)
    g = random_dependency_tree(rng, 12, max_children=3)
    for bottom in (True, False):
        pos = tree_layout(to_networkx(g), leaves_at_bottom=bottom)
        assert len(set(pos.values())) == g.num_nodes()


def test_layout_orders_children_by_position_not_edge_id():
    g = make_tree([-1, 0, 0], [1, 2, 3], positions=[0, 1, 0])  # node 2 is the left child
    pos = tree_layout(to_networkx(g))
    assert pos[2][0] < pos[1][0]


def test_draw_tree_png(tmp_path):
    out = draw_tree(sst_tree(), tmp_path / "sub" / "tree.png", vocab=VOCAB, title="SST")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    assert not list(out.parent.glob(".*.tmp"))
    g = random_dependency_tree(random.Random(1), 8)
    p2 = draw_tree(g, tmp_path / "dep.png", relations=[f"r{i}" for i in range(5)])
    assert p2.stat().st_size > 2000


def test_draw_tree_takes_the_librarys_vocab_and_relations_and_writes_svg(tmp_path):
    from gnn_treelstm.trees.vocab import Relations, Vocab

    g = random_dependency_tree(random.Random(3), 9, num_relations=3)
    vocab = Vocab([f"word{i}" for i in range(1, 40)])
    rels = Relations(["nsubj", "obj", "amod"])
    out = draw_tree(g, tmp_path / "dep.svg", vocab=vocab, relations=rels)
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "nsubj" in svg or "obj" in svg or "amod" in svg  # relation names, not ids
    sst = draw_tree(sst_tree(), tmp_path / "sst.svg", vocab=VOCAB, label_names=SST_LABEL_NAMES)
    assert "very positive" in sst.read_text() or "very negative" in sst.read_text()
    custom = draw_tree(sst_tree(), tmp_path / "custom.svg", vocab=VOCAB).read_text()
    assert "negative" not in custom and "positive" not in custom  # ids, not SST's names
    with pytest.raises(ValueError, match="cannot write 'gif'"):
        draw_tree(g, tmp_path / "x.gif")


def test_dependency_trees_are_drawn_in_sentence_order():
    g = random_dependency_tree(random.Random(4), 15)
    t = to_networkx(g)
    pos = tree_layout(t, sentence_order=True)
    xs = [pos[v][0] for v in sorted(t.nodes)]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)
    assert all(pos[v][1] == -nx_depth(t, v) for v in t.nodes)


def nx_depth(t, v):
    d = 0
    while t.out_degree(v):
        v = next(iter(t.successors(v)))
        d += 1
    return d


def test_a_100_node_tree_stays_readable(tmp_path):
    """A 50-word binarized sentence (99 nodes): slots as wide as the words, not 50 times
    the longest word; the PNG stays under 3500 px wide at the default 120 dpi."""
    from gnn_treelstm.datasets.binarize import binary_graph

    words = [(1 + i % 39) for i in range(50)]
    g = binary_graph([i + 1 if i < 49 else -1 for i in range(50)], words)
    assert g.num_nodes() == 99
    vocab = ["<unk>"] + [w * (1 + i % 9) for i, w in enumerate("abcdefghijklmnopqrstuvwxyz"
                                                               "abcdefghijklm")]
    out = draw_tree(g, tmp_path / "long.png", vocab=vocab)
    from matplotlib.image import imread

    h, w = imread(out).shape[:2]
    assert w < 3500, w


@pytest.fixture
def drawn(monkeypatch):
    """What draw_tree puts on its axes: every line (its points) and every node box (its
    centre and text), in inches."""
    from matplotlib.axes import Axes

    seen: dict[str, list] = {"lines": [], "boxes": []}
    plot, text = Axes.plot, Axes.text

    def record_plot(self, xs, ys, *a, **kw):
        seen["lines"].append(list(zip(xs, ys)))
        return plot(self, xs, ys, *a, **kw)

    def record_text(self, x, y, s, *a, **kw):
        if kw.get("fontsize") == 8 and "bbox" in kw:  # a node's box (edge labels: 6 pt)
            seen["boxes"].append(((x, y), s))
        return text(self, x, y, s, *a, **kw)

    monkeypatch.setattr(Axes, "plot", record_plot)
    monkeypatch.setattr(Axes, "text", record_text)
    return seen


def test_no_edge_runs_through_another_nodes_box(tmp_path, drawn):
    """A leaf of the root put on the bottom row, below a phrase of its sibling: its edge
    hangs from the row below the root instead of cutting across that phrase's box."""
    parents = [14, 8, 8, 10, 9, 9, 11, 12, 13, 10, 11, 12, 13, 14, -1]
    words = [*range(1, 9), *[NO_WORD] * 7]
    positions = [0, 0, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 0]
    g = make_tree(parents, words, labels=[2] * 15, positions=positions)
    vocab = ["<unk>", "Yet", "the", "act", "is", "still", "charming", "here", "."]
    draw_tree(g, tmp_path / "t.png", vocab=vocab, label_names=SST_LABEL_NAMES)
    assert len(drawn["boxes"]) == 15 and len(drawn["lines"]) == 14
    for line in drawn["lines"]:
        ends = {line[0], line[-1]}
        for (cx, cy), s in drawn["boxes"]:
            if (cx, cy) in ends:
                continue
            half_w, half_h = max(1, len(s)) * 0.072 / 2 + 0.05, 0.12
            for (x0, y0), (x1, y1) in zip(line, line[1:]):
                for k in range(201):
                    x, y = x0 + (x1 - x0) * k / 200, y0 + (y1 - y0) * k / 200
                    assert not (abs(x - cx) < half_w and abs(y - cy) < half_h), \
                        f"the edge {line} runs through the box of {s!r}"


def test_a_graph_without_words_shows_its_node_ids(tmp_path, drawn):
    draw_tree(dgl.graph(([1, 2, 3], [0, 0, 2])), tmp_path / "bare.png")
    assert sorted(s for _, s in drawn["boxes"]) == ["0", "1", "2", "3"]
    drawn["boxes"].clear()
    labelled = make_tree([-1, 0, 0], [NO_WORD] * 3, labels=[1, -1, 3])
    draw_tree(labelled, tmp_path / "labelled.png")
    assert sorted(s for _, s in drawn["boxes"]) == ["0: 1", "1", "2: 3"]


def test_a_plain_networkx_tree_is_drawn_with_its_node_ids(tmp_path, drawn):
    tree = nx.DiGraph([("b", "a"), ("c", "a"), ("d", "c")])  # child -> parent, no attributes
    out = draw_tree(tree, tmp_path / "nx.svg")
    assert out.read_text().lstrip().startswith("<?xml")
    assert sorted(s for _, s in drawn["boxes"]) == ["a", "b", "c", "d"]
    ys = {s: y for (_, y), s in drawn["boxes"]}
    assert ys["a"] > ys["c"] > ys["d"]  # the root on top
    named = nx.DiGraph([(1, 0), (2, 0)])
    named.nodes[1]["word"] = "hello"
    drawn["boxes"].clear()
    draw_tree(named, tmp_path / "named.png")
    assert sorted(s for _, s in drawn["boxes"]) == [" ", " ", "hello"]  # no word, no label


@pytest.mark.parametrize("edges, message", [
    ([(0, 1), (0, 2)], "node 0 of the networkx graph has 2 outgoing edges"),
    ([(1, 0), (3, 2)], "has 2 nodes without a parent and is not one tree"),
    ([(0, 1), (1, 2), (2, 0), (3, 4)], "has 1 nodes without a parent and is not one"),
])
def test_a_networkx_graph_that_is_not_one_tree_is_refused(tmp_path, edges, message):
    with pytest.raises(ValueError, match=message):
        draw_tree(nx.DiGraph(edges), tmp_path / "x.png")
