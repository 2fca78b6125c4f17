"""The interface every Tree-LSTM cell implements."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import dgl
import torch
from torch import nn

from .. import graph as G

__all__ = ["TreeCell", "ENGINES", "prop_nodes_topo"]

_NO_EDGES_WARNING = "The input graph for the user-defined edge function does not contain"


def prop_nodes_topo(
    graph: dgl.DGLGraph, message: Callable, reduce: Callable, apply: Callable,
) -> None:
    """``dgl.prop_nodes_topo`` leaves to root, with an edge-UDF message.

    The leaf frontier has no in-edges, so DGL calls the edge UDF on zero edges and warns
    each time; that warning is expected here and silenced (nothing else is).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_EDGES_WARNING)
        dgl.prop_nodes_topo(graph, message, reduce, apply_node_func=apply)

#: Propagation engines. ``"dgl"``: message/reduce/apply under ``dgl.prop_nodes_topo``
#: (the reference engine, default). ``"level"``: precomputed level schedule (issue 5).
ENGINES = ("dgl", "level")


class TreeCell(nn.Module):
    """Base class of all cells.

    ``forward(graph, x)`` takes a (batched) tree graph built to :mod:`gnn_treelstm.graph`'s
    schema and node inputs ``x`` of shape ``(num_nodes, x_size)`` (rows of nodes without a
    word are ignored by cells that only read words at leaves) and returns per-node states
    ``(h, c)``, ``h`` of shape ``(num_nodes, out_size)``. It never mutates ``graph``.

    Class attributes describe what the cell needs, so callers can refuse a model/tree
    combination before training: ``max_children`` (None = any), ``uses_relations``
    (reads ``edata['rel']``), ``tree_kinds`` (trees the cell is meant for).
    """

    max_children: int | None = None
    uses_relations: bool = False
    tree_kinds: tuple[str, ...] = ("constituency", "dependency", "chain", "amr")

    def __init__(self, x_size: int, h_size: int, *, engine: str = "dgl") -> None:
        super().__init__()
        if x_size <= 0 or h_size <= 0:
            raise ValueError(f"x_size and h_size must be positive, got {x_size} and {h_size}")
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; choose one of {ENGINES}")
        self.x_size = int(x_size)
        self.h_size = int(h_size)
        self.engine = engine

    @property
    def out_size(self) -> int:
        """Size of the per-node output ``h`` (e.g. 2*h_size for bidirectional cells)."""
        return self.h_size

    def check_input(self, graph: dgl.DGLGraph, x: torch.Tensor, **tree_kw) -> None:
        """Validate graph and features before computing; raises ``ValueError``."""
        name = type(self).__name__
        if x.dim() != 2 or x.shape[1] != self.x_size:
            raise ValueError(
                f"{name}: x has shape {tuple(x.shape)} but the cell expects "
                f"(num_nodes, x_size={self.x_size})"
            )
        if x.shape[0] != graph.num_nodes():
            raise ValueError(
                f"{name}: x has {x.shape[0]} rows but the graph has {graph.num_nodes()} nodes"
            )
        G.validate_tree(graph, who=name, **tree_kw)

    def embedding_parameters(self) -> list[nn.Parameter]:
        """Parameters that are embeddings (e.g. mTreeLSTM's relation embeddings), which a
        run may train at their own rate without L2 (``RunConfig.rel_lr``). None by
        default."""
        return []

    def level_forward(self, graph: dgl.DGLGraph, x: torch.Tensor, schedule=None, **kw):
        """Run this cell with the level engine (:mod:`gnn_treelstm.engine.level`).

        ``schedule`` is a :class:`~gnn_treelstm.engine.schedule.LevelSchedule` of ``graph``
        (built once per batch in the data loader's collate); computed here when omitted.
        """
        from ..engine.level import level_forward

        return level_forward(self, graph, x, schedule=schedule, **kw)

    def extra_repr(self) -> str:
        return f"x_size={self.x_size}, h_size={self.h_size}, engine={self.engine!r}"
