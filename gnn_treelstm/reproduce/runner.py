"""Run paper rows, one training run per seed, resumable.

Layout: ``<root>/<row key, "/" -> "__">/seed-<s>/`` is one
:func:`gnn_treelstm.training.trainer.run` with ``seeds=1, seed=s`` (its ``results.json`` marks the
seed done), and ``<root>/<row>/row.json`` records the row, the resolved
:class:`~gnn_treelstm.training.config.RunConfig`, the equivalent ``gnn-treelstm train`` command, the
vectors file and the data directory. A seed directory without ``results.json`` (a killed
run) resumes at its last saved epoch (its ``state.pt``, :mod:`gnn_treelstm.training.resume`) when it
has one of the row's configuration, else it is deleted and trained again; a finished seed
is never retrained unless ``force``.
Data are resolved once per data set and tree kind with ``runs_dir=root``, so raw data or
the embedded sample are built once into ``<root>/_built`` / ``<root>/_sample_data``.

Run directories are not committed; the results ledger (:mod:`.ledger`,
``docs/results.json``) is. :func:`done_seeds` given the ledger counts a seed as done if its
run directory has it *or* the ledger does (a record with only a summary of n seeds holds
seeds 1..n), so a fresh clone does not retrain what the ledger already holds: the command
line (``python -m gnn_treelstm.reproduce``) leaves a row whose seeds are all done that way
out of :func:`run_rows` (``--force`` trains it again). A row the ledger holds only in part
goes to :func:`run_rows`, which looks at the run directory only: it trains every seed missing
there, and those seeds then replace the ledger's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnn_treelstm.files import atomic_write
from gnn_treelstm.reproduce.rows import VECTORS, Row, engine_for, get, unavailable_reason
from gnn_treelstm.tasks import build_task
from gnn_treelstm.training import provenance
from gnn_treelstm.training.config import RunConfig, config_changes, run_options
from gnn_treelstm.training.data import RAW_PROBES, SAMPLE_SRC, resolve_data_dir
from gnn_treelstm.training.resume import STATE_NAME, TrainState, resumed_run_id
from gnn_treelstm.training.trainer import TrainHooks, run

log = logging.getLogger(__name__)

__all__ = ["RowRun", "RunRowsOptions", "QUICK", "PLACE", "describe_changes", "seed_changes",
           "seed_code", "code_changes", "run_rows", "row_dir", "done_seeds", "find_vectors",
           "row_config", "command", "data_reason"]

#: quick mode: a smoke test of every row on the embedded sample, in seconds per row
QUICK = {"epochs": 1, "max_train": 40, "max_eval": 40, "hidden": 16}
#: RunConfig fields the command always writes, even at their default
ALWAYS = ("task", "model", "tree", "hidden", "engine", "epochs", "seeds")
#: the order of the command's words: valued flags, then KEY=VALUE lists, then switches
_COMMAND_ORDER = {"value": 0, "pairs": 1, "list": 1, "switch": 2, "negated": 2}


@dataclass
class RowRun:
    """What happened to one row: ``done`` (nothing to do), ``ran``, ``skipped``, ``failed``."""

    row: Row
    status: str
    dir: Path
    reason: str = ""
    seeds: list[int] = field(default_factory=list)


def row_dir(root: Path, row: Row) -> Path:
    """Where ``row``'s seeds live (a row with ``same_as`` shares that row's directory)."""
    return Path(root) / (row.same_as or row.key).replace("/", "__")


def done_seeds(root: Path, row: Row) -> list[int]:
    """Seeds of ``row`` whose ``results.json`` exists in its run directory (with the
    ledger's seeds too: :func:`gnn_treelstm.reproduce.ledger.done_seeds`)."""
    out = set()
    for d in row_dir(root, row).glob("seed-*"):
        suffix = d.name[len("seed-"):]
        if suffix.isdigit() and (d / "results.json").is_file():
            out.add(int(suffix))
    return sorted(out)


def find_vectors(row: Row, vectors_dir: Path | None) -> Path | None:
    """The vectors file ``row`` needs (None for rows with random vectors)."""
    patterns = VECTORS[row.vectors]
    if not patterns:
        return None
    fix = ("pass --vectors-dir DIR (or set $GNN_TREELSTM_VECTORS) naming the directory that "
           "holds it (e.g. glove.840B.300d.sick-vocab.txt.gz, glove.6B.50d.filtered.txt.gz)")
    if vectors_dir is None:
        raise ValueError(f"row {row.key} needs {row.vectors} vectors ({patterns[0]}) and no "
                         f"vectors directory was given; {fix}")
    for pattern in patterns:
        hits = sorted(Path(vectors_dir).glob(pattern))
        if hits:
            return hits[0]
    raise ValueError(f"row {row.key} needs {row.vectors} vectors: no file matching "
                     f"{' or '.join(patterns)} in {vectors_dir}; {fix}")


def row_config(row: Row, *, data: str | None = None, embeddings: Path | None = None,
               seeds: int | None = None, epochs: int | None = None,
               quick: bool = False) -> RunConfig:
    """The RunConfig of ``row`` (seed 1, ``seeds`` seeds; only the row's fields set)."""
    kw: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v)
                          for k, v in row.overrides.items()}
    kw["engine"] = engine_for(row)
    kw.update(QUICK if quick else {})
    if epochs is not None:
        kw["epochs"] = epochs
    return RunConfig(**kw, data=data, embeddings=None if embeddings is None else str(embeddings),
                     seed=1, seeds=seeds or (1 if quick else row.seeds))


