"""The engines by name, and the :class:`Propagator` that runs a cell's recurrences with one.

:data:`ENGINES` is the one registry of propagation engines: a cell's ``engine`` is a name
in it (``--engine`` on the command line), and everything that depends on the engine reads
its :class:`Engine` entry, never the name.

A :class:`Propagator` binds an engine to one (batched) graph and, for the level engine, its
schedule: ``prop(rec, name=tensor, ...)`` runs a
:class:`~gnn_treelstm.engine.recurrence.Recurrence` on the named per-node inputs and
returns the node states as :class:`~gnn_treelstm.engine.recurrence.Parts` (views of one
packed tensor, in node order): ``out.h``, ``out.c``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import dgl
import torch

from gnn_treelstm.engine import dgl_engine, level
from gnn_treelstm.engine.recurrence import Inputs, Parts, Recurrence
from gnn_treelstm.engine.schedule import LevelSchedule

__all__ = ["Engine", "ENGINES", "engine_named", "Propagator", "check_schedule"]


@dataclass(frozen=True)
class Engine:
    """One propagation engine.

    Attributes:
        name: its name in :data:`ENGINES`.
        run: ``run(prop, rec, inputs) -> (N, rec.width)`` packed states in node order;
            ``inputs`` in the order of ``rec.inputs``.
        kernels: the cells' fast kernels
            (:meth:`~gnn_treelstm.cells.base.TreeCell.level_kernel`) apply on this engine.
        doc: one line on what it is.
    """

    name: str
    run: Callable[[Propagator, Recurrence, Inputs], torch.Tensor]
    kernels: bool
    doc: str


def _run_dgl(prop: Propagator, rec: Recurrence, inputs: Inputs) -> torch.Tensor:
    return dgl_engine.propagate(prop.graph, rec, inputs)


def _run_level(prop: Propagator, rec: Recurrence, inputs: Inputs) -> torch.Tensor:
    return level.propagate(prop.schedule_on(inputs[0].device), rec, inputs)


#: Propagation engines by name. ``"dgl"``: message/reduce/apply under
#: ``dgl.prop_nodes_topo`` (the reference engine, default). ``"level"``: a precomputed
#: level schedule, with the cells' optional C++ fast kernels.
ENGINES: Mapping[str, Engine] = MappingProxyType({
    "dgl": Engine("dgl", _run_dgl, kernels=False,
                  doc="message / built-in sum / apply under dgl.prop_nodes_topo"),
    "level": Engine("level", _run_level, kernels=True,
                    doc="level by level on a precomputed LevelSchedule"),
})


def engine_named(name: str) -> Engine:
    """The engine called ``name`` (``ValueError`` naming the choices otherwise)."""
    try:
        return ENGINES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown engine {name!r}; choose one of "
                         f"{', '.join(ENGINES)}") from None


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


class Propagator:
    """Runs a cell's recurrences on one (batched) graph with the engine named ``engine``.

    ``prop(rec, name=tensor, ...) -> Parts``: the states of every node (node order) by
    the recurrence's state names, views of one packed ``(N, rec.width)`` tensor. For the
    level engine the schedule is the one given (checked against the graph, ``who`` names
    the caller in the error) or built once on first use.
    """

    def __init__(self, engine: str, graph: dgl.DGLGraph,
                 schedule: LevelSchedule | None = None, *, who: str = "Propagator") -> None:
        self._engine = engine_named(engine)
        self.engine = engine
        self.graph = graph
        if schedule is not None:
            check_schedule(schedule, graph, who)
        self._schedule = schedule

    @property
    def kernels(self) -> bool:
        """Whether the cells' fast kernels apply on this engine."""
        return self._engine.kernels

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

    def __call__(self, rec: Recurrence, /, **inputs: torch.Tensor) -> Parts:
        tensors = rec.order_inputs(inputs, f"{self.engine} engine")
        return rec.state_layout.unpack(self._engine.run(self, rec, tensors))
