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
from pathlib import Path

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
from gnn_treelstm.analyze.render import render_tree, write_html_trees
from gnn_treelstm.models.checkpoint import Checkpoint
from gnn_treelstm.tasks.classification import ClassificationTask
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.drawing import SST_LABEL_NAMES, to_networkx

__all__ = ["node_predictions", "tree_analysis"]

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


def _sentence(ck: Checkpoint, data: str | None, split: str, index: int | None,
              text: str | None) -> tuple[object, list[str], str]:
    if text is not None:
        from gnn_treelstm.datasets.dependency import load_pipeline, parse_texts
        from gnn_treelstm.models.predictor import Predictor

        parse = parse_texts(load_pipeline(None), [text])
        return Predictor(ck).graphs(parse)[0], parse[0].tokens, "raw text"
    data_dir, sp = split_of(ck, data, split)
    if index is None or not 0 <= index < len(sp):
        raise AnalysisError(f"--index {index}: the {split} split of {data_dir} has "
                            f"{len(sp)} sentences; give 0..{len(sp) - 1}")
    toks = tokens_of(data_dir, split)[index].get("tokens")
    if toks is None:
        raise AnalysisError(f"{data_dir}/text/{split}.jsonl: no tokens for sentence {index}")
    return sp.graphs[index], list(toks), f"{split} #{index}"


def tree_analysis(run: str, out: str | Path, table: str | Path, *, data: str | None = None,
                  split: str = "dev", index: int | None = 0, text: str | None = None,
                  edge_labels: str = "auto", html: str | Path | None = None) -> dict:
    """Draw one sentence's tree (predicted vs gold per node) and write its node table.

    Returns ``{"nodes", "labelled", "correct", "root_pred", "root_gold"}``."""
    ck = load(run)
    _check_classifier(ck)  # before reading a sentence: a pair model has no single ones
    graph, tokens, where = _sentence(ck, data, split, index, text)
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
    boxes, captions, outline, rows = {}, {}, {}, []
    correct = labelled = 0
    for v, d in tree.nodes(data=True):
        p, g = int(pred[v]), gold[v]
        boxes[v] = ([(str(p), _colour(p, k))] if p >= 0 else []) + \
                   ([(str(g), _colour(g, k))] if g >= 0 else [])
        lo, hi = d["span"]
        if d["word"] is not None and 0 <= lo < len(tokens):
            captions[v] = tokens[lo] if hi == lo + 1 else str(d["word"])
        if p >= 0 and g >= 0:
            labelled += 1
            correct += p == g
            if p != g:
                outline[v] = "#000000"
        rows.append((v, f"[{lo}, {hi})", " ".join(tokens[lo:hi]),
                     names[g] if g >= 0 else "", names[p] if p >= 0 else "",
                     "" if p < 0 else f"{float(prob[v]):.3f}",
                     "" if p < 0 or g < 0 else ("yes" if p == g else "NO")))
    show = edge_labels == "on" or (edge_labels == "auto" and not _positional(ck.relations))
    edge_text = {(c, p): str(tree.edges[c, p]["relation"]) for c, p in tree.edges} \
        if show else {}
    root = tree.graph["root"]
    rp, rg = int(pred[root]), gold[root]
    title = (f"{ck.model.config.cell} ({ck.run_config.get('tree')}), {where}: "
             f"root predicted {names[rp] if rp >= 0 else '-'}, gold "
             f"{names[rg] if rg >= 0 else '-'}; nodes right {correct}/{labelled}")
    legend = [(_colour(i, k), f"{i} {names[i]}") for i in range(k)]
    legend.append(("#ffffff", "left box: predicted"))
    legend.append(("#ffffff", "right box: gold"))
    legend.append(("#ffffff", "black border: wrong"))
    render_tree(tree, out, boxes=boxes, captions=captions, edge_text=edge_text,
                outline=outline, legend=legend, legend_title="label", title=title)
    head = (f"{where}: {' '.join(tokens)}\n\n"
            f"Nodes with gold and predicted labels: {labelled}, right: {correct}"
            f"{f' ({100 * correct / labelled:.1f} %)' if labelled else ''}.\n\n")
    write_table(table, head + markdown(
        ["node", "span", "words", "gold", "predicted", "p(predicted)", "right"], rows))
    if html is not None:
        nodes = []
        for v, d in tree.nodes(data=True):
            p, g = int(pred[v]), gold[v]
            parent = next(iter(tree.successors(v)), None)
            lo, hi = d["span"]
            nodes.append({
                "id": v, "parent": parent, "word": captions.get(v),
                "token": lo if v in captions else None, "words": " ".join(tokens[lo:hi]),
                "relation": edge_text.get((v, parent)), "label": names[p] if p >= 0 else None,
                "probabilities": ({names[c]: round(float(q), 4) for c, q in
                                   enumerate(probs[v])} if p >= 0 else None),
                "gold": names[g] if g >= 0 else None})
        write_html_trees(html, [nodes], title=title, label_names=names)
    return {"nodes": graph.num_nodes(), "labelled": labelled, "correct": correct,
            "root_pred": rp, "root_gold": rg}


def _positional(relations: Sequence[str]) -> bool:
    """Whether the relation names are only child positions (constituency trees)."""
    return set(relations) <= {"left", "right"} or all(r.isdigit() for r in relations)
