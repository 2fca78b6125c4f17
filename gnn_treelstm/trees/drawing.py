"""networkx bridge and tree drawing for sentence graphs (schema of :mod:`gnn_treelstm.trees.graph`).

* :func:`to_networkx` turns one sentence graph (or graph ``index`` of a batch) into a
  ``networkx.DiGraph`` whose edges keep the DGL direction (child -> parent) and whose
  nodes and edges carry the schema fields under readable names.
* :func:`tree_layout` computes a tidy top-down layout: the root at the top, every leaf on
  the bottom row in sentence order (children ordered by ``pos``), each parent centred over
  its first and last child. No graphviz is needed.
* :func:`draw_tree` writes a PNG of one tree with matplotlib's Agg canvas (a bare
  ``Figure``, no pyplot, so the caller's backend is untouched).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dgl
import networkx as nx

from gnn_treelstm import _dgl_compat  # noqa: F401  (the package __init__ ran it before dgl)
from gnn_treelstm.files import atomic_write
from gnn_treelstm.trees.graph import IGNORE, LABEL, LEAF, NO_WORD, POS, REL, ROOT, SPAN, WORD

log = logging.getLogger(__name__)

__all__ = ["to_networkx", "tree_layout", "draw_tree", "TreeStyle", "SST_LABEL_NAMES",
           "edge_points"]

# SST's five classes, very negative .. very positive (red -> grey -> green)
_SST_COLOURS = ["#d7301f", "#fc8d59", "#d9d9d9", "#91cf60", "#1a9850"]
_OTHER_COLOURS = ["#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
                  "#b3de69", "#fccde5", "#bc80bd", "#ccebc5"]
_NO_LABEL = "#ffffff"


def _names(vocab: Sequence[str] | Any | None) -> Sequence[str] | None:
    """Names by id from a list, a :class:`~gnn_treelstm.trees.vocab.Vocab` (``itos``) or a
    :class:`~gnn_treelstm.trees.vocab.Relations` (``names``)."""
    if vocab is None:
        return None
    for attr in ("itos", "names"):
        if hasattr(vocab, attr):
            return getattr(vocab, attr)
    return vocab


def _single(graph: dgl.DGLGraph, index: int | None) -> dgl.DGLGraph:
    if graph.batch_size > 1 or index is not None:
        if index is None:
            raise ValueError(
                f"the graph is a batch of {graph.batch_size} graphs; pass index= to pick one"
            )
        if not 0 <= index < graph.batch_size:
            raise ValueError(f"index {index} out of range for a batch of {graph.batch_size}")
        return dgl.slice_batch(graph, index)
    return graph


def _node_columns(g: dgl.DGLGraph) -> tuple[list, list, list, list, list]:
    """Words, labels, leaf and root flags and spans of every node, as lists (the schema's
    defaults where a field is absent; leaf and root from the degrees)."""
    n = g.num_nodes()
    nd = g.ndata

    def col(key: str, default: Any) -> list:
        if key in nd:
            return nd[key].cpu().tolist()
        return [default] * n

    words = col(WORD, NO_WORD)
    labels = col(LABEL, IGNORE)
    leaf = col(LEAF, None)
    if n and leaf[0] is None:
        leaf = (g.in_degrees() == 0).tolist()
    root = col(ROOT, None)
    if n and root[0] is None:
        root = (g.out_degrees() == 0).tolist()
    return words, labels, leaf, root, col(SPAN, (-1, -1))


def _add_edges(out: nx.DiGraph, g: dgl.DGLGraph, rels: Sequence[str] | None) -> None:
    src, dst = (t.cpu().tolist() for t in g.edges())
    rel = g.edata[REL].cpu().tolist() if REL in g.edata else [0] * len(src)
    pos = g.edata[POS].cpu().tolist() if POS in g.edata else [None] * len(src)
    for s, d, r, p in zip(src, dst, rel, pos):
        name = rels[r] if rels is not None and 0 <= r < len(rels) else r
        out.add_edge(s, d, relation=name, rel=r, position=p)


def to_networkx(
    graph: dgl.DGLGraph,
    index: int | None = None,
    *,
    vocab: Sequence[str] | Any | None = None,
    relations: Sequence[str] | Any | None = None,
    label_names: Sequence[str] | None = None,
) -> nx.DiGraph:
    """One sentence graph as a ``networkx.DiGraph`` (edges child -> parent, as in DGL).

    Args:
        graph: a tree graph, or a batch of them together with ``index``.
        index: which graph of a batch.
        vocab: word strings by id (a list or an object with ``itos``); without it the
            ``word`` attribute is the id.
        relations: relation names by id; without it the ``relation`` attribute is the id.
        label_names: label names by id, stored as ``label_name``.

    Node attributes: ``word`` (string/id, ``None`` for a node without a word),
    ``word_id``, ``label`` (``None`` where ``IGNORE``), ``label_name``, ``leaf``, ``root``,
    ``span`` (tuple ``(start, end)``). Edge attributes: ``relation`` (name or id), ``rel``
    (id), ``position``. Graph attribute ``root``: the root node.
    """
    g = _single(graph, index)
    itos = _names(vocab)
    n = g.num_nodes()
    words, labels, leaf, root, spans = _node_columns(g)
    out = nx.DiGraph()
    for i in range(n):
        w = words[i]
        word = None if w == NO_WORD else (itos[w] if itos is not None and 0 <= w < len(itos)
                                          else w)
        lab = None if labels[i] == IGNORE else labels[i]
        out.add_node(
            i, word=word, word_id=w, label=lab,
            label_name=(label_names[lab] if label_names is not None and lab is not None
                        else None),
            leaf=bool(leaf[i]), root=bool(root[i]), span=tuple(spans[i]),
        )
    _add_edges(out, g, _names(relations))
    roots = [i for i in range(n) if root[i]]
    out.graph["root"] = roots[0] if roots else None
    return out


def tree_layout(
    tree: nx.DiGraph, *, leaves_at_bottom: bool = True, sentence_order: bool = False,
    widths: Mapping[int, float] | None = None,
) -> dict[int, tuple[float, float]]:
    """Tidy top-down positions ``{node: (x, y)}`` of a tree from :func:`to_networkx`.

    y is minus the depth (root at 0). x, two layouts:

    * default (constituency, AMR): children are ordered by the edge ``position`` (then node
      id); leaves take consecutive slots left to right and a parent sits at the midpoint of
      its first and last child. With ``leaves_at_bottom`` every leaf is put on the lowest
      row, as in parse-tree drawings. Each subtree covers a contiguous run of leaves, so no
      two nodes of a row collide.
    * ``sentence_order=True`` (dependency trees, chains: every node is a word): every node
      takes the slot of its word, in node-id order, i.e. the sentence read left to right;
      a projective tree then draws without crossing edges.

    ``widths`` (default 1 each, i.e. x = 0, 1, 2, ...) is the width of a node's slot, so
    long words get more room than short ones; x is the centre of the slot, the first at 0.
    """
    if tree.number_of_nodes() == 0:
        return {}
    root = tree.graph.get("root")
    if root is None:
        roots = [v for v in tree.nodes if tree.out_degree(v) == 0]
        if len(roots) != 1:
            raise ValueError(f"expected a tree with one root, found {len(roots)} roots")
        root = roots[0]
    children: dict[int, list[int]] = {}
    for v in tree.nodes:
        kids = list(tree.predecessors(v))
        kids.sort(key=lambda c: (tree.edges[c, v].get("position") or 0, c))
        children[v] = kids
    depth = {root: 0}
    order: list[int] = []  # pre-order
    stack = [root]
    while stack:
        v = stack.pop()
        order.append(v)
        for c in reversed(children[v]):
            depth[c] = depth[v] + 1
            stack.append(c)
    if len(order) != tree.number_of_nodes():
        raise ValueError("the graph is not a single tree (some nodes are not below the root)")
    width = (lambda v: 1.0) if widths is None else (lambda v: float(widths[v]))
    x: dict[int, float] = {}
    slots = sorted(tree.nodes) if sentence_order else [v for v in order if not children[v]]
    edge = -width(slots[0]) / 2.0  # the first slot is centred at x = 0
    for v in slots:
        x[v] = edge + width(v) / 2.0
        edge += width(v)
    if not sentence_order:
        for v in reversed(order):  # children before parents
            if children[v]:
                x[v] = (x[children[v][0]] + x[children[v][-1]]) / 2.0
    bottom = max(depth.values())
    at_bottom = leaves_at_bottom and not sentence_order
    return {v: (x[v], -float(bottom if (at_bottom and not children[v]) else depth[v]))
            for v in order}


def _node_text(data: Mapping[str, Any]) -> str:
    """A node's box text: its word, else its label id (the legend names the labels)."""
    if data.get("word") is not None:
        return str(data["word"])
    if data.get("label") is not None:
        return str(data["label"])
    return ""


