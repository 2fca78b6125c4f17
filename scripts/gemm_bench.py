"""The level engine's matrix products on this CPU: oneDNN, ``torch.mm`` and the C++ loops'
own kernel at the shapes a training step issues, one thread, the median thread time of
``--calls`` calls after a warm-up (:func:`gnn_treelstm.kernels.host.median_step_us`), in
µs, printed as a markdown table::

    python scripts/gemm_bench.py [--calls 300]

What ``gnn_treelstm.kernels.gemm`` chooses by default (``GNN_TREELSTM_GEMM=auto``) depends
on these figures: oneDNN where MKL runs AVX2 code (AMD CPUs), ``torch.mm`` on an Intel CPU,
whose MKL runs its own AVX-512 kernels (:func:`gnn_treelstm.kernels.gemm.cpu_vendor`).
Rows: ``a @ w.T`` for the input and level products (oneDNN unpacked and with the weight
packed once, as a level loop packs it), ``a @ b`` with ``a`` a transposed view for the
weight-gradient products (the C++ kernel reads it in place).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from gnn_treelstm.kernels import gemm, host, native

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    calls = ap.parse_args().calls
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    print(f"CPU vendor {gemm.cpu_vendor() or '(unknown)'}, "
          f"{torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}, one thread; "
          f"auto chooses {gemm.backend()}")
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
