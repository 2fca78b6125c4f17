"""``analyze curves``: training curves of one or more runs (loss and dev metric per epoch).

Reads each run directory's ``metrics.csv`` (one row per epoch; a multi-seed run keeps one
per ``seed-N/`` subdirectory, each drawn as its own line), or ``metrics.jsonl`` where a run
predates the CSV file. The dev metric is the run's
model-selection metric (``results.json``'s ``selection_metric``, column ``dev_<metric>``),
else ``--metric``, else the first ``dev_*`` column. The table lists every epoch of every
run with the best epoch (the one model selection kept) marked.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from gnn_treelstm.analyze.common import AnalysisError, figure, markdown, save_figure, write_table

__all__ = ["read_metrics", "curves_analysis"]

log = logging.getLogger(__name__)


def _metrics_file(d: Path) -> Path | None:
    for name in ("metrics.csv", "metrics.jsonl"):
        if (d / name).is_file():
            return d / name
    return None


def _metrics_files(run: Path) -> list[tuple[str, Path]]:
    own = _metrics_file(run)
    if own is not None:
        return [(run.name, own)]
    seeds = [f for f in map(_metrics_file, sorted(run.glob("seed-*"))) if f is not None]
    if not seeds:
        raise AnalysisError(f"{run}: no metrics.csv or metrics.jsonl (nor in seed-*/); is "
                            "it a run directory of gnn-treelstm train?")
    return [(f"{run.name}/{p.parent.name}", p) for p in seeds]


def _selection_metric(run: Path) -> str | None:
    for d in (run, run.parent):
        res = d / "results.json"
        if res.is_file():
            try:
                return json.loads(res.read_text(encoding="utf-8")).get("selection_metric")
            except ValueError as exc:
                raise AnalysisError(f"{res}: not valid JSON ({exc})") from exc
    return None


def _rows(path: Path) -> list[dict]:
    if path.suffix == ".csv":
        with open(path, encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh))
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise AnalysisError(f"{path}:{n}: not JSON ({exc})") from exc
            dev = rec.pop("dev", None) or {}
            rec.update({f"dev_{k}": v for k, v in dev.items()})
            rows.append(rec)
    return rows


def read_metrics(path: Path, metric: str | None = None) -> dict:
    """``{"epoch", "loss", "dev", "best", "metric"}`` lists from one ``metrics.csv`` (or
    ``metrics.jsonl``, its ``dev`` object read as ``dev_<name>`` columns)."""
    rows = _rows(path)
    if not rows:
        raise AnalysisError(f"{path}: no epochs recorded yet")
    cols = list(dict.fromkeys(k for r in rows for k in r))
    metric = metric or _selection_metric(path.parent)
    col = f"dev_{metric}" if metric and not metric.startswith("dev_") else metric
    if col is None:
        col = next((c for c in cols if c.startswith("dev_") and c != "dev_count"), None)
    if col not in cols:
        raise AnalysisError(f"{path}: no column {col!r}; dev columns: "
                            f"{', '.join(c for c in cols if c.startswith('dev_'))}")
    out: dict = {"epoch": [], "loss": [], "dev": [], "best": [], "metric": col}
    for n, r in enumerate(rows, 2):
        try:
            out["epoch"].append(int(r["epoch"]))
            out["loss"].append(float(r["train_loss"]))
            out["dev"].append(float(r[col]))
        except (KeyError, TypeError, ValueError) as exc:
            raise AnalysisError(f"{path}:{n}: bad row ({exc})") from exc
        out["best"].append(str(r.get("best", "")).lower() == "true")
    return out


def curves_analysis(runs: Sequence[str], out: str | Path, table: str | Path, *,
                    metric: str | None = None, labels: Sequence[str] | None = None) -> dict:
    """Loss and dev metric against epoch for every run (seed); figure and table."""
    if labels and len(labels) != len(runs):
        raise AnalysisError(f"--label: give one per run ({len(runs)}), got {len(labels)}")
    curves = {}
    for k, run in enumerate(runs):
        for name, path in _metrics_files(Path(run)):
            if labels:
                name = labels[k] + name[len(Path(run).name):]
            curves[name] = read_metrics(path, metric)
    fig = figure(10.0, 3.6)
    ax_l, ax_d = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    rows = []
    for name, c in curves.items():
        ax_l.plot(c["epoch"], c["loss"], marker="o", markersize=3, label=name)
        line, = ax_d.plot(c["epoch"], c["dev"], marker="o", markersize=3, label=name)
        best = [i for i, b in enumerate(c["best"]) if b]
        if best:  # the last improvement is the epoch model selection kept
            i = best[-1]
            ax_d.plot(c["epoch"][i], c["dev"][i], marker="*", markersize=11,
                      color=line.get_color())
        for i, e in enumerate(c["epoch"]):
            rows.append((name, e, f"{c['loss'][i]:.4f}", f"{c['dev'][i]:.4f}",
                         "best" if best and i == best[-1] else ""))
    metrics = sorted({c["metric"] for c in curves.values()})
    ax_l.set_title("training loss", fontsize=10)
    ax_d.set_title(f"{', '.join(metrics)} (star: the epoch kept)", fontsize=10)
    for ax in (ax_l, ax_d):
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, out)
    write_table(table, "Training curves (`metrics.csv` of each run).\n\n" + markdown(
        ["run", "epoch", "train loss", ", ".join(metrics), "kept"], rows))
    return curves
