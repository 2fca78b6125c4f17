"""The level engine on a GPU against the CPU's threads, in one run: writes ``docs/bench/cuda.json``.

``python scripts/gpu_check.py --device cuda [--cpu-threads 16] [--data BUILT_SST]
[--sick-data BUILT_SICK] [--src RAW] [--embeddings GLOVE] [--json docs/bench/cuda.json]``
(``scripts/gpu_check.sh`` builds the C++ loops, runs this, then the CUDA tests.)

0. A preflight (CUDA torch, DGL and penman, the Triton path on the device, the C++ loops
   for the CPU baseline, the data): a missing piece stops the check with one line (exit 2).
1. The SST-5 N-ary epoch (``gnn-treelstm train --task sst-5 --model nary --tree
   constituency --supervision phrase --hidden 150 --engine level --epochs 1``) on the CPU
   at batch 25, then an untimed warm-up epoch on the device's first 50 trees (it compiles
   the kernels, which Triton caches on disk), then the device at batch 25 and 256: training
   trees/s (``train_seconds`` of ``metrics.jsonl``) and the dev evaluation's trees/s at the
   evaluation batch (256), each as its own process under ``--epoch-timeout``; a failed or
   slow epoch is a row with its error, and the check goes on.
2. Every registry cell at batch 25 (the workloads of ``gnn-treelstm bench``: SST train
   constituency trees, SICK train dependency trees, SST chains), forward + backward trees/s
   of the level engine on ``--device`` (there, ``GNN_TREELSTM_BACKEND=auto``: the Triton
   kernels on CUDA) and on the CPU with ``--cpu-threads`` threads (the C++ level loops),
   the two interleaved repeat by repeat; the ratio device/CPU per cell.

Each cell's kernels are warmed at the measured shapes before any clock (the warm-up's
seconds, Triton's compiles included, are the row's ``warmup_s``); the cells together run
under ``--cells-timeout`` (a cell not begun by then is a row saying so; one begun stops
after its repeat in progress); a cell that fails is a row with its error.
``docs/bench/cuda.json`` (``--json``) is rewritten after every row.

``--device cpu`` runs everything on the CPU with small sizes: a dry run of the code paths
(the test suite runs it), not a measurement. Without ``--data``/``--src`` the package's
embedded sample is read.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import gnn_treelstm

try:  # DGL and penman are missing from some CUDA images: the preflight says so in one line
    import dgl  # noqa: F401
    import penman  # noqa: F401
except Exception as exc:  # noqa: BLE001  (an import can fail with more than ImportError)
    NOT_IMPORTED: str | None = f"{type(exc).__name__}: {exc}"
else:
    NOT_IMPORTED = None
    from gnn_treelstm.cells import build_cell
    from gnn_treelstm.commands import bench
    from gnn_treelstm.datasets.chain import word_chains
    from gnn_treelstm.files import write_json
    from gnn_treelstm.kernels import backend, fused_triton, native
    from gnn_treelstm.trees.schedule import LevelSchedule

SAMPLE = Path(gnn_treelstm.__file__).parent / "sample_data"


def version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (None: not installed)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``) and core count."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def workload_graphs(args) -> dict[str, tuple[list, int]]:
    """Graphs per data set name of :data:`bench.WORKLOADS` (and SICK's relation count)."""
    sst = bench._sst_graphs(args)
    sick, nrel = bench._sick_graphs(args)
    return {"sst": (sst, 0), "sick": (sick, nrel), "sst-chain": (word_chains(sst), 0)}


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def one_pass(batches: list, run: tuple, threads: int) -> float:
    """Seconds of one forward + backward pass over ``batches`` with ``run`` = (cell,
    schedules, inputs, device)."""
    cell, scheds, xs, dev = run
    torch.set_num_threads(threads)
    _synchronize(dev)
    t0 = time.perf_counter()
    for g, s, x in zip(batches, scheds, xs):
        x.requires_grad_(True)
        h, c = cell(g, x, schedule=s)
        (h.sum() + c.sum()).backward()
        x.grad = None
        cell.zero_grad(set_to_none=True)
    _synchronize(dev)
    return time.perf_counter() - t0


def cell_rates(args, device: torch.device):
    """Forward + backward trees/s of every cell at ``args.batch`` on ``device`` and on
    the CPU, interleaved repeat by repeat; the median of the repeats. Yields each row as it
    is measured: a cell that fails is a row with its error (the check goes on), and past
    ``args.cells_timeout`` seconds a cell is not begun (a row saying so) and one begun
    stops after the repeat in progress (at least one)."""
    data = workload_graphs(args)
    deadline = time.perf_counter() + args.cells_timeout
    for name, dataset, kw, _ in bench.WORKLOADS:
        if args.cells and name not in args.cells:
            continue
        if time.perf_counter() > deadline:
            print(f"{name}: not measured, past --cells-timeout {args.cells_timeout} s",
                  flush=True)
            yield {"cell": name, "skipped": f"past --cells-timeout {args.cells_timeout} s"}
            continue
        graphs, nrel = data[dataset]
        kw = {k: (nrel if v is None else v) for k, v in kw.items()}
        try:
            yield cell_row(args, device, name, graphs, kw, deadline)
        except Exception as exc:  # noqa: BLE001  (a failing cell loses only itself)
            print(f"{name}: failed: {type(exc).__name__}: {exc}", flush=True)
            yield {"cell": name, "error": f"{type(exc).__name__}: {str(exc)[-3000:]}"}


def cell_row(args, device: torch.device, name: str, graphs: list, kw: dict,
             deadline: float) -> dict:
    """One row of :func:`cell_rates`: cell ``name`` (built with ``kw``) on ``graphs``."""
    batches = bench._batches(graphs, args.batch, args.trees, 0)
    trees = sum(b.batch_size for b in batches)
    torch.manual_seed(0)
    cpu_cell = build_cell(name, args.x_size, args.h_size, engine="level", **kw)
    dev_cell = build_cell(name, args.x_size, args.h_size, engine="level", **kw)
    dev_cell.load_state_dict(cpu_cell.state_dict())
    dev_cell.to(device)
    runs = {}
    for where, cell in (("cpu", cpu_cell), ("device", dev_cell)):
        dev = torch.device("cpu") if where == "cpu" else device
        scheds = [LevelSchedule.from_graph(b) for b in batches]
        if dev.type == "cuda":  # moved once per batch, before the clock
            scheds = [s.pin_memory().to(dev) for s in scheds]
        xs = [torch.randn(b.num_nodes(), args.x_size, device=dev) for b in batches]
        runs[where] = (cell, scheds, xs, dev)

    # warm-up at the measured shapes: Triton compiles its kernels on first use, and
    # that time is reported apart (warmup_s), never inside the timed passes
    warmup = {where: one_pass(batches, run, args.cpu_threads) for where, run in runs.items()}
    times: dict[str, list[float]] = {"cpu": [], "device": []}
    for r in range(args.repeats):
        if r and time.perf_counter() > deadline:
            break
        for where, run in runs.items():
            times[where].append(one_pass(batches, run, args.cpu_threads))
    cpu_rate = trees / statistics.median(times["cpu"])
    dev_rate = trees / statistics.median(times["device"])
    print(f"{name:10s} batch {args.batch}: CPU {cpu_rate:8.0f} trees/s, "
          f"{device.type} {dev_rate:8.0f} trees/s, x{dev_rate / cpu_rate:.2f}", flush=True)
    return {"cell": name, "batch": args.batch, "trees": trees, "repeats": len(times["cpu"]),
            "cpu_fwdbwd_trees_s": cpu_rate, "device_fwdbwd_trees_s": dev_rate,
            "device_over_cpu": dev_rate / cpu_rate,
            "device_path": backend.path(runs["device"][2][0]) if name != "mean"
            else "general", "warmup_s": warmup}


def epoch_command(args, device: str, batch: int, threads: int, runs_dir: str,
                  k: int, max_train: int | None = None) -> list[str]:
    """The ``gnn-treelstm train`` command of one SST-5 N-ary epoch (on the first
    ``max_train`` trees, else ``--max-train``'s)."""
    cmd = [sys.executable, "-m", "gnn_treelstm", "train", "--task", "sst-5", "--model", "nary",
           "--tree", "constituency", "--supervision", "phrase", "--hidden", "150",
           "--engine", "level", "--epochs", "1", "--device", device, "--batch-size",
           str(batch), "--threads", str(threads), "--runs-dir", runs_dir, "--name",
           f"run{k}", "-q"]
    if args.data or Path(args.src) != SAMPLE:  # else train reads the embedded sample too
        cmd += ["--data", str(args.data or args.src)]
    if args.embeddings:
        cmd += ["--embeddings", args.embeddings]
    if max_train or args.max_train:
        cmd += ["--max-train", str(max_train or args.max_train)]
    return cmd


#: the trees of the untimed epoch before the device's timed ones: its process compiles the
#: Triton kernels (cached on disk for the processes after it) and is reported apart
WARMUP_TREES = 50


def epochs(args, device: torch.device):
    """One SST-5 N-ary training epoch per (device, batch), each its own process; yields
    each row as it is measured. Before the device's epochs, an untimed one on
    :data:`WARMUP_TREES` trees (a row with ``warmup``), so that no timed epoch pays the
    kernels' compiles."""
    runs = [("cpu", 25, None), (device.type, 25, WARMUP_TREES), (device.type, 25, None),
            (device.type, 256, None)]
    if device.type == "cpu":  # the dry run: nothing to compile
        del runs[1]
    with tempfile.TemporaryDirectory() as runs_dir:
        for k, (where, batch, max_train) in enumerate(runs):
            cmd = epoch_command(args, where, batch, args.cpu_threads, runs_dir, k, max_train)
            row = epoch_row(args, cmd, where, batch, Path(runs_dir) / f"run{k}",
                            warmup=max_train is not None)
            what = "untimed warm-up epoch" if max_train is not None else "epoch"
            shown = {key: v for key, v in row.items() if key != "command"}
            print(f"SST-5 N-ary {what}, {where}, batch {batch}: {json.dumps(shown)}",
                  flush=True)
            yield row


def epoch_row(args, cmd: list[str], where: str, batch: int, run_dir: Path,
              warmup: bool) -> dict:
    """Run one epoch's command (:func:`epochs`); its row, or its error."""
    row: dict = {"device": where, "batch": batch, "command": " ".join(cmd[1:])}
    if warmup:
        row["warmup"] = True
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.epoch_timeout)
    except subprocess.TimeoutExpired:  # a slow part loses only itself
        return {**row, "error": f"past --epoch-timeout {args.epoch_timeout} s"}
    row["process_s"] = time.perf_counter() - t0
    if proc.returncode != 0:
        return {**row, "error": proc.stderr[-3000:]}
    try:
        m = json.loads((run_dir / "metrics.jsonl").read_text().strip().splitlines()[-1])
        dev_trees = m["dev"].get("count", 0)
        row.update({"train_seconds": m["train_seconds"], "train_trees": m["examples"],
                    "train_trees_s": m["trees_per_second"], "eval_seconds": m["eval_seconds"],
                    "eval_trees": dev_trees,
                    "eval_trees_s": dev_trees / max(m["eval_seconds"], 1e-9),
                    "dev_accuracy": m["dev"].get("accuracy")})
    except (OSError, ValueError, KeyError, IndexError, AttributeError) as exc:
        return {**row, "error": f"its metrics.jsonl does not read: {type(exc).__name__}: {exc}"}
    return row


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="the device against the CPU (cpu: a dry run)")
    p.add_argument("--cpu-threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--data", help="built SST directory (as bench --data)")
    p.add_argument("--sick-data", help="built SICK directory")
    p.add_argument("--src", default=os.environ.get("GNN_TREELSTM_DATA") or str(SAMPLE),
                   help="raw data (default: $GNN_TREELSTM_DATA, else the embedded sample)")
    p.add_argument("--embeddings", help="word vectors for the epochs (as train --embeddings)")
    p.add_argument("--cells", nargs="*", default=None, help="default: every registry cell")
    p.add_argument("--batch", type=int, default=25)
    p.add_argument("--trees", type=int, default=500, help="trees per cell and pass")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--x-size", type=int, default=300)
    p.add_argument("--h-size", type=int, default=150)
    p.add_argument("--max-train", type=int, default=None, help="epochs on the first N trees")
    p.add_argument("--epoch-timeout", type=int, default=180, help="seconds per epoch")
    p.add_argument("--cells-timeout", type=int, default=150,
                   help="seconds for the cells (those not begun by then are left out)")
    p.add_argument("--no-epochs", action="store_true", help="skip the training epochs")
    p.add_argument("--json", default="docs/bench/cuda.json")
    return p


