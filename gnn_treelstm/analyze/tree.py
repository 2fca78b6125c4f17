"""``analyze tree``: one sentence's tree, predicted against gold label at every node.

The classic SST picture (Socher et al. 2013, Tai et al. 2015): every node of the tree
carries two boxes, the model's predicted label (left) and the gold label (right), coloured
on the 5-point scale from very negative (red) to very positive (green); a wrong prediction
gets a thick black border. Leaves show their word underneath; edges show the relation name
(dependency labels, AMR roles; constituency trees' child positions ``left`` / ``right``
only with ``--edge-labels on``). A model trained on root labels only predicts the root
alone (the other nodes show the gold box only). The table lists every node: span, words,
gold, predicted, its probability.

A sentence comes from a built split (``--split dev --index 7``, with gold labels) or as
raw text (``--text "..."``, parsed with spaCy as ``gnn-treelstm predict`` does; no gold).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import torch

from gnn_treelstm.analyze.common import (
    SST_COLOURS,
    AnalysisError,
    load,
    markdown,
    split_of,
    tokens_of,
    write_table,
)
from gnn_treelstm.analyze.render import Frame, render_tree, write_html_trees
from gnn_treelstm.models.checkpoint import Checkpoint
from gnn_treelstm.tasks.classification import ClassificationTask
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.drawing import SST_LABEL_NAMES, to_networkx

__all__ = ["TreeOptions", "node_predictions", "tree_analysis"]

log = logging.getLogger(__name__)
_PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462")
_NO_LABEL = "#ffffff"


@torch.no_grad()
def node_predictions(ck: Checkpoint, graph) -> torch.Tensor:
    """The class distribution at every node of one graph, (N, C); rows of NaN where the
    model predicts nothing (every node but the root of a root-supervised model)."""
    _check_classifier(ck)
    ck.model.eval()
    out = ck.model(graph)
    if "node_logits" in out:
        return out["node_logits"].softmax(-1)
    root = int(G.batch_roots(graph)[0])
    probs = torch.full((graph.num_nodes(), out["root_logits"].shape[-1]), float("nan"))
    probs[root] = out["root_logits"][0].softmax(-1)
    return probs


def _check_classifier(ck: Checkpoint) -> None:
    task = ck.model.task
    if not isinstance(task, ClassificationTask):
        raise AnalysisError(f"{ck.path}: a {task.name} model does not classify sentences; "
                            "the tree analysis needs a single-sentence classifier (sst-5, "
                            "sst-2, trec)")


def _colour(label: int, num_classes: int) -> str:
    if label < 0:
        return _NO_LABEL
    return SST_COLOURS[label] if num_classes == 5 else _PALETTE[label % len(_PALETTE)]


@dataclass(frozen=True)
class TreeOptions:
    """Which sentence ``analyze tree`` draws and how (its flags).

    ``data``: a built data directory (default: the checkpoint's); ``split`` and ``index``:
    the sentence of a built split; ``text``: a raw sentence instead (parsed with spaCy, no
    gold labels); ``edge_labels``: relation names on the edges, ``"on"``, ``"off"`` or
    ``"auto"`` (not for child positions); ``html``: also write a self-contained HTML
    drawing there."""

    data: str | None = None
    split: str = "dev"
    index: int | None = 0
    text: str | None = None
    edge_labels: str = "auto"
    html: str | Path | None = None


def _sentence(ck: Checkpoint, options: TreeOptions) -> tuple[object, list[str], str]:
    """(graph, tokens, where it comes from) of the sentence ``options`` name."""
    if options.text is not None:
        from gnn_treelstm.datasets.dependency import load_pipeline, parse_texts
        from gnn_treelstm.models.predictor import Predictor

        parse = parse_texts(load_pipeline(None), [options.text])
        return Predictor(ck).graphs(parse)[0], parse[0].tokens, "raw text"
    split, index = options.split, options.index
    data_dir, sp = split_of(ck, options.data, split)
    if index is None or not 0 <= index < len(sp):
        raise AnalysisError(f"--index {index}: the {split} split of {data_dir} has "
                            f"{len(sp)} sentences; give 0..{len(sp) - 1}")
    toks = tokens_of(data_dir, split)[index].get("tokens")
    if toks is None:
        raise AnalysisError(f"{data_dir}/text/{split}.jsonl: no tokens for sentence {index}")
    return sp.graphs[index], list(toks), f"{split} #{index}"


@dataclass
class _Labels:
    """One sentence's tree with the model's and the gold label at every node (-1: none)."""

    tree: nx.DiGraph
    tokens: list[str]
    probs: torch.Tensor  # (N, C), NaN rows where the model predicts nothing
    prob: torch.Tensor   # (N,) the predicted label's probability
    pred: list[int]
    gold: list[int]
    names: list[str]     # the label names
    k: int               # the number of classes coloured

    def both(self, v: int) -> bool:
        """Whether node ``v`` has a predicted and a gold label."""
        return self.pred[v] >= 0 and self.gold[v] >= 0

    def name(self, label: int, none: str | None = "") -> str | None:
        """The label's name, ``none`` for no label (-1)."""
        return self.names[label] if label >= 0 else none


def _labels(ck: Checkpoint, graph, tokens: list[str]) -> _Labels:
    probs = node_predictions(ck, graph)
    known = ~probs.isnan().any(-1)
    prob, pred = probs.nan_to_num(-1.0).max(-1)
    pred[~known] = -1
    names = list(ck.label_names or [])
    k = len(names) or 5
    names = names or list(SST_LABEL_NAMES)
    tree = to_networkx(graph, vocab=ck.vocab, relations=ck.relations)
    gold = [-1 if tree.nodes[v]["label"] is None else tree.nodes[v]["label"]
            for v in range(graph.num_nodes())]
    return _Labels(tree, tokens, probs, prob, [int(p) for p in pred], gold, names, k)


def tree_analysis(run: str, out: str | Path, table: str | Path,
                  options: TreeOptions = TreeOptions()) -> dict:
    """Draw one sentence's tree (predicted vs gold per node) and write its node table.

    Returns ``{"nodes", "labelled", "correct", "root_pred", "root_gold"}``."""
    ck = load(run)
    _check_classifier(ck)  # before reading a sentence: a pair model has no single ones
    graph, tokens, where = _sentence(ck, options)
    lab = _labels(ck, graph, tokens)
    captions = _captions(lab)
    labelled = sum(lab.both(v) for v in lab.tree.nodes)
    correct = sum(lab.both(v) and lab.pred[v] == lab.gold[v] for v in lab.tree.nodes)
    show = options.edge_labels == "on" or (options.edge_labels == "auto"
                                           and not _positional(ck.relations))
    edge_text = {(c, p): str(lab.tree.edges[c, p]["relation"]) for c, p in lab.tree.edges} \
        if show else {}
    root = lab.tree.graph["root"]
    rp, rg = lab.pred[root], lab.gold[root]
    title = (f"{ck.model.config.cell} ({ck.run_config.get('tree')}), {where}: "
             f"root predicted {lab.name(rp, '-')}, gold "
             f"{lab.name(rg, '-')}; nodes right {correct}/{labelled}")
    render_tree(lab.tree, out, boxes=_boxes(lab), captions=captions, edge_text=edge_text,
                outline={v: "#000000" for v in lab.tree.nodes
                         if lab.both(v) and lab.pred[v] != lab.gold[v]},
                frame=Frame(title=title, legend=_legend(lab), legend_title="label"))
    head = (f"{where}: {' '.join(tokens)}\n\n"
            f"Nodes with gold and predicted labels: {labelled}, right: {correct}"
            f"{f' ({100 * correct / labelled:.1f} %)' if labelled else ''}.\n\n")
    write_table(table, head + markdown(
        ["node", "span", "words", "gold", "predicted", "p(predicted)", "right"],
        _table_rows(lab)))
    if options.html is not None:
        write_html_trees(options.html, [_html_nodes(lab, captions, edge_text)], title=title,
                         label_names=lab.names)
    return {"nodes": graph.num_nodes(), "labelled": labelled, "correct": correct,
            "root_pred": rp, "root_gold": rg}


def _boxes(lab: _Labels) -> dict[int, list[tuple[str, str]]]:
    """Each node's predicted box (left) and gold box (right), where it has them."""
    return {v: [(str(label), _colour(label, lab.k)) for label in (lab.pred[v], lab.gold[v])
                if label >= 0] for v in lab.tree.nodes}


def _captions(lab: _Labels) -> dict[int, str]:
    """A word node's word: its token for a one-word span, else the vocabulary's word."""
    captions = {}
    for v, d in lab.tree.nodes(data=True):
        lo, hi = d["span"]
        if d["word"] is not None and 0 <= lo < len(lab.tokens):
            captions[v] = lab.tokens[lo] if hi == lo + 1 else str(d["word"])
    return captions


def _legend(lab: _Labels) -> list[tuple[str, str]]:
    return [(_colour(i, lab.k), f"{i} {lab.names[i]}") for i in range(lab.k)] + [
        ("#ffffff", "left box: predicted"), ("#ffffff", "right box: gold"),
        ("#ffffff", "black border: wrong")]


def _table_rows(lab: _Labels) -> list[tuple]:
    rows = []
    for v, d in lab.tree.nodes(data=True):
        p, g = lab.pred[v], lab.gold[v]
        lo, hi = d["span"]
        rows.append((v, f"[{lo}, {hi})", " ".join(lab.tokens[lo:hi]), lab.name(g),
                     lab.name(p), "" if p < 0 else f"{float(lab.prob[v]):.3f}",
                     "" if p < 0 or g < 0 else ("yes" if p == g else "NO")))
    return rows


def _html_nodes(lab: _Labels, captions: dict[int, str],
                edge_text: dict[tuple[int, int], str]) -> list[dict]:
    """The nodes in :mod:`gnn_treelstm.trees.treesvg`'s schema."""
    nodes = []
    for v, d in lab.tree.nodes(data=True):
        p, g = lab.pred[v], lab.gold[v]
        parent = next(iter(lab.tree.successors(v)), None)
        lo, hi = d["span"]
        nodes.append({
            "id": v, "parent": parent, "word": captions.get(v),
            "token": lo if v in captions else None, "words": " ".join(lab.tokens[lo:hi]),
            "relation": edge_text.get((v, parent)), "label": lab.name(p, None),
            "probabilities": ({lab.names[c]: round(float(q), 4) for c, q in
                               enumerate(lab.probs[v])} if p >= 0 else None),
            "gold": lab.name(g, None)})
    return nodes


def _positional(relations: Sequence[str]) -> bool:
    """Whether the relation names are only child positions (constituency trees)."""
    return set(relations) <= {"left", "right"} or all(r.isdigit() for r in relations)
