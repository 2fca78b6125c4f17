"""Speed benchmark of the propagation engines. Not a test.

``python -m gnn_treelstm bench [--data BUILT_SST] [--sick-data BUILT_SICK] [--src RAW]``

For each cell and batch size, on real trees (SST train constituency trees; SICK train
dependency trees for Child-Sum / mtree), trees per second of

* ``level``: the level engine (:mod:`gnn_treelstm.engine.level`), schedule prebuilt as in
  the data loader's collate function (its build time is reported separately, ``sched ms``);
* ``dgl``: the cell's reference engine (``dgl.prop_nodes_topo`` with built-in reduce);
* ``anchor``: DGL's own Tree-LSTM example cell (Python mailbox reduce, one
  ``prop_nodes_topo`` call; :mod:`gnn_treelstm.commands.dgl_example`), for the binary N-ary
  cell on SST and the Child-Sum cell on SICK;

forward only (``torch.no_grad``) and forward + backward (``h.sum()``, ``x`` requires grad
as an embedding does), all in one process so the ratios are fair: engines interleaved
repeat by repeat, each rate the median over the repeats, and beside it the best repeat's
(``fwdbwd_trees_s_best``: on a host whose speed swings between phases, a second reading of
the same run). Also the achieved GFLOP/s
(matrix-product FLOPs the cell's equations require, backward = 2x forward) against the
measured peak of ``torch.mm`` and of the oneDNN products the level engine uses, and the
level engine's *ceiling*: how far ahead of the anchor / dgl engine it could be if those FLOPs
all ran at that peak and nothing else took time (:func:`ceiling`; a speed-up target above it
cannot be met on the machine). Prints a markdown table and writes JSON.

Data: ``--data DIR`` / ``--sick-data DIR`` as built by ``gnn-treelstm build``; else the
raw files under ``--src`` (default ``$GNN_TREELSTM_DATA``) are parsed with
:mod:`gnn_treelstm.datasets`.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import dgl  # gnn_treelstm/__init__ (the dgl compat shim) ran before this module
import torch

from gnn_treelstm.argtypes import non_negative_int, positive_int
from gnn_treelstm.cells import build_cell
from gnn_treelstm.commands.dgl_example import DGLExampleChildSumTreeLSTM, DGLExampleTreeLSTM
from gnn_treelstm.commands.process import setup_training
from gnn_treelstm.datasets.chain import word_chains
from gnn_treelstm.datasets.sources import sick_graphs, sst_graphs
from gnn_treelstm.files import check_writable, write_json
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.data import load_meta, load_split
from gnn_treelstm.trees.schedule import LevelSchedule

logger = logging.getLogger(__name__)

# (cell name, dataset, kwargs, anchor class or None)
WORKLOADS: list[tuple[str, str, dict, type | None]] = [
    ("nary", "sst", {"n_ary": 2}, DGLExampleTreeLSTM),
    ("childsum", "sick", {}, DGLExampleChildSumTreeLSTM),
    ("mtree", "sick", {"num_relations": None}, None),
    ("mtree-add", "sick", {"num_relations": None}, None),
    ("mtree-full", "sick", {"num_relations": None}, None),
    ("lex", "sst", {}, None),
    ("topdown", "sst", {}, None),
    ("bitree", "sst", {}, None),
    ("lstm", "sst-chain", {}, None),
    ("bilstm", "sst-chain", {}, None),
    ("lstm2", "sst-chain", {}, None),
    ("bilstm2", "sst-chain", {}, None),
    ("mean", "sick", {}, None),
]


# ------------------------------------------------------------------ data
def _sst_graphs(args) -> list[dgl.DGLGraph]:
    if args.data:
        return list(load_split(args.data, "train", "constituency").graphs)
    return sst_graphs(args.src)


def _sick_graphs(args) -> tuple[list[dgl.DGLGraph], int]:
    if args.sick_data:
        split = load_split(args.sick_data, "train", "dependency")
        nrel = int(load_meta(args.sick_data)["num_relations"]["dependency"])
        return list(split.graphs) + list(split.graphs_b or []), nrel
    return sick_graphs(args.src)


# ------------------------------------------------------------------ FLOPs
def model_flops(name: str, graph: dgl.DGLGraph, x_size: int, h: int, n_ary: int = 2) -> float:
    """Matrix-product FLOPs of one forward pass (the equations' products; elementwise ops
    and the word-less rows of masked inputs are not counted). None if not modelled."""
    n = graph.num_nodes()
    e = graph.num_edges()
    inner = int((graph.in_degrees() > 0).sum())
    words = int((graph.ndata[G.WORD] != G.NO_WORD).sum())
    if name == "nary":  # W x (4h) at word nodes; U: (K h) -> (3+K) h at inner nodes
        return 2.0 * words * x_size * 4 * h + 2.0 * inner * n_ary * h * (3 + n_ary) * h
    if name == "childsum":  # W x (4h) all nodes; U_iou h~ at inner; U_f h_k per edge
        return 2.0 * n * x_size * 4 * h + 2.0 * inner * h * 3 * h + 2.0 * e * h * h
    if name == "mtree":  # Child-Sum + W_hm (s ⊙ W_mh h_k) per edge (m = h)
        return model_flops("childsum", graph, x_size, h) + 2.0 * e * 2 * h * h
    if name == "lstm":  # Tai eq 1 on chains: W x (4h) at every word, U h_{t-1} per edge
        return 2.0 * n * x_size * 4 * h + 2.0 * e * h * 4 * h
    return float("nan")


def matmul_peak(repeats: int = 20) -> dict[str, float]:
    """GFLOP/s of float32 matrix products at the benchmark's sizes (and a large square
    one), through ``torch.mm`` (MKL) and through the level engine's oneDNN path
    (:mod:`gnn_treelstm.kernels.gemm`; absent when oneDNN is unusable here)."""
    from gnn_treelstm.kernels import gemm

    shapes = {
        "930x300 @ 300x600 (input terms, batch 25)": (930, 300, 600),
        "9500x300 @ 300x600 (input terms, batch 256)": (9500, 300, 600),
        "25x300 @ 300x750 (one level, batch 25)": (25, 300, 750),
        "128x300 @ 300x750 (one level, batch 256)": (128, 300, 750),
        "2048x2048 @ 2048x2048": (2048, 2048, 2048),
    }
    kinds: dict[str, Callable] = {"torch.mm": lambda a, w, wp: torch.mm(a, w.t())}
    if gemm.backend() == "onednn":
        kinds["oneDNN"] = lambda a, w, wp: gemm.mm_nt(a, wp)
    out = {}
    for label, (m, k, n) in shapes.items():
        a, w = torch.randn(m, k), torch.randn(n, k)
        wp = gemm.pack(w)
        for kind, f in kinds.items():
            for _ in range(3):
                f(a, w, wp)
            reps = max(3, int(repeats * 1e8 / (2 * m * k * n)) + 1)
            t0 = time.perf_counter()
            for _ in range(reps):
                f(a, w, wp)
            dt = (time.perf_counter() - t0) / reps
            out[f"{kind} {label}"] = 2.0 * m * k * n / dt / 1e9
    return out


# ------------------------------------------------------------------ timing
def _batches(graphs: list[dgl.DGLGraph], batch_size: int, max_trees: int, seed: int):
    idx = list(range(len(graphs)))
    random.Random(seed).shuffle(idx)
    idx = idx[: max(batch_size, min(max_trees, len(idx)))]
    return [dgl.batch([graphs[i] for i in idx[k:k + batch_size]])
            for k in range(0, len(idx), batch_size)]


def bench_workload(name: str, graphs: list[dgl.DGLGraph], kw: dict, anchor_cls, args,
                   batch_size: int) -> list[dict]:
    """One cell at one batch size: a row per engine (trees/s, GFLOP/s, schedule time)."""
    torch.manual_seed(0)
    batches = _batches(graphs, batch_size, args.trees, args.seed)
    n_trees = sum(b.batch_size for b in batches)
    xs = [torch.randn(b.num_nodes(), args.x_size) for b in batches]
    t0 = time.perf_counter()
    scheds = [LevelSchedule.from_graph(b) for b in batches]
    sched_ms = (time.perf_counter() - t0) / len(batches) * 1e3
    engines, params = _engines(name, kw, anchor_cls, args, batches, xs, scheds)
    flops = [model_flops(name, b, args.x_size, args.h_size, kw.get("n_ary", 2)) for b in batches]
    total_flops = sum(flops)
    times = _time_engines(engines, xs, params, args, len(batches))
    for x in xs:
        x.requires_grad_(False)
    rows = []
    for engine in engines:
        t_f = statistics.median(times[(engine, False)])
        t_fb = statistics.median(times[(engine, True)])
        rows.append({
            "cell": name, "engine": engine, "batch": batch_size, "trees": n_trees,
            "fwd_trees_s": n_trees / t_f, "fwdbwd_trees_s": n_trees / t_fb,
            # best of the repeats: a second reading where the host's speed swings between them
            "fwdbwd_trees_s_best": n_trees / min(times[(engine, True)]),
            "fwd_gflops": total_flops / t_f / 1e9, "fwdbwd_gflops": 3 * total_flops / t_fb / 1e9,
            "sched_ms_per_batch": sched_ms if engine == "level" else None,
        })
        r = rows[-1]
        logger.info("%s, %s engine, batch %d: %.0f trees/s forward, %.0f forward+backward",
                    r["cell"], r["engine"], r["batch"], r["fwd_trees_s"], r["fwdbwd_trees_s"])
    return rows


def _engines(name: str, kw: dict, anchor_cls, args, batches: list[dgl.DGLGraph],
             xs: list[torch.Tensor], scheds: list[LevelSchedule]
             ) -> tuple[dict[str, Callable], list[torch.nn.Parameter]]:
    """Each engine as a function of the batch number, and the parameters of them all: the
    cell on ``dgl`` and on ``level`` (the same weights), and the anchor where there is one."""
    cell = build_cell(name, args.x_size, args.h_size, **kw)
    lvl = build_cell(name, args.x_size, args.h_size, engine="level", **kw)
    lvl.load_state_dict(cell.state_dict())
    engines: dict[str, Callable] = {
        "dgl": lambda k: cell(batches[k], xs[k]),
        "level": lambda k: lvl(batches[k], xs[k], schedule=scheds[k]),
    }
    params = list(cell.parameters()) + list(lvl.parameters())
    if anchor_cls is not None:
        anchor = anchor_cls(args.x_size, args.h_size)
        masks = [b.ndata[G.WORD] != G.NO_WORD for b in batches]
        engines["anchor"] = lambda k: anchor(batches[k], xs[k], masks[k])
        params += list(anchor.parameters())
    return engines, params


def _step(fwd: Callable, backward: bool, xs: list[torch.Tensor],
          params: list[torch.nn.Parameter]) -> Callable[[int], None]:
    """One batch through an engine: forward only under ``torch.no_grad``, or forward and
    backward of ``h.sum()`` with ``x`` requiring grad (the gradients cleared after)."""
    def run(k: int) -> None:
        if not backward:
            with torch.no_grad():
                fwd(k)
            return
        x = xs[k].requires_grad_(True)  # the engines' closures read xs[k]
        h, _ = fwd(k)
        h.sum().backward()
        x.grad = None
        for p in params:
            p.grad = None
    return run


def _time_engines(engines: dict[str, Callable], xs: list[torch.Tensor],
                  params: list[torch.nn.Parameter], args, n_batches: int
                  ) -> dict[tuple[str, bool], list[float]]:
    """Seconds of each repeat over all batches, per (engine, backward); engines interleaved
    repeat by repeat, so load changes hit all of them alike."""
    times: dict[tuple[str, bool], list[float]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for backward in (False, True):
            for fwd in engines.values():  # warm-up
                run = _step(fwd, backward, xs, params)
                for k in range(min(args.warmup, n_batches)):
                    run(k)
            for _ in range(args.repeats):
                for engine, fwd in engines.items():
                    run = _step(fwd, backward, xs, params)
                    t0 = time.perf_counter()
                    for k in range(n_batches):
                        run(k)
                    times.setdefault((engine, backward), []).append(time.perf_counter() - t0)
    return times


def ceiling(row: dict, ref_trees_s: float, peak: float) -> float:
    """The most ``row``'s engine could be ahead of a reference engine doing
    ``ref_trees_s`` (forward + backward): its trees per second if every FLOP of the
    equations' matrix products ran at ``peak`` GFLOP/s and nothing else took time, over the
    reference's. A target above it cannot be met on this machine by any implementation of
    the same products. NaN where the cell's FLOPs are not modelled."""
    gf = row["fwdbwd_gflops"]
    if not gf == gf or gf <= 0 or ref_trees_s <= 0:
        return float("nan")
    return row["fwdbwd_trees_s"] * (peak / gf) / ref_trees_s