def preflight(args, device: torch.device) -> str | None:
    """Why the check cannot run here, in one line (None: it can): CUDA torch, DGL and
    penman, the Triton path on the device, a C++ compiler for the CPU baseline (the C++
    loops), the data and word vectors it reads."""
    if device.type == "cuda" and not torch.cuda.is_available():
        return (f"--device cuda but torch {torch.__version__} sees no CUDA device (a CPU "
                "build of torch, or no driver)")
    if NOT_IMPORTED:
        return (f"DGL or penman does not import ({NOT_IMPORTED}); install them (on a "
                "machine without an index: scripts/gpu_bundle.sh, then gpu_check.sh --wheels)")
    try:
        path = backend.path(torch.zeros(1, device=device))
        if device.type == "cuda" and path != "triton":
            return (f"the level engine would run its {path!r} path on {device}, not the "
                    "Triton kernels (triton not importable, or GNN_TREELSTM_BACKEND set: "
                    "unset it)")
        if not native.available(torch.zeros(1)):
            return ("the C++ level loops are off or not built (a C++ compiler is needed for "
                    "the CPU baseline; GNN_TREELSTM_BACKEND must allow them)")
    except (RuntimeError, ValueError) as exc:  # a failed build, a bad setting
        return f"the level engine's paths do not load: {str(exc).splitlines()[0]}"
    missing = [str(p) for p in needed_files(args) if not p.exists()]
    return f"missing data: {', '.join(missing)}" if missing else None


