"""``analyze length``: the metric against sentence length for several runs on one plot
(Tai et al. 2015, Figs 3-4; Teng & Zhang 2017, Fig 6).

The picture of ``gnn-treelstm evaluate --plot-length`` (:func:`plot_length`): accuracy
(SST, TREC) or Pearson's r (SICK-R, by the pair's mean length) in windows of ±2 words,
windows with fewer than ``min_count`` examples left out; plus the table of every point.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gnn_treelstm import metrics as M
from gnn_treelstm.analyze.common import AnalysisError, check_figure_path, markdown, write_table
from gnn_treelstm.models.checkpoint import Checkpoint, checkpoint_path
from gnn_treelstm.training.evaluation import evaluate_checkpoint

__all__ = ["length_analysis", "length_curve_of", "plot_length"]


def length_analysis(runs: Sequence[str], out: str | Path, table: str | Path, *,
                    data: str | None = None, split: str = "test", min_count: int = 10,
                    labels: Sequence[str] | None = None) -> dict:
    """Evaluate each run on ``split`` and plot its length curve; figure and table."""
    if labels and len(labels) != len(runs):
        raise AnalysisError(f"--label: give one per run ({len(runs)}), got {len(labels)}")
    check_figure_path(out)
    curves, rows, results, metric = [], [], {}, None
    for k, run in enumerate(runs):
        ck, metrics, gathered = evaluate_checkpoint(run, split=split, data=data)
        metric = ck.model.task.curve_metric()
        label = labels[k] if labels else (f"{ck.model.config.cell} "
                                          f"({ck.run_config.get('tree')}) "
                                          f"[{checkpoint_path(run).parent.name}]")
        x, y, c = length_curve_of(ck, gathered, min_count)
        curves.append((label, (x, y, c)))
        results[label] = metrics
        rows += [(label, int(a), f"{b:.4f}", int(n)) for a, b, n in zip(x, y, c)]
    plot_length(curves, out, metric=metric or "accuracy", split=split)
    summary = "\n".join(f"- {lab}: " + ", ".join(
        f"{m} {v:.4f}" for m, v in res.items() if isinstance(v, float))
        for lab, res in results.items())
    write_table(table, f"Metric against sentence length ({split}; windows of ±2 words, at "
                f"least {min_count} examples).\n\n{summary}\n\n" + markdown(
                    ["run", "length", metric or "accuracy", "examples"], rows))
    return results


def plot_length(curves: list[tuple[str, object]], out: str | Path, *, metric: str,
                split: str) -> Path:
    """Tai Figs 3-4: score against sentence length, pooled in windows of +-2 words."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for label, (x, y, _c) in curves:
        ax.plot(x, y, marker="o", markersize=3, label=label)
    xlabel = "mean sentence length" if metric == "pearson" else "sentence length"
    ax.set_xlabel(f"{xlabel} (words; windows of \u00b12)")
    ax.set_ylabel("Pearson's r" if metric == "pearson" else "accuracy")
    ax.set_title(f"{metric} vs. sentence length ({split})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def length_curve_of(ck: Checkpoint, gathered: dict, min_count: int = 10) -> tuple:
    """``(length, score, count)`` of one model; windows with fewer than ``min_count``
    examples are left out (they are noise at the long tail)."""
    task = ck.model.task
    pred, gold = task.example_scores(gathered)
    fn = M.pearson if task.curve_metric() == "pearson" else M.accuracy
    return M.length_curve(gathered["length"], pred, gold, fn, window=2,
                          min_count=max(min_count, 3 if fn is M.pearson else 1))


# ---------------------------------------------------------------------------- CLI
