"""Loading and batching a built split: resident bytes a node, load seconds, collate trees/s.

One measurement per process (a fresh process measures the load's memory), printed as JSON::

    python scripts/packed_bench.py load DIR [--split train --tree constituency]
    python scripts/packed_bench.py collate DIR [--batch-size 25] [--schedule]

``load``: the resident set (``VmRSS``) before and after ``load_split``, and after reading
every tree once (for packed trees: every page of their arrays; for lists of graphs the
load already holds them), divided by the split's nodes. ``collate``: one shuffled pass
over the split in batches, on one thread, as the data loader builds them
(``TreeDataset.__getitems__`` then ``collate``), trees per second. It uses only what
every version of the package has (``load_split``, ``TreeDataset``, ``collate``), so the
same script measures another checkout with ``PYTHONPATH=OTHER``; run both alternately
and compare ratios (``--compare OLD_PYTHONPATH OLD_DIR NEW_PYTHONPATH NEW_DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _rss() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def measure_load(data: str, split: str, tree: str) -> dict:
    import numpy as np

    from gnn_treelstm.trees import data as D

    D.load_meta(data)  # imports and the meta file before the baseline
    before = _rss()
    t0 = time.perf_counter()
    sp = D.load_split(data, split, tree)
    seconds = time.perf_counter() - t0
    loaded = _rss()
    arrays = getattr(sp.graphs, "arrays", None)
    if arrays is not None:
        for side in (sp.graphs, sp.graphs_b):
            for arr in (side.arrays.values() if side is not None else ()):
                np.add.reduce(np.asarray(arr).reshape(-1).view(np.uint8), dtype=np.uint64)
        nodes = int(arrays["node_offsets"][-1])
        if sp.graphs_b is not None:
            nodes += int(sp.graphs_b.arrays["node_offsets"][-1])
    else:
        nodes = sum(g.num_nodes() for g in sp.graphs)
        nodes += sum(g.num_nodes() for g in sp.graphs_b or [])
    touched = _rss()
    return {"trees": len(sp), "nodes": nodes, "load_s": round(seconds, 4),
            "loaded_bytes_per_node": round((loaded - before) / nodes, 2),
            "resident_bytes_per_node": round((touched - before) / nodes, 2)}


def measure_collate(data: str, split: str, tree: str, batch_size: int, schedule: bool) -> dict:
    import torch

    from gnn_treelstm.trees import data as D

    torch.set_num_threads(1)
    sp = D.load_split(data, split, tree)
    ds = D.TreeDataset(sp)
    order = torch.randperm(len(sp), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    for b in batches[:20]:  # warm: first pages read, first DGL calls
        D.collate(ds.__getitems__(b), schedule=schedule)
    t0 = time.perf_counter()
    for b in batches:
        D.collate(ds.__getitems__(b), schedule=schedule)
    seconds = time.perf_counter() - t0
    return {"trees": len(sp), "batch_size": batch_size, "schedule": schedule,
            "trees_per_s": round(len(sp) / seconds, 1)}


def compare(args: argparse.Namespace) -> None:
    """Alternate the two checkouts, ``--repeat`` rounds of every measurement."""
    old_py, old_dir, new_py, new_dir = args.compare
    rows = []
    for r in range(args.repeat):
        for what in ("load", "collate"):
            for name, py, d in (("old", old_py, old_dir), ("new", new_py, new_dir)):
                cmd = [sys.executable, __file__, what, d, "--split", args.split, "--tree",
                       args.tree, "--batch-size", str(args.batch_size)]
                if args.schedule:
                    cmd.append("--schedule")
                env = {**os.environ, "PYTHONPATH": py}
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                row = {"round": r, "what": what, "code": name,
                       **json.loads(out.stdout.strip().splitlines()[-1])}
                print(json.dumps(row), flush=True)
                rows.append(row)
    for what, key in (("load", "resident_bytes_per_node"), ("load", "load_s"),
                      ("collate", "trees_per_s")):
        for r in range(args.repeat):
            o, n = (next(x[key] for x in rows if x["round"] == r and x["what"] == what
                         and x["code"] == c) for c in ("old", "new"))
            print(f"round {r} {what} {key}: old {o} new {n} new/old {n / o:.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("load", "collate", "compare"))
    ap.add_argument("data", nargs="?", type=str)
    ap.add_argument("--split", default="train")
    ap.add_argument("--tree", default="constituency")
    ap.add_argument("--batch-size", type=int, default=25)
    ap.add_argument("--schedule", action="store_true", help="collate: level schedules too")
    ap.add_argument("--compare", nargs=4, metavar=("OLD_PY", "OLD_DIR", "NEW_PY", "NEW_DIR"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    if args.what == "compare":
        compare(args)
        return 0
    if args.data is None or not Path(args.data).is_dir():
        print(f"error: {args.data}: not a built data directory", file=sys.stderr)
        return 2
    if args.what == "load":
        out = measure_load(args.data, args.split, args.tree)
    else:
        out = measure_collate(args.data, args.split, args.tree, args.batch_size, args.schedule)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
