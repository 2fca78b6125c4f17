"""The interface every Tree-LSTM cell implements, and the one forward preamble they share.

A cell declares its math once, in its own file: plain-tensor functions (input terms, the
per-edge message, the node update; equation numbers in their docstrings) bundled into
:class:`~gnn_treelstm.engine.recurrence.Recurrence` objects. :meth:`TreeCell.forward`
validates the input, then hands the cell a :class:`Propagator` for its engine; the cell's
:meth:`TreeCell.compute` computes its input terms and runs its recurrences through it. So
the DGL engine (``dgl.prop_nodes_topo``) and the level engine (precomputed schedule) run
the same declared functions. A cell may also name a fast kernel
(:meth:`TreeCell.level_kernel`, the C++ loops of :mod:`gnn_treelstm.kernels.fused`) used by
the level engine when it applies; the registry-wide test holds it to the declaration.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import dgl
import torch
from torch import nn

from gnn_treelstm.engine import dgl_engine, level
from gnn_treelstm.engine.recurrence import Recurrence
from gnn_treelstm.engine.schedule import LevelSchedule
from gnn_treelstm.trees import graph as G

__all__ = ["TreeCell", "ENGINES", "Propagator", "prop_nodes_topo"]

#: Propagation engines. ``"dgl"``: message/reduce/apply under ``dgl.prop_nodes_topo``
#: (the reference engine, default). ``"level"``: precomputed level schedule.
ENGINES = ("dgl", "level")

prop_nodes_topo = dgl_engine.prop_nodes_topo


class Propagator:
    """Runs a cell's recurrences on one (batched) graph with one engine.

    ``prop(rec, *inputs) -> states`` (node order). For the level engine the schedule is
    the one given (checked against the graph) or built once on first use.
    """

    def __init__(self, engine: str, graph: dgl.DGLGraph,
                 schedule: LevelSchedule | None = None) -> None:
        self.engine = engine
        self.graph = graph
        self._schedule = schedule

    @property
    def schedule(self) -> LevelSchedule:
        """The given schedule, or the graph's, built (on the CPU) on first use."""
        if self._schedule is None:
            self._schedule = LevelSchedule.from_graph(self.graph)
        return self._schedule

    def schedule_on(self, device: torch.device) -> LevelSchedule:
        """The schedule on ``device``, moved at most once per forward (a cell may run
        several recurrences on it)."""
        if self.schedule.device != device:
            self._schedule = self.schedule.to(device)
        return self._schedule

    def __call__(self, rec: Recurrence, *inputs: torch.Tensor) -> torch.Tensor:
        if self.engine == "dgl":
            return dgl_engine.propagate(self.graph, rec, inputs)
        sched = self.schedule_on(inputs[0].device)
        if sched.num_nodes == 0:
            return rec.update(inputs, rec.sources(inputs[0], 0))
        return level.propagate(sched, rec, inputs)


def check_schedule(schedule: LevelSchedule, graph: dgl.DGLGraph, who: str) -> None:
    """A precomputed schedule must describe ``graph``: same nodes, and every edge of the
    graph where the schedule has it (child -> parent)."""
    if not isinstance(schedule, LevelSchedule):
        raise ValueError(f"{who}: schedule must be a LevelSchedule, got "
                         f"{type(schedule).__name__}")
    n, e = graph.num_nodes(), graph.num_edges()
    lv = schedule.up
    if schedule.num_nodes != n or lv.edge_src.shape[0] != e:
        raise ValueError(
            f"{who}: the schedule is for a graph of {schedule.num_nodes} nodes and "
            f"{lv.edge_src.shape[0]} edges, this graph has {n} nodes and {e} edges; build "
            "it with LevelSchedule.from_graph(graph) of this batch (or pass schedule=None)"
        )
    if e == 0:
        return
    src, dst = graph.edges()
    dev = lv.order.device
    par = torch.full((n,), -1, dtype=torch.int64, device=dev)
    par[src.to(dev).long()] = dst.to(dev).long()
    child = lv.order.index_select(0, lv.edge_src)
    parent = lv.order.index_select(0, lv.edge_dst)
    if not bool((par.index_select(0, child) == parent).all()):
        raise ValueError(
            f"{who}: the schedule's edges differ from this graph's (a schedule of another "
            "batch with the same size?); build it with LevelSchedule.from_graph(graph) of "
            "this batch (or pass schedule=None)"
        )


