"""The level engine's matrix products on this CPU: oneDNN, ``torch.mm`` and the C++ loops'
own kernel at the shapes a training step issues, one thread, the median thread time of
``--calls`` calls after a warm-up (:func:`gnn_treelstm.kernels.host.median_step_us`), in
µs, printed as a markdown table::

    python scripts/gemm_bench.py [--calls 300]
    python scripts/gemm_bench.py --small [--calls 200]
    python scripts/gemm_bench.py --small-steps ../shared/data [--cells nary childsum]

What ``gnn_treelstm.kernels.gemm`` chooses by default (``GNN_TREELSTM_GEMM=auto``) depends
on these figures: oneDNN where MKL runs AVX2 code (AMD CPUs), ``torch.mm`` on an Intel CPU,
whose MKL runs its own AVX-512 kernels (:func:`gnn_treelstm.kernels.gemm.cpu_vendor`), and
``torch.mm`` for products too small for oneDNN's per-call cost (``--small``).
Rows: ``a @ w.T`` for the input and level products (oneDNN unpacked and with the weight
packed once, as ``gemm.pack`` packs it), ``a @ b`` with ``a`` a transposed view for the
weight-gradient products (the C++ kernel reads it in place).

``--small``: the crossover of :data:`gnn_treelstm.kernels.gemm.SMALL_PRODUCT`, below which
``auto`` takes ``torch.addmm`` for small models' products: oneDNN (unpacked and packed) and
``torch.addmm`` with a bias over a grid of shapes, each call after a 2 MB write (more than
a core's L1 and L2 caches hold), as a training step's other work runs between its
products.
``--small-steps SRC``: what that choice changes in the C++ path's steps at x 8, h 8 (the
cell's forward + backward and the SST-5 training step of
:mod:`gnn_treelstm.training.stepcost`, on the first 25 SST trees and on new batches of 25),
in one process, ``SMALL_PRODUCT`` at 0 (every product of four rows or more that
:func:`gnn_treelstm.kernels.gemm.mm_nt` makes on oneDNN, as before the rule existed) and at
its value alternating in blocks of ten steps, the median thread time of each. Only where
``auto`` chooses oneDNN (an AVX-512 CPU not Intel's); the cells' other products are not
``mm_nt``'s and do not move.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import dgl
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.datasets.sources import sst_graphs
from gnn_treelstm.kernels import gemm, host, native
from gnn_treelstm.training.stepcost import train_step

#: (what, m, k, n): ``a`` (m, k) times ``w`` (n, k) transposed
PRODUCTS = [("input, x 8 h 8 (941 nodes)", 941, 8, 40),
            ("level, h 150 (32 rows)", 32, 300, 750),
            ("level, h 150 (128 rows)", 128, 300, 750),
            ("input, h 150 (960 rows)", 960, 300, 750)]
#: (what, rows, m, n): ``a`` = (rows, m) transposed, times ``b`` (rows, n)
GRADIENTS = [("weight gradient, x 8 h 8", 941, 40, 8),
             ("weight gradient, h 150", 941, 750, 300)]


def _median_us(f: Callable[..., object], *args: object, calls: int = 300) -> str:
    """:func:`gnn_treelstm.kernels.host.median_step_us` of ``f(*args)``, formatted."""
    return f"{host.median_step_us(lambda: f(*args), steps=calls, warmup=min(20, calls)):.1f}"


def _onednn(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(a, w, None, "none", [], "")


#: ``--small``: rows m, and (k, n) of the weight (n, k)
SMALL_ROWS = (64, 512, 2048)
SMALL_WEIGHTS = ((8, 24), (8, 40), (16, 48), (16, 80), (32, 96), (32, 160), (64, 192),
                 (64, 320), (100, 300), (150, 450))


def _cold_median_us(f: Callable[..., object], *args: object, calls: int,
                    evict: torch.Tensor) -> float:
    """The median thread time of ``f(*args)`` over ``calls`` calls, each after a write of
    ``evict`` (outside the clock), µs."""
    for _ in range(10):
        f(*args)
    times = []
    for _ in range(calls):
        evict.mul_(1.0)
        t0 = time.thread_time_ns()
        f(*args)
        times.append(time.thread_time_ns() - t0)
    return statistics.median(times) / 1e3


def small(calls: int) -> None:
    """``--small``: the table of oneDNN against ``torch.addmm`` at small products."""
    g = torch.Generator().manual_seed(0)
    evict = torch.randn(512, 1024, generator=g)  # 2 MB
    op = torch.ops.mkldnn._linear_pointwise
    print("| m | k | n | m k n | torch.addmm µs | oneDNN µs | oneDNN, packed µs "
          "| oneDNN / addmm | packed / addmm |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in SMALL_ROWS:
        for k, n in SMALL_WEIGHTS:
            a, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
            b = torch.randn(n, generator=g)
            wp = torch.ops.mkldnn._reorder_linear_weight(w, 32)
            t_mm = _cold_median_us(torch.addmm, b, a, w.t(), calls=calls, evict=evict)
            t_dnn = _cold_median_us(op, a, w, b, "none", [], "", calls=calls, evict=evict)
            t_pk = _cold_median_us(op, a, wp, b, "none", [], "", calls=calls, evict=evict)
            print(f"| {m} | {k} | {n} | {m * k * n:,} | {t_mm:.1f} | {t_dnn:.1f} | "
                  f"{t_pk:.1f} | {t_dnn / t_mm:.2f} | {t_pk / t_mm:.2f} |", flush=True)


def _alternating(step: Callable[[], object], values: tuple[int, int], blocks: int = 30,
                 per: int = 10) -> list[float]:
    """Median thread time of ``step()`` (µs) with ``gemm.SMALL_PRODUCT`` at each of
    ``values``, in alternating blocks of ``per`` timed steps (two untimed before each)."""
    times: list[list[int]] = [[], []]
    for b in range(blocks):
        for i in ((0, 1) if b % 2 == 0 else (1, 0)):
            gemm.SMALL_PRODUCT = values[i]
            step()
            step()
            for _ in range(per):
                t0 = time.thread_time_ns()
                step()
                times[i].append(time.thread_time_ns() - t0)
    return [statistics.median(t) / 1e3 for t in times]


def small_steps(src: str, cells: list[str]) -> None:
    """``--small-steps``: the C++ path's steps with small products on oneDNN (as before
    :data:`~gnn_treelstm.kernels.gemm.SMALL_PRODUCT`) and on ``torch.addmm``."""
    if gemm.backend() != "onednn":
        raise SystemExit("--small-steps compares oneDNN with torch.addmm: auto chooses "
                         f"{gemm.backend()} on this CPU, so both would be torch.mm's")
    graphs = sst_graphs(src, limit=1000)
    values = (0, gemm.SMALL_PRODUCT)
    print("| cell | step | oneDNN µs | torch.addmm µs | ratio |")
    print("| --- | --- | --- | --- | --- |")
    try:
        for cell in cells:
            _small_rows(cell, graphs, values)
    finally:
        gemm.SMALL_PRODUCT = values[1]


def _small_rows(cell: str, graphs: list, values: tuple[int, int]) -> None:
    """``--small-steps``' rows of ``cell``."""
    torch.manual_seed(0)
    step, _ = host.cell_step(build_cell(cell, 8, 8, engine="level"), dgl.batch(graphs[:25]))
    steps = {"cell step": step,
             "training step, one batch": train_step(cell, graphs[:25], "native"),
             "training step, new batches": train_step(cell, graphs, "native", batch_size=25)}
    with host.on_path("native"):
        for what, s in steps.items():
            old, new = _alternating(s, values)
            print(f"| {cell} | {what} | {old:.0f} | {new:.0f} | {new / old:.2f} |",
                  flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=None, help="calls timed per cell "
                    "(default 300; --small: 200)")
    ap.add_argument("--small", action="store_true",
                    help="oneDNN against torch.addmm at small products (SMALL_PRODUCT)")
    ap.add_argument("--small-steps", metavar="SRC",
                    help="the C++ path's x 8 h 8 steps on the SST trees under SRC, small "
                    "products on oneDNN and on torch.addmm alternating")
    ap.add_argument("--cells", nargs="+", default=["nary", "childsum"],
                    help="--small-steps: the cells (default: nary childsum)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"CPU vendor {gemm.cpu_vendor() or '(unknown)'}, "
          f"{torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}, one thread; "
          f"auto chooses {gemm.backend()}")
    if args.small:
        small(args.calls or 200)
        return
    if args.small_steps:
        small_steps(args.small_steps, args.cells)
        return
    calls = args.calls or 300
    g = torch.Generator().manual_seed(0)
    print("| product | shape | oneDNN µs | oneDNN, packed weight µs | torch.mm µs "
          "| C++ kernel µs |")
    print("| --- | --- | --- | --- | --- | --- |")
    ours = torch.ops.gnn_treelstm.matmul if native.available() else None
    for what, m, k, n in PRODUCTS:
        a, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
        wp = torch.ops.mkldnn._reorder_linear_weight(w, 32)
        wt = w.t().contiguous()  # the loops' operand, laid out once per loop
        print(f"| {what} | {m} x {k} @ {k} x {n} | {_median_us(_onednn, a, w, calls=calls)} "
              f"| {_median_us(_onednn, a, wp, calls=calls)} "
              f"| {_median_us(torch.mm, a, wt, calls=calls)} "
              f"| {_median_us(ours, a, wt, calls=calls) if ours else '-'} |")
    for what, rows, m, n in GRADIENTS:
        d, x = torch.randn(rows, m, generator=g), torch.randn(rows, n, generator=g)
        print(f"| {what} | ({rows} x {m})^T @ {rows} x {n} "
              f"| {_median_us(_onednn, d.t(), x.t(), calls=calls)} | - "
              f"| {_median_us(torch.mm, d.t(), x, calls=calls)} "
              f"| {_median_us(ours, d.t(), x, calls=calls) if ours else '-'} |")


if __name__ == "__main__":
    main()
