"""The instructions a step's host work executes, counted by valgrind's callgrind: the
steps of ``gnn-treelstm bench --host-cost`` (each cell's forward + backward at x 8, h 8 on
the first 25 SST-5 training trees, the sequential LSTMs on those trees' words as chains,
the mTreeLSTM cells on the first 25 SICK training dependency trees of side a, one thread,
Triton launches no-ops; with ``--train`` the whole SST-5 training step of each SST cell as
well, and with ``--new-batches K`` that step on K new batches in turn, as training runs),
in instructions per step::

    python scripts/host_instructions.py --src ../shared/data --cells nary lex --path triton

(``PYTHONPATH=CHECKOUT`` to count another checkout's code.) Thread time on a shared or
virtual machine wanders by a third from minute to minute; the count of instructions repeats
to a fraction of a per cent from run to run whatever else the machine runs, so an A/B of two
checkouts resolves cuts of a few per cent. It counts work, not time: an instruction that
waits on memory counts as one that does not, so a ratio of counts is a ratio of host work,
not a speed-up; the thread times of ``bench --host-cost`` stay the measurement of cost.

The script starts itself again under ``valgrind --tool=callgrind --instr-atstart=no`` (and
``TRITON_INTERPRET=1``): the imports and the warm-up steps run uncounted (about a minute);
then, per cell, counting on, ``--steps`` steps, a dump, ``2 * --steps`` steps, a dump. The
difference of the two dumps over ``--steps`` is the count of one step, free of what the
switching costs. What is alive before the first window is frozen out of Python's cyclic
collector (``gc.freeze``), whose passes over it would otherwise fall into one window or
the other.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: the cells counted on SST-5 constituency trees, as ``bench --host-cost`` runs them
SST_CELLS = ("nary", "childsum", "lex", "topdown", "bitree")
#: the cells counted on SICK's dependency trees (their relations)
SICK_CELLS = ("mtree", "mtree-add", "mtree-full")
#: the cells counted on the SST-5 trees' words as chains (gnn_treelstm.datasets.chain)
CHAIN_CELLS = ("lstm", "bilstm", "lstm2", "bilstm2")
CELLS = SST_CELLS + SICK_CELLS + CHAIN_CELLS
PATHS = ("triton", "native", "general")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", default="../shared/data",
                   help="raw data folder holding sst/trees/train.txt (and "
                        "sick/stanford_parsed for the mTreeLSTM cells)")
    p.add_argument("--cells", nargs="+", choices=CELLS, default=["nary", "childsum"])
    p.add_argument("--path", choices=PATHS, default="triton",
                   help="the level engine's path (gnn_treelstm.kernels.host.PATHS)")
    p.add_argument("--train", action="store_true",
                   help="also count the whole SST-5 training step of each SST cell")
    p.add_argument("--new-batches", type=int, default=0, metavar="K",
                   help="also count the training step of each SST cell on K new batches of "
                        "--trees trees in turn (as training takes a new batch every step, "
                        "which the cell checks; K > 4, the batches a cell remembers as "
                        "checked, and a divisor of --steps, so that each window holds whole "
                        "rounds of them)")
    p.add_argument("--steps", type=int, default=10, help="steps in the first window")
    p.add_argument("--trees", type=int, default=25)
    p.add_argument("--keep", metavar="DIR", type=Path,
                   help="keep the dumps there (cg.out.1, .2, ...: two a step, in the order "
                        "of the table's rows), for callgrind_annotate --inclusive=yes")
    p.add_argument("--inner", metavar="DIR", help=argparse.SUPPRESS)  # under valgrind
    args = p.parse_args(argv)
    if args.new_batches and (args.new_batches <= 4 or args.steps % args.new_batches):
        p.error(f"--new-batches {args.new_batches}: take more than 4 and a divisor of --steps "
                f"({args.steps})")
    return args


def totals(dump: Path) -> int:
    """The instructions a callgrind dump counted (its ``summary:`` or ``totals:`` line)."""
    for line in dump.read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("summary", "totals"):
            return int(value.split()[0])
    raise ValueError(f"{dump}: no 'summary:' or 'totals:' line; not a callgrind dump?")


def per_step(first: int, second: int, steps: int) -> float:
    """One step's count from the windows of ``steps`` and ``2 * steps`` steps."""
    return (second - first) / steps


def _control(*flags: str) -> None:
    """``callgrind_control`` on this process (which runs under callgrind)."""
    subprocess.run(["callgrind_control", *flags, str(os.getpid())], check=True,
                   capture_output=True)


