"""``gnn-treelstm train``: train a Tree-LSTM on a task of the papers.

    gnn-treelstm train                                # Constituency Tree-LSTM on SST-5
    gnn-treelstm train --task sick-r --model childsum --tree dependency --seeds 5
    gnn-treelstm train --task sst-2 --model nary --embeddings glove.txt.gz --epochs 10

Also ``python -m gnn_treelstm train`` and, in a checkout, ``python train.py``.

Data: ``--data DIR`` (a directory built by ``gnn-treelstm build``, a directory of
such directories, or raw data laid out like the data mirror), else ``$GNN_TREELSTM_DATA``,
else the embedded sample (built on the fly into ``runs/_sample_data``). Writes
``runs/NAME/`` (config.json, metrics.jsonl, best.pt, results.json, train.log).

Exit status: 0 done; 2 an error (a bad option, damaged data, a full disk, ...: the message
says which and what to do); 3 the data changed under the run (a mapped file cut short,
rewritten or replaced while the run read it: :mod:`gnn_treelstm.commands.sigbus`); 130
interrupted. After 2 or 3 the run's saved state is intact and ``--resume`` continues it.

Progress goes to stderr: one line per start-up stage (data, word vectors, native loops,
model; hidden by ``--log-level ERROR``), then the progress bars (``-q``: none); each epoch's
summary line and the results go to stdout.
"""

from __future__ import annotations

from gnn_treelstm.commands.cli import progress_bar, set_openmp_wait_policy  # no torch, no dgl

set_openmp_wait_policy()  # read by libgomp when torch loads: before any torch import

import argparse
import functools
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm.cells.registry import import_cell_modules
from gnn_treelstm.commands import heap, process, sigbus
from gnn_treelstm.files import NoSpaceError
from gnn_treelstm.metrics import format_metrics
from gnn_treelstm.registry import UnknownNameError
from gnn_treelstm.training import rundir
from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.data import DataError
from gnn_treelstm.training.faults import NonFiniteError, WriteFailed
from gnn_treelstm.training.options import build_parser, config_from_args, parse_args
from gnn_treelstm.training.trainer import STARTUP_LOG, TrainHooks, run
from gnn_treelstm.trees import manifest
from gnn_treelstm.trees.manifest import DataChangedError

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
    except PermissionError as e:  # a directory of another user, read-only, ...
        raise _Refused(rundir.unwritable(run_dir, e, resume=a.resume is not None)) from e
    except OSError as e:  # --runs-dir is a file, ...
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


#: the errors a run reports as a message, exit status 2
_REPORTED = (ValueError, DataError, UnknownNameError, FileNotFoundError, NotImplementedError,
             NonFiniteError, WriteFailed, NoSpaceError)


def _resume_hint(run_dir: Path) -> str:
    return f"continue the run with `gnn-treelstm train --resume {run_dir}`"


def _failure(e: Exception, run_dir: Path) -> tuple[str, int] | None:
    """The message and exit status of a run that raised ``e``; None for an error the command
    does not know (its traceback is shown)."""
    if isinstance(e, DataChangedError):
        return str(e), sigbus.DATA_CHANGED
    if isinstance(e, _REPORTED):
        return str(e), 2
    if isinstance(e, PermissionError):  # what the run reads: its data, word vectors, ...
        return (f"cannot read {e.filename or 'a file of the run'} ({e.strerror or e}); give "
                "this user read permission on it (chmod a+r, and a+x on its directories) or "
                "run as the user who owns it"), 2
    if isinstance(e, RuntimeError) and "DataLoader worker" in str(e):
        # torch's first sentence: "DataLoader worker (pid N) is killed by signal: Bus error"
        what = str(e).splitlines()[0].split(". ")[0].rstrip(".")
        changed = manifest.changed_mapped()
        if changed:  # a loader process stopped by the bus error of a file cut short
            return (f"{manifest.changed_message(changed)}; a data loader process stopped "
                    f"reading it ({what}). The run's state is saved after every epoch (and "
                    f"every --checkpoint-every N batches): {_resume_hint(run_dir)} once the "
                    "data is back"), sigbus.DATA_CHANGED
        return (f"a data loader process stopped ({what}); the run's state "
                "is saved after every epoch (and every --checkpoint-every N batches): "
                f"{_resume_hint(run_dir)}"), 2
    return None


def _bus_error(run_dir: Path) -> str:
    """The message of a bus error under the run (:mod:`gnn_treelstm.commands.sigbus`)."""
    kept = ("the run's state, saved after every epoch (and every --checkpoint-every N "
            "batches), is intact")
    changed = manifest.changed_mapped()
    if changed:
        return (f"error: {manifest.changed_message(changed)}. The run stopped at the bus "
                f"error (SIGBUS) of reading it; {kept}: {_resume_hint(run_dir)} once the data "
                "is back")
    dirs = sorted({str(Path(f).parent) for f in manifest.mapped_files()}) or ["none"]
    return (f"error: a bus error (SIGBUS): a memory-mapped file could not be read (a file "
            f"cut short, a lost disk or mount; data mapped from: {', '.join(dirs)}); {kept}: "
            f"check the data and {_resume_hint(run_dir)}")


def _record(run_dir: Path, writer: bool) -> Callable[[str], None] | None:
    """How a bus error is recorded: ``status.json``, where this process holds the run
    directory (a fault while the data loads, before the run claims it, leaves it alone)."""
    if not writer:
        return None

    def record(text: str) -> None:
        if rundir.held(run_dir):
            rundir.record_failure(run_dir, text.removeprefix("error: "), keep=("train.log",))

    return record


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
        with sigbus.installed(functools.partial(_bus_error, run_dir), _record(run_dir, writer)):
            res = run(cfg, hooks=hooks, overwrite=a.overwrite, keep=("train.log",),
                      resume=a.resume is not None)
    except Exception as e:  # noqa: BLE001 - those it knows are messages, others raised on
        failure = _failure(e, run_dir)
        if failure is None:
            raise
        if writer and failure[0] != str(e) and (isinstance(e, RuntimeError)  # training's
                                                or rundir.read_status(run_dir) is not None):
            rundir.record_failure(run_dir, failure[0], keep=("train.log",))  # what it said
        print(f"error: {failure[0]}", file=sys.stderr)
        return failure[1]
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
