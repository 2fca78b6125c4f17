"""``gnn_treelstm.trees.treesvg``: layout, node elements, colours, escaping, the HTML file."""

import json
import re
import xml.etree.ElementTree as ET

import pytest

from gnn_treelstm.trees import treesvg as T

SVG = "{http://www.w3.org/2000/svg}"
SST5 = list(T.SST_LABEL_NAMES)


def _probs(label):
    return {n: (0.6 if n == label else 0.1) for n in SST5}


def constituency():
    """((a (good film)) .): leaves 0-3 are the tokens, 4-6 phrase nodes."""
    words = ["a", "good", "film", "."]
    parent = {0: 5, 1: 4, 2: 4, 3: 6, 4: 5, 5: 6, 6: None}
    labels = {0: "neutral", 1: "positive", 2: "neutral", 3: "neutral", 4: "positive",
              5: "very positive", 6: "very positive"}
    # listed out of order on purpose: the layout orders by token, not by list position
    order = [6, 3, 5, 2, 4, 1, 0]
    return [{"id": i, "parent": parent[i], "word": words[i] if i < 4 else None,
             "token": i if i < 4 else None, "label": labels[i], "probabilities":
             _probs(labels[i])} for i in order]


def dependency():
    """'the film was bad': every node a word; 'was' the root, relations on the edges."""
    words = ["the", "film", "was", "bad"]
    heads = [1, 2, None, 2]
    rels = ["det", "nsubj", None, "acomp"]
    return [{"id": i, "parent": heads[i], "word": w, "token": i, "relation": rels[i],
             "label": "negative" if i == 3 else None} for i, w in enumerate(words)]


def _nodes(svg):
    root = ET.fromstring(svg)  # well-formed XML, or this raises
    return root, [g for g in root.iter(f"{SVG}g") if "node" in g.get("class", "").split()]


def _centre(g):
    shape = g.find(f"{SVG}rect")
    if shape is not None:
        return (float(shape.get("x")) + float(shape.get("width")) / 2,
                float(shape.get("y")) + float(shape.get("height")) / 2, float(shape.get("width")))
    c = g.find(f"{SVG}circle")
    return float(c.get("cx")), float(c.get("cy")), 2 * float(c.get("r"))


def test_constituency_layout_leaves_in_order_parents_centred():
    nodes = constituency()
    svg = T.tree_svg(nodes, label_names=SST5)
    root, gs = _nodes(svg)
    assert len(gs) == len(nodes)
    at = {int(g.get("data-id")): _centre(g) for g in gs}
    leaves = [0, 1, 2, 3]
    xs = [at[i][0] for i in leaves]
    assert xs == sorted(xs)  # sentence order, left to right
    assert len({at[i][1] for i in leaves}) == 1  # every leaf on the bottom row
    assert all(at[i][1] > at[p][1] for i, p in [(0, 5), (4, 5), (5, 6), (3, 6)])
    for parent, (first, last) in {4: (1, 2), 5: (0, 4), 6: (5, 3)}.items():
        assert at[parent][0] == pytest.approx((at[first][0] + at[last][0]) / 2, abs=0.11)
    # no two nodes of a row overlap
    rows = {}
    for x, y, w in at.values():
        rows.setdefault(y, []).append((x - w / 2, x + w / 2))
    for spans in rows.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    # every node inside the canvas
    assert all(0 <= x - w / 2 and x + w / 2 <= float(root.get("width")) for x, _, w in
               at.values())
    assert T.tree_svg(list(reversed(nodes)), label_names=SST5) == svg  # deterministic