def _kind(cell: str) -> str:
    """The trees ``cell`` is counted on: ``"sst"``, ``"chain"`` or ``"sick"``."""
    return "sick" if cell in SICK_CELLS else "chain" if cell in CHAIN_CELLS else "sst"


@functools.lru_cache(maxsize=3)
def _trees(kind: str, src: Path, count: int) -> tuple[list, dict]:
    """The first ``count`` trees ``bench --host-cost`` takes, read once, and the cells'
    keyword arguments (:func:`_kind`): SST-5 training trees, their words as chains (the
    sequential cells), or SICK's side-a training dependency trees with the relation count
    (the mTreeLSTM cells)."""
    from gnn_treelstm.datasets.chain import word_chains
    from gnn_treelstm.datasets.sources import sick_graphs, sst_graphs

    if kind == "sick":
        graphs, num_relations = sick_graphs(src, sides=("a",), limit=count)
        return graphs, {"num_relations": num_relations}
    graphs = sst_graphs(src, limit=count)
    return (word_chains(graphs) if kind == "chain" else graphs), {}


def _labels(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The counted steps in order: each cell's, then (SST cells) its training step's on one
    batch (``--train``) and on new batches (``--new-batches``)."""
    return [(c, w) for c in args.cells
            for w in ("cell", *(("train",) if args.train else ()),
                      *(("train-new",) if args.new_batches else ()))
            if w == "cell" or c in SST_CELLS]


def _inner(args: argparse.Namespace) -> None:
    """Under callgrind: each step warmed, then counted in two windows (dumps)."""
    import dgl
    import torch

    from gnn_treelstm.cells import build_cell
    from gnn_treelstm.kernels import host
    from gnn_treelstm.training.stepcost import train_step

    steps = []
    for name, what in _labels(args):
        graphs, kw = _trees(_kind(name), Path(args.src), args.trees)
        if what == "train":
            steps.append(train_step(name, graphs, args.path))
            continue
        if what == "train-new":
            many, _ = _trees(_kind(name), Path(args.src), args.trees * args.new_batches)
            steps.append(train_step(name, many, args.path, batch_size=args.trees))
            continue
        torch.manual_seed(0)
        cell = build_cell(name, 8, 8, engine="level", **kw)
        steps.append(host.cell_step(cell, dgl.batch(graphs))[0])
    with host.on_path(args.path):
        for step in steps:
            for _ in range(3):
                step()
        # the objects made so far out of the collector's way: a collection in a window
        # then walks the steps' own objects only, whatever the imports left behind
        gc.collect()
        gc.freeze()
        try:
            _control("-i", "on")
            for step in steps:
                _control("-z")
                for _ in range(args.steps):
                    step()
                _control("-d")
                for _ in range(2 * args.steps):
                    step()
                _control("-d")
            _control("-i", "off")
        finally:
            gc.unfreeze()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.inner:
        _inner(args)
        return 0
    for need, cells in (("sst/trees/train.txt", SST_CELLS + CHAIN_CELLS),
                        ("sick/stanford_parsed/rels_set.txt", SICK_CELLS)):
        if set(args.cells) & set(cells) and not (Path(args.src) / need).is_file():
            raise SystemExit(f"error: {args.src}/{need} not found; pass --src")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        for old in args.keep.glob("cg.out*"):  # an earlier run's dumps
            old.unlink()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = str(args.keep or scratch)
        out = Path(tmp) / "cg.out"
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={out}", sys.executable, __file__,
               *(argv if argv is not None else sys.argv[1:]), "--inner", tmp]
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        try:
            run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        except FileNotFoundError:
            raise SystemExit("error: valgrind not found; install it (Debian: valgrind)") from None
        if run.returncode:
            raise SystemExit(f"error: the counted run failed:\n{run.stderr[-3000:]}")
        labels = _labels(args)
        # two dumps a step, in order: its window of --steps steps, then of twice as many
        dumps = sorted(Path(tmp).glob("cg.out.*"), key=lambda f: int(f.suffix[1:]))
        counts = [totals(d) for d in dumps]
    print("| cell | path | step | instructions per step |")
    print("| --- | --- | --- | --- |")
    for k, (cell, what) in enumerate(labels):
        first, second = counts[2 * k], counts[2 * k + 1]
        print(f"| {cell} | {args.path} | {what} | {per_step(first, second, args.steps):,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
