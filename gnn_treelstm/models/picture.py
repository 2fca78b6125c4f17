"""A prediction drawn: the tree a model predicted on, with its words, relation names, the
predicted label (or score) in the title and, where the model labels every node
(phrase-level sentiment), every node coloured by its predicted label, the legend naming
them (:func:`draw_prediction`, behind
:meth:`~gnn_treelstm.models.predictor.Predictor.draw`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gnn_treelstm.models.checkpoint import Checkpoint

__all__ = ["draw_prediction"]


def draw_prediction(ck: Checkpoint, rec: dict, graphs: Sequence[Any], path: str | os.PathLike,
                    *, side: int = 0, **kwargs: Any) -> Path:
    """Draw side ``side`` (0: sentence A, 1: sentence B of a pair) of a prediction of
    ``ck``'s model: its record ``rec`` (with ``nodes`` where the model labels every node)
    and the ``graphs`` it was predicted from, as
    :meth:`~gnn_treelstm.models.predictor.Predictor.trees` returns them, to ``path`` (PNG,
    or SVG for a ``.svg`` name); :func:`gnn_treelstm.trees.drawing.draw_tree`'s keyword
    arguments pass through.

    Raises:
        ValueError: a ``side`` the input does not have.
    """
    from gnn_treelstm.trees.drawing import draw_tree, to_networkx

    if side not in range(len(graphs)):
        raise ValueError(f"side={side}: this input has {len(graphs)} sentence(s) "
                         "(0: sentence A, 1: sentence B of a pair)")
    tokens = rec["tokens"] if side == 0 else rec["tokens_b"]
    verdict = rec.get("label", rec.get("score"))
    kwargs.setdefault("title", " ".join(tokens) + ("" if verdict is None
                                                    else f"  [{verdict}]"))
    relations = ck.relations or None
    if "nodes" not in rec:
        return draw_tree(graphs[side], path, vocab=ck.vocab, relations=relations, **kwargs)
    names = list(rec["nodes"][0]["probabilities"])  # the head's classes, in order
    tree = to_networkx(graphs[side], vocab=ck.vocab, relations=relations, label_names=names)
    for node in rec["nodes"]:
        tree.nodes[node["id"]].update(label=names.index(node["label"]),
                                      label_name=node["label"])
    kwargs.setdefault("label_names", names)
    return draw_tree(tree, path, relations=relations, **kwargs)