#: SST's class names, used in the legend when a 5-class tree comes without label names
SST_LABEL_NAMES = ("very negative", "negative", "neutral", "positive", "very positive")
_CHAR_IN = 0.072   # width of a character at the 8 pt node font, inches
_PAD_IN = 0.22     # box padding plus the gap between neighbours, inches
_ROW_IN = 0.62     # row height, inches
_MAX_TEXT = 18     # longer node texts are cut with an ellipsis


def _in_sentence_order(tree: nx.DiGraph) -> bool:
    """Whether every node is a word whose span covers its own position (dependency trees
    and chains: node i is token i); then the tree is drawn in sentence order."""
    n = tree.number_of_nodes()
    for v, d in tree.nodes(data=True):
        lo, hi = (tuple(d.get("span") or (-1, -1)) + (-1, -1))[:2]
        if d.get("word") is None or not (0 <= lo <= v < hi <= n):
            return False
    return n > 0


@dataclass(frozen=True)
class TreeStyle:
    """How :func:`draw_tree` draws: every field's default (None) is chosen from the tree.

    Attributes:
        edge_labels: write the relation on each edge (default: when ``relations`` is
            given).
        leaves_at_bottom: put every leaf on the lowest row (default: when every word is
            a leaf, as in constituency trees).
        sentence_order: every node in its word's slot (default: when every node is a
            word covering its own position, as in dependency trees and chains).
        dpi: dots per inch of a PNG.
        format: ``"png"``, ``"svg"`` or ``"pdf"`` (default: the path's suffix, else PNG).
    """

    edge_labels: bool | None = None
    leaves_at_bottom: bool | None = None
    sentence_order: bool | None = None
    dpi: int = 120
    format: str | None = None  # matplotlib's name


