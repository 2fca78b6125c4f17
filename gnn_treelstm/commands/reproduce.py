"""Command line: ``python -m gnn_treelstm.reproduce [ROWS...] [options]``.

ROWS are table ids (``tran-t3``), row keys (``tran-t3/treelstm-d``) or globs
(``'tai-t3/*'``); none = every row (rows that cannot run here are skipped with the reason).
Runs the missing seeds of each row, then regenerates the results document.

Before the document (and its figure) is regenerated, the finished seeds found in the run
directories are merged into the results ledger beside it (``docs/results.json``; --quick:
``ROOT/results.json``), which is committed: a seed in both is taken from the run directory,
a seed only in the ledger is kept, and the tables are rendered from the merged ledger, so
rows whose run directories are gone keep their numbers (--report-only merges too). A seed
the ledger holds counts as done (--list, and a row whose seeds the ledger holds is not
trained again; --force trains it again).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from gnn_treelstm.argtypes import int_from_to, positive_int
from gnn_treelstm.commands import heap, process
from gnn_treelstm.commands.cli import description, progress_bar
from gnn_treelstm.registry import UnknownNameError
from gnn_treelstm.reproduce import ledger, plot, report, rows, runner
from gnn_treelstm.training.config import MAX_EPOCHS, MAX_SEEDS, RunConfig
from gnn_treelstm.training.trainer import TrainHooks

#: the figure written beside the results document (paper vs ours per row)
FIGURE = "results.png"


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``gnn-treelstm reproduce``."""
    ap = argparse.ArgumentParser(
        prog="gnn-treelstm reproduce", description=description(__doc__),
        epilog=f"tables: {', '.join(rows.TABLES)}")
    ap.add_argument("rows", nargs="*", metavar="ROWS",
                    help="table ids, row keys or globs (default: all rows)")
    ap.add_argument("--root", type=Path, default=None,
                    help="run directory (default: runs/reproduce; --quick: "
                         "runs/reproduce-quick)")
    ap.add_argument("--data", default=os.environ.get("GNN_TREELSTM_DATA") or None,
                    help="built data dir, dir of built dirs, or the raw data mirror "
                         "(default: $GNN_TREELSTM_DATA, else the embedded sample)")
    ap.add_argument("--vectors-dir", type=Path,
                    default=os.environ.get("GNN_TREELSTM_VECTORS") or None,
                    help="directory with glove.840B.300d*.txt.gz and glove.6B.50d*.txt.gz "
                         "(default: $GNN_TREELSTM_VECTORS)")
    ap.add_argument("--seeds", type=int_from_to(1, MAX_SEEDS, "a positive integer (seeds)"),
                    default=None,
                    help="seeds per row (default: the row's, 5; ablations 3; --quick 1)")
    ap.add_argument("--epochs", type=int_from_to(1, MAX_EPOCHS, "a positive integer (epochs)"),
                    default=None,
                    help="override every row's epochs (default: the paper's)")
    ap.add_argument("--quick", action="store_true",
                    help=f"smoke test: embedded sample, {runner.QUICK}, 1 seed")
    ap.add_argument("--force", action="store_true", help="retrain finished seeds")
    ap.add_argument("--list", action="store_true", help="list the rows with their status")
    ap.add_argument("--report-only", action="store_true",
                    help="only regenerate the results document")
    ap.add_argument("--results", type=Path, default=None,
                    help="results document (default: docs/RESULTS.md; --quick: "
                         "ROOT/RESULTS.md)")
    ap.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bars, warnings only")
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def _wanted(r: rows.Row, a: argparse.Namespace) -> int:
    return a.seeds or (1 if a.quick else r.seeds)


