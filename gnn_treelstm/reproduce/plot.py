"""One picture of the reproduction: the paper's number beside ours, row by row.

For every table with at least one finished row, a panel shows each row's headline metric
(the first metric the paper gives: accuracy, or Pearson for relatedness) as two points with
error bars: the paper's mean (std) and ours, mean (sample std) over the finished seeds (run
directories merged into the results ledger; a ledger record with only a summary is drawn from
the summary's mean, std and n).
Written next to ``docs/RESULTS.md`` as ``results.png`` and linked from it.
"""

from __future__ import annotations

import io
import logging
import math
import textwrap
from collections.abc import Mapping
from pathlib import Path

from gnn_treelstm.files import atomic_write
from gnn_treelstm.reproduce.report import RowResults, collect
from gnn_treelstm.reproduce.rows import TABLES, Row, is_accuracy

log = logging.getLogger(__name__)

__all__ = ["plot_results"]


def _panels(root: Path, rows: list[Row], ledger: Mapping[str, dict] | None = None,
            ) -> list[tuple[str, list[tuple[RowResults, str]]]]:
    out = []
    for table in TABLES:
        done = []
        for r in (r for r in rows if r.table == table):
            res = collect(root, r, ledger)
            metric = next(iter(r.paper), None)
            if metric is not None and res.stats(metric) is not None:
                done.append((res, metric))
        if done:
            out.append((table, done))
    return out


def plot_results(root: Path, rows: list[Row], out: Path,
                 ledger: Mapping[str, dict] | None = None) -> Path | None:
    """Write the figure to ``out`` (PNG); None (and nothing written) if no row has run.
    Rows are read from ``root`` merged into ``ledger`` (:func:`.report.collect`)."""
    panels = _panels(Path(root), rows, ledger)
    if not panels:
        log.info("no finished rows under %s: no figure", root)
        return None
    from matplotlib.figure import Figure  # Agg canvas, no display needed

    heights = [max(1.2, 0.32 * len(p[1]) + 0.8) for p in panels]
    fig = Figure(figsize=(9, sum(heights)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False,
                        gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, (table, done) in zip(axes, panels):
        labels, ys = [], []
        for i, (res, metric) in enumerate(done):
            y = len(done) - 1 - i
            scale = 100 if is_accuracy(metric) else 1
            pm, ps = res.row.paper[metric]
            om, os_ = res.stats(metric)  # type: ignore[misc]
            ax.errorbar(pm * scale, y + 0.12, xerr=(ps or 0) * scale, fmt="s", color="0.45",
                        capsize=3, label="paper" if i == 0 else None)
            ax.errorbar(om * scale, y - 0.12, xerr=(os_ or 0) * scale, fmt="o", color="C0",
                        capsize=3, label="ours (n seeds)" if i == 0 else None)
            ax.annotate(f"n={res.n}", (om * scale, y - 0.12), xytext=(6, -3),
                        textcoords="offset points", fontsize=7, color="C0")
            labels.append(f"{res.row.label} [{metric}]")
            ys.append(y)
        ax.set_yticks(ys, labels, fontsize=8)
        ax.set_ylim(-0.7, len(done) - 0.3)
        unit = "%" if all(is_accuracy(m) for _, m in done) else "value"
        ax.set_title(textwrap.shorten(TABLES[table].title, 95, placeholder=" …"), fontsize=9,
                     loc="left")
        ax.set_xlabel(unit, fontsize=8)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
        if not all(math.isfinite(x) for x in ax.get_xlim()):
            ax.set_xlim(0, 100)
    axes[0].legend(fontsize=8, loc="lower right")
    png = io.BytesIO()
    fig.savefig(png, dpi=110, format="png")
    out = Path(out)
    atomic_write(out, png.getvalue())
    log.info("wrote %s (%d panels)", out, len(panels))
    return out
