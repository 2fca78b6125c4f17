r"""``analyze heads``: the head word a lexicalized model picks for every constituent
(Teng & Zhang 2017, §4.1 eqs 9-10, §7.5 and Fig 5), against a rule-based head finder.

**The model's head word.** The head lexicon ``x_t`` of an internal node is a soft mix of
its children's, ``x_t = z_t ⊙ x^L + (1 - z_t) ⊙ x^R`` with a vector gate ``z_t`` (eqs 9-10),
so "the head" has to be read off. Two readings, ``--rule``:

* ``cosine`` (default, Teng §7.5's own: "we decide the head of a node by choosing the
  head of the child that gives the largest similarity value", the cosine between the
  node's head lexicon and each child's): at node ``t`` pick the child ``k ∈ {L, R}`` with
  the larger ``cos(x_t, x^k)`` (a tie: ``L``);
* ``gate``: pick ``L`` when the mean of the gate over its dimensions is at least ½,
  ``mean(z_t) ≥ 0.5``, else ``R``.

The head *word* of a constituent is then found by following the picked child from the
node down to a leaf; its word is the head. A node with one child takes that child's.
Leaves are their own heads and are left out of every count.

**The rule-based head.** Teng compares with Collins' head rules (30.68 % agreement on SST
dev, 25.72 % on test), which need syntactic categories; SST's PTB trees carry sentiment
labels instead. The substitute: the sentence's spaCy dependency parse (the data set's
``dependency`` trees, built from the same tokens), and as the head of a span the token
whose dependency head lies outside the span; when several do (the span is not one
dependency subtree), the one nearest the dependency root, then the leftmost. For a span
that is one subtree this is that subtree's root: the dependency-grammar head, which
Collins-style rules approximate. The table also gives the agreement of the trivial
leftmost-word and rightmost-word heads, so the number has a scale.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import dgl
import torch
from torch.nn import functional as F

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
from gnn_treelstm.cells.lexicalized import head_gate
from gnn_treelstm.models.checkpoint import Checkpoint
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.drawing import SST_LABEL_NAMES, to_networkx

__all__ = ["RULES", "HeadsOptions", "model_heads", "rule_heads", "agreement",
           "heads_analysis", "TENG_COLLINS"]

log = logging.getLogger(__name__)
RULES = ("cosine", "gate")
#: Teng & Zhang §7.5: agreement of their model's heads with Collins' rules (dev, test), %
TENG_COLLINS = {"dev": 30.68, "test": 25.72}
_RULE_FACE = "#d8c8e8"  # the rule head's box, where it differs from the model's


def _head_module(cell):
    for owner in (cell, getattr(cell, "up", None)):
        mod = getattr(owner, "head_lexicon_module", None)
        if mod is not None:
            return mod
    return None


@torch.no_grad()
def model_heads(ck: Checkpoint, graph: dgl.DGLGraph, rule: str = "cosine") -> torch.Tensor:
    """The head token (an index into the sentence) of every node of ``graph`` (one tree or
    a batch), as the module docstring defines it; (N,) long."""
    if rule not in RULES:
        raise AnalysisError(f"--rule {rule!r}: choose one of {', '.join(RULES)}")
    mod = _head_module(ck.model.cell)
    if mod is None:
        raise AnalysisError(f"{ck.path}: the {ck.model.config.cell!r} cell has no head "
                            "lexicon; train a lexicalized model (--model lex)")
    ck.model.eval()
    x = ck.model.embed(graph)  # (N, x), no dropout in eval mode
    heads = mod(graph, x)  # (N, x): eqs 9-10
    n = graph.num_nodes()
    src, dst = (t.long() for t in graph.edges())
    pos = graph.edata[G.POS].long()
    kids = torch.full((n, 2), -1, dtype=torch.long)
    kids[dst, pos] = src
    inner = (kids >= 0).any(1)
    both = (kids >= 0).all(1)
    pick = torch.where(kids[:, 0] >= 0, kids[:, 0], kids[:, 1])  # one child: that one
    b = both.nonzero().squeeze(1)
    if len(b):
        lft, rgt = kids[b, 0], kids[b, 1]
        if rule == "cosine":
            left = F.cosine_similarity(heads[b], heads[lft], dim=-1) >= \
                F.cosine_similarity(heads[b], heads[rgt], dim=-1)
        else:
            if mod.mode != "gate":
                raise AnalysisError(f"--rule gate: the head lexicon has mode {mod.mode!r}, "
                                    "no gate; use --rule cosine")
            xs = torch.cat([heads[lft], heads[rgt]], dim=-1)
            left = head_gate(xs, mod.W_z, mod.b_z).mean(-1) >= 0.5  # eq 10
        pick[b] = torch.where(left, lft, rgt)
    span = graph.ndata[G.SPAN].long()
    head = span[:, 0].clone()  # leaves: their own token
    for v in torch.argsort(span[:, 1] - span[:, 0]).tolist():  # children before parents
        if inner[v]:
            head[v] = head[pick[v]]
    return head


def rule_heads(dep_parents: Sequence[int], spans: Sequence[tuple[int, int]]) -> list[int]:
    """The rule-based head token of each span ``[lo, hi)`` from the dependency parents
    (``-1`` at the root): the token of the span whose parent lies outside it, nearest
    the root, then leftmost (module docstring)."""
    n = len(dep_parents)
    depth = [0] * n
    for i in range(n):
        d, j = 0, i
        while dep_parents[j] >= 0:
            j = dep_parents[j]
            d += 1
            if d > n:
                raise AnalysisError(f"dependency parents {list(dep_parents)} have a cycle")
        depth[i] = d
    out = []
    for lo, hi in spans:
        cands = [i for i in range(lo, hi) if not lo <= dep_parents[i] < hi]
        out.append(min(cands, key=lambda i: (depth[i], i)))
    return out


def _dep_parents(g: dgl.DGLGraph) -> list[int]:
    parents = [-1] * g.num_nodes()
    src, dst = g.edges()
    for s, d in zip(src.tolist(), dst.tolist()):
        parents[s] = d
    return parents


def agreement(ck: Checkpoint, const: Sequence[dgl.DGLGraph], dep: Sequence[dgl.DGLGraph],
              rule: str = "cosine", batch: int = 256) -> dict:
    """Counts over the internal nodes of ``const``: the model's head equal to the
    rule-based one, and the leftmost / rightmost word equal to it."""
    total = same = left = right = 0
    for start in range(0, len(const), batch):
        gs = list(const[start:start + batch])
        bg = dgl.batch(gs)
        heads = model_heads(ck, bg, rule).tolist()
        offset = 0
        for k, (g, d) in enumerate(zip(gs, dep[start:start + batch])):
            spans = [tuple(s) for s in g.ndata[G.SPAN].tolist()]
            n_tok = max(hi for _, hi in spans)
            if d.num_nodes() != n_tok:
                raise AnalysisError(f"sentence {start + k}: its constituency tree has {n_tok} "
                                    f"tokens, its dependency tree {d.num_nodes()}; build both "
                                    "from the same data (gnn-treelstm build)")
            inner = [v for v, (lo, hi) in enumerate(spans) if hi - lo >= 2]
            rule_h = rule_heads(_dep_parents(d), [spans[v] for v in inner])
            for v, r in zip(inner, rule_h):
                total += 1
                same += heads[offset + v] == r
                left += spans[v][0] == r
                right += spans[v][1] - 1 == r
            offset += g.num_nodes()
    return {"constituents": total, "model": same, "leftmost": left, "rightmost": right}


def _pct(a: int, b: int) -> float:
    return 100.0 * a / b if b else float("nan")


@dataclass(frozen=True)
class HeadsOptions:
    """What ``analyze heads`` measures and draws (its flags).

    ``data``: a built data directory (default: the checkpoint's); ``splits``: the splits of
    the agreement table; ``draw_split`` and ``index``: the sentence drawn; ``rule``: how the
    model's head is read off (:data:`RULES`, module docstring); ``html``: also write the
    drawn tree as self-contained HTML there."""

    data: str | None = None
    splits: Sequence[str] = ("dev", "test")
    draw_split: str = "dev"
    index: int = 0
    rule: str = "cosine"
    html: str | Path | None = None


def heads_analysis(run: str, out: str | Path, table: str | Path,
                   options: HeadsOptions = HeadsOptions()) -> dict:
    """Agreement over ``options.splits`` (table) and one sentence's heads drawn on its
    tree."""
    data, rule = options.data, options.rule
    ck = load(run)
    if _head_module(ck.model.cell) is None:
        raise AnalysisError(f"{ck.path}: the {ck.model.config.cell!r} cell has no head "
                            "lexicon; train a lexicalized model (--model lex)")
    results = {}
    for split in options.splits:
        data_dir, const = split_of(ck, data, split)
        _, dep = split_of(ck, data, split, tree="dependency")
        results[split] = agreement(ck, const.graphs, dep.graphs, rule)
        log.info("%s: %s", split, results[split])
    rows = []
    for split, r in results.items():
        n = r["constituents"]
        rows.append((split, n, f"{_pct(r['model'], n):.2f}", f"{_pct(r['leftmost'], n):.2f}",
                     f"{_pct(r['rightmost'], n):.2f}", str(TENG_COLLINS.get(split, ""))))
    text = (f"Head words of `{ck.path}` ({ck.model.config.cell}, rule `{rule}`) against the "
            "rule-based heads (spaCy dependency parse, see `gnn_treelstm/analyze/heads.py`),"
            " over the internal nodes (constituents of 2+ words).\n\n" + markdown(
                ["split", "constituents", "model = rule (%)", "leftmost word = rule (%)",
                 "rightmost word = rule (%)", "Teng & Zhang vs Collins (%)"], rows))
    drawn = _draw(ck, options, out)
    write_table(table, text + "\n" + drawn)
    return results


def _draw(ck: Checkpoint, options: HeadsOptions, out: str | Path) -> str:
    """Draw the sentence ``options`` name with the model's and the rule's head words;
    returns its table's text."""
    split, index, rule = options.draw_split, options.index, options.rule
    data_dir, const = split_of(ck, options.data, split)
    _, dep = split_of(ck, options.data, split, tree="dependency")
    if not 0 <= index < len(const):
        raise AnalysisError(f"--index {index}: the {split} split of {data_dir} has "
                            f"{len(const)} sentences; give 0..{len(const) - 1}")
    g, d = const.graphs[index], dep.graphs[index]
    tokens = list(tokens_of(data_dir, split)[index]["tokens"])
    heads = model_heads(ck, g, rule).tolist()
    tree = to_networkx(g, vocab=ck.vocab)
    spans = [tuple(s) for s in g.ndata[G.SPAN].tolist()]
    inner = [v for v, (lo, hi) in enumerate(spans) if hi - lo >= 2]
    rule_h = dict(zip(inner, rule_heads(_dep_parents(d), [spans[v] for v in inner])))
    boxes, outline, rows = {}, {}, []
    for v, data_v in tree.nodes(data=True):
        lab = data_v["label"]
        face = SST_COLOURS[lab] if lab is not None and 0 <= lab < 5 else "#ffffff"
        word = tokens[heads[v]]
        boxes[v] = [(word, face)]
        if v in rule_h:
            if rule_h[v] != heads[v]:
                boxes[v].append((tokens[rule_h[v]], _RULE_FACE))
                outline[v] = "#7b3294"
            lo, hi = spans[v]
            rows.append((v, " ".join(tokens[lo:hi]), word, tokens[rule_h[v]],
                         "yes" if rule_h[v] == heads[v] else "no"))
    agree = sum(r[-1] == "yes" for r in rows)
    legend = [(SST_COLOURS[i], f"gold {i} {SST_LABEL_NAMES[i]}") for i in range(5)]
    legend += [("#ffffff", "first box: model's head word"),
               (_RULE_FACE, "second box: rule head, where it differs"),
               ("#ffffff", "purple border: differs")]
    title = (f"head words of {ck.model.config.cell} (rule {rule}), {split} #{index}: "
             f"{agree}/{len(rows)} constituents agree with the dependency-rule head")
    render_tree(tree, out, boxes=boxes, outline=outline,
                frame=Frame(title=title, legend=legend))
    if options.html is not None:
        write_html_trees(options.html, [_html_nodes(tree, tokens, spans, heads, rule_h)],
                         title=title, label_names=list(SST_LABEL_NAMES))
    return (f"The drawn sentence ({split} #{index}): {' '.join(tokens)}\n\n"
            + markdown(["node", "constituent", "model head", "rule head", "same"], rows))


def _html_nodes(tree, tokens: list[str], spans: list[tuple], heads: list[int],
                rule_h: dict[int, int]) -> list[dict]:
    """The drawn tree's nodes in :mod:`gnn_treelstm.trees.treesvg`'s schema."""
    nodes = []
    for v, d in tree.nodes(data=True):
        lo, hi = spans[v]
        lab = d["label"]
        rule_word = tokens[rule_h[v]] if v in rule_h else tokens[heads[v]]
        nodes.append({
            "id": v, "parent": next(iter(tree.successors(v)), None),
            "word": tokens[lo] if v not in rule_h else None,
            "token": lo if v not in rule_h else None,
            "words": f"{' '.join(tokens[lo:hi])} | model head: {tokens[heads[v]]} | "
                     f"rule head: {rule_word}",
            "label": SST_LABEL_NAMES[lab] if lab is not None and 0 <= lab < 5 else None})
    return nodes
