"""Regenerate the reproduction tables of ``docs/RESULTS.md`` from run directories and the
results ledger (:mod:`.ledger`, ``docs/results.json``).

Only the text between :data:`BEGIN` and :data:`END` is rewritten; everything outside the
markers is kept byte for byte. One markdown table per paper table: each row's test metrics
over its finished seeds (mean and *sample* standard deviation, ``ddof=1``), next to the
paper's number, the gap, the median seconds per epoch, the vectors and the exact
``gnn-treelstm train`` command. A row whose ledger record has only a ``summary`` (numbers
whose per-seed values were not kept) shows the summary's mean (std) and n.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from gnn_treelstm.files import atomic_write
from gnn_treelstm.reproduce.ledger import (
    LOWER_IS_BETTER,
    RowResults,
    merge_record,
    merges,
    read_run,
    record_key,
    seed_numbers,
    to_results,
)
from gnn_treelstm.reproduce.rows import TABLES, VECTORS, Row, is_accuracy, unavailable_reason
from gnn_treelstm.reproduce.runner import command, row_config

log = logging.getLogger(__name__)

__all__ = ["BEGIN", "END", "RowResults", "collect", "render", "write_results", "fmt_metric",
           "fmt_mean_std"]

BEGIN = "<!-- BEGIN GENERATED: reproduce -->"
END = "<!-- END GENERATED: reproduce -->"
HEADER = ("# Results\n\nReproduction of the papers' tables (`python -m gnn_treelstm.reproduce`)."
          " Text outside the generated markers below is kept when the tables are "
          "regenerated.\n\n")


def collect(root: Path, row: Row, ledger: Mapping[str, dict] | None = None) -> RowResults:
    """``row``'s results: its ``row.json`` and every ``seed-*/results.json`` under ``root``,
    merged into its record of ``ledger`` as :func:`.ledger.merge_runs` merges them (a seed
    in both is the run directory's; a quick or stale run directory does not replace
    measured seeds)."""
    found, info = read_run(root, row)
    if ledger is None:
        return to_results(row, found, info)
    old = ledger.get(record_key(row))
    if merges(old, found, row, root):
        return to_results(row, merge_record(old, found), info)
    # not merged: the ledger's seeds, with the run directory's row.json only if it has none
    return to_results(row, old, None if seed_numbers(old) else info)


def fmt_metric(metric: str, value: float | None, *, sign: bool = False) -> str:
    """A metric value as the tables print it: accuracies in points (1 decimal), others to 4
    decimals; ``sign`` for differences; "–" for None."""
    if value is None:
        return "–"
    if is_accuracy(metric):
        return f"{value * 100:+.1f}" if sign else f"{value * 100:.1f}"
    return f"{value:+.4f}" if sign else f"{value:.4f}"


def fmt_mean_std(metric: str, ms: tuple[float, float | None]) -> str:
    """``mean (std)`` (``mean`` alone without a std) in :func:`fmt_metric`'s units."""
    mean, std = ms
    return fmt_metric(metric, mean) + ("" if std is None else f" ({fmt_metric(metric, std)})")


def _within(metric: str, ours: float, paper: tuple[float, float | None]) -> str:
    mean, std = paper
    if std is None:
        return "–"
    if metric in LOWER_IS_BETTER:
        return "✓" if ours <= mean + std else "✗"
    return "✓" if ours >= mean - std else "✗"


def _reason(r: RowResults) -> str:
    if unavailable_reason(r.row):
        return unavailable_reason(r.row)
    return r.info.get("reason", "") if r.info.get("status") == "unavailable" else ""


def _command(r: RowResults) -> str:
    if r.info.get("command"):  # runs recorded before the console command say train.py
        recorded = r.info["command"]
        old = "python train.py "
        return "gnn-treelstm train " + recorded[len(old):] if recorded.startswith(old) \
            else recorded
    patterns = VECTORS[r.row.vectors]
    vec = Path("VECTORS_DIR") / patterns[0] if patterns else None
    return command(row_config(r.row, embeddings=vec))


def _setting(row: Row) -> str:
    o = row.overrides
    parts = [o.get("task", ""), o.get("tree", "")]
    if o.get("supervision"):
        parts.append(f"{o['supervision']}-level")
    return " ".join(p for p in parts if p)


