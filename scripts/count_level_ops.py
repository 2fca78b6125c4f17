"""Operations one forward + backward step of the level engine dispatches, per level.

``TRITON_INTERPRET=1 python scripts/count_level_ops.py --src ../shared/data [--cell nary]
[--trees 25]``: the first ``--trees`` SST training trees as one batch, the cell at x 300,
h 150, counted with :func:`gnn_treelstm.kernels.count.count_step` (views and metadata ops
left out) on three paths: the Triton kernels (under triton's interpreter), the C++ loops and
the general level driver.
"""

from __future__ import annotations

import argparse
import sys
import types

import dgl
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.commands import bench
from gnn_treelstm.kernels import fused_triton
from gnn_treelstm.kernels.count import count_step
from gnn_treelstm.trees.schedule import LevelSchedule


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", required=True, help="raw data (SST PTB trees under sst/trees)")
    p.add_argument("--cell", default="nary",
                   choices=["nary", "childsum", "lex", "topdown", "bitree"])
    p.add_argument("--trees", type=int, default=25)
    args = p.parse_args(argv)
    graphs = bench._sst_graphs(types.SimpleNamespace(data=None, src=args.src))
    g = dgl.batch(graphs[: args.trees])
    sched = LevelSchedule.from_graph(g)
    levels = sched.up.num_levels
    print(f"{args.trees} trees, {g.num_nodes()} nodes, {levels} levels")
    paths = [("general driver", "native", "off"), ("C++ loops", "native", None)]
    if fused_triton.interpreted():
        paths.insert(0, ("Triton kernels", "triton", None))
    for label, kernels, nat in paths:
        torch.manual_seed(0)
        cell = build_cell(args.cell, 300, 150, engine="level")
        x = torch.randn(g.num_nodes(), 300, requires_grad=True)
        count = count_step(cell, g, x, sched, kernels=kernels, native_choice=nat)
        print(f"{label}: {count.total} ops, {count.total / levels:.1f} per level")
    return 0


if __name__ == "__main__":
    sys.exit(main())