def _picture_format(path: Path, format: str | None) -> str:  # noqa: A002 - matplotlib's name
    fmt = (format or path.suffix.lstrip(".") or "png").lower()
    if fmt not in ("png", "svg", "pdf"):
        raise ValueError(f"draw_tree: cannot write {fmt!r}; use a .png, .svg or .pdf path "
                         "(or format='png'|'svg'|'pdf')")
    return fmt


def _box_texts(tree: nx.DiGraph) -> dict[int, str]:
    """Every node's box text, cut with an ellipsis past :data:`_MAX_TEXT` characters; in a
    tree without words, the node ids (with the label where there is one)."""
    wordless = all(d.get("word") is None for _, d in tree.nodes(data=True))
    texts = {}
    for v, d in tree.nodes(data=True):
        t = _node_text(d)
        if wordless:
            t = str(v) if d.get("label") is None else f"{v}: {d['label']}"
        texts[v] = t if len(t) <= _MAX_TEXT else t[:_MAX_TEXT - 1] + "…"
    return texts


def _drawn_layout(tree: nx.DiGraph, texts: Mapping[int, str],
                  style: TreeStyle) -> dict[int, tuple[float, float]]:
    """The layout of :func:`tree_layout` in inches across and rows down, each slot as
    wide as its text."""
    sentence_order = style.sentence_order
    if sentence_order is None:
        sentence_order = _in_sentence_order(tree)
    leaves_at_bottom = style.leaves_at_bottom
    if leaves_at_bottom is None:
        leaves_at_bottom = all(d["word"] is None for _, d in tree.nodes(data=True)
                               if not d["leaf"])
    widths = {v: max(1, len(t)) * _CHAR_IN + _PAD_IN for v, t in texts.items()}
    return tree_layout(tree, leaves_at_bottom=leaves_at_bottom, sentence_order=sentence_order,
                       widths=widths)


@dataclass(frozen=True)
class _Colours:
    """Box colours by label: the red-to-green scale for five ordered classes with names
    (a custom data set's label 1 is not SST's "negative"), else a qualitative palette."""

    sst: bool

    @classmethod
    def of(cls, labels_seen: list[int], label_names: Sequence[str] | None) -> _Colours:
        return cls(bool(labels_seen) and max(labels_seen) <= 4 and label_names is not None
                   and len(label_names) == 5)

    def __call__(self, lab: int | None) -> str:
        if lab is None:
            return _NO_LABEL
        if self.sst:
            return _SST_COLOURS[lab]
        return _OTHER_COLOURS[lab % len(_OTHER_COLOURS)]