def command(cfg: RunConfig) -> str:
    """The ``gnn-treelstm train ...`` command equivalent to ``cfg`` (``python train.py``
    in a checkout takes the same flags): the run options that change what is trained
    (:attr:`~gnn_treelstm.training.flags.RunOption.in_command`) and differ from their
    defaults, and always those of :data:`ALWAYS`."""
    args = ["gnn-treelstm", "train"]
    for opt in sorted((o for o in run_options() if o.in_command),
                      key=lambda o: _COMMAND_ORDER[o.kind]):
        value = getattr(cfg, opt.name)
        if opt.name in ALWAYS or value != opt.default:
            args += opt.words(value)
    return shlex.join(args)


def _snli_has_train(data: str | None) -> bool:
    data = data if data is not None else os.environ.get("GNN_TREELSTM_DATA") or None
    if data is None:
        return False
    p = Path(data)
    for meta in (p / "meta.json", p / "snli" / "meta.json"):
        if meta.is_file():
            info = json.loads(meta.read_text(encoding="utf-8"))
            if info.get("dataset") == "snli":
                return "train" in info.get("splits", {})
    return any((p / "snli").glob("*train*"))


def data_reason(row: Row, data: str | None, quick: bool) -> str:
    """Why the data at hand cannot run ``row`` ("" if it can, as far as we can tell)."""
    dataset = build_task(row.overrides["task"]).dataset
    if quick and not (SAMPLE_SRC / RAW_PROBES.get(dataset, dataset)).exists():
        return f"the embedded sample has no {dataset} data"
    if dataset == "snli" and not _snli_has_train(str(SAMPLE_SRC) if quick else data):
        return ("no SNLI train split in the data (the data here has dev/test only); pass "
                "--data DIR holding snli/snli_1.0_train.jsonl or a built SNLI directory")
    return ""


#: RunConfig fields that may differ between a finished seed and the row: where it ran,
#: and the engine and device, which do not change the math (the engines are tested equal
#: in states and gradients, tests/cells/test_registry.py)
PLACE = ("seed", "seeds", "name", "runs_dir", "data", "engine", "device", "eval_batch_size",
         "checkpoint_every")


def describe_changes(had: Mapping[str, Any], cfg: RunConfig,
                     ignore: Iterable[str] = PLACE) -> str:
    """How the recorded configuration ``had`` differs from ``cfg`` (resolved here), as
    ``"field: old -> new, ..."`` ("" = same), leaving out the ``ignore`` fields."""
    return ", ".join(f"{k}: {old!r} -> {new!r}"
                     for k, old, new in config_changes(dict(had), cfg.resolved(), ignore=ignore))


def seed_changes(sdir: Path, cfg: RunConfig) -> str:
    """How a finished seed's recorded configuration differs from ``cfg`` ("" = same)."""
    try:
        had = json.loads((sdir / "config.json").read_text(encoding="utf-8"))["run_config"]
    except (OSError, ValueError, KeyError):
        return "no readable config.json"
    return describe_changes(had, cfg)


