"""Trees with per-node predictions drawn as SVG, and as one self-contained HTML file.

Pure functions over plain dictionaries (no torch, dgl or JavaScript): used by
``gnn-treelstm serve`` (:mod:`gnn_treelstm.commands.serve`) and by the analysis commands'
``--html``.

A tree is a sequence of node mappings (``predict --json --nodes`` records fit, see
:func:`nodes_from_record`); keys, all but ``id`` and ``parent`` optional:

* ``id``: int, unique in the tree;
* ``parent``: the parent's id; ``None`` for the one root;
* ``word``: the node's own word, drawn in its box (``None``: a phrase node, drawn as a small
  circle, e.g. the inner nodes of a constituency tree);
* ``token``: the word's position in the sentence (orders the drawing);
* ``words``: the phrase the node covers (hover text);
* ``relation``: the edge to the parent (dependency label, AMR role), drawn on the edge;
* ``label``: the predicted label name (colours the node);
* ``probabilities``: ``{label name: probability}`` (hover text);
* ``gold``: the gold label name, if known (hover text).

Layout (deterministic): if every node has a ``token`` (dependency trees, chains: every node
is a word) each node sits in its word's slot, read left to right, one row per depth; else a
tidy tree: the leaves in sentence order on the bottom row, each parent centred over its
first and last child. Slots are as wide as their words, so nothing overlaps.

Every node is an SVG ``<g class="node">`` with ``data-id``, ``data-parent``, ``data-label``,
``data-words`` and ``data-probabilities`` (JSON) attributes and a ``<title>`` (the hover
text); edges are ``<polyline class="edge">`` with ``data-child`` and ``data-parent``,
drawn in the gaps between rows so that none runs through a node. Five-class sentiment
(SST's label names) is coloured on a red .. grey .. blue scale as in the Sentiment
Treebank's pictures (Socher et al. 2013), two-class sentiment red/blue, other label sets
with a qualitative palette, unlabelled nodes white.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from gnn_treelstm.files import atomic_write

__all__ = ["SST_LABEL_NAMES", "nodes_from_record", "tree_svg", "html_page", "write_html"]

#: SST's five classes, very negative .. very positive
SST_LABEL_NAMES = ("very negative", "negative", "neutral", "positive", "very positive")
_SENTIMENT_5 = ("#c0392b", "#f0a29a", "#d0d0d0", "#8cc0e6", "#1f6fb2")
_GLYPHS_5 = ("−−", "−", "0", "+", "++")
_SENTIMENT_2 = {"negative": "#c0392b", "positive": "#1f6fb2"}
_QUALITATIVE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
                "#b3de69", "#fccde5", "#bc80bd", "#ccebc5")
_DARK = {"#c0392b", "#1f6fb2", "#bc80bd"}  # fills that take white text
_NO_LABEL = "#ffffff"

_FONT = 13         # px, node text
_CHAR = 8.2        # px, width of one character at _FONT (generous for sans-serif)
_PAD = 14          # px, box padding plus the gap between neighbours
_ROW = 52          # px, row height
_RADIUS = 11       # px, phrase-node circle
_BOX_H = 22        # px, word box height
_MARGIN = 20       # px around the drawing
_MAX_TEXT = 24     # longer words are cut with an ellipsis


def nodes_from_record(rec: Mapping[str, Any], side: str = "a") -> list[dict]:
    """Tree nodes (this module's schema) from a ``predict --json --nodes`` record.

    ``side``: ``"a"`` (``tokens``) or ``"b"`` (``tokens_b``, the second sentence of a pair).
    Node ``i < len(tokens)`` is token ``i`` in every tree kind ``predict`` builds, so it gets
    ``word``/``token``; the others are phrase nodes. Relations are not in the record.
    """
    tokens = rec["tokens" if side == "a" else "tokens_b"]
    out = []
    for x in rec["nodes"]:
        i = x["id"]
        own = 0 <= i < len(tokens)
        out.append({"id": i, "parent": x["parent"], "word": tokens[i] if own else None,
                    "token": i if own else None, "words": x.get("words"),
                    "label": x.get("label"), "probabilities": x.get("probabilities")})
    return out


def _children(nodes: Sequence[Mapping[str, Any]]) -> tuple[Any, dict[Any, list]]:
    """The root and each node's children, checking that the nodes form one tree."""
    ids = [n["id"] for n in nodes]
    if len(set(ids)) != len(ids):
        raise ValueError("tree_svg: node ids must be unique")
    kids: dict[Any, list] = {i: [] for i in ids}
    roots = []
    for n in nodes:
        p = n.get("parent")
        if p is None:
            roots.append(n["id"])
        elif p not in kids:
            raise ValueError(f"tree_svg: node {n['id']}'s parent {p!r} is not a node of the tree")
        else:
            kids[p].append(n["id"])
    if len(roots) != 1:
        raise ValueError(f"tree_svg: a tree has one root (parent None), found {len(roots)}")
    return roots[0], kids


def _layout(nodes: Sequence[Mapping[str, Any]], widths: Mapping[Any, float]
            ) -> dict[Any, tuple[float, int]]:
    """``{id: (x centre in px from 0, row)}``; see the module docstring."""
    by_id = {n["id"]: n for n in nodes}
    root, kids = _children(nodes)
    order, depth, stack = [], {root: 0}, [root]
    while stack:  # pre-order, children in sentence order once sorted below
        v = stack.pop()
        order.append(v)
        for c in kids[v]:
            depth[c] = depth[v] + 1
            stack.append(c)
    if len(order) != len(nodes):
        raise ValueError("tree_svg: the nodes do not form one tree (a cycle, or nodes not "
                         "below the root)")
    first: dict[Any, float] = {}  # the leftmost token under a node orders siblings
    for v in reversed(order):
        t = by_id[v].get("token")
        own = [float(t)] if t is not None else []
        first[v] = min(own + [first[c] for c in kids[v]], default=float("inf"))
    for v in kids:
        kids[v].sort(key=lambda c: (first[c], str(c)))
    order, stack = [], [root]
    while stack:
        v = stack.pop()
        order.append(v)
        stack.extend(reversed(kids[v]))
    x: dict[Any, float] = {}
    sentence_order = all(n.get("token") is not None for n in nodes)
    slots = (sorted(by_id, key=lambda v: (by_id[v]["token"], str(v))) if sentence_order
             else [v for v in order if not kids[v]])
    edge = 0.0
    for v in slots:
        x[v] = edge + widths[v] / 2
        edge += widths[v]
    if not sentence_order:
        for v in reversed(order):
            if kids[v]:
                x[v] = (x[kids[v][0]] + x[kids[v][-1]]) / 2
    bottom = max(depth.values())
    return {v: (x[v], bottom if (not sentence_order and not kids[v]) else depth[v])
            for v in order}


def _palette(label_names: Sequence[str] | None, labels: Sequence[str]):
    """``(colour, table)``: a ``label -> (fill, glyph)`` function for the label set and the
    legend's ``{label: (fill, glyph)}``. Deterministic: no hashing of names."""
    names = tuple(label_names) if label_names is not None else tuple(sorted(set(labels)))
    sst5 = set(SST_LABEL_NAMES)
    if names == SST_LABEL_NAMES or (label_names is None and names and set(names) <= sst5
                                    and not set(names) <= set(_SENTIMENT_2)):
        table = {n: (c, g) for n, c, g in zip(SST_LABEL_NAMES, _SENTIMENT_5, _GLYPHS_5)}
    elif names and set(names) <= set(_SENTIMENT_2):
        table = {"negative": (_SENTIMENT_2["negative"], "−"),
                 "positive": (_SENTIMENT_2["positive"], "+")}
    else:
        table = {n: (_QUALITATIVE[k % len(_QUALITATIVE)], "") for k, n in enumerate(names)}

    def colour(label: str | None) -> tuple[str, str]:
        if label is None:
            return _NO_LABEL, ""
        if label not in table:  # a label outside label_names: a stable colour of its own
            return _QUALITATIVE[sum(map(ord, label)) % len(_QUALITATIVE)], ""
        return table[label]

    return colour, table


def _text(word: str) -> str:
    return word if len(word) <= _MAX_TEXT else word[:_MAX_TEXT - 1] + "…"


def _hover(n: Mapping[str, Any]) -> str:
    lines = [str(n.get("words") or n.get("word") or "")]
    if n.get("relation") is not None:
        lines.append(f"relation: {n['relation']}")
    if n.get("label") is not None:
        probs = n.get("probabilities") or {}
        p = probs.get(n["label"])
        lines.append(f"predicted: {n['label']}" + (f" ({p:.3f})" if p is not None else ""))
    if n.get("gold") is not None:
        lines.append(f"gold: {n['gold']}")
    lines += [f"  {k}: {float(v):.3f}" for k, v in (n.get("probabilities") or {}).items()]
    return "\n".join(lines)


def _legend_svg(table: Mapping[str, tuple[str, str]], y0: float) -> list[str]:
    """The legend row at ``y0``: a swatch and the name of every label."""
    out = []
    lx = float(_MARGIN)
    for name, (fill, _) in table.items():
        out.append(f'<rect x="{lx:.1f}" y="{y0 + 2}" width="14" height="14" rx="3" '
                   f'fill="{fill}" stroke="#555"/><text x="{lx + 19:.1f}" y="{y0 + 14}" '
                   f'font-size="11">{escape(name)}</text>')
        lx += 19 + len(name) * 6.4 + 16
    return out


def _edge_svg(n: Mapping[str, Any], xy: Mapping[Any, tuple[float, float]]) -> list[str]:
    """The edge from a node to its parent and its relation (nothing for the root): up from
    the node to the gap below the parent's row, along that gap to above the parent, up to
    the parent. Only a node's own edges pass its row beside it (its subtree's slots are its
    own), and the gaps between rows hold no node, so an edge never runs through a node, as
    a straight line to a parent rows above or slots away would."""
    p = n.get("parent")
    if p is None:
        return []
    (x1, y1), (x2, y2) = xy[n["id"]], xy[p]
    bus = y2 + _ROW / 2  # the gap below the parent's row
    out = [f'<polyline class="edge" data-child="{escape(str(n["id"]))}" '
           f'data-parent="{escape(str(p))}" points="{x1:.1f},{y1:.1f} {x1:.1f},{bus:.1f} '
           f'{x2:.1f},{bus:.1f} {x2:.1f},{y2:.1f}" fill="none" stroke="#777" '
           f'stroke-width="1.2"/>']
    if n.get("relation") is not None:
        rel = escape(str(n["relation"]))
        out.append(f'<text class="relation" x="{x1:.1f}" y="{y1 - _BOX_H / 2 - 4:.1f}" '
                   f'text-anchor="middle" font-size="10" '
                   f'fill="#1f4e79" stroke="#fff" stroke-width="3" paint-order="stroke">'
                   f'{rel}</text>')
    return out


def _node_attributes(n: Mapping[str, Any]) -> str:
    """The ``data-*`` attributes of a node's group (what the page's script reads)."""
    probs = n.get("probabilities")
    attrs = {"data-id": n["id"], "data-parent": "" if n.get("parent") is None else n["parent"],
             "data-label": n.get("label") or "", "data-word": n.get("word") or "",
             "data-words": n.get("words") or n.get("word") or "",
             "data-probabilities": json.dumps(probs, ensure_ascii=False) if probs else ""}
    if n.get("gold") is not None:
        attrs["data-gold"] = n["gold"]
    return " ".join(f'{k}="{escape(str(a))}"' for k, a in attrs.items())


def _node_svg(n: Mapping[str, Any], at: tuple[float, float], text: str, width: float,
              colour: Callable[[str | None], tuple[str, str]]) -> list[str]:
    """A node's group: its hover text and a box with its word, or a circle with the
    label's glyph for a node without a word."""
    x, y = at
    fill, glyph = colour(n.get("label"))
    ink = "#fff" if fill in _DARK else "#111"
    root = " root" if n.get("parent") is None else ""
    out = [f'<g class="node{root}" {_node_attributes(n)}><title>{escape(_hover(n))}</title>']
    if text:
        w = width - _PAD / 2
        out.append(f'<rect x="{x - w / 2:.1f}" y="{y - _BOX_H / 2:.1f}" width="{w:.1f}" '
                   f'height="{_BOX_H}" rx="5" fill="{fill}" stroke="#333" '
                   f'stroke-width="{2 if root else 1}"/>'
                   f'<text x="{x:.1f}" y="{y + 4.5:.1f}" text-anchor="middle" '
                   f'fill="{ink}">{escape(text)}</text>')
    else:
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{_RADIUS}" fill="{fill}" '
                   f'stroke="#333" stroke-width="{2 if root else 1}"/>')
        if glyph:
            out.append(f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle" '
                       f'font-size="10" fill="{ink}">{glyph}</text>')
    out.append("</g>")
    return out