def _figure(pos: Mapping[int, tuple[float, float]], legend: bool,
            title: str | None) -> tuple[Any, Any]:
    """A bare Figure (the Agg canvas, pyplot's global state left alone) sized to the
    layout, and its axes without frame."""
    from matplotlib.figure import Figure

    xs = [p[0] for p in pos.values()] or [0.0]
    ys = [p[1] for p in pos.values()] or [0.0]
    legend_in = 1.4 if legend else 0.0
    width_in = (max(xs) - min(xs)) + 2 * _PAD_IN + 0.6 + legend_in
    height_in = (max(ys) - min(ys)) * _ROW_IN + 0.9 + (0.3 if title else 0.0)
    fig = Figure(figsize=(max(2.5, width_in), max(1.6, height_in)))
    ax = fig.add_axes((0.0, 0.0, 1.0 - legend_in / max(2.5, width_in), 1.0))
    ax.set_axis_off()
    return fig, ax


def edge_points(child: tuple[float, float], parent: tuple[float, float],
                row: float) -> list[tuple[float, float]]:
    """The points of the line drawn from a node at ``child`` to its parent at ``parent``
    (rows ``row`` apart): straight when the child is one row below; a child further down
    (a leaf put on the bottom row) hangs from the row below its parent by a vertical line,
    as in parse-tree drawings, so its edge passes no other node's box."""
    (x0, y0), y1 = child, parent[1]
    if y1 - y0 <= row * 1.5:
        return [child, parent]
    return [child, (x0, y1 - row), parent]


def _draw_edges(ax: Any, tree: nx.DiGraph, pos: Mapping[int, tuple[float, float]],
                edge_labels: bool) -> None:
    for c, p in tree.edges:
        points = edge_points(pos[c], pos[p], _ROW_IN)
        ax.plot([q[0] for q in points], [q[1] for q in points], color="#555555",
                linewidth=0.8, zorder=1)
        (x0, y0), (x1, y1) = points[-2], points[-1]
        if edge_labels:
            rel = tree.edges[c, p].get("relation")
            if rel is not None:
                ax.text((x0 + x1) / 2, (y0 + y1) / 2, str(rel), fontsize=6, color="#1f4e79",
                        ha="center", va="center", zorder=3,
                        bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none",
                              "alpha": 0.85})


def _draw_nodes(ax: Any, tree: nx.DiGraph, pos: Mapping[int, tuple[float, float]],
                texts: Mapping[int, str], colour: _Colours) -> None:
    for v, d in tree.nodes(data=True):
        x, y = pos[v]
        ax.text(x, y, texts[v] or " ", ha="center", va="center", zorder=4,
                fontsize=8, fontweight="bold" if d["root"] else "normal",
                bbox={"boxstyle": "round,pad=0.25", "fc": colour(d["label"]),
                      "ec": "#333333" if d["word"] is not None else "#999999",
                      "lw": 0.7})


def _draw_legend(fig: Any, labels_seen: list[int], label_names: Sequence[str] | None,
                 colour: _Colours) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=colour(lab), edgecolor="#333333",
                     label=(f"{lab} {label_names[lab]}" if label_names is not None
                            and lab < len(label_names) else str(lab)))
               for lab in labels_seen]
    fig.legend(handles=handles, loc="upper right", fontsize=7, frameon=False,
               title="label", title_fontsize=7)


def _schema_tree(tree: nx.DiGraph) -> nx.DiGraph:
    """A ``networkx.DiGraph`` given to :func:`draw_tree`: one of :func:`to_networkx` as it
    is; any other tree-shaped one (edges child -> parent) as a copy with the node
    attributes :func:`to_networkx` sets (``word`` and ``label`` kept where they are a
    string and an int; ``leaf`` and ``root`` from the edges). Anything but one tree is
    refused, naming what is wrong."""
    n = tree.number_of_nodes()
    roots = [v for v in tree.nodes if tree.out_degree(v) == 0]
    two = next((v for v in tree.nodes if tree.out_degree(v) > 1), None)
    if two is not None:
        raise ValueError(f"draw_tree: node {two!r} of the networkx graph has "
                         f"{tree.out_degree(two)} outgoing edges; a tree's edges point child "
                         "-> parent, one per child (nx.reverse(graph) turns a parent -> child "
                         "tree round)")
    if n and (len(roots) != 1 or not nx.is_weakly_connected(tree)):  # (or has a cycle)
        raise ValueError(f"draw_tree: the networkx graph has {len(roots)} nodes without a "
                         "parent and is not one tree; draw one tree (edges child -> parent, "
                         "exactly one root)")
    keys = ("word", "label", "label_name", "leaf", "root", "span")
    if all(k in d for _, d in tree.nodes(data=True) for k in keys):
        return tree
    out = nx.DiGraph(root=roots[0] if roots else None)
    for v, d in tree.nodes(data=True):
        word, label = d.get("word"), d.get("label")
        out.add_node(v, word=word if isinstance(word, str) else None,
                     label=label if isinstance(label, int) and label >= 0 else None,
                     label_name=None, leaf=tree.in_degree(v) == 0, root=v == roots[0],
                     span=(-1, -1))
    for c, p, d in tree.edges(data=True):
        out.add_edge(c, p, relation=d.get("relation"), rel=d.get("rel"),
                     position=d.get("position"))
    return out