def seed_code(sdir: Path) -> dict[str, Any] | None:
    """The code a seed recorded (``config.json``'s ``code``:
    :func:`gnn_treelstm.training.provenance.code_record`), None if it recorded no fingerprints."""
    try:
        code = json.loads((sdir / "config.json").read_text(encoding="utf-8")).get("code")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(code, dict) or not isinstance(code.get("modules"), dict):
        return None
    return code


def code_changes(had: Mapping[str, Any] | None, cfg: RunConfig) -> list[str]:
    """How the code a seed recorded differs from today's for ``cfg``'s model
    (:func:`gnn_treelstm.training.provenance.code_changes`; [] if the same or none recorded)."""
    return provenance.code_changes(had, cfg.model, cfg.task)


def _resumable(row: Row, sdir: Path, cfg: RunConfig) -> bool:
    """Whether the unfinished seed in ``sdir`` continues where it stopped: it holds a
    readable saved state (:mod:`gnn_treelstm.training.resume`) of a run of ``cfg`` (the check of
    ``gnn-treelstm train --resume``, :func:`gnn_treelstm.training.resume.resumed_run_id`); otherwise
    it is trained again from its beginning (said in the log)."""
    if not (sdir / STATE_NAME).is_file():
        return False
    try:
        resumed_run_id(sdir, cfg.resolved())  # RunDirError (a ValueError) if it differs
        TrainState.load(sdir)
    except (OSError, ValueError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        log.warning("%s: cannot resume %s (%s); training the seed from its beginning",
                    row.key, sdir, first)
        return False
    return True


def _train_seeds(row: Row, cfg: RunConfig, rdir: Path, n: int, *, force: bool,
                 hooks: TrainHooks | None) -> bool:
    """Train the missing seeds 1..n of a row; True if anything was trained. A finished
    seed whose recorded configuration differs from the row's is trained again; an
    unfinished one with a saved state of the row's configuration resumes at its last saved
    epoch (:func:`gnn_treelstm.training.trainer.run` with ``resume``), any other is trained
    again."""
    trained = False
    for s in range(1, n + 1):
        sdir = rdir / f"seed-{s}"
        if (sdir / "results.json").is_file() and not force:
            stale = seed_changes(sdir, cfg)
            if not stale:
                log.info("%s seed %d: done (%s)", row.key, s, sdir / "results.json")
                changed = code_changes(seed_code(sdir), cfg)
                if changed:  # same configuration, other code: kept, but said
                    log.warning("%s seed %d: ran with other code in %s than today's; kept "
                                "(--force retrains it if the change alters the math)",
                                row.key, s, ", ".join(changed))
                continue
            log.warning("%s seed %d: the row changed since it ran (%s); training it again",
                        row.key, s, stale)
        seed_cfg = dataclasses.replace(cfg, seed=s, seeds=1, runs_dir=str(rdir),
                                       name=f"seed-{s}")
        resume = (not force and not (sdir / "results.json").is_file()
                  and _resumable(row, sdir, seed_cfg))
        if resume:  # a killed seed continues at its last saved epoch
            log.info("%s seed %d/%d: resuming %s where it stopped", row.key, s, n, sdir)
            run(seed_cfg, hooks=hooks, resume=True)
            trained = True
            continue
        if sdir.exists():
            log.info("%s seed %d: removing %s run %s", row.key, s,
                     "finished" if force else "incomplete", sdir)
            shutil.rmtree(sdir)
        log.info("%s seed %d/%d: training", row.key, s, n)
        run(seed_cfg, hooks=hooks)
        trained = True
    return trained


def _record(rdir: Path, row: Row, **info: Any) -> None:
    """Write the row directory's ``row.json``; a row that shares another's runs
    (``same_as``) writes it as that row (their configurations are equal: tested)."""
    owner = get(row.same_as) if row.same_as else row
    atomic_write(rdir / "row.json", json.dumps({"row": owner.to_dict(), **info}, indent=2,
                                               default=str) + "\n")


@dataclass(frozen=True)
class RunRowsOptions:
    """How :func:`run_rows` trains.

    ``data``: a raw or built data directory (None: ``$GNN_TREELSTM_DATA``, else the embedded
    sample: :func:`~gnn_treelstm.training.data.resolve_data_dir`; ignored in ``quick`` mode,
    which trains on the embedded sample with the :data:`QUICK` settings);
    ``vectors_dir``: the directory holding the word-vector files; ``seeds``, ``epochs``:
    instead of each row's; ``force``: train finished seeds again; ``hooks``: given to every
    training run (:func:`gnn_treelstm.training.trainer.run`)."""

    data: str | None = None
    vectors_dir: Path | None = None
    seeds: int | None = None
    epochs: int | None = None
    quick: bool = False
    force: bool = False
    hooks: TrainHooks | None = None


def _data_arg(options: RunRowsOptions) -> str | None:
    """The data directory the rows train on, the options checked (``ValueError``)."""
    for name, value in (("seeds", options.seeds), ("epochs", options.epochs)):
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if options.quick and options.data is not None:
        log.warning("quick mode uses the embedded sample; ignoring data %s", options.data)
    data_arg = str(SAMPLE_SRC) if options.quick else options.data
    if data_arg is not None and not Path(data_arg).exists():
        raise ValueError(f"data directory {data_arg} does not exist")
    return data_arg


def _plan(rows: list[Row], data_arg: str | None, options: RunRowsOptions
          ) -> list[tuple[Row, str, Path | None]]:
    """Each row with why it cannot run ("" if it can) and its vectors file (a row needing
    vectors that are not there is a ``ValueError`` here, before any training)."""
    plan: list[tuple[Row, str, Path | None]] = []
    for row in rows:
        reason = unavailable_reason(row) or data_reason(row, data_arg, options.quick)
        plan.append((row, reason, None if reason or options.quick
                     else find_vectors(row, options.vectors_dir)))
    return plan


def run_rows(rows: list[Row], *, root: Path,
             options: RunRowsOptions = RunRowsOptions()) -> list[RowRun]:
    """Train every seed of every row that is not done; skip rows that cannot run here.

    Checks every row's vectors first (``ValueError`` naming the row, before any training);
    a row whose training fails is reported as ``failed`` and the others still run.
    """
    root = Path(root)
    quick = options.quick
    data_arg = _data_arg(options)
    plan = _plan(rows, data_arg, options)
    out: list[RowRun] = []
    built: dict[tuple[str, str], str] = {}
    handled: set[Path] = set()  # rows that share runs (same_as) are trained once per call
    for row, reason, vectors in plan:
        rdir = row_dir(root, row)
        if rdir in handled:
            out.append(RowRun(row, "done", rdir, "", done_seeds(root, row)))
            continue
        if reason:
            log.info("%s: skipped (%s)", row.key, reason)
            _record(rdir, row, status="unavailable", reason=reason, quick=quick)
            out.append(RowRun(row, "skipped", rdir, reason))
            continue
        cfg = row_config(row, data=data_arg, embeddings=vectors, seeds=options.seeds,
                         epochs=options.epochs, quick=quick)
        n = cfg.seeds
        try:
            cfg.check()
            key = (build_task(cfg.task).dataset, cfg.tree)
            if key not in built:
                built[key] = str(resolve_data_dir(data_arg, *key, runs_dir=root))
            info = dict(quick=quick, data=data_arg, data_dir=built[key], vectors=vectors,
                        engine=cfg.engine, command=command(cfg),
                        config=cfg.resolved().to_dict())
            _record(rdir, row, status="running", **info)
            trained = _train_seeds(row, dataclasses.replace(cfg, data=built[key]), rdir, n,
                                   force=options.force, hooks=options.hooks)
            handled.add(rdir)
            _record(rdir, row, status="done", seeds_done=done_seeds(root, row), **info)
        except Exception as e:  # one failing row must not stop the others
            log.error("%s: failed: %s", row.key, e)
            log.debug("%s: traceback", row.key, exc_info=True)
            out.append(RowRun(row, "failed", rdir, f"{type(e).__name__}: {e}",
                              done_seeds(root, row)))
            continue
        out.append(RowRun(row, "ran" if trained else "done", rdir, "", done_seeds(root, row)))
    return out