def test_node_attributes_colours_and_hover():
    svg = T.tree_svg(constituency(), label_names=SST5)
    _, gs = _nodes(svg)
    by_id = {int(g.get("data-id")): g for g in gs}
    assert by_id[1].get("data-label") == "positive" and by_id[1].get("data-word") == "good"
    assert json.loads(by_id[1].get("data-probabilities")) == _probs("positive")
    assert "root" in by_id[6].get("class") and by_id[6].get("data-parent") == ""
    assert by_id[4].get("data-parent") == "5"
    title = by_id[6].find(f"{SVG}title").text
    assert "predicted: very positive (0.600)" in title and "very negative: 0.100" in title
    # red .. grey .. blue: very positive is the dark blue, neutral grey
    assert by_id[6].find(f"{SVG}circle").get("fill") == "#1f6fb2"
    assert by_id[0].find(f"{SVG}rect").get("fill") == "#d0d0d0"
    assert by_id[4].find(f"{SVG}text").text == "+"  # phrase glyph


def test_dependency_sentence_order_and_relations():
    svg = T.tree_svg(dependency())
    root, gs = _nodes(svg)
    at = {int(g.get("data-id")): _centre(g) for g in gs}
    assert [at[i][0] for i in range(4)] == sorted(at[i][0] for i in range(4))
    assert at[2][1] < at[1][1] < at[0][1] and at[3][1] == at[1][1]  # rows are depths
    rels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "relation"]
    assert sorted(rels) == ["acomp", "det", "nsubj"]
    assert len([e for e in root.iter() if e.get("class") == "edge"]) == 3
    unlabelled = [g for g in gs if g.get("data-label") == ""]
    assert len(unlabelled) == 3
    assert all(g.find(f"{SVG}rect").get("fill") == "#ffffff" for g in unlabelled)


def test_escaping_of_markup_in_words():
    nodes = [{"id": 0, "parent": 2, "word": "<b>&", "token": 0, "label": 'a"b'},
             {"id": 1, "parent": 2, "word": "x</svg>", "token": 1, "relation": "<r>"},
             {"id": 2, "parent": None, "words": "<b>& x</svg>"}]
    svg = T.tree_svg(nodes, title="A & <B>")
    root, gs = _nodes(svg)  # parses: nothing leaked as markup
    assert len(gs) == 3 and svg.count("</svg>") == 1
    assert "&lt;b&gt;&amp;" in svg and "<b>" not in svg
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "<b>&" in texts and "x</svg>" in texts and "<r>" in texts and "A & <B>" in texts
    assert {g.get("data-label") for g in gs} == {'a"b', ""}


@pytest.mark.parametrize("nodes, message", [
    ([], "no nodes"),
    ([{"id": 0, "parent": None}, {"id": 1, "parent": None}], "found 2"),
    ([{"id": 0, "parent": 7}], "parent 7"),
    ([{"id": 0, "parent": None}, {"id": 0, "parent": 0}], "unique"),
    ([{"id": 0, "parent": None}, {"id": 1, "parent": 2}, {"id": 2, "parent": 1}],
     "one tree"),
])
def test_not_a_tree_is_a_clear_error(nodes, message):
    with pytest.raises(ValueError, match=message):
        T.tree_svg(nodes)


def test_nodes_from_predict_record():
    rec = {"tokens": ["a", "film"], "nodes": [
        {"id": 0, "parent": 2, "span": [0, 1], "words": "a", "label": "neutral",
         "probabilities": _probs("neutral")},
        {"id": 1, "parent": 2, "span": [1, 2], "words": "film", "label": "neutral",
         "probabilities": _probs("neutral")},
        {"id": 2, "parent": None, "span": [0, 2], "words": "a film", "label": "positive",
         "probabilities": _probs("positive")}]}
    nodes = T.nodes_from_record(rec)
    assert [(n["word"], n["token"]) for n in nodes] == [("a", 0), ("film", 1), (None, None)]
    assert nodes[2]["words"] == "a film" and nodes[2]["label"] == "positive"
    assert len(_nodes(T.tree_svg(nodes, label_names=SST5))[1]) == 3