class TreeCell(nn.Module):
    """Base class of all cells.

    ``forward(graph, x, schedule=None, **kw)`` takes a (batched) tree graph built to
    :mod:`gnn_treelstm.trees.graph`'s schema and node inputs ``x`` of shape
    ``(num_nodes, x_size)`` and returns per-node states ``(h, c)``, ``h`` of shape
    ``(num_nodes, out_size)``. It never mutates ``graph``. Subclasses implement
    :meth:`compute` (their math, through the :class:`Propagator`) and may implement
    :meth:`level_kernel` (a fast path of the level engine).

    Class attributes describe what the cell needs, so callers can refuse a model/tree
    combination before training: ``max_children`` (None = any), ``uses_relations``
    (reads ``edata['rel']``), ``edge_fields`` (edge fields it reads), ``reads_words``
    (reads ``x`` only where ``ndata['word'] != NO_WORD``), ``tree_kinds`` (trees the cell
    is meant for).

    ``run_defaults`` holds the training defaults of the cell's paper family, which
    :meth:`gnn_treelstm.training.config.RunConfig.resolved` fills in where a run leaves
    them unset: ``optimizer``, ``emb_dropout``, ``loss_reduction`` and ``teng_head``
    (the classifier of Teng & Zhang's eq 17, with its ReLU hidden layer).
    """

    run_defaults: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    max_children: int | None = None
    uses_relations: bool = False
    reads_words: bool = False
    edge_fields: tuple[str, ...] = (G.POS,)
    tree_kinds: tuple[str, ...] = ("constituency", "dependency", "chain", "amr")

    def __init__(self, x_size: int, h_size: int, *, engine: str = "dgl") -> None:
        super().__init__()
        for name, size in (("x_size", x_size), ("h_size", h_size)):
            if not isinstance(size, numbers.Integral) or isinstance(size, bool):
                raise ValueError(f"{name} must be an integer, got {size!r} "
                                 f"({type(size).__name__})")
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

    # ------------------------------------------------------------ the one preamble
    def forward(self, graph: dgl.DGLGraph, x: torch.Tensor, schedule: LevelSchedule | None = None,
                **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """Validate, then run the cell's math with its engine; returns ``(h, c)``."""
        self.check_input(graph, x)
        self.check_kwargs(graph, **kwargs)
        if schedule is not None:
            check_schedule(schedule, graph, type(self).__name__)
        prop = Propagator(self.engine, graph, schedule)
        if self.engine == "level":
            fast = self.level_kernel(prop, x, **kwargs)
            if fast is not None:
                return fast
        return self.compute(prop, x, **kwargs)

    def compute(self, prop: Propagator, x: torch.Tensor, **kwargs
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """The cell's math: input terms, then its recurrences through ``prop``."""
        raise NotImplementedError

    def level_kernel(self, prop: Propagator, x: torch.Tensor, **kwargs
                     ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """An optional fast path of the level engine (``None``: none applies here, the
        general level driver runs :meth:`compute`)."""
        return None

    def check_kwargs(self, graph: dgl.DGLGraph, **kwargs) -> None:
        """Validate extra forward arguments (e.g. ``heads=``); none by default."""
        if kwargs:
            raise TypeError(f"{type(self).__name__}.forward() got unexpected arguments "
                            f"{sorted(kwargs)}")

    def check_input(self, graph: dgl.DGLGraph, x: torch.Tensor, **tree_kw) -> None:
        """Validate graph and features before computing; raises ``ValueError``."""
        name = type(self).__name__
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name}: x must be a float tensor, got {got}")
        if x.dim() != 2 or x.shape[1] != self.x_size:
            raise ValueError(
                f"{name}: x has shape {tuple(x.shape)} but the cell expects "
                f"(num_nodes, x_size={self.x_size})"
            )
        params = [p for p in self.parameters() if p.is_floating_point()]
        if params and x.dtype != params[0].dtype:
            raise ValueError(
                f"{name}: x has dtype {x.dtype} but the cell's parameters are "
                f"{params[0].dtype}; convert one of them (e.g. cell.to(x.dtype))"
            )
        tree_kw.setdefault("edge_fields", self.edge_fields)
        G.validate_tree(graph, who=name, **tree_kw)
        if x.shape[0] != graph.num_nodes():
            raise ValueError(
                f"{name}: x has {x.shape[0]} rows but the graph has {graph.num_nodes()} nodes"
            )
        if self.reads_words:
            G.check_words(graph, who=name)

    def check_output(self, graph: dgl.DGLGraph, h: torch.Tensor) -> None:
        """``h`` must be :meth:`forward`'s output for ``graph`` (the classifier inputs a cell
        builds from it, ``sentence_vector`` / ``node_vectors``, call this); ``ValueError``."""
        if h.dim() != 2 or h.shape != (graph.num_nodes(), self.out_size):
            raise ValueError(
                f"{type(self).__name__}: h has shape {tuple(h.shape)} but must be forward()'s "
                f"output, (num_nodes={graph.num_nodes()}, out_size={self.out_size})"
            )

    def embedding_parameters(self) -> list[nn.Parameter]:
        """Parameters that are embeddings (e.g. mTreeLSTM's relation embeddings), which a
        run may train at their own rate without L2 (``RunConfig.rel_lr``). None by
        default."""
        return []

    def extra_repr(self) -> str:
        return f"x_size={self.x_size}, h_size={self.h_size}, engine={self.engine!r}"
