"""Registers and spills of the Triton level kernels as a GPU compiles them, on a CPU machine.

``python scripts/registers.py [--cells nary lex ...] [--x 300] [--h 150] [--arch 90]
[--json FILE] [--fail-on-spill]``

A kernel whose threads need more than the 255 registers a thread may hold spills the rest
to local memory (the stack), which every access then pays. Two steps, each its own process:

1. under triton's interpreter (``TRITON_INTERPRET=1``), each cell at ``x``, ``h`` runs one
   forward + backward on the package's SST and SICK samples with the GPU's block sizes
   and launch options, every launch a no-op: each kernel's distinct specializations (the
   arguments' types and alignment, the constexprs, the warps and stages) are recorded by
   Triton's own binder, as a GPU launch would compute them;
2. without the interpreter, each is compiled for ``sm_<arch>a`` (``triton.compile``: no GPU
   needed) and assembled by the ``ptxas`` Triton ships, with the flags Triton passes it
   (``-v``: registers a thread, spill stores and loads in bytes).

Prints a markdown table and writes JSON; ``--fail-on-spill``: exit 1 when any kernel spills.
The cells run with their default options (the lex cells' gate head lexicons, float32): the
other head modes and the ConTree baseline are constexpr variants of the same kernels that
this does not compile. Drives triton 3.9's launch internals (``JITFunction._pack_args``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path

#: the cells whose level loops run Triton kernels, by workload (data set, cell kwargs)
CELLS = {"nary": ("sst", {}), "childsum": ("sick", {}), "mtree": ("sick", {"rel": 1}),
         "mtree-add": ("sick", {"rel": 1}),
         "mtree-full": ("sick", {"rel": 1}), "lex": ("sst", {}), "topdown": ("sst", {}),
         "bitree": ("sst", {}), "lstm": ("chain", {}), "bilstm": ("chain", {})}


@functools.lru_cache
def _graphs(ds: str, trees: int):
    """The first ``trees`` training trees of the package's sample (SST constituency, their
    words' chains, or SICK dependency with its relation count)."""
    from importlib.resources import files

    from gnn_treelstm.datasets.chain import word_chains
    from gnn_treelstm.datasets.sources import sick_graphs, sst_graphs

    root = Path(str(files("gnn_treelstm") / "sample_data"))
    if ds in ("sst", "chain"):
        out = sst_graphs(root, limit=trees)
        if ds == "chain":
            out = word_chains(out)
        return out, 0
    return sick_graphs(root, sides=("a",), limit=trees)


def record(cells: list[str], x: int, h: int, trees: int, out: Path) -> None:
    """Step 1 (under the interpreter): every distinct launch of ``cells``' forward +
    backward, pickled to ``out`` as ``{kernel: [(options, signature, constexprs, attrs,
    cells)]}``."""
    import dgl
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction, create_function_from_signature

    from gnn_treelstm.cells import build_cell
    from gnn_treelstm.kernels import fused_triton
    from gnn_treelstm.trees.schedule import LevelSchedule

    backend = make_backend(GPUTarget("cuda", 90, 32))
    seen: dict[str, dict[str, tuple]] = {}
    binders: dict[str, tuple] = {}  # per kernel, made at its first launch
    cell_now = [""]

    def launch(self, *args, grid, warmup, **kwargs):
        if self.fn.__name__ not in binders:
            jf = JITFunction(self.fn, **self.kwargs)
            binders[self.fn.__name__] = jf, create_function_from_signature(
                jf.signature, jf.params, backend)
        jf, binder = binders[self.fn.__name__]
        bound, spec, options = binder(*args, **kwargs)
        opts, sig, cx, attrs = jf._pack_args(backend, kwargs, bound, spec, options)
        key = repr((sorted(opts.__dict__.items()), sig, sorted(cx.items()), attrs))
        entry = seen.setdefault(self.fn.__name__, {}).setdefault(
            key, (opts.__dict__, sig, cx, attrs, []))
        if cell_now[0] not in entry[4]:
            entry[4].append(cell_now[0])

    interpreter.InterpretedFunction.run = launch
    fused_triton.gpu_blocks = lambda t: True  # the GPU's block sizes and launch options
    fused_triton.set_choice("triton")
    torch.manual_seed(0)
    for name in cells:
        ds, kw = CELLS[name]
        graphs, nrel = _graphs(ds, trees)
        if kw.get("rel"):
            kw = {"num_relations": nrel}
        g = dgl.batch(graphs)
        cell_now[0] = name
        cell = build_cell(name, x, h, engine="level", **kw)
        xs = torch.randn(g.num_nodes(), x, requires_grad=True)
        res = cell(g, xs, schedule=LevelSchedule.from_graph(g))
        res = res if isinstance(res, tuple) else (res,)
        sum(r.sum() for r in res).backward()
    with open(out, "wb") as f:
        pickle.dump({k: list(v.values()) for k, v in seen.items()}, f)