def test_write_html_is_self_contained_and_atomic(tmp_path):
    path = tmp_path / "out" / "trees.html"
    got = T.write_html(path, [constituency(), dependency()], title="Two <trees>",
                       captions=["first", "second"], label_names=SST5)
    assert got == path
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.count("<svg") == 2
    assert "<title>Two &lt;trees&gt;</title>" in text
    assert not re.search(r"<script|<link|src=|href=", text)  # nothing external, no JS
    assert len(re.findall(r'<g class="node', text)) == 7 + 4
    assert [p.name for p in path.parent.iterdir()] == ["trees.html"]  # no temporary left
    with pytest.raises(ValueError, match="1 captions for 2 trees"):
        T.write_html(path, [constituency(), dependency()], title="t", captions=["x"])


def _shapes(svg):
    """``{id: (left, top, right, bottom)}`` of every node's box or circle, and the edges
    as ``(child, parent, [(x, y), ...])``."""
    root, gs = _nodes(svg)
    boxes = {}
    for g in gs:
        x, y, w = _centre(g)
        h = float(g.find(f"{SVG}rect").get("height")) if g.find(f"{SVG}rect") is not None \
            else w
        boxes[g.get("data-id")] = (x - w / 2, y - h / 2, x + w / 2, y + h / 2)
    edges = []
    for e in root.iter():
        if e.get("class") == "edge":
            if e.tag == f"{SVG}line":
                pts = [(float(e.get("x1")), float(e.get("y1"))),
                       (float(e.get("x2")), float(e.get("y2")))]
            else:
                pts = [tuple(map(float, p.split(","))) for p in e.get("points").split()]
            edges.append((e.get("data-child"), e.get("data-parent"), pts))
    return boxes, edges


def _through(svg):
    """The (edge child, edge parent, node) where an edge runs through another node."""
    boxes, edges = _shapes(svg)
    hits = set()
    for child, parent, pts in edges:
        for (x1, y1), (x2, y2) in zip(pts, pts[1:]):
            for k in range(1, 200):
                x, y = x1 + k / 200 * (x2 - x1), y1 + k / 200 * (y2 - y1)
                hits |= {(child, parent, v) for v, (a, b, c, d) in boxes.items()
                         if v not in (child, parent) and a + 1 < x < c - 1 and b + 1 < y < d - 1}
    return sorted(hits)


def see_it_clearly_now():
    """'see it clearly now': 'now' hangs from 'see' three words away, past 'clearly' on its
    row (a straight line to 'see' leaves the row inside the box of 'clearly')."""
    words, rels = ["see", "it", "clearly", "now"], [None, "dobj", "advmod", "advmod"]
    return [{"id": i, "parent": None if i == 0 else 0, "word": w, "token": i,
             "relation": rels[i]} for i, w in enumerate(words)]


def flat_phrase_beside_a_deep_one():
    """(a (b (c (d e)))) f g): the root's leaf children sit on the bottom row, rows below
    the root, beside the deep phrase's nodes."""
    parent = {0: 10, 1: 7, 2: 8, 3: 9, 4: 9, 5: 10, 6: 10, 7: 10, 8: 7, 9: 8, 10: None}
    words = "a b c d e f g".split()
    return [{"id": i, "parent": p, "word": words[i] if i < 7 else None,
             "token": i if i < 7 else None} for i, p in parent.items()]


@pytest.mark.parametrize("tree", [see_it_clearly_now, flat_phrase_beside_a_deep_one,
                                  dependency, constituency])
def test_no_edge_runs_through_a_node(tree):
    """An edge runs only through its own two nodes, in sentence-order and tidy layouts."""
    svg = T.tree_svg(tree())
    assert _through(svg) == []
    boxes, edges = _shapes(svg)
    assert len(edges) == len(boxes) - 1
    for child, parent, pts in edges:  # from the child's centre to the parent's
        (a, b, c, d), (e, f, g, h) = boxes[child], boxes[parent]
        assert pts[0] == pytest.approx(((a + c) / 2, (b + d) / 2), abs=0.06)
        assert pts[-1] == pytest.approx(((e + g) / 2, (f + h) / 2), abs=0.06)
