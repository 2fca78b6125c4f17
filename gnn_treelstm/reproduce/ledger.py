"""The committed results ledger: every finished seed of every row, kept in git.

Run directories (``runs/reproduce/``) are not committed; the ledger is. It lives beside
the results document (``docs/results.json`` for ``docs/RESULTS.md``: :func:`ledger_path`)
and holds one record per row *directory* key (``row.same_as or row.key``, the rows that
share runs share a record)::

    {"tran-t3/treelstm-d": {
        "seeds": {"1": {"test": {"accuracy": 0.83, ...}, "seconds_per_epoch": 3.5,
                        "best_epoch": 7, "code": {"python": "3.11", "version": "0.1.0",
                        "modules": {"gnn_treelstm.cells.childsum": "...", ...}}}, ...},
        "command": "gnn-treelstm train ...", "vectors": "...", "config": {...},
        "summary": {"n": 5, "metrics": {"accuracy": {"mean": 0.831, "std": 0.002}},
                    "seconds_per_epoch": 3.5, "vectors": "...", "command": "...",
                    "source": "..."}}}

``seeds`` (seed number as a string) come from the run directories (:func:`merge_runs`:
a seed in both is taken from the run directory, a seed only in the ledger is kept);
``command``, ``vectors``, ``config`` (and ``quick``) as the row's ``row.json`` has them.
``summary`` holds numbers whose per-seed values were not kept (imported from a results
document by ``scripts/import_results_ledger.py``, with the resolved ``config`` of its
command): a record with seeds is reported from its seeds, one with only a summary from the
summary's mean (std) and n.

A record holds the seeds of *one* configuration. :func:`stale` says how the configuration
a record was measured with differs from a row's today (a changed default, ``--epochs``):
the runner does not count a stale record's seeds as done, and :func:`merge_record` replaces
a record whose configuration differs from the run directory's instead of mixing the two.
A seed's ``code`` holds the fingerprints of its model's modules
(:mod:`gnn_treelstm.training.provenance`); :func:`code_changes` names the seeds that ran with other
code than today's, which a configuration cannot show (a fix of a cell's math).

JSON with sorted keys, indent 1, written atomically (:func:`gnn_treelstm.files.atomic_write`:
a killed write leaves the previous ledger). Non-finite numbers are stored as ``null``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shlex
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnn_treelstm.files import atomic_write
from gnn_treelstm.reproduce import runner
from gnn_treelstm.reproduce.rows import Row
from gnn_treelstm.reproduce.runner import row_dir
from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.options import config_from_args, parse_args  # as the CLI reads them

log = logging.getLogger(__name__)

__all__ = ["FILENAME", "RowResults", "ledger_path", "record_key", "load", "dumps", "save",
           "read_run", "merge_record", "merge_runs", "seed_numbers", "to_results",
           "record_config", "command_config", "stale", "code_changes", "done_seeds", "merges",
           "PLACE"]

#: the ledger's file name, beside the results document
FILENAME = "results.json"
#: metrics where lower is better
LOWER_IS_BETTER = ("mse",)
#: row.json fields a record keeps
_INFO = ("command", "vectors", "config", "quick")
#: RunConfig fields that say where and how many, not what was trained (the runner's, and
#: the embeddings, compared by file name: the directory differs from machine to machine)
PLACE = (*runner.PLACE, "embeddings")


@dataclass
class RowResults:
    """The finished seeds of a row: per metric the test values, and seconds per epoch;
    or, for a row whose per-seed values were not kept, the ``summary`` of its ledger
    record (used only when there are no seeds)."""

    row: Row
    values: dict[str, list[float]] = field(default_factory=dict)
    seconds_per_epoch: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # row.json, if any
    summary: dict[str, Any] | None = None
    #: per seed (seed order), its dev value of the metric its epoch was selected on, or
    #: None (seeds recorded before the ledger kept dev values)
    dev_selected: list[float | None] = field(default_factory=list)
    #: the metric the seeds' epochs were selected on ("" if not recorded)
    selected_on: str = ""

    @property
    def n(self) -> int:
        if self.seconds_per_epoch or not self.summary:
            return len(self.seconds_per_epoch)
        return int(self.summary.get("n") or 0)

    def stats(self, metric: str) -> tuple[float, float | None] | None:
        """(mean, sample std or None for one seed) of a test metric, None if not run."""
        if self.summary and not self.seconds_per_epoch:
            m = self.summary.get("metrics", {}).get(metric)
            if not m or m.get("mean") is None:
                return None
            return float(m["mean"]), None if m.get("std") is None else float(m["std"])
        vals = [v for v in self.values.get(metric, []) if v is not None and math.isfinite(v)]
        if not vals:
            return None
        return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else None

    def best_by_dev(self, metric: str) -> float | None:
        """The test ``metric`` of the seed with the best dev value of its selection metric
        (the statistic of papers that print the best of k runs selected on dev, Teng & Zhang
        §6); None unless every seed has its dev value."""
        vals = self.values.get(metric, [])
        devs = self.dev_selected
        if not vals or len(devs) != len(vals) or any(d is None for d in devs):
            return None
        lower = self.selected_on in LOWER_IS_BETTER
        best = (min if lower else max)(range(len(devs)), key=lambda i: devs[i])
        value = vals[best]
        return None if value is None or not math.isfinite(value) else value

    def median_seconds(self) -> float | None:
        """Median seconds per epoch over the seeds (the summary's, without seeds)."""
        if self.summary and not self.seconds_per_epoch:
            s = self.summary.get("seconds_per_epoch")
            return None if s is None else float(s)
        spe = [s for s in self.seconds_per_epoch if math.isfinite(s)]
        return statistics.median(spe) if spe else None


def ledger_path(results: Path) -> Path:
    """The ledger of a results document: ``results.json`` in the same directory."""
    return Path(results).with_name(FILENAME)


def record_key(row: Row) -> str:
    """The key of ``row``'s record: its run directory's row (``same_as``) or its own."""
    return row.same_as or row.key


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats as None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def load(path: Path) -> dict[str, dict]:
    """The ledger at ``path`` ({} if there is none); ``ValueError`` if it is not one."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{path}: not a results ledger (invalid JSON: {e})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ValueError(f"{path}: not a results ledger (expected an object of row records)")
    return data


def dumps(ledger: Mapping[str, Any]) -> str:
    """The ledger's file content: sorted keys, indent 1, no NaN."""
    return json.dumps(_finite(dict(ledger)), sort_keys=True, indent=1, ensure_ascii=False,
                      allow_nan=False) + "\n"


def save(path: Path, ledger: Mapping[str, Any]) -> Path:
    """Write ``ledger`` to ``path`` atomically (not at all if the file already says it)."""
    path = Path(path)
    text = dumps(ledger)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return path
    atomic_write(path, text)
    log.info("wrote %s (%d records)", path, len(ledger))
    return path


def _test_metrics(res: dict) -> dict[str, float]:
    out = {k: v["mean"] for k, v in res.get("test", {}).items() if isinstance(v, dict)}
    if not out and res.get("seeds"):
        out = dict(res["seeds"][0].get("test", {}))
    return out


def _seed_record(res: dict) -> dict[str, Any]:
    rec: dict[str, Any] = {"test": _finite(_test_metrics(res)),
                           "seconds_per_epoch": _finite(res.get("seconds_per_epoch"))}
    per_seed = res.get("seeds") or [{}]
    if per_seed[0].get("best_epoch") is not None:
        rec["best_epoch"] = per_seed[0]["best_epoch"]
    sel = res.get("selection_metric")
    dev = res.get("dev", {}).get(sel) if sel else None
    if isinstance(dev, dict) and dev.get("mean") is not None:  # the dev value it was selected on
        rec["dev"] = {"metric": sel, "value": _finite(float(dev["mean"]))}
    return rec


def read_run(root: Path, row: Row) -> tuple[dict[str, Any], dict[str, Any]]:
    """``row``'s record as its run directory under ``root`` has it (finished seeds, and
    the ``row.json`` fields a record keeps), and that ``row.json`` ({} if none)."""
    rdir = row_dir(root, row)
    info: dict[str, Any] = {}
    if (rdir / "row.json").is_file():
        info = json.loads((rdir / "row.json").read_text(encoding="utf-8"))
    seeds = {}
    row_cfg = _run_config(info["config"]) if info.get("config") else None
    seed_dirs = [d for d in rdir.glob("seed-*") if d.name[5:].isdigit()]
    for d in sorted(seed_dirs, key=lambda d: int(d.name[5:])):
        path = d / "results.json"
        if not path.is_file():
            continue
        changed = (runner.seed_changes(d, row_cfg)
                   if row_cfg is not None and (d / "config.json").is_file() else "")
        if changed:  # e.g. seeds 3-5 of an earlier call with other --epochs
            log.warning("%s: %s ran with another configuration than the row's (%s); not "
                        "recorded", row.key, d, changed)
            continue
        rec = _seed_record(json.loads(path.read_text(encoding="utf-8")))
        code = runner.seed_code(d)
        if code:
            rec["code"] = code
        seeds[str(int(d.name[5:]))] = rec
    record: dict[str, Any] = {"seeds": seeds}
    record.update({k: _finite(info[k]) for k in _INFO
                   if info.get(k) is not None and (k != "quick" or info[k])})
    return record, info


def record_config(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The resolved run configuration a record was measured with (its ``row.json``'s, else
    its summary's), None if it has none."""
    record = record or {}
    return record.get("config") or (record.get("summary") or {}).get("config") or None


def command_config(command: str) -> dict[str, Any]:
    """The resolved configuration (``RunConfig.resolved().to_dict()``) of a ``gnn-treelstm
    train ...`` command, under today's defaults (``ValueError`` if it does not parse)."""
    words = shlex.split(command)
    if words[:2] != ["gnn-treelstm", "train"]:
        raise ValueError(f"not a 'gnn-treelstm train' command: {command!r}")
    try:
        args = parse_args(words[2:])
    except SystemExit as e:
        raise ValueError(f"cannot read the command {command!r} (argparse exit {e.code})") from e
    return json.loads(json.dumps(config_from_args(args).resolved().to_dict(), default=str))


def _run_config(recorded: Mapping[str, Any]) -> RunConfig:
    """A :class:`RunConfig` from a recorded one (fields it no longer has are dropped)."""
    names = {f.name for f in dataclasses.fields(RunConfig)}
    return RunConfig(**{k: v for k, v in recorded.items() if k in names})


def stale(record: Mapping[str, Any] | None, cfg: RunConfig) -> str:
    """How the configuration ``record`` was measured with differs from ``cfg`` (resolved
    here), as ``"field: old -> new, ..."``; "" if it is the same or the record has none.
    :data:`PLACE` fields are ignored, the embeddings compared by file name (when both
    name one)."""
    had = record_config(record)
    if not had:
        return ""
    diffs = [runner.describe_changes(had, cfg, ignore=PLACE)]
    old_emb, new_emb = had.get("embeddings"), cfg.embeddings
    if old_emb and new_emb and Path(old_emb).name != Path(new_emb).name:
        diffs.append(f"embeddings: {Path(old_emb).name!r} -> {Path(new_emb).name!r}")
    return ", ".join(d for d in diffs if d)


def code_changes(record: Mapping[str, Any] | None, cfg: RunConfig) -> str:
    """Which seeds of ``record`` ran with other code of ``cfg``'s model than today's, as
    ``"seeds 1, 2: cells.topdown; seed 3: model"`` ("" if none, or none recorded its code:
    seeds measured before runs recorded it). Unlike :func:`stale` this only informs: a
    fingerprint also changes with a refactor that leaves the math as it was."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for s, rec in ((record or {}).get("seeds") or {}).items():
        changed = runner.code_changes(rec.get("code") if isinstance(rec, dict) else None, cfg)
        if changed:
            groups.setdefault(tuple(changed), []).append(int(s))
    return "; ".join(
        f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, sorted(seeds)))}: "
        + ", ".join(m.removeprefix("gnn_treelstm.") for m in modules)
        for modules, seeds in sorted(groups.items(), key=lambda kv: min(kv[1])))


def merge_record(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """``old`` with ``new``'s seeds (a seed in both: ``new``'s) and ``row.json`` fields; or
    ``new`` alone if both name a configuration and they differ (:func:`stale`)."""
    new_cfg = record_config(new)
    changed = stale(old, _run_config(new_cfg)) if old and new_cfg and new.get("seeds") else ""
    if changed:
        log.info("replacing a ledger record measured with another configuration (%s)", changed)
        old = None
    out = json.loads(json.dumps(old or {}))  # a deep copy
    if new.get("seeds"):
        out["seeds"] = {**out.get("seeds", {}), **json.loads(json.dumps(new["seeds"]))}
        out.pop("summary", None)  # a record with seeds is reported from them
    if any(k in new for k in _INFO):  # new has a row.json: its fields replace old's
        for k in _INFO:
            out.pop(k, None)
            if k in new:
                out[k] = new[k]
    return out


def merge_runs(ledger: Mapping[str, dict], root: Path, rows: Iterable[Row]) -> dict[str, dict]:
    """A new ledger: ``ledger`` with the finished seeds found under ``root`` for ``rows``
    merged in (run directory wins for a seed in both; seeds only in the ledger are kept).
    A row without finished seeds in its run directory leaves its record as it was, and so
    does a quick-mode run directory of a row the ledger holds measured seeds of, and a run
    directory measured with another configuration than the row's today when the ledger's
    record has the row's (:func:`stale`)."""
    out = {k: dict(v) for k, v in ledger.items()}
    seen = set()
    for row in rows:
        key = record_key(row)
        if key in seen:
            continue
        seen.add(key)
        found, _ = read_run(root, row)
        if merges(out.get(key), found, row, root):
            out[key] = merge_record(out.get(key), found)
    return out


def merges(old: Mapping[str, Any] | None, found: Mapping[str, Any], row: Row,
           root: Path) -> bool:
    """Whether the record ``found`` in ``row``'s run directory (:func:`read_run`) is merged
    into the ledger's record ``old`` (:func:`merge_runs`), warning why not if it has seeds."""
    old = old or {}
    if not found.get("seeds"):
        return False
    where = row_dir(root, row)
    if found.get("quick") and not old.get("quick") and seed_numbers(old):
        log.warning("%s: not merging quick-mode (smoke test) seeds from %s into the "
                    "measured ones of the ledger", record_key(row), where)
        return False
    today = runner.row_config(row, quick=bool(found.get("quick")))
    changed = stale(found, today)
    if changed and seed_numbers(old) and not stale(old, today):
        log.warning("%s: not merging %s: it ran with another configuration than the row's "
                    "(%s), and the ledger holds seeds of the row's", record_key(row), where,
                    changed)
        return False
    return True


def done_seeds(root: Path, row: Row, ledger: Mapping[str, dict] | None = None,
               cfg: RunConfig | None = None) -> list[int]:
    """Seeds of ``row`` whose ``results.json`` exists under ``root``, and those its record in
    ``ledger`` holds; given the row's configuration ``cfg``, not those of a record measured
    with another one (:func:`stale`)."""
    out = set(runner.done_seeds(root, row))
    if ledger:
        record = ledger.get(record_key(row))
        if cfg is None or not stale(record, cfg):
            out.update(seed_numbers(record))
    return sorted(out)


def seed_numbers(record: Mapping[str, Any] | None) -> list[int]:
    """The seeds a record holds: its ``seeds``, else 1..n of its ``summary`` (the runner
    trains seeds 1, 2, ... in order)."""
    if not record:
        return []
    if record.get("seeds"):
        return sorted(int(s) for s in record["seeds"])
    n = int((record.get("summary") or {}).get("n") or 0)
    return list(range(1, n + 1))


def to_results(row: Row, record: Mapping[str, Any] | None,
               info: Mapping[str, Any] | None = None) -> RowResults:
    """The :class:`RowResults` of ``row`` from its ledger ``record`` (seeds in seed order;
    without seeds, the record's summary). ``info`` (the run directory's ``row.json``)
    wins over the record's ``command``, ``vectors`` and ``config``."""
    record = record or {}
    out = RowResults(row)
    seeds = record.get("seeds") or {}
    for s in sorted(seeds, key=int):
        res = seeds[s]
        for metric, value in (res.get("test") or {}).items():
            out.values.setdefault(metric, []).append(math.nan if value is None else value)
        spe = res.get("seconds_per_epoch")
        out.seconds_per_epoch.append(math.nan if spe is None else float(spe))
        dev = res.get("dev") or {}
        out.dev_selected.append(dev.get("value"))
        out.selected_on = out.selected_on or dev.get("metric", "")
    summary = record.get("summary")
    if not seeds and summary:
        out.summary = dict(summary)
        out.info.update({k: summary[k] for k in ("command", "vectors")
                         if summary.get(k) is not None})
    out.info.update({k: record[k] for k in _INFO if record.get(k) is not None})
    out.info.update(info or {})
    return out