def _ptxas_report(log: str) -> dict[str, int]:
    """Registers a thread and spill bytes from ``ptxas -v``'s log."""
    def grab(pattern: str) -> int:
        m = re.search(pattern, log)
        if m is None:
            raise RuntimeError(f"ptxas -v printed no {pattern!r}:\n{log}")
        return int(m.group(1))
    return {"registers": grab(r"Used (\d+) registers"),
            "spill_stores": grab(r"(\d+) bytes spill stores"),
            "spill_loads": grab(r"(\d+) bytes spill loads")}


def compile_all(recorded: Path, arch: int) -> list[dict]:
    """Step 2 (no interpreter): each recorded launch compiled for ``sm_<arch>a`` and
    assembled with ``ptxas -v``; a row per kernel variant."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    from gnn_treelstm.kernels import triton_levels

    target = GPUTarget("cuda", arch, 32)
    ptxas = get_ptxas(arch).path
    rows = []
    with open(recorded, "rb") as f:
        launches = pickle.load(f)
    for kernel in sorted(launches):
        jf = getattr(triton_levels, kernel)
        for opts, sig, cx, attrs, cells in launches[kernel]:
            k = triton.compile(ASTSource(jf, sig, cx, attrs), target=target, options=opts)
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / f"{kernel}.ptx"
                src.write_text(k.asm["ptx"])
                r = subprocess.run([ptxas, "-v", "--regAllocOptLevel=2",
                                    f"--gpu-name=sm_{arch}a", str(src), "-o",
                                    str(src.with_suffix(".o"))],
                                   capture_output=True, text=True, check=True)
            consts = {jf.arg_names[path[0]]: v for path, v in cx.items()}
            rows.append({"kernel": kernel, "cells": cells, "constexprs": consts,
                         "num_warps": opts["num_warps"], "num_stages": opts["num_stages"],
                         **_ptxas_report(r.stderr + r.stdout)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", nargs="+", default=list(CELLS), choices=list(CELLS))
    p.add_argument("--x", type=int, default=300, help="input size (default 300)")
    p.add_argument("--h", type=int, default=150, help="hidden size (default 150)")
    p.add_argument("--trees", type=int, default=8, help="sample trees a batch (default 8)")
    p.add_argument("--arch", type=int, default=90, help="compute capability (default 90)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--fail-on-spill", action="store_true", help="exit 1 if a kernel spills")
    p.add_argument("--record-to", help=argparse.SUPPRESS)  # step 1, in the child process
    args = p.parse_args(argv)
    if args.record_to:
        record(args.cells, args.x, args.h, args.trees, Path(args.record_to))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / "launches.pkl"
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        if os.environ.get("TRITON_INTERPRET") == "1":
            p.error("run without TRITON_INTERPRET=1: the kernels are compiled, not interpreted")
        step1 = subprocess.run([sys.executable, __file__,
                                *(argv if argv is not None else sys.argv[1:]),
                                "--record-to", str(rec)], env=env)
        if step1.returncode:
            return step1.returncode
        rows = compile_all(rec, args.arch)
    print(f"Triton level kernels at x {args.x}, h {args.h}, float32, sm_{args.arch}a "
          f"(ptxas -v):\n")
    print("| kernel | cells | constexprs | warps | registers | spill stores / loads (bytes) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        cx = ", ".join(f"{k}={v}" for k, v in r["constexprs"].items())
        print(f"| {r['kernel']} | {', '.join(r['cells'])} | {cx} | {r['num_warps']} | "
              f"{r['registers']} | {r['spill_stores']} / {r['spill_loads']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"x": args.x, "h": args.h, "arch": args.arch,
                                               "rows": rows}, indent=1) + "\n")
    spills = [r["kernel"] for r in rows if r["spill_stores"] or r["spill_loads"]]
    if spills:
        print(f"\nspilling: {', '.join(sorted(set(spills)))}")
    return 1 if spills and args.fail_on_spill else 0


if __name__ == "__main__":
    sys.exit(main())
