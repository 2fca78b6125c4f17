"""``gnn-treelstm train``: train a Tree-LSTM on a task of the papers.

    gnn-treelstm train                                # Constituency Tree-LSTM on SST-5
    gnn-treelstm train --task sick-r --model childsum --tree dependency --seeds 5
    gnn-treelstm train --task sst-2 --model nary --embeddings glove.txt.gz --epochs 10

Also ``python -m gnn_treelstm train`` and, in a checkout, ``python train.py``.

Data: ``--data DIR`` (a directory built by ``gnn-treelstm build``, a directory of
such directories, or raw data laid out like the data mirror), else ``$GNN_TREELSTM_DATA``,
else the embedded sample (built on the fly into ``runs/_sample_data``). Writes
``runs/NAME/`` (config.json, metrics.jsonl, best.pt, results.json, train.log).

Progress goes to stderr: one line per start-up stage (data, word vectors, native loops,
model; hidden by ``--log-level ERROR``), then the progress bars (``-q``: none); each epoch's
summary line and the results go to stdout.
"""

from __future__ import annotations

from gnn_treelstm.commands.cli import progress_bar, set_openmp_wait_policy  # no torch, no dgl

set_openmp_wait_policy()  # read by libgomp when torch loads: before any torch import

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm.cells.registry import import_cell_modules
from gnn_treelstm.commands import heap, process
from gnn_treelstm.files import NoSpaceError
from gnn_treelstm.metrics import format_metrics
from gnn_treelstm.registry import UnknownNameError
from gnn_treelstm.training import rundir
from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.data import DataError
from gnn_treelstm.training.faults import NonFiniteError, WriteFailed
from gnn_treelstm.training.options import build_parser, config_from_args, parse_args
from gnn_treelstm.training.trainer import STARTUP_LOG, TrainHooks, run

__all__ = ["main", "build_parser"]


def _startup_console(level: str) -> logging.Handler | None:
    """A stderr handler that shows the trainer's start-up lines (INFO) as plain lines,
    unless the console level is above WARNING; the console handler of the root logger
    is kept from showing them a second time."""
    if logging.getLevelName(level) > logging.WARNING:
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.setLevel(logging.INFO)
    logging.getLogger(STARTUP_LOG).addHandler(handler)
    return handler


def _not_startup(record: logging.LogRecord) -> bool:
    return record.name != STARTUP_LOG


class _RunLog(logging.FileHandler):
    """``train.log``: a record it cannot write (a full disk) stops the file with one line on
    stderr, not a traceback per record; the run's own error says what happened."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        exc = sys.exc_info()[1]
        print(f"warning: cannot write {self.baseFilename} "
              f"({getattr(exc, 'strerror', None) or exc}); the log stops here",
              file=sys.stderr)
        self.emit = lambda record: None  # type: ignore[method-assign]
        if self.stream is not None:
            try:
                self.stream.close()
            except OSError:
                pass
            self.stream = None


class _Refused(Exception):
    """A run refused before it starts: ``error: MESSAGE``, exit status 2."""


def _run_config(a: argparse.Namespace) -> RunConfig:
    """The checked :class:`RunConfig` of the parsed arguments, its cell modules imported
    and the process set up (threads); :class:`_Refused` naming a bad value."""
    try:
        import_cell_modules(a.cell_module)
        cfg = config_from_args(a)
        cfg.check()
        process.setup_training(a.threads)
    except (ValueError, UnknownNameError) as e:
        raise _Refused(e) from e
    cfg.name = cfg.run_name()
    return cfg


def _run_log(a: argparse.Namespace, run_dir: Path, writer: bool) -> logging.Handler:
    """The handler of ``run_dir/train.log`` (a null one where this process writes nothing:
    ranks > 0 of a distributed run); :class:`_Refused` for a run directory that is taken
    or cannot be written."""
    if not writer:
        return logging.NullHandler()
    try:  # before train.log is opened: a refused directory keeps its old log
        if a.resume is None:
            rundir.check_free(run_dir, overwrite=a.overwrite)
    except rundir.RunDirError as e:
        raise _Refused(e) from e
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        return _RunLog(run_dir / "train.log", mode="a" if a.resume else "w", encoding="utf-8")
    except OSError as e:  # --runs-dir is a file, not writable, ...
        raise _Refused(f"cannot write the run directory {run_dir} ({e.strerror or e}); "
                       "pass --runs-dir a writable directory") from e


def _attach(handler: logging.Handler, level: str, writer: bool) -> logging.Handler | None:
    """Send the library's INFO records to ``handler`` (``train.log``) and the console's at
    ``level``; the start-up lines' console handler (:func:`_startup_console`), if any."""
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    root = logging.getLogger()
    root.addHandler(handler)
    logging.getLogger("gnn_treelstm").setLevel(logging.INFO)
    for h in root.handlers:
        if h is not handler:
            h.setLevel(level)
    shown = _startup_console(level) if writer else None
    if shown is not None:
        for h in root.handlers:
            if h is not handler:
                h.addFilter(_not_startup)
    return shown