def _table(table: str, results: list[RowResults]) -> list[str]:
    info = TABLES[table]
    citation = info.citation.replace("*", "\\*")
    best = info.best_of_runs  # the paper's statistic: best of k runs, selected on dev
    lines = [f"### {info.title}", "", f"*{citation}*", "",
             "| row | setting | metric | paper | ours (n seeds) | gap | "
             + ("best by dev (gap) | " if best else "")
             + "≥ paper − std | s/epoch | vectors |",
             "|---|---|---|---|---|---|---|---|---|" + ("---|" if best else "")]
    notes = []
    for r in results:
        row, reason = r.row, _reason(r)
        vectors = Path(r.info["vectors"]).name if r.info.get("vectors") else row.vectors
        if r.info.get("quick") and not reason:
            vectors = "sample (quick)"
        spe = r.median_seconds()
        speed = "–" if spe is None else f"{spe:.1f}"
        for i, (metric, paper) in enumerate(row.paper.items()):
            ms = r.stats(metric)
            by_dev = "–"
            if reason:
                ours, gap, within = f"unavailable: {reason}" if i == 0 else "", "–", "–"
            elif ms is None:
                ours, gap, within = "not run", "–", "–"
            else:
                b = r.best_by_dev(metric)
                if b is not None:
                    gap_b = fmt_metric(metric, b - paper[0], sign=True)
                    by_dev = f"{fmt_metric(metric, b)} ({gap_b})"
                total = r.info.get("config", {}).get("seeds", row.seeds)
                ours = f"{fmt_mean_std(metric, ms)}, n={r.n}" + ("" if r.n >= total
                                                               else f"/{total}")
                gap = fmt_metric(metric, ms[0] - paper[0], sign=True)
                within = _within(metric, ms[0], paper)
            first = i == 0
            text = row.label.replace("|", "\\|")  # Teng Table 5's "|h|=150" would end the cell
            label = f"{text} (`{row.key.split('/', 1)[1]}`)" if first else ""
            lines.append(f"| {label} | {_setting(row) if first else ''} | {metric} | "
                         f"{fmt_mean_std(metric, paper)} | {ours} | {gap} | "
                         + (f"{by_dev} | " if best else "") + f"{within} | "
                         f"{speed if first else ''} | {vectors if first else ''} |")
        note = f" — {row.note}" if row.note else ""
        notes.append(f"- `{row.key}`: `{_command(r)}`{note}")
    lines += ["", "<details><summary>commands and notes</summary>", "", *notes, "",
              "</details>", ""]
    return lines


def render(root: Path, rows: list[Row], *, note: str = "",
           ledger: Mapping[str, dict] | None = None) -> str:
    """The generated section (between the markers, markers excluded); rows are read from
    ``root`` merged into ``ledger`` (:func:`collect`)."""
    lines = ["", f"Generated by `python -m gnn_treelstm.reproduce` from `{root}`. "
             "**ours** = mean (sample standard deviation, ddof=1; none for one seed) over the "
             "finished seeds of each seed's test metric at its dev-selected epoch; **paper** = "
             "as printed, mean (std). **gap** = ours − paper: accuracies in points (×100), "
             "Pearson / Spearman / MSE as the raw difference. **≥ paper − std**: ✓ if ours ≥ "
             "paper mean − paper std (MSE: ours ≤ mean + std); – where the paper gives no std. "
             "Accuracies are shown in %. **best by dev (gap)**, in the tables of a paper that "
             "prints the best of k runs selected on dev (Teng & Zhang): the test value of our "
             "seed with the best dev value of the metric its epoch was selected on, and its "
             "gap to the paper.", ""]
    if note:
        lines += [note, ""]
    for table in TABLES:
        chosen = [r for r in rows if r.table == table]
        if chosen:
            lines += _table(table, [collect(root, r, ledger) for r in chosen])
    return "\n".join(lines)


def write_results(root: Path, out: Path, rows: list[Row], *, note: str = "",
                  ledger: Mapping[str, dict] | None = None) -> Path:
    """Rewrite the generated section of ``out`` (created with a header if absent)."""
    out = Path(out)
    text = out.read_text(encoding="utf-8") if out.exists() else HEADER + f"{BEGIN}\n{END}\n"
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 and e < 0:
        text = text.rstrip("\n") + f"\n\n{BEGIN}\n{END}\n"
        b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < 0 or e < b or text.count(BEGIN) > 1 or text.count(END) > 1:
        raise ValueError(f"{out}: expected exactly one {BEGIN} followed by one {END}; fix "
                         "the markers by hand (or delete them to have them appended)")
    section = render(root, rows, note=note, ledger=ledger)
    atomic_write(out, text[:b + len(BEGIN)] + "\n" + section + "\n" + text[e:])
    log.info("wrote %s (%d rows)", out, len(rows))
    return out