def draw_tree(
    graph: dgl.DGLGraph | nx.DiGraph,
    path: str | os.PathLike,
    vocab: Sequence[str] | Any | None = None,
    relations: Sequence[str] | Any | None = None,
    title: str | None = None,
    *,
    index: int | None = None,
    label_names: Sequence[str] | None = None,
    style: TreeStyle | None = None,
) -> Path:
    """Write a picture (PNG; SVG for a ``.svg`` path or ``TreeStyle(format="svg")``) of a tree.

    Layout (:func:`tree_layout`): dependency trees and chains (every node a word, spans
    covering their own position) are drawn in sentence order, each word in its slot and
    its depth as the row, so projective trees have no crossing edges; constituency trees
    put the leaves in sentence order on the bottom row (``leaves_at_bottom``) and each
    phrase above the middle of its children; AMR and other trees use the same tidy layout
    with leaves one row below their parent. A slot is as wide as its word, so the width
    follows the sentence's length in characters, not its longest word times its nodes.
    ``style`` (:class:`TreeStyle`) overrides these choices, the edge labels, the dpi and
    the format.

    ``graph``: a DGL tree, or a ``networkx.DiGraph`` of :func:`to_networkx` or any tree
    with edges child -> parent (``word`` and ``label`` node attributes drawn where present).
    Node text is the word (``vocab``: a list or a :class:`~gnn_treelstm.trees.vocab.Vocab`),
    else the label id; in a graph without words, the node id (``id: label``). Nodes are
    coloured by label (SST's five classes red to green when ``label_names`` has five
    entries, e.g. :data:`SST_LABEL_NAMES`; else a qualitative palette), white without one;
    the legend names them by ``label_names``, else by id. Edge labels are relation names
    (``relations``: a list or a :class:`~gnn_treelstm.trees.vocab.Relations`; shown when
    given). Written atomically; returns the path.
    """
    style = style or TreeStyle()
    path = Path(path)
    fmt = _picture_format(path, style.format)
    tree = _schema_tree(graph) if isinstance(graph, nx.DiGraph) else to_networkx(
        graph, index, vocab=vocab, relations=relations, label_names=label_names)
    texts = _box_texts(tree)
    pos = _drawn_layout(tree, texts, style)
    edge_labels = relations is not None if style.edge_labels is None else style.edge_labels
    labels_seen = sorted({d["label"] for _, d in tree.nodes(data=True) if d["label"] is not None})
    colour = _Colours.of(labels_seen, label_names)
    fig, ax = _figure(pos, bool(labels_seen), title)
    xs = [p[0] for p in pos.values()] or [0.0]
    # y in rows -> inches, so the axes keep the aspect the figure size assumes
    pos = {v: (x, y * _ROW_IN) for v, (x, y) in pos.items()}
    _draw_edges(ax, tree, pos, edge_labels)
    _draw_nodes(ax, tree, pos, texts, colour)
    ys_in = [p[1] for p in pos.values()] or [0.0]
    ax.set_xlim(min(xs) - _PAD_IN - 0.3, max(xs) + _PAD_IN + 0.3)
    ax.set_ylim(min(ys_in) - 0.45, max(ys_in) + 0.45)
    if labels_seen:
        _draw_legend(fig, labels_seen, label_names, colour)
    if title:
        ax.set_title(title, fontsize=9)
    path = atomic_write(path, lambda f: fig.savefig(f, dpi=style.dpi, format=fmt,
                                                  bbox_inches="tight", pad_inches=0.1))
    log.info("drew a tree of %d nodes to %s", tree.number_of_nodes(), path)
    return path
