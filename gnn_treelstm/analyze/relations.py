r"""``analyze relations``: relations ranked by the Frobenius norm of their composition
matrix (Tran & Cheng 2018, §6.2-6.4).

mTreeLSTM (eq 3) composes child ``k`` of node ``j`` through the relation's matrix
``W_hh^r = W_hm diag(W_mr e_r) W_mh`` (``h × h``): the larger its norm, the more that
child weighs in the parent. Tran & Cheng list the relations in decreasing order of
``‖W_hh^r‖_F`` (SICK dependency trees: iobj, mark, neg, amod, prt, conj; AMR: :ARG1,
:degree, :ARG0, ...). For ``mtree-full`` the matrix is the relation's own ``W_hh[r]``.
The parameters are read by their public names (``cell.rel_emb``, ``cell.W_mr``,
``cell.W_mh``, ``cell.W_hm``; ``cell.W_hh``).

The table adds how often each relation occurs in the training split (edges): a relation
seen a few times keeps nearly its initial embedding, and its norm says little.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch

from gnn_treelstm.analyze.common import (
    AnalysisError,
    figure,
    load,
    markdown,
    save_figure,
    split_of,
    write_table,
)
from gnn_treelstm.models.checkpoint import Checkpoint
from gnn_treelstm.trees import graph as G

__all__ = ["relation_matrices", "relation_norms", "relation_counts", "relations_analysis"]

log = logging.getLogger(__name__)
CELLS = ("mtree", "mtree-full")


@torch.no_grad()
def relation_matrices(cell) -> torch.Tensor:
    """``W_hh^r`` of every relation, (R, h, h): ``W_hm diag(W_mr e_r) W_mh`` (Tran eq 3)
    for ``variant="mult"``, ``W_hh`` itself for ``"full"``."""
    variant = getattr(cell, "variant", None)
    if variant == "full":
        return cell.W_hh.detach().clone()
    if variant != "mult":
        raise AnalysisError(f"a {type(cell).__name__} cell (variant {variant!r}) has no "
                            "relation matrices; use an mtree or mtree-full model")
    d = cell.W_mr(cell.rel_emb.weight)  # (R, m): W_mr e_r
    W_hm, W_mh = cell.W_hm.weight, cell.W_mh.weight  # (h, m), (m, h)
    return torch.einsum("hm,rm,mk->rhk", W_hm, d, W_mh)


def relation_norms(cell) -> torch.Tensor:
    """``‖W_hh^r‖_F`` of every relation, (R,)."""
    return torch.linalg.matrix_norm(relation_matrices(cell), ord="fro")


def relation_counts(graphs: Sequence, num_relations: int) -> list[int]:
    """Edges per relation id over ``graphs``."""
    c: Counter = Counter()
    for g in graphs:
        if g.num_edges():
            c.update(g.edata[G.REL].tolist())
    return [c.get(r, 0) for r in range(num_relations)]


def _counts(ck: Checkpoint, data: str | None, split: str) -> list[int]:
    _, sp = split_of(ck, data, split)
    graphs = list(sp.graphs) + list(sp.graphs_b or [])
    return relation_counts(graphs, len(ck.relations))


def _note(norms: Sequence[float], counts: Sequence[int | None]) -> str:
    """One line on the ranking: collapsed (every norm 0), or the rank correlation of the
    norms with the training counts."""
    if max(norms, default=0.0) == 0.0:
        return ("Every norm is 0: `W_mr`, `W_mh` or `W_hm` (or every relation embedding) "
                "trained to zero, so the children reach the parent only through the forget "
                "gates; the ranking below is the relation order, not a result.")
    if any(c is None for c in counts) or len(set(norms)) < 2 or len(set(counts)) < 2:
        return "Ranked by norm."
    from scipy.stats import spearmanr

    rho = float(spearmanr(norms, counts).statistic)
    return f"Spearman's rho of norm and edge count: {rho:.2f}. Ranked by norm."


def relations_analysis(runs: Sequence[str], out: str | Path, table: str | Path, *,
                       data: Sequence[str | None] | None = None, top: int = 15,
                       counts_split: str | None = "train") -> list[list[tuple]]:
    """One panel per run: the ``top`` relations by norm; the table ranks all of them.

    Returns per run the ranked ``(relation, norm, train count or None)``."""
    if top <= 0:
        raise AnalysisError(f"--top must be positive, got {top}")
    data = list(data or [None] * len(runs))
    if len(data) not in (1, len(runs)):
        raise AnalysisError(f"--data: give one directory or one per run ({len(runs)}), "
                            f"got {len(data)}")
    if len(data) == 1:
        data = data * len(runs)
    ranked_all, text = [], ""
    fig = figure(5.2 * len(runs), 0.26 * top + 1.3)
    for k, (run, d) in enumerate(zip(runs, data)):
        ck = load(run, cells=CELLS)
        names = list(ck.relations)
        norms = relation_norms(ck.model.cell).tolist()
        if len(names) != len(norms):
            raise AnalysisError(f"{ck.path}: {len(names)} relation names but the cell has "
                                f"{len(norms)} relation embeddings")
        counts = _counts(ck, d, counts_split) if counts_split else [None] * len(names)
        order = sorted(range(len(names)), key=lambda r: -norms[r])
        ranked = [(names[r], norms[r], counts[r]) for r in order]
        ranked_all.append(ranked)
        tree = ck.run_config.get("tree") or "?"
        label = (f"{ck.model.config.cell} on {ck.model.task.name}, {tree} trees "
                 f"[{ck.path.parent.name}]")
        note = _note(norms, counts)
        text += (f"## {label} (`{ck.path}`)\n\n{note}\n\n" + markdown(
            ["rank", "relation", "Frobenius norm", f"{counts_split or 'train'} edges"],
            [(i + 1, n, f"{v:.3f}", "" if c is None else c)
             for i, (n, v, c) in enumerate(ranked)]) + "\n")
        ax = fig.add_subplot(1, len(runs), k + 1)
        shown = ranked[:top][::-1]
        ax.barh([n for n, _, _ in shown], [v for _, v, _ in shown], color="#4c72b0")
        for y, (_, v, c) in enumerate(shown):
            if c is not None and max(norms) > 0.0:
                ax.text(v, y, f" {c}", va="center", fontsize=7, color="#555555")
        ax.set_xlabel(r"$\|W_{hm}\,\mathrm{diag}(W_{mr} e_r)\,W_{mh}\|_F$"
                      if ck.model.cell.variant == "mult" else r"$\|W_{hh}^r\|_F$")
        ax.set_title(f"{label}\n(top {len(shown)} of {len(names)}; grey: "
                     f"{counts_split} edges)" if counts_split else label, fontsize=9)
        if max(norms) == 0.0:
            ax.text(0.5, 0.5, "every norm is 0:\nthe relation path collapsed",
                    transform=ax.transAxes, ha="center", va="center", fontsize=10,
                    color="#b2182b")
        elif counts_split:
            ax.text(0.98, 0.02, note.split(". ")[0], transform=ax.transAxes, ha="right",
                    va="bottom", fontsize=7.5, color="#555555")
        ax.tick_params(axis="y", labelsize=8)
        ax.margins(x=0.15)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out)
    write_table(table, "Relations ranked by the Frobenius norm of their composition matrix "
                "(Tran & Cheng 2018, §6.2-6.3).\n\n" + text)
    return ranked_all
