"""One-off: import the numbers of a results document's generated tables into the ledger.

The run directories behind ``docs/RESULTS.md`` are gone; its generated tables (between the
``reproduce`` markers) are all that is left of them. This parses every row with numbers
(``| label (`slug`) | setting | metric | paper | mean (std), n=N | gap | … | s/epoch |
vectors |``, further metrics on continuation lines with an empty first cell) and the
commands of the ``<details>`` block (``- `table/slug`: `gnn-treelstm train …```), and writes
one ledger record per row directory key (:func:`gnn_treelstm.reproduce.ledger.record_key`)
with a ``summary``: ``n``, per metric ``mean`` and ``std`` (accuracies as fractions, as
``results.json`` has them), ``seconds_per_epoch``, ``vectors``, ``command``, ``source`` and
``config``, the command resolved under today's defaults
(:func:`gnn_treelstm.reproduce.ledger.command_config`: the runner's stale check compares it
with a row's configuration); a summary already in the ledger with the same command keeps
its ``config`` (resolved under the defaults of its day). Records already in the ledger keep
their seeds; only their ``summary`` is replaced. ``--add-configs`` only adds the
``config`` of summaries without one (a ledger imported before summaries had it; their
commands name every setting that differs from today's defaults).

    .venv/bin/python scripts/import_results_ledger.py [--results docs/RESULTS.md]
        [--ledger docs/results.json] [--source TEXT] [--add-configs]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import gnn_treelstm  # noqa: F401  (before anything that imports dgl)
from gnn_treelstm.reproduce import ledger
from gnn_treelstm.reproduce import rows as R
from gnn_treelstm.reproduce.report import BEGIN, END

SOURCE = "docs/RESULTS.md at commit 06c36f5 (per-seed values were not kept)"
_LABEL = re.compile(r"\(`([^`]+)`\)$")
_OURS = re.compile(r"^(-?\d+(?:\.\d+)?)(?: \((-?\d+(?:\.\d+)?)\))?, n=(\d+)(?:/\d+)?$")
_COMMAND = re.compile(r"^- `([^`]+)`: `([^`]*)`")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


def _section(text: str) -> str:
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < b:
        raise ValueError(f"no {BEGIN} ... {END} section")
    return text[b + len(BEGIN):e]


def _cells(line: str) -> list[str]:
    body = line.strip()
    if not (body.startswith("|") and body.endswith("|")):
        raise ValueError(f"not a table row: {line!r}")
    return [c.strip() for c in body[1:-1].split(" | ")]


def _value(metric: str, text: str) -> float:
    v = float(text)
    return round(v / 100, 6) if R.is_accuracy(metric) else v


def parse(text: str) -> dict[str, dict]:
    """Row key -> {"n", "metrics": {metric: {"mean", "std"}}, "seconds_per_epoch",
    "vectors", "command"} for every row of the generated section with numbers."""
    titles = {t.title: k for k, t in R.TABLES.items()}
    out: dict[str, dict] = {}
    commands: dict[str, str] = {}
    table = key = None
    for line in _section(text).splitlines():
        if line.startswith("### "):
            title = line[4:].strip()
            if title not in titles:
                raise ValueError(f"unknown table {title!r}")
            table, key = titles[title], None
            continue
        m = _COMMAND.match(line)
        if m:
            commands[m.group(1)] = m.group(2)
            continue
        if not line.startswith("| ") or line.startswith("| row |"):
            continue
        cells = _cells(line)
        if len(cells) != 9:
            raise ValueError(f"expected 9 cells, got {len(cells)}: {line!r}")
        label, _, metric, _, ours, _, _, speed, vectors = cells
        if label:
            m = _LABEL.search(label)
            if m is None or table is None:
                raise ValueError(f"no row key in {line!r}")
            key = f"{table}/{m.group(1)}"
            R.get(key)  # a KeyError-like error for a row the registry does not know
            row_speed, row_vectors = speed, vectors
        elif key is None:
            raise ValueError(f"continuation line before any row: {line!r}")
        m = _OURS.match(ours)
        if m is None:
            if ours and ours != "not run" and not ours.startswith("unavailable"):
                raise ValueError(f"cannot read the numbers {ours!r} of {key}")
            continue
        mean, std, n = m.groups()
        rec = out.setdefault(key, {"n": int(n), "metrics": {}, "seconds_per_epoch":
                                   float(row_speed) if _NUMBER.match(row_speed) else None,
                                   "vectors": row_vectors})
        if rec["n"] != int(n):
            raise ValueError(f"{key}: n={n} for {metric} but n={rec['n']} before")
        rec["metrics"][metric] = {"mean": _value(metric, mean),
                                  "std": None if std is None else _value(metric, std)}
    for key, rec in out.items():
        if key not in commands:
            raise ValueError(f"{key}: no command in the details block")
        rec["command"] = commands[key]
    return out


def to_ledger(parsed: dict[str, dict], *, source: str = SOURCE,
              into: dict[str, dict] | None = None) -> dict[str, dict]:
    """``into`` (a ledger) with a summary record per row directory key of ``parsed``; rows
    sharing a directory must agree on the numbers they both show."""
    out = {k: dict(v) for k, v in (into or {}).items()}
    summaries: dict[str, dict] = {}
    # the directory's own row first: its command and vectors are the record's
    order = sorted(parsed, key=lambda k: ledger.record_key(R.get(k)) != k)
    for key in order:
        p = parsed[key]
        rkey = ledger.record_key(R.get(key))
        vectors = p["vectors"]
        if vectors == R.get(key).vectors or vectors == "sample (quick)":
            vectors = None  # the row's vectors kind, not a file name
        held = (out.get(rkey) or {}).get("summary") or {}
        config = (held["config"] if held.get("config") and held.get("command") == p["command"]
                  else ledger.command_config(p["command"]))  # resolved once, when imported
        new = {"n": p["n"], "metrics": dict(p["metrics"]),
               "seconds_per_epoch": p["seconds_per_epoch"], "vectors": vectors,
               "command": p["command"], "source": source, "config": config}
        have = summaries.get(rkey)
        if have is None:
            summaries[rkey] = new
            continue
        for field in ("n", "seconds_per_epoch"):
            if have[field] != new[field]:
                raise ValueError(f"{key} and {rkey} share runs but differ in {field}: "
                                 f"{new[field]} vs {have[field]}")
        for metric, ms in new["metrics"].items():
            if have["metrics"].setdefault(metric, ms) != ms:
                raise ValueError(f"{key} and {rkey} share runs but differ in {metric}: "
                                 f"{ms} vs {have['metrics'][metric]}")
    for rkey, summary in summaries.items():
        out[rkey] = {**out.get(rkey, {}), "summary": summary}
    return out


def add_configs(led: dict[str, dict]) -> dict[str, dict]:
    """``led`` with the resolved ``config`` of its command added to every summary without
    one."""
    out = {k: dict(v) for k, v in led.items()}
    for rec in out.values():
        summary = rec.get("summary")
        if summary and not summary.get("config") and summary.get("command"):
            rec["summary"] = {**summary, "config": ledger.command_config(summary["command"])}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=Path("docs/RESULTS.md"))
    ap.add_argument("--ledger", type=Path, default=None,
                    help="default: results.json beside --results")
    ap.add_argument("--source", default=SOURCE)
    ap.add_argument("--add-configs", action="store_true",
                    help="only add the resolved config of summaries that have none")
    a = ap.parse_args(argv)
    path = a.ledger or ledger.ledger_path(a.results)
    if a.add_configs:
        led = add_configs(ledger.load(path))
        ledger.save(path, led)
        print(f"{path}: {len(led)} records")
        return 0
    parsed = parse(a.results.read_text(encoding="utf-8"))
    led = to_ledger(parsed, source=a.source, into=ledger.load(path))
    ledger.save(path, led)
    print(f"{path}: {len(parsed)} rows with numbers -> {len(led)} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
