"""``gnn-treelstm evaluate``: evaluate checkpoints, and tabulate or plot runs.

    gnn-treelstm evaluate runs/NAME/best.pt --split test      # the task's metrics
    gnn-treelstm evaluate --table runs/A runs/B               # mean (std) over seeds
    gnn-treelstm evaluate runs/A/best.pt runs/B/best.pt --plot-length length.png

The model is rebuilt from the checkpoint alone; the data directory recorded in it is used
unless ``--data`` is given. Raw text is labelled by ``gnn-treelstm predict RUN TEXT``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm.analyze.length import length_curve_of, plot_length
from gnn_treelstm.argtypes import LOG_LEVELS, non_negative_int, positive_int
from gnn_treelstm.cells.registry import CELL_MODULE_HELP, import_cell_modules
from gnn_treelstm.commands.cli import description
from gnn_treelstm.engine.propagator import ENGINES
from gnn_treelstm.metrics import format_metrics
from gnn_treelstm.models.checkpoint import checkpoint_path
from gnn_treelstm.training.config import DEVICES
from gnn_treelstm.training.data import DataError
from gnn_treelstm.training.evaluation import (
    evaluate_checkpoint,
)
from gnn_treelstm.training.rundir import check_same_run

log = logging.getLogger("evaluate")


# ---------------------------------------------------------------------------- tables


def _cell(metric: str, v: dict | None) -> str:
    if not v or v.get("mean") is None or (isinstance(v["mean"], float)
                                          and math.isnan(v["mean"])):
        return "n/a"
    mean, std = v["mean"], v.get("std") or 0.0
    if "accuracy" in metric:
        return f"{100 * mean:.1f} ({100 * std:.1f})"
    return f"{mean:.4f} ({std:.4f})"


def markdown_table(run_dirs: Sequence[str | Path], split: str = "test") -> str:
    """The papers' table form: one row per run, metric mean (std) over its seeds."""
    rows = []
    metrics: list[str] = []
    for d in run_dirs:
        path = Path(d) / "results.json" if Path(d).is_dir() else Path(d)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no results.json (is {d} a finished run?)")
        res = json.loads(path.read_text(encoding="utf-8"))
        config = path.with_name("config.json")
        if config.is_file():  # results and config of one run, never two
            check_same_run(path.parent, {
                "results.json": res,
                "config.json": json.loads(config.read_text(encoding="utf-8"))})
        for m in res.get("metric_names") or list(res.get(split, {})):
            if m not in metrics:
                metrics.append(m)
        rows.append(res)
    header = ["model", "tree", "task", "seeds"] + metrics
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for res in rows:
        vals = res.get(split, {})
        cells = [res.get("name", ""), res.get("tree", ""), res.get("task", ""),
                 str(len(res.get("seeds", [])))]
        cells[0] = f"{res.get('model', '')} ({res.get('name', '')})"
        cells += [_cell(m, vals.get(m)) for m in metrics]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- CLI
class _UsePredict(argparse.Action):
    """``evaluate --predict``: raw text is the ``predict`` command's job."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
        parser.error(f"{option_string} is not an evaluate option: label raw text with "
                     "`gnn-treelstm predict RUN TEXT` (or --file FILE, one input per line)")


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    ap = argparse.ArgumentParser(prog="gnn-treelstm evaluate", description=description(__doc__))
    ap.add_argument("paths", nargs="*",
                    help="checkpoint(s) (runs/NAME/best.pt or runs/NAME), or run "
                         "directories with --table")
    ap.add_argument("--split", default=None, help="split to evaluate (default: test)")
    ap.add_argument("--data", default=None, help="built data directory (default: the "
                    "checkpoint's)")
    ap.add_argument("--predict", nargs="*", action=_UsePredict, help=argparse.SUPPRESS)
    ap.add_argument("--table", action="store_true",
                    help="markdown table of the run directories: mean (std) over seeds")
    ap.add_argument("--plot-length", metavar="PNG", default=None,
                    help="plot accuracy (Pearson for sick-r) against sentence length")
    ap.add_argument("--min-count", type=non_negative_int, default=10,
                    help="--plot-length: leave out windows with fewer examples")
    ap.add_argument("--device", default="cpu", choices=DEVICES)
    ap.add_argument("--engine", default=None, choices=ENGINES,
                    help="override the checkpoint's engine")
    ap.add_argument("--batch-size", type=positive_int, default=256)
    ap.add_argument("--remap-vocab", action="store_true",
                    help="data built with another vocabulary: translate word and relation "
                         "ids by name (default: refuse it)")
    ap.add_argument("--log-level", default="WARNING",
                    choices=LOG_LEVELS)
    ap.add_argument("-v", "--verbose", dest="log_level", action="store_const", const="INFO",
                    help="= --log-level INFO")
    ap.add_argument("--json", action="store_true",
                    help="metrics as JSON lines")
    ap.add_argument("--cell-module", action="append", default=[], metavar="MODULE",
                    help=CELL_MODULE_HELP)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=a.log_level, format="%(levelname)s %(name)s: %(message)s")
    split = a.split or "test"
    try:
        import_cell_modules(a.cell_module)
        if a.table:
            if not a.paths:
                raise ValueError("--table needs run directories: evaluate.py --table runs/A ...")
            print(markdown_table(a.paths, split))
            return 0
        if not a.paths:
            raise ValueError("give a checkpoint: evaluate.py runs/NAME/best.pt --split test")
        if a.plot_length:
            curves = []
            metric = None
            for p in a.paths:
                ck, metrics, gathered = evaluate_checkpoint(
                    p, split=split, data=a.data, device=a.device, engine=a.engine,
                    batch_size=a.batch_size, remap_vocab=a.remap_vocab)
                metric = ck.model.task.curve_metric()
                cp = checkpoint_path(p)
                label = f"{ck.model.config.cell} ({ck.run_config.get('tree')}) "\
                        f"[{cp.parent.name}]"
                curves.append((label, length_curve_of(ck, gathered, a.min_count)))
                print(f"{cp}: {format_metrics(metrics)}")
            out = plot_length(curves, a.plot_length, metric=metric or "accuracy", split=split)
            print(f"wrote {out}")
            return 0
        for p in a.paths:
            ck, metrics, _ = evaluate_checkpoint(p, split=split, data=a.data, device=a.device,
                                                 engine=a.engine, batch_size=a.batch_size,
                                                 remap_vocab=a.remap_vocab)
            if a.json:
                print(json.dumps({"checkpoint": str(checkpoint_path(p)), "split": split,
                                  **metrics, "vectors": ck.meta.get("vectors")}))
            else:
                print(f"{checkpoint_path(p)} [{ck.model.task.name}, {split}]: "
                      f"{format_metrics(metrics)}")
        return 0
    except (ValueError, FileNotFoundError, DataError, NotImplementedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