def tree_svg(nodes: Sequence[Mapping[str, Any]], *, label_names: Sequence[str] | None = None,
             title: str | None = None, legend: bool = True) -> str:
    """One tree as an SVG string (an ``<svg>`` element, no XML declaration).

    Args:
        nodes: the tree, in the schema of the module docstring.
        label_names: the model's label set, in order (picks the colours and the legend);
            default: the labels that occur.
        title: a caption drawn above the tree.
        legend: draw the colour legend (for the labels that have colours).

    Raises:
        ValueError: the nodes are not one tree (duplicate ids, an unknown parent, no or
            several roots, a cycle).
    """
    if not nodes:
        raise ValueError("tree_svg: no nodes to draw")
    by_id = {n["id"]: n for n in nodes}
    texts = {v: _text(str(n["word"])) if n.get("word") is not None else "" for v, n in
             by_id.items()}
    widths = {v: max(len(t) * _CHAR + _PAD, 2 * _RADIUS + _PAD) for v, t in texts.items()}
    pos = _layout(nodes, widths)
    labels = [n["label"] for n in nodes if n.get("label") is not None]
    colour, table = _palette(label_names, labels)
    legend = legend and bool(labels)
    top = _MARGIN + (24 if title else 0) + (28 if legend else 0) + _BOX_H / 2
    xy = {v: (_MARGIN + x, top + row * _ROW) for v, (x, row) in pos.items()}
    legend_w = sum(19 + len(name) * 6.4 + 16 for name in table) if legend else 0
    width = max(max(x + widths[v] / 2 for v, (x, _) in xy.items()) + _MARGIN,
                _MARGIN * 2 + legend_w, _MARGIN * 2 + len(title or "") * _CHAR)
    height = max(y for _, y in xy.values()) + _BOX_H / 2 + _MARGIN
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="tree" width="{width:.0f}" '
           f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
           f'font-family="DejaVu Sans, Arial, sans-serif" font-size="{_FONT}">']
    y0 = _MARGIN
    if title:
        out.append(f'<text class="caption" x="{_MARGIN}" y="{y0 + 14}" font-weight="bold">'
                   f'{escape(title)}</text>')
        y0 += 24
    if legend:
        out += _legend_svg(table, y0)
    drawn = [by_id[v] for v in pos]  # pre-order: the output does not depend on list order
    for n in drawn:  # edges first, under the nodes
        out += _edge_svg(n, xy)
    for n in drawn:
        v = n["id"]
        out += _node_svg(n, xy[v], texts[v], widths[v], colour)
    out.append("</svg>")
    return "\n".join(out)


