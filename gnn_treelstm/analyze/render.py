"""Draw a tree whose nodes carry small coloured boxes (labels, head words) and captions.

The layout is :func:`gnn_treelstm.trees.drawing.tree_layout` (constituency: leaves on the bottom row
in sentence order; dependency trees and chains: every word in its sentence slot), with
each slot as wide as its widest text. Used by the ``tree`` and ``heads`` analyses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from gnn_treelstm.analyze.common import figure, save_figure
from gnn_treelstm.trees.drawing import _in_sentence_order, tree_layout

__all__ = ["Box", "Frame", "render_tree", "write_html_trees"]

#: (text, face colour) of one box
Box = tuple[str, str]

_CHAR_IN = 0.066   # a character at the 8 pt font, inches
_BOX_PAD_IN = 0.09  # a box's padding, inches
_GAP_IN = 0.22     # gap between neighbouring slots, inches
_ROW_IN = 0.7      # row height, inches


def _box_width(text: str) -> float:
    return max(1, len(text)) * _CHAR_IN + _BOX_PAD_IN


@dataclass(frozen=True)
class Frame:
    """What is drawn around the tree: a title above it, a legend of ``(face colour, text)``
    entries beside it (under ``legend_title``), and the picture's resolution."""

    title: str | None = None
    legend: Sequence[tuple[str, str]] = ()
    legend_title: str | None = None
    dpi: int = 130


def render_tree(
    tree: nx.DiGraph, out: str | os.PathLike, *, boxes: Mapping[int, Sequence[Box]],
    captions: Mapping[int, str] | None = None,
    edge_text: Mapping[tuple[int, int], str] | None = None,
    outline: Mapping[int, str] | None = None, frame: Frame = Frame(),
) -> Path:
    """Write a picture of ``tree`` (from :func:`gnn_treelstm.trees.drawing.to_networkx`).

    ``boxes[v]``: the boxes drawn side by side at node ``v``; ``captions[v]``: text under
    them (a leaf's word); ``edge_text[(child, parent)]``: a label on the edge;
    ``outline[v]``: a thick border colour for ``v``'s boxes (e.g. a wrong prediction);
    ``frame``: title, legend and resolution. Written atomically; returns the path.
    """
    captions = captions or {}
    widths = _slot_widths(tree, boxes, captions)
    pos = _positions(tree, widths)
    xs = [p[0] for p in pos.values()] or [0.0]
    ys = [p[1] for p in pos.values()] or [0.0]
    widest = max(widths.values(), default=1.0)
    legend_in = 1.7 if frame.legend else 0.0
    width = max(3.0, max(xs) - min(xs) + widest + legend_in)
    height = max(1.8, max(ys) - min(ys) + 1.2 + (0.35 if frame.title else 0.0))
    fig = figure(width, height)
    ax = fig.add_axes((0.0, 0.0, 1.0 - legend_in / width, 1.0))
    ax.set_axis_off()
    _draw_edges(ax, tree, pos, edge_text or {})
    _draw_nodes(ax, tree, pos, boxes, captions, outline or {})
    ax.set_xlim(min(xs) - widest / 2 - 0.1, max(xs) + widest / 2 + 0.1)
    ax.set_ylim(min(ys) - 0.65, max(ys) + 0.4)
    if frame.legend:
        _draw_legend(fig, frame)
    if frame.title:
        ax.set_title(frame.title, fontsize=9, loc="left")
    return save_figure(fig, out, dpi=frame.dpi)


def _slot_widths(tree: nx.DiGraph, boxes: Mapping[int, Sequence[Box]],
                 captions: Mapping[int, str]) -> dict[int, float]:
    """Each node's slot, inches: its boxes side by side or its caption, whichever is wider,
    and the gap to the next slot."""
    widths = {}
    for v in tree.nodes:
        w_boxes = sum(_box_width(t) for t, _ in boxes.get(v, ())) + 0.02 * len(boxes.get(v, ()))
        w_cap = len(captions.get(v, "")) * _CHAR_IN
        widths[v] = max(w_boxes, w_cap, 0.3) + _GAP_IN
    return widths


def _positions(tree: nx.DiGraph, widths: Mapping[int, float]) -> dict[int, tuple[float, float]]:
    """Node centres, inches (:func:`gnn_treelstm.trees.drawing.tree_layout`)."""
    order = _in_sentence_order(tree)
    pos = tree_layout(tree, leaves_at_bottom=not order, sentence_order=order, widths=widths)
    return {v: (x, y * _ROW_IN) for v, (x, y) in pos.items()}


def _draw_edges(ax, tree: nx.DiGraph, pos: Mapping[int, tuple[float, float]],
                edge_text: Mapping[tuple[int, int], str]) -> None:
    for c, p in tree.edges:
        (x0, y0), (x1, y1) = pos[c], pos[p]
        # from the top of the child's boxes to the bottom of the parent's
        ax.plot([x0, x1], [y0 + 0.12, y1 - 0.12], color="#777777", linewidth=0.8, zorder=1)
        text = edge_text.get((c, p))
        if text:
            ax.text((x0 + x1) / 2, (y0 + y1) / 2, text, fontsize=6.5, color="#1f4e79",
                    ha="center", va="center", zorder=3,
                    bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none",
                          "alpha": 0.9})


def _draw_nodes(ax, tree: nx.DiGraph, pos: Mapping[int, tuple[float, float]],
                boxes: Mapping[int, Sequence[Box]], captions: Mapping[int, str],
                outline: Mapping[int, str]) -> None:
    """Each node's boxes centred on it, side by side, and its caption underneath."""
    for v in tree.nodes:
        x, y = pos[v]
        row = list(boxes.get(v, ()))
        total = sum(_box_width(t) for t, _ in row) + 0.02 * max(0, len(row) - 1)
        left = x - total / 2
        edge = outline.get(v)
        for text, face in row:
            w = _box_width(text)
            ax.text(left + w / 2, y, text or " ", ha="center", va="center", fontsize=8,
                    zorder=4, bbox={"boxstyle": "round,pad=0.25", "fc": face,
                                    "ec": edge or "#444444", "lw": 2.0 if edge else 0.6})
            left += w + 0.02
        cap = captions.get(v)
        if cap:
            ax.text(x, y - 0.2, cap, ha="center", va="top", fontsize=9, zorder=4)


def _draw_legend(fig, frame: Frame) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=face, edgecolor="#333333", label=text)
               for face, text in frame.legend]
    fig.legend(handles=handles, loc="upper right", fontsize=7.5, frameon=False,
               title=frame.legend_title, title_fontsize=7.5)


def write_html_trees(path: str | os.PathLike, trees: Sequence[Sequence[dict]], *, title: str,
                     label_names: Sequence[str] | None = None) -> Path:
    """Trees in :mod:`gnn_treelstm.trees.treesvg`'s node schema as one self-contained HTML file
    (``--html``); an :class:`~gnn_treelstm.analyze.common.AnalysisError` if that module is
    missing."""
    try:
        from gnn_treelstm.trees.treesvg import write_html
    except ImportError as exc:
        from gnn_treelstm.analyze.common import AnalysisError

        raise AnalysisError("--html needs gnn_treelstm.trees.treesvg (write_html), which this "
                            "installation does not have") from exc
    return write_html(path, trees, title=title, label_names=label_names)
