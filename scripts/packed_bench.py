"""Loading and batching a built split: resident bytes a node, load seconds, collate trees/s.

One measurement per process (a fresh process measures the load's memory), printed as JSON::

    python scripts/packed_bench.py load DIR [--split train --tree constituency]
    python scripts/packed_bench.py collate DIR [--batch-size 25] [--schedule] [--ready]
        [--up-only]
    python scripts/packed_bench.py schedule-ab DIR --ab OLD_PYTHONPATH NEW_PYTHONPATH
        [--batch-sizes 25 256] [--repeat 3] [--passes 5]

``--ready`` (and ``schedule-ab``, in the new code's process) also times ``dgl.batch`` of
the same trees made into graphs beforehand, alone and followed by DGL's own schedule,
``dgl.topological_nodes_generator`` (the bottom-up frontiers ``prop_nodes_topo`` walks).
``--up-only`` (with ``--schedule``) also times collate building the bottom-up levels only
(``top_down=False``: the batches of a cell whose ``runs_top_down`` is False), its passes
alternating with the others, and reports the bytes a loader process sends a batch
(``collate(wire=True)`` pickled) both ways.
    python scripts/packed_bench.py loader DIR [--batch-size 25] [--workers 1] [--step-ms 2]
        [--pin-thread]

``loader``: the training loader alone (``make_loader``, shuffled, level schedules, the
given loader processes): batches a second it delivers to a consumer that does nothing, then
to one whose every step takes ``--step-ms`` (a sleep: the time a GPU step leaves the host
CPU free), how long that consumer waited for its batches (``next``), per step, the CPU
time of its thread in ``next``, and the part of ``next``'s time in which that thread did
not run (``blocked``: waiting for a batch, or for the interpreter lock), and in how many
steps the batch was in the training process before ``next`` was called
(``arrived_before_next``: ``next`` then waits for no loader process). ``--pin-thread``:
the loader of a CUDA run (``pin_memory=True``), whose thread receives each batch beside
the step and pins it (the loader's own receiving thread; in a package before it, the data
loader's pinning thread), made to run here without an accelerator, pinning nothing.

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


def measure_collate(data: str, split: str, tree: str, batch_size: int, schedule: bool,
                    ready: bool = False, passes: int = 1, up_only: bool = False) -> dict:
    import torch

    from gnn_treelstm.trees import data as D

    torch.set_num_threads(1)
    sp = D.load_split(data, split, tree)
    ds = D.TreeDataset(sp)
    order = torch.randperm(len(sp), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    options = {"schedule": schedule}
    try:  # the C++ routines, as the data loader passes them, where the package has them
        from gnn_treelstm.kernels import native
    except ImportError:
        native = None
    if hasattr(native, "batch_builder"):
        options["builder"] = native.batch_builder()
    elif schedule and hasattr(native, "schedule_builder"):  # older code: the schedule's only
        options["builder"] = native.schedule_builder()
    for b in batches[:20]:  # warm: first pages read, first DGL calls
        D.collate(ds.__getitems__(b), **options)

    def one_pass() -> None:
        for b in batches:
            D.collate(ds.__getitems__(b), **options)

    works = {"collate": one_pass}
    if up_only:  # the batches of a bottom-up cell: no top-down levels
        def up_pass() -> None:
            for b in batches:
                D.collate(ds.__getitems__(b), top_down=False, **options)

        works["up_only"] = up_pass
    if ready:  # dgl.batch of the same trees made into graphs beforehand
        import dgl

        sides = [sp.graphs] + ([sp.graphs_b] if sp.graphs_b is not None else [])
        graphs = [[side[i] for side in sides for i in b] for b in batches]
        for g in graphs[:20]:
            dgl.batch(g)

        def ready_pass() -> None:
            for g in graphs:
                dgl.batch(g)

        def topo_pass() -> None:  # and DGL's topological frontiers (prop_nodes_topo's)
            for g in graphs:
                dgl.topological_nodes_generator(dgl.batch(g))

        works.update(ready=ready_pass, topo=topo_pass)
    # the passes of each alternate (collate, dgl.batch, ..., collate, ...): the ratios
    # compare the same minutes of this machine, whose speed drifts
    cpu = _median_cpus(works, passes)
    out = {"trees": len(sp), "batch_size": batch_size, "schedule": schedule,
           "passes": passes, "trees_per_s": round(len(sp) / cpu["collate"][1], 1),
           "trees_per_cpu_s": round(len(sp) / cpu["collate"][0], 1)}
    if up_only:
        import pickle

        out["up_only_trees_per_cpu_s"] = round(len(sp) / cpu["up_only"][0], 1)
        for key, down in (("wire_bytes_per_batch", True), ("up_only_wire_bytes_per_batch", False)):
            sizes = [len(pickle.dumps(D.collate(ds.__getitems__(b), top_down=down, wire=True,
                                                **options))) for b in batches]
            out[key] = round(sum(sizes) / len(sizes))
    if ready:
        out["ready_dgl_batch_trees_per_cpu_s"] = round(len(sp) / cpu["ready"][0], 1)
        out["ready_dgl_topo_trees_per_cpu_s"] = round(len(sp) / cpu["topo"][0], 1)
    return out


def _median_cpus(works: dict, passes: int) -> dict[str, tuple[float, float]]:
    """The median CPU time of this thread (``time.thread_time``) and the median wall time
    of ``passes`` runs of each of ``works``, their runs alternating."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in works}
    for _ in range(passes):
        for name, work in works.items():
            c0, w0 = time.thread_time(), time.perf_counter()
            work()
            times[name].append((time.thread_time() - c0, time.perf_counter() - w0))
    return {name: (sorted(c for c, _ in ts)[len(ts) // 2],
                   sorted(w for _, w in ts)[len(ts) // 2]) for name, ts in times.items()}


def measure_loader(data: str, split: str, tree: str, batch_size: int, workers: int,
                   step_ms: float, epochs: int = 2, pin_thread: bool = False,
                   ahead: bool = False, between_ms: float = 0.0) -> dict:
    import torch

    from gnn_treelstm.training.batching import make_loader
    from gnn_treelstm.trees import data as D

    torch.set_num_threads(1)
    if pin_thread:
        _pinning_thread_without_accelerator()
    sp = D.load_split(data, split, tree)
    loader = make_loader(sp, batch_size, shuffle=True, seed=0, schedule=True, workers=workers,
                         pin_memory=pin_thread)
    out = {"trees": len(sp), "batch_size": batch_size, "workers": workers, "step_ms": step_ms,
           "pin_thread": pin_thread, "ahead": ahead, "between_ms": between_ms,
           "cpu_ms_per_batch": _loader_cpu(sp, batch_size, loader.collate_fn)}
    for name, step in (("alone", 0.0), ("with_step", step_ms / 1000)):
        waits, blocked, t0, batches, cpu = [], [], time.perf_counter(), 0, 0.0
        arrived: list[bool | None] = []
        starts = []  # each epoch's first batch: from the epoch's iter() to the batch
        iters = []  # of which iter() itself
        for epoch in range(epochs):
            if epoch:  # after the last batch: the trainer's next epoch, then its evaluation
                if ahead:
                    loader.start_next_epoch()
                time.sleep(between_ms / 1000)
            e0 = time.perf_counter()
            it = iter(loader)
            iters.append(round(1000 * (time.perf_counter() - e0), 3))
            first = True
            while True:
                batch = None  # the last step's batch freed by the step, not inside next()
                there = _arrived(it)
                w0, c0 = time.perf_counter(), time.thread_time()
                batch = next(it, None)
                if batch is None:
                    break
                if first:
                    starts.append(round(1000 * (time.perf_counter() - e0), 3))
                else:  # the first batch of an epoch waits for the epoch's start
                    wall, own = time.perf_counter() - w0, time.thread_time() - c0
                    waits.append(wall)
                    blocked.append(wall - own)  # not running: the batch, or the GIL, not there
                    cpu += own
                    arrived.append(there)
                first = False
                batches += 1
                if step:
                    time.sleep(step)
        seconds = time.perf_counter() - t0
        waits.sort()
        blocked.sort()
        out[name] = {"batches_per_s": round(batches / seconds, 1),
                     "wait_ms_median": round(1000 * waits[len(waits) // 2], 3),
                     "wait_ms_p99": round(1000 * waits[int(len(waits) * 0.99)], 3),
                     "waits_over_0.1ms": sum(w > 1e-4 for w in waits), "steps": len(waits),
                     "next_cpu_ms_per_batch": round(1000 * cpu / max(len(waits), 1), 3),
                     "blocked_ms_median": round(1000 * blocked[len(blocked) // 2], 3),
                     "blocked_ms_p99": round(1000 * blocked[int(len(blocked) * 0.99)], 3),
                     # steps whose batch was in the training process before next() was
                     # called (None: this torch's loader does not show it)
                     "arrived_before_next": None if None in arrived else sum(arrived),
                     # the first batch of each epoch, ms (the first epoch's also waits for
                     # the loader processes to start)
                     "epoch_start_ms": starts,
                     # of each: the epoch's iter() (with processes kept up, the data
                     # loader waits there for each to take up the new epoch)
                     "epoch_iter_ms": iters}
    return out


def _arrived(it) -> bool | None:
    """Whether the batch ``next(it)`` returns is in the training process already: in the
    loader iterator's buffer of batches that came out of order, or in the queue it reads
    (the pinning thread's with ``pin_memory``, else the processes'), or, where the loader's
    own thread receives the batches, among those it holds ready. None where this torch's
    iterator has no such attributes, or its queue cannot tell its size."""
    ready = getattr(it, "ready", None)  # a thread of the loader receives the batches
    if callable(ready):
        return ready() > 0
    info, idx, queue = (getattr(it, k, None) for k in ("_task_info", "_rcvd_idx", "_data_queue"))
    if info is None or idx is None or queue is None:
        return None
    if len(info.get(idx, ())) == 2:  # (worker, batch): arrived out of order, kept
        return True
    try:
        return queue.qsize() > 0
    except NotImplementedError:  # multiprocessing queues on macOS
        return None


def _pinning_thread_without_accelerator() -> None:
    """Make ``DataLoader(pin_memory=True)`` run its pinning thread here, on a machine
    without an accelerator (where it would warn and run none), pinning nothing: what a CUDA
    run's loader does (the thread receives and unpickles each batch beside the step, then
    pins it), less the copy into pinned memory. For this measurement only, in this process:
    the data loader asks ``torch.accelerator`` whether there is a device and which, and the
    thread calls ``pin_memory`` (torch's, or the batch's own where the loader's receiving
    thread pins)."""
    import torch
    import torch.utils.data._utils.pin_memory as pinning

    from gnn_treelstm.trees import data as D

    acc = getattr(torch, "accelerator", None)
    if acc is None or not hasattr(acc, "current_device_index"):
        raise SystemExit("--pin-thread needs a torch with torch.accelerator (2.6 or later)")
    acc.is_available = lambda: True
    acc.current_device_index = lambda: 0
    acc.set_device_index = lambda index: None
    acc.current_accelerator = lambda *args, **kwargs: torch.device("cpu")
    pinning.pin_memory = lambda data, device=None: data
    D.Batch.pin_memory = lambda self: self


def _loader_cpu(sp, batch_size: int, collate) -> dict:
    """CPU time a batch costs each side of a loader process, one shuffled epoch, one
    thread: the loader process's (``TreeDataset.__getitems__``, ``collate``: the loader's
    own collate function, with the schedule; pickling what it returns for the queue:
    ``ForkingPickler.dumps``, shared memory included) and the training process's
    (unpickling it)."""
    import pickle
    from multiprocessing.reduction import ForkingPickler

    import torch
    import torch.multiprocessing  # noqa: F401  (the tensor reductions the loader uses)

    from gnn_treelstm.trees import data as D

    ds = D.TreeDataset(sp)
    order = torch.randperm(len(sp), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    for b in batches[:20]:  # warm: first pages read, first DGL calls, libraries loaded
        pickle.loads(ForkingPickler.dumps(collate(ds.__getitems__(b))))
    make = send = receive = 0.0
    for b in batches:
        c0 = time.thread_time()
        batch = collate(ds.__getitems__(b))
        c1 = time.thread_time()
        data = ForkingPickler.dumps(batch)
        c2 = time.thread_time()
        pickle.loads(data)
        c3 = time.thread_time()
        make, send, receive = make + c1 - c0, send + c2 - c1, receive + c3 - c2
    k = len(batches) / 1000
    return {"collate_schedule": round(make / k, 3), "pickle": round(send / k, 3),
            "loader_process": round((make + send) / k, 3),
            "training_process": round(receive / k, 3)}


def schedule_ab(args: argparse.Namespace) -> None:
    """Collate + schedule, old and new code alternating (a fresh process each), at every
    ``--batch-sizes``: trees per CPU second of the one loading thread, and ``dgl.batch`` of
    the same trees as ready graphs (new process); ratios per round."""
    old_py, new_py = args.ab
    rows = []
    for r in range(args.repeat):
        for bs in args.batch_sizes:
            for name, py in (("old", old_py), ("new", new_py)):
                cmd = [sys.executable, __file__, "collate", args.data, "--split", args.split,
                       "--tree", args.tree, "--batch-size", str(bs), "--schedule",
                       "--passes", str(args.passes)]
                if name == "new":
                    cmd.append("--ready")
                env = {**os.environ, "PYTHONPATH": py}
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                row = {"round": r, "code": name, **json.loads(out.stdout.strip().splitlines()[-1])}
                print(json.dumps(row), flush=True)
                rows.append(row)
    for bs in args.batch_sizes:
        for r in range(args.repeat):
            o, n = (next(x for x in rows if x["round"] == r and x["batch_size"] == bs
                         and x["code"] == c) for c in ("old", "new"))
            key = "trees_per_cpu_s"
            print(f"batch {bs} round {r}: collate+schedule trees/CPU-s old {o[key]:,.0f} "
                  f"new {n[key]:,.0f} new/old {n[key] / o[key]:.2f}; dgl.batch of ready graphs "
                  f"{n['ready_dgl_batch_trees_per_cpu_s']:,.0f}, new/ready "
                  f"{n[key] / n['ready_dgl_batch_trees_per_cpu_s']:.2f}; dgl.batch + "
                  f"topological_nodes_generator {n['ready_dgl_topo_trees_per_cpu_s']:,.0f}, "
                  f"new/that {n[key] / n['ready_dgl_topo_trees_per_cpu_s']:.2f}")


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
    ap.add_argument("what", choices=("load", "collate", "compare", "schedule-ab", "loader"))
    ap.add_argument("data", nargs="?", type=str)
    ap.add_argument("--split", default="train")
    ap.add_argument("--tree", default="constituency")
    ap.add_argument("--batch-size", type=int, default=25)
    ap.add_argument("--schedule", action="store_true", help="collate: level schedules too")
    ap.add_argument("--compare", nargs=4, metavar=("OLD_PY", "OLD_DIR", "NEW_PY", "NEW_DIR"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ready", action="store_true",
                    help="collate: also dgl.batch of the same trees as ready graphs")
    ap.add_argument("--up-only", action="store_true",
                    help="collate: also the bottom-up levels alone (top_down=False)")
    ap.add_argument("--ab", nargs=2, metavar=("OLD_PY", "NEW_PY"),
                    help="schedule-ab: the two checkouts' PYTHONPATH")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[25, 256])
    ap.add_argument("--passes", type=int, default=1,
                    help="collate, schedule-ab: passes over the split in each process; the "
                         "figures are the median pass's")
    ap.add_argument("--workers", type=int, default=1, help="loader: loader processes")
    ap.add_argument("--step-ms", type=float, default=2.0,
                    help="loader: the time of a step (a sleep)")
    ap.add_argument("--epochs", type=int, default=2, help="loader: epochs of each part")
    ap.add_argument("--pin-thread", action="store_true",
                    help="loader: as on CUDA (pin_memory=True), a thread of the training "
                         "process receives the batches beside the step (here pinning "
                         "nothing: no accelerator)")
    ap.add_argument("--ahead", action="store_true",
                    help="loader: start each next epoch after the last one's last batch "
                         "(Loader.start_next_epoch), as the trainer does before its dev "
                         "evaluation")
    ap.add_argument("--between-ms", type=float, default=0.0,
                    help="loader: a pause between epochs (a sleep), the dev evaluation's "
                         "place")
    args = ap.parse_args(argv)
    if args.what == "compare":
        compare(args)
        return 0
    if args.what == "schedule-ab":
        schedule_ab(args)
        return 0
    if args.data is None or not Path(args.data).is_dir():
        print(f"error: {args.data}: not a built data directory", file=sys.stderr)
        return 2
    if args.what == "load":
        out = measure_load(args.data, args.split, args.tree)
    elif args.what == "loader":
        out = measure_loader(args.data, args.split, args.tree, args.batch_size, args.workers,
                             args.step_ms, epochs=args.epochs, pin_thread=args.pin_thread,
                             ahead=args.ahead, between_ms=args.between_ms)
    else:
        if args.up_only and not args.schedule:
            print("error: --up-only needs --schedule", file=sys.stderr)
            return 2
        out = measure_collate(args.data, args.split, args.tree, args.batch_size, args.schedule,
                              args.ready, args.passes, args.up_only)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