def _detach(handler: logging.Handler, shown: logging.Handler | None) -> None:
    """Undo :func:`_attach`."""
    root = logging.getLogger()
    root.removeHandler(handler)
    handler.close()
    if shown is not None:
        logging.getLogger(STARTUP_LOG).removeHandler(shown)
        for h in root.handlers:
            h.removeFilter(_not_startup)


def _epoch_printer(cfg: RunConfig) -> Callable[[dict], None]:
    """The ``on_epoch_end`` hook: one summary line per epoch on stdout (the learning rate
    too when a schedule or a warm-up changes it)."""
    scheduled = cfg.lr_schedule != "constant" or cfg.lr_warmup_epochs > 0

    def on_epoch(r: dict) -> None:
        star = " *" if r["best"] else ""
        lr = f", lr {r['lr']:.3g}" if scheduled else ""
        print(f"seed {r['seed']} epoch {r['epoch']:>3}: loss {r['train_loss']:.4f} | dev "
              f"{format_metrics(r['dev'], sep=' ', counts=False)} | {r['train_seconds']:.1f}s "
              f"({r['trees_per_second']:.0f} trees/s, peak {r['peak_rss_mb']:.0f} MB, "
              f"dev {r['eval_seconds']:.1f}s{lr}){star}", flush=True)

    return on_epoch


def _print_results(res: dict) -> None:
    """The results on stdout: each seed's selected epoch, the mean over seeds, the files."""
    sel = res["selection_metric"]
    for r in res["seeds"]:
        test = f" | test {format_metrics(r['test'], sep=' ', counts=False)}" if "test" in r else ""
        stop = r.get("stopped_early")
        stopped = (f" (stopped early after epoch {stop['epoch']}: no better dev {sel} for "
                   f"{stop['patience']} epochs)" if stop else "")
        print(f"seed {r['seed']}: best epoch {r['best_epoch']} dev {sel} "
              f"{r['dev'].get(sel, float('nan')):.4f}{test}{stopped}")
    if len(res["seeds"]) > 1 and res["test"]:
        summary = format_metrics({k: f"{v['mean']:.4f} ({v['std']:.4f})"
                                  for k, v in res["test"].items()
                                  if not k.startswith("count")}, sep=" ")
        print(f"test mean (std) over {len(res['seeds'])} seeds: {summary}")
    print(f"run: {res['run_dir']}  checkpoint: {res['checkpoint']}  "
          f"({res['seconds_per_epoch']:.2f} s/epoch median, training peak "
          f"{res['peak_rss_mb']:.0f} MB RSS, process peak {res['process_peak_rss_mb']:.0f} MB)")


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=a.log_level, format="%(levelname)s %(name)s: %(message)s")
    # ranks > 0 of a distributed run write nothing: no log file, no directory
    writer = not a.distributed or os.environ.get("RANK", "0") == "0"
    try:
        cfg = _run_config(a)
        run_dir = Path(cfg.runs_dir) / cfg.name
        handler = _run_log(a, run_dir, writer)
    except _Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    shown = _attach(handler, a.log_level, writer)
    try:
        hooks = TrainHooks(progress=progress_bar(a.quiet), on_epoch_end=_epoch_printer(cfg),
                           release_heap=heap.release_free_heap)  # free pages back each epoch
        res = run(cfg, hooks=hooks, overwrite=a.overwrite, keep=("train.log",),
                  resume=a.resume is not None)
    except (ValueError, DataError, UnknownNameError, FileNotFoundError,
            NotImplementedError, NonFiniteError, WriteFailed, NoSpaceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        if "DataLoader worker" not in str(e):
            raise
        print(f"error: a data loader process stopped ({str(e).splitlines()[0]}); the run's "
              f"state is saved after every epoch (and every --checkpoint-every N batches): "
              f"continue it with `gnn-treelstm train --resume {run_dir}`", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: the run's state is saved after every epoch (and every "
              f"--checkpoint-every N batches); continue it with `gnn-treelstm train --resume "
              f"{run_dir}`", file=sys.stderr)
        return 130
    finally:
        _detach(handler, shown)
    if "rank" not in res:  # a distributed run's other ranks: rank 0 reports
        _print_results(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
