"""Phrase accuracy by phrase length of models trained with ``--supervision phrase-sequences``.

Each checkpoint (a ``best.pt``, or a run directory) is scored on every labelled phrase of one
split (default ``dev``), each phrase its own sequence as in training, and its accuracy is
printed per phrase length (words) beside the share of the split's most frequent label in
that bin (what always answering that label would score)::

    .venv/bin/python scripts/phrase_length_accuracy.py RUN_A/seed-1/best.pt \\
        RUN_B/seed-1/best.pt --split dev --data DATA

A measurement, not part of the package; ``--json`` prints the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from gnn_treelstm.models.checkpoint import load_model
from gnn_treelstm.training.evaluation import data_dir_for, evaluate, load_eval_split

BINS = ((1, 1), (2, 2), (3, 5), (6, 10), (11, 20), (21, None))


def by_length(path: str, split: str = "dev", data: str | None = None,
              batch_size: int = 512) -> dict:
    """``{"all": row, "1": row, "2": row, "3-5": row, ...}``, each row ``{"phrases",
    "accuracy", "majority"}`` (``None`` for an empty bin)."""
    ck = load_model(path)
    if ck.run_config.get("supervision") != "phrase-sequences":
        raise SystemExit(f"{path}: trained with --supervision "
                         f"{ck.run_config.get('supervision')!r}; this measures models trained "
                         "with --supervision phrase-sequences")
    sp = load_eval_split(ck, data_dir_for(ck, data), split)
    # phrase accuracy's arrays: one labelled node per chain, in the split's order
    _, gathered = evaluate(ck.model, sp, batch_size=batch_size)
    pred = torch.as_tensor(gathered["node_pred"])
    gold = torch.as_tensor(gathered["node_gold"])
    if len(pred) != len(sp):
        raise SystemExit(f"{path}: {len(pred)} scored phrases for {len(sp)} sequences")
    length = torch.tensor([g.num_nodes() for g in sp.graphs])
    majority = torch.mode(gold).values
    res = {}
    for name, (lo, hi) in [("all", (1, None)), *((_name(b), b) for b in BINS)]:
        m = (length >= lo) & (length <= (hi or int(length.max())))
        n = int(m.sum())
        res[name] = {"phrases": n,
                     "accuracy": float((pred[m] == gold[m]).float().mean()) if n else None,
                     "majority": float((gold[m] == majority).float().mean()) if n else None}
    return res


def _name(b: tuple[int, int | None]) -> str:
    lo, hi = b
    return str(lo) if lo == hi else f"{lo}+" if hi is None else f"{lo}-{hi}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--split", default="dev")
    p.add_argument("--data", default=None, help="built data directory (default: the "
                   "checkpoint's)")
    p.add_argument("--label", action="append", help="a column name per checkpoint "
                   "(default: its two parent folders)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.label and len(a.label) != len(a.checkpoints):
        p.error(f"--label: give one per checkpoint ({len(a.checkpoints)}), got {len(a.label)}")
    names = a.label or ["/".join(Path(c).resolve().parts[-3:-1]) for c in a.checkpoints]
    torch.set_num_threads(1)
    results = {n: by_length(c, a.split, a.data) for n, c in zip(names, a.checkpoints)}
    if a.json:
        print(json.dumps(results, indent=1))
        return 0
    bins = list(next(iter(results.values())))
    print("| words | phrases | " + " | ".join(results) + " | most frequent label |")
    print("|---" * (len(results) + 3) + "|")
    for b in bins:
        rows = [r[b] for r in results.values()]
        acc = " | ".join("–" if r["accuracy"] is None else f"{100 * r['accuracy']:.1f}"
                         for r in rows)
        maj = rows[0]["majority"]
        print(f"| {b} | {rows[0]['phrases']} | {acc} | "
              f"{'–' if maj is None else f'{100 * maj:.1f}'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