def needed_files(args) -> list[Path]:
    """The files the check reads: SST's three splits (the epochs build them; or the built
    ``--data``), SICK's parsed training pairs for the mTreeLSTM cells (or ``--sick-data``),
    the word vectors."""
    src = Path(args.src)
    need = [Path(args.data)] if args.data else [
        src / "sst" / "trees" / f"{split}.txt" for split in ("train", "dev", "test")]
    need += [Path(args.sick_data)] if args.sick_data else [src / "sick" / "stanford_parsed"]
    return need + ([Path(args.embeddings)] if args.embeddings else [])


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    device = torch.device(args.device)
    why = preflight(args, device)
    if why:
        print(f"gpu_check: {why}", file=sys.stderr)
        return 2
    out = {
        "machine": {"cpu": cpu_model(), "cpu_threads": args.cpu_threads,
                    "device": torch.cuda.get_device_name(device) if device.type == "cuda"
                    else "cpu (dry run)",
                    "torch": torch.__version__, "python": platform.python_version(),
                    "triton": fused_triton.installed() and version("triton"),
                    "dgl": version("dgl"),
                    "path": backend.path(torch.zeros(1, device=device))},
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None
                                                       else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "epochs": [], "cells": [],
    }
    # the most important figures first (the batch-25 epoch, CPU and device, then batch
    # 256), then the cells; the JSON is rewritten after every row, so a run cut short
    # keeps every row it finished
    write_json(args.json, out)
    parts = ([] if args.no_epochs else [("epochs", epochs(args, device))]) + [
        ("cells", cell_rates(args, device))]
    for key, rows in parts:
        for row in rows:
            out[key].append(row)
            write_json(args.json, out)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