_STYLE = """
body { font-family: "DejaVu Sans", Arial, sans-serif; margin: 1.5em; color: #111; }
.tree-box { overflow-x: auto; margin: 0.5em 0 1.5em; }
.node { cursor: default; }
.node:hover rect, .node:hover circle { stroke: #000; stroke-width: 2.5; }
"""


def html_page(body: str, *, title: str, style: str = "") -> str:
    """A complete HTML document around ``body`` (HTML, e.g. SVG strings), with the module's
    style sheet inline: no external file, font or script."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{escape(title)}</title><style>{_STYLE}{style}</style></head>\n'
            f'<body>\n{body}\n</body></html>\n')


def write_html(path: str | os.PathLike, trees: Sequence[Sequence[Mapping[str, Any]]], *,
               title: str, captions: Sequence[str] | None = None,
               label_names: Sequence[str] | None = None) -> Path:
    """Write trees (each a node sequence) as one self-contained HTML file, atomically.

    ``captions``: one per tree (drawn above it). Returns the path.
    """
    if captions is not None and len(captions) != len(trees):
        raise ValueError(f"write_html: {len(captions)} captions for {len(trees)} trees")
    parts = [f"<h1>{escape(title)}</h1>"]
    for k, nodes in enumerate(trees):
        svg = tree_svg(nodes, label_names=label_names,
                       title=None if captions is None else captions[k])
        parts.append(f'<div class="tree-box">{svg}</div>')
    return atomic_write(path, html_page("\n".join(parts), title=title))
