"""``analyze length``: the metric against sentence length for several runs on one plot
(Tai et al. 2015, Figs 3-4; Teng & Zhang 2017, Fig 6).

A wrapper of ``gnn-treelstm evaluate --plot-length`` (:func:`gnn_treelstm.evaluate.
plot_length`, the same picture): accuracy (SST, TREC) or Pearson's r (SICK-R, by the
pair's mean length) in windows of ±2 words, windows with fewer than ``min_count``
examples left out; plus the table of every point.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gnn_treelstm.checkpoint import checkpoint_path
from gnn_treelstm.evaluate import evaluate_checkpoint, length_curve_of, plot_length

from .common import AnalysisError, check_figure_path, markdown, write_table

__all__ = ["length_analysis"]


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