def _list(selected: list[rows.Row], a: argparse.Namespace, held: dict[str, dict]) -> None:
    width = max(len(r.key) for r in selected)
    merged = ledger.merge_runs(held, a.root, selected)  # the seeds of both, for the code
    for r in selected:
        reason = rows.unavailable_reason(r) or runner.data_reason(r, a.data, a.quick)
        total = _wanted(r, a)
        cfg = _config(r, a)
        done = ledger.done_seeds(a.root, r, held, cfg)
        status = "-" if reason else f"{len(done)}/{total} seeds"
        changed = "" if reason else ledger.stale(held.get(ledger.record_key(r)), cfg)
        code = "" if reason or changed else ledger.code_changes(
            merged.get(ledger.record_key(r)), cfg)
        print(f"{r.key:<{width}}  {status:<11}  {r.label}"
              + (f"  [unavailable: {reason}]" if reason else "")
              + (f"  [ledger measured with another configuration: {changed}]"
                 if changed else "")
              + (f"  [ran with other code than today's: {code}; --force reruns]"
                 if code else ""))


def _config(r: rows.Row, a: argparse.Namespace) -> RunConfig:
    """``r``'s configuration as this call would train it (for the ledger's stale check)."""
    return runner.row_config(r, seeds=a.seeds, epochs=a.epochs, quick=a.quick)


def _in_ledger(r: rows.Row, a: argparse.Namespace, held: dict[str, dict]) -> bool:
    """Whether the ledger completes ``r``'s seeds (its run directory alone does not: a
    complete run directory goes to the runner, which checks it is not stale)."""
    want = set(range(1, _wanted(r, a) + 1))
    return (not a.force and not rows.unavailable_reason(r)
            and want <= set(ledger.done_seeds(a.root, r, held, _config(r, a)))
            and not want <= set(runner.done_seeds(a.root, r)))


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    a.root = a.root or Path("runs/reproduce-quick" if a.quick else "runs/reproduce")
    results = a.results or (a.root / "RESULTS.md" if a.quick else Path("docs/RESULTS.md"))
    ledger_file = ledger.ledger_path(results)
    logging.basicConfig(level=logging.WARNING if a.quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    progress = progress_bar(a.quiet)

    note = ("**Quick mode** (embedded sample, tiny models, 1 epoch): a smoke test, not "
            "comparable with the papers." if a.quick else "")
    try:
        selected = rows.select(a.rows)
        held = ledger.load(ledger_file)
        if a.list:
            _list(selected, a, held)
            return 0
        if not a.report_only:
            process.setup_training(a.threads)  # as `gnn-treelstm train`, which seeds record
            skip = {r.key for r in selected if _in_ledger(r, a, held)}
            ran = runner.run_rows(
                [r for r in selected if r.key not in skip], root=a.root,
                options=runner.RunRowsOptions(
                    data=a.data, vectors_dir=a.vectors_dir, seeds=a.seeds, epochs=a.epochs,
                    quick=a.quick, force=a.force,
                    hooks=TrainHooks(progress=progress, release_heap=heap.release_free_heap)))
            by_key = {r.row.key: r for r in ran}
            done = [by_key.get(r.key) or runner.RowRun(
                r, "done", runner.row_dir(a.root, r), f"in {ledger_file}",
                ledger.done_seeds(a.root, r, held)) for r in selected]
        held = ledger.merge_runs(held, a.root, rows.ROWS)
        if held or ledger_file.exists():
            ledger.save(ledger_file, held)
        figure = plot.plot_results(a.root, rows.ROWS, Path(results).with_name(FIGURE),
                                   ledger=held)
        if figure is not None:
            note = "\n\n".join(x for x in (note, f"![paper vs ours, row by row]({FIGURE})")
                                if x)
        report.write_results(a.root, results, rows.ROWS, note=note, ledger=held)
    except (ValueError, UnknownNameError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; run the same command again to resume (finished seeds are kept)",
              file=sys.stderr)
        return 130
    if a.report_only:
        print(f"wrote {results}")
        return 0
    for r in done:
        extra = f" ({r.reason})" if r.reason else ""
        print(f"{r.row.key}: {r.status}, seeds {r.seeds or '-'}{extra}")
    failed = [r.row.key for r in done if r.status == "failed"]
    print(f"wrote {results}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
