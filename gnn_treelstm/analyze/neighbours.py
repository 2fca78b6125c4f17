r"""``analyze neighbours``: nearest-neighbour sentences under a relatedness model against
mean word vectors (Tai et al. 2015, §7.1 and Table 4).

Tai et al. draw a 1000-sentence sample from the SICK test set and, for a query sentence,
rank the other sentences of the sample twice: by the trained model's predicted
relatedness of the pair (query, candidate), ``ŷ = rᵀ p̂`` in 1..5 (Tai eq 15), and by the
cosine similarity of the two sentences' mean word vectors. Here the sample is drawn from
the split's distinct sentences (A and B sides, compared as lower-cased token strings) with
``random.Random(seed)``; each query sentence is added to the sample if the draw missed
it. The mean vectors use the checkpoint's own word embedding (for SICK-R the fixed GloVe
vectors, Tai §5.3), over the words of the sentence's graph (unknown words included as
``<unk>``'s vector).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import dgl
import torch
from torch.nn import functional as F

from gnn_treelstm.analyze.common import (
    AnalysisError,
    figure,
    load,
    markdown,
    save_figure,
    split_of,
    tokens_of,
    write_table,
)
from gnn_treelstm.tasks.base import Encoded
from gnn_treelstm.trees import graph as G

__all__ = ["NeighboursOptions", "nearest", "mean_vectors", "neighbours_analysis"]

log = logging.getLogger(__name__)


def nearest(scores: torch.Tensor, query: int, k: int) -> list[tuple[int, float]]:
    """The ``k`` best candidates ``(index, score)`` of a score row, the query left out,
    best first (ties: the lower index)."""
    s = scores.clone().double()
    s[query] = float("-inf")
    k = min(k, len(s) - 1)
    order = sorted(range(len(s)), key=lambda i: (-float(s[i]), i))[:k]
    return [(i, float(s[i])) for i in order]


def mean_vectors(emb: torch.Tensor, graphs: Sequence[dgl.DGLGraph]) -> torch.Tensor:
    """Mean of the word vectors of each graph's word nodes, (n, d)."""
    out = []
    for g in graphs:
        w = g.ndata[G.WORD]
        w = w[w != G.NO_WORD]
        if not len(w):
            raise AnalysisError("a sentence graph without words cannot have a mean vector")
        out.append(emb[w].mean(0))
    return torch.stack(out)


@torch.no_grad()
def model_scores(model, graphs: Sequence[dgl.DGLGraph], queries: Sequence[int],
                 batch: int = 256) -> torch.Tensor:
    """Predicted relatedness of every (query, candidate) pair, (len(queries), n)."""
    model.eval()
    sents = []
    for start in range(0, len(graphs), batch):
        sents.append(model.encode(dgl.batch(list(graphs[start:start + batch]))).sent)
    sent = torch.cat(sents)  # (n, d)
    rows = []
    for q in queries:
        pair = torch.cat([sent[q].expand_as(sent), sent])
        enc = Encoded(graph=None, h=sent, sent=pair, roots=None, num_a=len(sent))
        rows.append(model.head(enc)["score"])
    return torch.stack(rows)


def _pool(graphs_a, graphs_b, recs) -> tuple[list[str], list]:
    seen: dict[str, int] = {}
    texts, graphs = [], []
    for i, r in enumerate(recs):
        for side, gs in (("a", graphs_a), ("b", graphs_b)):
            t = " ".join(r[side])
            if t.lower() not in seen:
                seen[t.lower()] = len(texts)
                texts.append(t)
                graphs.append(gs[i])
    return texts, graphs


@dataclass(frozen=True)
class NeighboursOptions:
    """Which sentences ``analyze neighbours`` ranks (its flags).

    ``data``: a built data directory (default: the checkpoint's); ``split``: the split the
    sample is drawn from; ``queries``: query sentences of that split (tokens separated by
    spaces, case ignored), else the first ``num_queries`` of the sample; ``sample``: the
    sentences in the sample (at least 2), drawn with ``random.Random(seed)``; ``k``:
    neighbours per query."""

    data: str | None = None
    split: str = "test"
    queries: Sequence[str] = ()
    num_queries: int = 3
    sample: int = 1000
    k: int = 3
    seed: int = 1


