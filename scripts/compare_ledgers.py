"""Do two results ledgers agree? The check behind "a change does not move a number".

After a change that should not change what a model learns (a faster kernel, another way to
draw the dropout mask), rerun some rows into a separate run directory and ledger, then compare
it with the committed one::

    .venv/bin/python -m gnn_treelstm.reproduce tai-t2/const-treelstm-sst5 tai-t3/dep-treelstm \\
        --root runs/rerun-check --results /tmp/rerun/RESULTS.md --data DATA --vectors-dir GLOVE
    .venv/bin/python scripts/compare_ledgers.py docs/results.json /tmp/rerun/results.json

For every row in both ledgers and every test metric the paper reports for it (the row's
``paper`` metrics), it prints the committed mean (std, n), the rerun's, the difference and
whether ``|difference| <= max(std committed, std rerun)``: a rerun with other random draws
(a seed now draws another dropout mask) moves a mean by about a standard deviation at most
when nothing else changed. A Markdown table on stdout; exit 1 if a metric disagrees, 2 on bad
input. A check, not part of the package: it reads the package's ledger module.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from gnn_treelstm.reproduce import ledger, rows
from gnn_treelstm.reproduce.report import fmt_mean_std, fmt_metric


@dataclass(frozen=True)
class Agreement:
    """One row's metric in both ledgers: (mean, std, n) each."""

    key: str
    metric: str
    old: tuple[float, float | None, int]
    new: tuple[float, float | None, int]

    @property
    def delta(self) -> float:
        return self.new[0] - self.old[0]

    @property
    def tolerance(self) -> float | None:
        stds = [s for s in (self.old[1], self.new[1]) if s is not None and math.isfinite(s)]
        return max(stds) if stds else None

    @property
    def agrees(self) -> bool:
        tol = self.tolerance
        return tol is not None and abs(self.delta) <= tol + 1e-12


def compare(old: dict[str, dict], new: dict[str, dict]) -> list[Agreement]:
    """The paper metrics of every row whose record is in both ledgers (table order)."""
    out = []
    for row in rows.ROWS:
        key = ledger.record_key(row)
        if key != row.key or key not in old or key not in new:
            continue
        a, b = ledger.to_results(row, old[key]), ledger.to_results(row, new[key])
        for metric in row.paper:
            sa, sb = a.stats(metric), b.stats(metric)
            if sa is None or sb is None:
                continue
            out.append(Agreement(key, metric, (*sa, a.n), (*sb, b.n)))
    return out


def markdown(found: list[Agreement]) -> str:
    lines = ["| row | metric | committed mean (std), n | rerun mean (std), n | difference "
             "| within max std |", "|---|---|---|---|---|---|"]
    for f in found:
        cells = [f"{fmt_mean_std(f.metric, x[:2])}, {x[2]}" for x in (f.old, f.new)]
        lines.append(f"| {f.key} | {f.metric} | {cells[0]} | {cells[1]} | "
                     f"{fmt_metric(f.metric, f.delta, sign=True)} | "
                     f"{'yes' if f.agrees else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("committed", type=Path, help="the committed ledger (docs/results.json)")
    p.add_argument("rerun", type=Path, help="the rerun's ledger (beside its --results)")
    a = p.parse_args(argv)
    try:
        old, new = ledger.load(a.committed), ledger.load(a.rerun)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, held in (("committed", old), ("rerun", new)):
        if not held:
            print(f"error: the {name} ledger {getattr(a, name)} holds no rows; pass the "
                  "results.json beside a results document", file=sys.stderr)
            return 2
    found = compare(old, new)
    if not found:
        print(f"error: no row is in both {a.committed} and {a.rerun}", file=sys.stderr)
        return 2
    print(markdown(found))
    bad = [f"{f.key} {f.metric}" for f in found if not f.agrees]
    print(f"\n{len(found) - len(bad)} of {len(found)} metrics agree within max std"
          + (f"; not: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