def markdown(rows: list[dict], peak: float) -> str:
    lines = ["| cell | data | batch | engine | fwd trees/s | fwd+bwd trees/s | "
             "× anchor (f+b) | × dgl (f+b) | × dgl, best of repeats | "
             "fwd+bwd GFLOP/s (% peak) | ceiling × anchor / dgl | sched ms/batch |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        same = [q for q in rows if q["cell"] == r["cell"] and q["batch"] == r["batch"]]
        ref = {q["engine"]: q["fwdbwd_trees_s"] for q in same}
        best = {q["engine"]: q.get("fwdbwd_trees_s_best") for q in same}
        xa = f"{r['fwdbwd_trees_s'] / ref['anchor']:.1f}" if "anchor" in ref else "–"
        xd = f"{r['fwdbwd_trees_s'] / ref['dgl']:.1f}"
        xb = (f"{best[r['engine']] / best['dgl']:.1f}"
              if best[r["engine"]] and best.get("dgl") else "–")
        gf = r["fwdbwd_gflops"]
        gfs = "–" if gf != gf else f"{gf:.1f} ({100 * gf / peak:.0f}%)"
        ceil = "–"
        if r["engine"] == "level" and gf == gf:
            ca = ceiling(r, ref["anchor"], peak) if "anchor" in ref else float("nan")
            cd = ceiling(r, ref["dgl"], peak)
            ceil = (f"{ca:.1f} / " if ca == ca else "– / ") + f"{cd:.1f}"
        sm = "" if r["sched_ms_per_batch"] is None else f"{r['sched_ms_per_batch']:.2f}"
        lines.append(f"| {r['cell']} | {r['data']} | {r['batch']} | {r['engine']} | "
                     f"{r['fwd_trees_s']:.0f} | {r['fwdbwd_trees_s']:.0f} | {xa} | {xd} | "
                     f"{xb} | {gfs} | {ceil} | {sm} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = argparse.ArgumentParser(prog="gnn-treelstm bench", description=__doc__.split("\n")[0])
    p.add_argument("--data", help="built SST directory (gnn-treelstm build)")
    p.add_argument("--sick-data", help="built SICK directory")
    p.add_argument("--src", default=os.environ.get("GNN_TREELSTM_DATA"),
                   help="raw data root (default $GNN_TREELSTM_DATA)")
    p.add_argument("--cells", nargs="*", default=["nary", "childsum"],
                   help="cells to run (default: nary childsum); 'all' for every workload")
    p.add_argument("--batch-sizes", nargs="*", type=positive_int, default=[25, 256])
    p.add_argument("--trees", type=positive_int, default=1500,
                   help="trees timed per configuration")
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--x-size", type=positive_int, default=300)
    p.add_argument("--h-size", type=positive_int, default=150)
    p.add_argument("--warmup", type=non_negative_int, default=2, help="untimed batches (0: none)")
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="bench.json", help="where to write the results")
    p.add_argument("--host-cost", action="store_true",
                   help="print the host cost of a level-engine step instead (Triton launches "
                        "no-ops under triton's interpreter, x 8, h 8, the first "
                        "--host-trees trees, one thread; gnn_treelstm.kernels.host), and of "
                        "a whole SST-5 training step on that batch repeated and on new "
                        "batches of that size (gnn_treelstm.training.stepcost)")
    p.add_argument("--host-trees", type=positive_int, default=25,
                   help="--host-cost: trees in the batch (default 25)")
    p.add_argument("--host-steps", type=positive_int, default=30,
                   help="--host-cost: timed steps, median taken (default 30)")
    p.add_argument("--host-parts", action="store_true",
                   help="--host-cost: also time each part of the training step (forward, the "
                        "cell's forward, loss, releasing the gradients, backward, the "
                        "finiteness check, the optimizer; gnn_treelstm.training.stepcost)")
    p.add_argument("--omp-passive", action="store_true",
                   help="re-run under OMP_WAIT_POLICY=PASSIVE: on a loaded machine, spinning "
                        "OpenMP threads make 2-thread timings collapse (100x) for every engine")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.omp_passive and os.environ.get("OMP_WAIT_POLICY") != "PASSIVE":
        # libgomp reads the variable when torch loads it, so it must be set before start
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        cli = list(sys.argv[1:] if argv is None else argv)
        os.execv(sys.executable, [sys.executable, "-m", "gnn_treelstm.commands.bench", *cli])
    if args.host_cost and os.environ.get("TRITON_INTERPRET") != "1" and _triton_installed():
        # triton reads the variable when it is imported: set it before the process starts
        os.environ["TRITON_INTERPRET"] = "1"
        cli = list(sys.argv[1:] if argv is None else argv)
        os.execv(sys.executable, [sys.executable, "-m", "gnn_treelstm.commands.bench", *cli])
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    wanted = _wanted_cells(p, args)
    if args.host_cost:
        return _host_cost(p, args, wanted)
    try:
        setup_training(args.threads)  # as `gnn-treelstm train`, for every engine alike
    except ValueError as exc:
        p.error(str(exc))
    peak_by_shape = matmul_peak()
    data: dict[str, object] = {}
    rows: list[dict] = []
    for name, ds, kw, anchor_cls in WORKLOADS:
        if name not in wanted:
            continue
        graphs, kw = _workload_data(ds, kw, args, data)
        for bs in args.batch_sizes:
            for r in bench_workload(name, graphs, kw, anchor_cls, args, bs):
                r["data"] = ds
                rows.append(r)
    _report(args, rows, peak_by_shape)
    return 0


def _triton_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


#: the data set of each workload's host-cost batch: the first SST trees wherever the cell
#: takes constituency trees (mtree's relations need SICK's dependency trees)
_HOST_DATA = {"sick": "sst", "sst": "sst", "sst-chain": "sst-chain"}
#: ``--host-cost``: the new batches the training step cycles through (more than the four a
#: cell remembers as checked, so that it checks every step's batch, as in training)
HOST_NEW_BATCHES = 40


def _host_cost(p: argparse.ArgumentParser, args: argparse.Namespace, wanted: set[str]) -> int:
    """``--host-cost``: per cell and path, the host µs of a step and of a level; prints a
    table and writes the JSON."""
    from gnn_treelstm.kernels import fused_triton, host
    from gnn_treelstm.training.stepcost import train_step_cost, train_step_parts

    try:
        setup_training(1)
    except ValueError as exc:
        p.error(str(exc))
    paths = ["triton", "native", "general"] if fused_triton.interpreted() else [
        "native", "general"]
    data: dict[str, object] = {}
    rows: list[dict] = []
    print("| cell | path | host µs per level | host ms per step | levels | host ms per "
          "training step | new batches |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, ds, kw, _ in WORKLOADS:
        if name not in wanted:
            continue
        ds = "sick" if name.startswith("mtree") else _HOST_DATA[ds]
        graphs, kw = _workload_data(ds, kw, args, data)
        batch = dgl.batch(graphs[: args.host_trees])
        for path in paths:
            torch.manual_seed(args.seed)
            cell = build_cell(name, 8, 8, engine="level", **kw)
            r = host.host_cost(cell, batch, path, steps=args.host_steps)
            if ds == "sst":  # the whole SST-5 step: embedding, cell, head, loss, AdaGrad
                r["train_step_us"] = train_step_cost(name, graphs[: args.host_trees], path,
                                                     cell_kwargs=kw, steps=args.host_steps)
                # as training runs: a new batch every step (HOST_NEW_BATCHES of them, cycled)
                r["new_batch_train_step_us"] = train_step_cost(
                    name, graphs[: args.host_trees * HOST_NEW_BATCHES], path, cell_kwargs=kw,
                    steps=args.host_steps, batch_size=args.host_trees)
                if args.host_parts:
                    r["train_step_parts_us"] = train_step_parts(
                        name, graphs[: args.host_trees], path, cell_kwargs=kw,
                        steps=args.host_steps)
            rows.append({"cell": name, "data": ds, "path": path, **r})
            train, new = (f"{r[k] / 1e3:.2f}" if k in r else "-"
                          for k in ("train_step_us", "new_batch_train_step_us"))
            print(f"| {name} | {path} | {r['level_us']:.0f} | {r['step_us'] / 1e3:.2f} | "
                  f"{r['levels']} | {train} | {new} |", flush=True)
    _print_parts(rows)
    write_json(Path(args.json), {"args": vars(args), "host_cost": rows,
                                 "torch": torch.__version__, "machine": platform.processor()
                                 or platform.machine(), "cpus": os.cpu_count()})
    return 0


def _print_parts(rows: list[dict]) -> None:
    """``--host-parts``: the training step's parts of each row that has them, µs."""
    from gnn_treelstm.training.stepcost import PARTS

    timed = [r for r in rows if "train_step_parts_us" in r]
    if not timed:
        return
    print("\n| cell | path | " + " | ".join(f"{part} µs" for part in PARTS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in PARTS) + " |")
    for r in timed:
        parts = r["train_step_parts_us"]
        print(f"| {r['cell']} | {r['path']} | "
              + " | ".join(f"{parts[part]:.0f}" for part in PARTS) + " |")


def _wanted_cells(p: argparse.ArgumentParser, args: argparse.Namespace) -> set[str]:
    """The cells ``--cells`` names, checked against the workloads and the data given
    (``p.error``, exit 2, naming what is missing)."""
    names = [w[0] for w in WORKLOADS]
    wanted = set(names) if args.cells == ["all"] else set(args.cells)
    if wanted - set(names):
        p.error(f"--cells: no workload for {', '.join(sorted(wanted - set(names)))}; choose "
                f"from {', '.join(names)} or 'all'")
    needs = {"sick" if ds == "sick" and (name.startswith("mtree") or not args.host_cost)
             else "sst" for name, ds, _, _ in WORKLOADS if name in wanted}
    if "sst" in needs and not (args.data or args.src):
        p.error("the SST workloads (nary, lex, topdown, bitree, the sequential LSTMs) need "
                "--data (built SST) or --src / $GNN_TREELSTM_DATA (raw data root)")
    if "sick" in needs and not (args.sick_data or args.src):
        p.error("the SICK workloads (childsum, mtree*, mean) need --sick-data (built SICK) "
                "or --src / $GNN_TREELSTM_DATA (raw data root)")
    for path in (args.data, args.sick_data):
        try:
            if path:
                load_meta(path)  # a built directory: its meta.json is there and readable
        except (FileNotFoundError, ValueError) as exc:
            p.error(str(exc))
    try:  # before the run, whose results would be lost
        check_writable(args.json)
    except OSError as exc:
        p.error(f"--json {args.json}: cannot write it ({exc.strerror or exc}); give a "
                "writable file")
    return wanted


def _workload_data(ds: str, kw: dict, args: argparse.Namespace, data: dict[str, object]
                   ) -> tuple[list[dgl.DGLGraph], dict]:
    """The trees of data set ``ds`` (read once into ``data``) and the cell's keyword
    arguments (a copy; SICK's relation count filled in)."""
    kw = dict(kw)
    if ds == "sick":
        if "sick" not in data:
            data["sick"] = _sick_graphs(args)
        graphs, nrel = data["sick"]  # type: ignore[misc]
        if "num_relations" in kw:
            kw["num_relations"] = nrel
        return graphs, kw
    if "sst" not in data:
        data["sst"] = _sst_graphs(args)
    graphs = data["sst"]
    if ds == "sst-chain":
        data.setdefault("sst-chain", word_chains(graphs[: args.trees]))
        graphs = data["sst-chain"]
    return graphs, kw  # type: ignore[return-value]


def _report(args: argparse.Namespace, rows: list[dict], peak_by_shape: dict[str, float]
            ) -> None:
    """Print the machine, the matmul peaks and the table; write the JSON."""
    table = markdown(rows, max(peak_by_shape.values()))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, dgl {dgl.__version__}, {args.threads} threads, "
          f"h {args.h_size}, x {args.x_size}, {platform.processor() or platform.machine()}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(default)')}, "
          f"load average {load:.1f} on {os.cpu_count()} CPUs")
    print("matmul peak GFLOP/s: " + ", ".join(f"{k}: {v:.0f}" for k, v in peak_by_shape.items()))
    print()
    print(table)
    write_json(Path(args.json), {
        "args": vars(args), "matmul_gflops": peak_by_shape, "rows": rows, "load_average": load,
        "torch": torch.__version__, "dgl": dgl.__version__,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")})


if __name__ == "__main__":
    raise SystemExit(main())