def neighbours_analysis(run: str, out: str | Path, table: str | Path,
                        options: NeighboursOptions = NeighboursOptions()) -> list[dict]:
    """Nearest neighbours of each query in a ``sample``-sentence draw; table and figure."""
    ck = load(run, tasks=("sick-r",))
    split = options.split
    data_dir, sp = split_of(ck, options.data, split)
    texts, graphs = _pool(sp.graphs, sp.graphs_b, tokens_of(data_dir, split))
    if options.sample < 2:
        raise AnalysisError(f"--sample must be at least 2, got {options.sample}")
    wanted = _query_indices(texts, options.queries, f"the {split} split of {data_dir}")
    chosen, wanted = _draw_sample(len(texts), wanted, options)
    pos = {i: j for j, i in enumerate(chosen)}
    pool_g = [graphs[i] for i in chosen]
    model_s = model_scores(ck.model, pool_g, [pos[w] for w in wanted])
    mv = F.normalize(mean_vectors(ck.model.embedding.weight.detach(), pool_g), dim=-1)
    results, rows = [], []
    for qi, w in enumerate(wanted):
        q = pos[w]
        by_model = nearest(model_s[qi], q, options.k)
        by_mean = nearest(mv @ mv[q], q, options.k)
        results.append({"query": texts[w],
                        "model": [(texts[chosen[i]], s) for i, s in by_model],
                        "mean": [(texts[chosen[i]], s) for i, s in by_mean]})
        for r, ((a, sa), (b, sb)) in enumerate(zip(results[-1]["model"], results[-1]["mean"])):
            rows.append((texts[w] if r == 0 else "", r + 1, a, f"{sa:.2f}", b, f"{sb:.2f}"))
    cell = ck.model.config.cell
    tree = ck.run_config.get("tree")
    write_table(table, (
        f"Nearest neighbours in a {len(chosen)}-sentence sample (seed {options.seed}) of the "
        f"{split} split of `{data_dir}`: `{ck.path}` ({cell}, {tree} trees; score = "
        "predicted relatedness 1-5) against mean word vectors (cosine).\n\n") + markdown(
        ["query", "rank", f"{cell} neighbour", "score", "mean-vector neighbour", "cosine"],
        rows))
    _draw(results, out, f"{cell} ({tree})", len(chosen), split)
    return results


def _query_indices(texts: Sequence[str], queries: Sequence[str], where: str) -> list[int]:
    """The pool index of each query sentence (compared lower-cased)."""
    index = {t.lower(): i for i, t in enumerate(texts)}
    wanted = []
    for q in queries:
        if q.strip().lower() not in index:
            raise AnalysisError(f"--query {q!r} is not a sentence of {where} "
                                "(tokens separated by spaces, case ignored)")
        wanted.append(index[q.strip().lower()])
    return wanted


def _draw_sample(n: int, wanted: list[int], options: NeighboursOptions
                 ) -> tuple[list[int], list[int]]:
    """(the sample's pool indices, the queries'): ``options.sample`` of the ``n`` sentences
    drawn with ``random.Random(options.seed)``, the queries added at the end; without
    queries, the sample's first ``options.num_queries``."""
    rng = random.Random(options.seed)
    chosen = rng.sample(range(n), min(options.sample, n))
    chosen = [i for i in chosen if i not in wanted][:options.sample - len(wanted)] + wanted
    if not wanted:
        wanted = chosen[:options.num_queries]
    return chosen, wanted


def _draw(results: list[dict], out: str | Path, model: str, n: int, split: str) -> None:
    k = max((len(r["model"]) for r in results), default=0)
    lines = 2 + len(results) * (k + 2)
    fig = figure(13.0, 0.24 * lines + 0.4)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    ax.set_ylim(lines, 0)
    ax.text(0.01, 0.8, f"ranking by {model} (score 1-5)", fontsize=10, weight="bold")
    ax.text(0.52, 0.8, "ranking by mean word vectors (cosine)", fontsize=10, weight="bold")
    y = 2.0
    for r in results:
        ax.text(0.01, y, r["query"], fontsize=9.5, style="italic", color="#1f4e79")
        ax.plot([0.01, 0.99], [y + 0.35, y + 0.35], color="#bbbbbb", lw=0.6)
        y += 1
        for (a, sa), (b, sb) in zip(r["model"], r["mean"]):
            ax.text(0.02, y, _cut(a), fontsize=9)
            ax.text(0.47, y, f"{sa:.2f}", fontsize=9, ha="right")
            ax.text(0.53, y, _cut(b), fontsize=9)
            ax.text(0.98, y, f"{sb:.2f}", fontsize=9, ha="right")
            y += 1
        y += 1
    ax.text(0.99, lines - 0.3, f"{n}-sentence sample of SICK {split} (Tai et al. 2015, "
            "Table 4)", fontsize=7.5, ha="right", color="#777777")
    save_figure(fig, out)


def _cut(text: str, width: int = 74) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"
