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

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import dgl
import numpy as np
import torch

from gnn_treelstm.eager import eager
from gnn_treelstm.engine import dgl_engine, level
from gnn_treelstm.engine.recurrence import Inputs, Parts, Recurrence
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.schedule import LevelSchedule

logger = logging.getLogger(__name__)

__all__ = ["Engine", "ENGINES", "engine_named", "Propagator", "check_schedule", "compiling"]


#: the edge fields a :class:`~gnn_treelstm.trees.schedule.Levels` keeps, by name
_SCHEDULED_EDGE_FIELDS = {G.REL: "edge_rel", G.POS: "edge_pos"}


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
        scheduled: runs on a :class:`~gnn_treelstm.trees.schedule.LevelSchedule`
            (:meth:`Propagator.prepare` builds it).
    """

    name: str
    run: Callable[[Propagator, Recurrence, Inputs], torch.Tensor]
    kernels: bool
    doc: str
    scheduled: bool = False


def _run_dgl(prop: Propagator, rec: Recurrence, inputs: Inputs) -> torch.Tensor:
    if compiling():
        return _run_dgl_eagerly(prop, rec, inputs)
    return dgl_engine.propagate(prop.graph, rec, inputs)


#: why the DGL engine's propagation is not compiled (logged once per process)
DGL_EAGER_REASON = (
    "torch.compile: the dgl engine runs its propagation (dgl.prop_nodes_topo) eagerly; "
    "only the cell's tensor math around it is compiled. DGL drives every frontier through "
    "its C library (DLPack conversions, host reads of tensor values), which Dynamo cannot "
    "put in a graph: traced, the graph breaks at every frontier and runs slower than "
    "eager (docs/speed.md). Use engine='level' to compile the propagation too."
)
_dgl_eager_logged = [False]


@eager(reason="DGL's prop_nodes_topo runs in DGL's C library")
def _run_dgl_eagerly(prop: Propagator, rec: Recurrence, inputs: Inputs) -> torch.Tensor:
    """The DGL engine under ``torch.compile``: the same propagation, run eagerly (a graph
    break), with one logged warning per process (:data:`DGL_EAGER_REASON`)."""
    if not _dgl_eager_logged[0]:
        _dgl_eager_logged[0] = True
        logger.warning(DGL_EAGER_REASON)
    return dgl_engine.propagate(prop.graph, rec, inputs)


@eager(reason="DGL's graph code runs in DGL's C library")
def _dgl_leaves(graph: dgl.DGLGraph) -> torch.Tensor:
    return graph.in_degrees() == 0


@eager(reason="DGL's graph code runs in DGL's C library")
def _dgl_parent_edge_data(graph: dgl.DGLGraph, field: str, root: int) -> torch.Tensor:
    out = torch.full((graph.num_nodes(),), root, dtype=torch.int64, device=graph.device)
    if graph.num_edges():
        out[graph.edges()[0].long()] = graph.edata[field].long()
    return out


def _run_level(prop: Propagator, rec: Recurrence, inputs: Inputs) -> torch.Tensor:
    return level.propagate(prop.schedule_on(inputs[0].device), rec, inputs)


#: Propagation engines by name. ``"dgl"``: message/reduce/apply under
#: ``dgl.prop_nodes_topo`` (the reference engine, default). ``"level"``: a precomputed
#: level schedule, with the cells' optional C++ fast kernels.
ENGINES: Mapping[str, Engine] = MappingProxyType({
    "dgl": Engine("dgl", _run_dgl, kernels=False,
                  doc="message / built-in sum / apply under dgl.prop_nodes_topo"),
    "level": Engine("level", _run_level, kernels=True,
                    doc="level by level on a precomputed LevelSchedule", scheduled=True),
})


def compiling() -> bool:
    """Whether ``torch.compile`` is tracing the caller (Dynamo decides this at trace time,
    so the compiled graph holds only the branch taken).

    Under compilation the level engine runs its general driver
    (:func:`~gnn_treelstm.engine.level.propagate`), not the cells' fast kernels
    (:attr:`Propagator.kernels` is False). The choice is deliberate: the C++ loops are
    opaque to Dynamo and Inductor (with their fake kernels they trace as single ops, so
    compiling has nothing of them to fuse), and some of them do not compile at all (the
    Teng head loop's argument named ``mode`` collides with the ``mode`` of PyTorch's
    functionalization of mutating ops, ``auto_functionalized``: a ``TypeError``). The
    general driver is plain tensor code that Inductor fuses level by level, forward and
    backward, and its results equal the kernels' (``tests/cells/test_registry.py``). The
    matrix products follow the same rule (:func:`gnn_treelstm.kernels.gemm.backend`)."""
    return torch.compiler.is_compiling()


def engine_named(name: str) -> Engine:
    """The engine called ``name`` (``ValueError`` naming the choices otherwise)."""
    try:
        return ENGINES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown engine {name!r}; choose one of "
                         f"{', '.join(ENGINES)}") from None


@eager  # host-side check: eager under torch.compile, never traced
def check_schedule(schedule: LevelSchedule, graph: dgl.DGLGraph, who: str) -> None:
    """A precomputed schedule must describe ``graph``: same nodes, and every edge of the
    graph where the schedule has it (child -> parent). The edges are compared on the CPU
    when the graph's edges are there (with the schedule's CPU copy,
    :meth:`~gnn_treelstm.trees.schedule.LevelSchedule.on_host`), so a schedule moved to
    a device is checked without waiting for it; a graph on a device is compared there. A
    schedule the graph's maker made of the same edges
    (:func:`~gnn_treelstm.trees.graph.made_with`: a data loader's batch) is not compared
    again."""
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
    if e == 0 or G.made_with(graph, schedule):  # made of the graph's own edges
        return
    host = schedule.on_host()
    if graph.device.type == "cpu" and host is not None:
        # the graph's edges are on the CPU: compare there, with the schedule's CPU copy
        # (no wait for a device the schedule was moved to), as the structure checks read
        # them (G.host_edges)
        src, dst = G.host_edges(graph)
        up = host.up
        par = np.full(n, -1, dtype=np.int64)
        par[src] = dst
        order = up.order.numpy()
        same = bool((par[order[up.edge_src.numpy()]] == order[up.edge_dst.numpy()]).all())
    else:
        src_t, dst_t = graph.edges()
        dev = lv.order.device
        par_t = torch.full((n,), -1, dtype=torch.int64, device=dev)
        par_t[src_t.to(dev).long()] = dst_t.to(dev).long()
        child = lv.order.index_select(0, lv.edge_src)
        parent = lv.order.index_select(0, lv.edge_dst)
        same = bool((par_t.index_select(0, child) == parent).all())
    if not same:
        raise ValueError(
            f"{who}: the schedule's edges differ from this graph's (a schedule of another "
            "batch with the same size?); build it with LevelSchedule.from_graph(graph) of "
            "this batch (or pass schedule=None)"
        )


class Propagator:
    """Runs a cell's recurrences on one (batched) graph with the engine named ``engine``.

    ``prop(rec, name=tensor, ...) -> Parts``: the states of every node (node order) by
    the recurrence's state names, views of one packed ``(N, rec.width)`` tensor. For the
    level engine the schedule is the one given (checked against the graph unless ``check``
    is False because the caller checked this pair before; ``who`` names the caller in the
    error) or built once on first use.
    """

    def __init__(self, engine: str, graph: dgl.DGLGraph,
                 schedule: LevelSchedule | None = None, *, who: str = "Propagator",
                 check: bool = True) -> None:
        self._engine = engine_named(engine)
        self.engine = engine
        self.graph = graph
        if schedule is not None and check:
            check_schedule(schedule, graph, who)
        self._schedule = schedule
        #: the level engine's path for this forward (``"triton"``, ``"loops"``,
        #: ``"general"``), set once per forward by the cell
        #: (:func:`gnn_treelstm.kernels.backend.path`); None until then
        self.path: str | None = None

    @property
    def kernels(self) -> bool:
        """Whether the cells' fast kernels apply on this engine: never while
        ``torch.compile`` traces (:func:`compiling`; then the general level driver runs)."""
        return self._engine.kernels and not compiling()

    @property
    def schedule(self) -> LevelSchedule:
        """The given schedule, or the graph's, built (on the CPU) on first use."""
        if self._schedule is None:
            self._schedule = LevelSchedule.from_graph(self.graph)
        return self._schedule

    def prepare(self) -> None:
        """The host-side work up front: the level engine's schedule (built on the CPU
        unless given). :meth:`~gnn_treelstm.cells.base.TreeCell.forward` calls it outside
        ``torch.compile``'s tracing, so that the compiled graph holds only tensor math."""
        if self._engine.scheduled:
            self.schedule  # noqa: B018  (the property builds and keeps it)

    def leaves(self) -> torch.Tensor:
        """(N,) bool, node order: the node has no child. On a scheduled engine read from
        the schedule (tensor ops, which ``torch.compile`` traces; DGL's graph code would
        break the graph), else from DGL."""
        if self._engine.scheduled:
            lv = self.schedule.up
            return lv.rank < (lv.node_offsets[1] if lv.num_levels else 0)
        return _dgl_leaves(self.graph)

    def parent_edge_data(self, field: str, root: int) -> torch.Tensor:
        """(N,) int64, node order: the edge field ``edata[field]`` (``rel`` or ``pos``) of
        each node's edge to its parent, ``root`` at the roots; read from the schedule or
        DGL as :meth:`leaves`."""
        if field not in _SCHEDULED_EDGE_FIELDS:
            raise ValueError(f"parent_edge_data reads {sorted(_SCHEDULED_EDGE_FIELDS)}, "
                             f"not {field!r}")
        if not self._engine.scheduled:
            return _dgl_parent_edge_data(self.graph, field, root)
        lv = self.schedule.up
        child = lv.order.index_select(0, lv.edge_src)  # node ids, schedule edge order
        data = getattr(lv, _SCHEDULED_EDGE_FIELDS[field]).long()
        out = torch.full((lv.num_nodes,), root, dtype=torch.int64, device=lv.device)
        return out.index_put_((child,), data)

    def schedule_on(self, device: torch.device) -> LevelSchedule:
        """The schedule on ``device``, moved at most once per forward (a cell may run
        several recurrences on it)."""
        if self.schedule.device != device:
            self._schedule = self.schedule.to(device)
        return self._schedule

    def __call__(self, rec: Recurrence, /, **inputs: torch.Tensor) -> Parts:
        tensors = rec.order_inputs(inputs, f"{self.engine} engine")
        return rec.state_layout.unpack(self._engine.run(self, rec, tensors))
