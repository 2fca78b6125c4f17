"""The interface every Tree-LSTM cell implements, and the one forward preamble they share.

A cell declares its math once, in its own file: plain-tensor functions (input terms, the
per-edge message, the node update; equation numbers in their docstrings) bundled into
:class:`~gnn_treelstm.engine.recurrence.Recurrence` objects that name their inputs and the
parts of their state and messages (``state={"h": H, "c": H}``; the functions read
``src.h``, ``x.iou`` and return ``{"h": ..., "c": ...}``; the engines pack and unpack).

:meth:`TreeCell.forward` validates the input, then hands the cell a
:class:`~gnn_treelstm.engine.propagator.Propagator` for its engine (a name in
:data:`~gnn_treelstm.engine.propagator.ENGINES`); the cell's :meth:`TreeCell.compute`
computes its input terms and runs its recurrences through it,
``out = prop(rec, iou=..., f=...)``, reading the states by name (``out.h``, ``out.c``). So
the DGL engine (``dgl.prop_nodes_topo``) and the level engine (precomputed schedule) run
the same declared functions. A cell may also name a fast kernel
(:meth:`TreeCell.level_kernel`, the C++ loops of :mod:`gnn_treelstm.kernels.fused`) used
where the engine allows it (``Engine.kernels``; the level engine) and it applies;
:attr:`TreeCell.has_kernel` tells whether a cell names one, and the registry-wide test
holds every kernel to its declaration.
"""

from __future__ import annotations

import numbers
import weakref
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import dgl
import torch
from torch import nn

from gnn_treelstm.eager import eager
from gnn_treelstm.engine.propagator import ENGINES, Propagator
from gnn_treelstm.kernels import backend
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.schedule import LevelSchedule

__all__ = ["TreeCell"]


#: batches a cell remembers as checked (a pair model runs its cell on two graphs a step)
_SEEN_PER_CELL = 4


class _Seen:
    """What :meth:`TreeCell.check_input` (and the schedule check) read of a forward's
    arguments, held so that a second forward on the same, unchanged batch skips the checks:
    the graph (by identity, and its structure object, which DGL replaces when edges are
    added or removed), every node and edge field by identity and version counter (a new
    tensor or an in-place write shows), ``x``'s shape and dtype, the cell's parameter
    dtype and the schedule (by identity). Anything else: checked again."""

    __slots__ = ("graph", "index", "fields", "meta", "schedule")

    def __init__(self, graph, index, fields, meta, schedule) -> None:
        self.graph, self.index, self.fields = graph, index, fields
        self.meta, self.schedule = meta, schedule

    @classmethod
    def of(cls, cell: nn.Module, graph, x, schedule) -> _Seen | None:
        """The record of this forward (``None``: not a graph and a tensor, checked as
        usual)."""
        if not isinstance(graph, dgl.DGLGraph) or not isinstance(x, torch.Tensor):
            return None
        fields = tuple((name, t, t._version) for view in G.field_views(graph)
                       for name, t in ((k, view[k]) for k in view.keys())
                       if isinstance(t, torch.Tensor))
        dtype = next((p.dtype for p in cell.parameters() if p.is_floating_point()), None)
        meta = (x.shape, x.dtype, x.device, dtype)
        return cls(weakref.ref(graph), graph._graph, fields, meta, schedule)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Seen):
            return NotImplemented
        return (self.graph() is other.graph() and self.graph() is not None
                and self.index is other.index and self.schedule is other.schedule
                and self.meta == other.meta and len(self.fields) == len(other.fields)
                and all(ka == kb and a is b and va == vb
                        for (ka, a, va), (kb, b, vb) in zip(self.fields, other.fields)))

    __hash__ = None  # type: ignore[assignment]


#: per cell, the batches it checked last (:class:`_Seen`)
_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class TreeCell(nn.Module):
    """Base class of all cells.

    ``forward(graph, x, schedule=None, **kw)`` takes a (batched) tree graph built to
    :mod:`gnn_treelstm.trees.graph`'s schema and node inputs ``x`` of shape
    ``(num_nodes, x_size)`` and returns per-node states ``(h, c)``, ``h`` of shape
    ``(num_nodes, out_size)``. It never mutates ``graph``. Subclasses implement
    :meth:`compute` (their math: input terms, then their
    :class:`~gnn_treelstm.engine.recurrence.Recurrence` run through the
    :class:`~gnn_treelstm.engine.propagator.Propagator`) and may implement
    :meth:`level_kernel` (a fast path of the level engine; :attr:`has_kernel`).
    ``engine`` is the name of the cell's engine in
    :data:`~gnn_treelstm.engine.propagator.ENGINES`.

    Class attributes describe what the cell needs, so callers can refuse a model/tree
    combination before training: ``max_children`` (None = any), ``uses_relations``
    (reads ``edata['rel']``), ``edge_fields`` (edge fields it reads), ``reads_words``
    (reads ``x`` only where ``ndata['word'] != NO_WORD``), ``tree_kinds`` (trees the cell
    is meant for), ``runs_top_down`` (reads the level schedule's top-down levels: the data
    loader builds them for its batches; a cell that never does says False, and its batches
    go without them).

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
    runs_top_down: bool = True

    def __init__(self, x_size: int, h_size: int, *, engine: str = "dgl") -> None:
        super().__init__()
        for name, size in (("x_size", x_size), ("h_size", h_size)):
            if not isinstance(size, numbers.Integral) or isinstance(size, bool):
                raise ValueError(f"{name} must be an integer, got {size!r} "
                                 f"({type(size).__name__})")
        if x_size <= 0 or h_size <= 0:
            raise ValueError(f"x_size and h_size must be positive, got {x_size} and {h_size}")
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
        self.x_size = int(x_size)
        self.h_size = int(h_size)
        self.engine = engine

    @property
    def out_size(self) -> int:
        """Size of the per-node output ``h`` (e.g. 2*h_size for bidirectional cells)."""
        return self.h_size

    @property
    def sentence_size(self) -> int:
        """Size of the rows of ``sentence_vector`` (B, sentence_size), for the cells that
        build their own sentence vector: ``out_size`` unless the cell says otherwise (a cell
        whose sentence vector has another width overrides this property)."""
        return self.out_size

    def reset_parameters(self) -> None:
        """(Re)initialise every parameter. This default resets each submodule that has a
        ``reset_parameters`` (``nn.Linear``, ``nn.Embedding``, ...: PyTorch's own
        initialisation); cells with an initialisation of their own override it, and
        constructors end by calling it."""
        for module in self.children():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()

    # ------------------------------------------------------------ the one preamble
    def forward(self, graph: dgl.DGLGraph, x: torch.Tensor, schedule: LevelSchedule | None = None,
                **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """Validate, then run the cell's math with its engine; returns ``(h, c)``."""
        prop = self._prepare(graph, x, schedule, kwargs)
        # once per forward: Triton, C++ loops or general (kept as prop.path)
        if prop.kernels and self.kernel_path(prop, x) != "general":
            fast = self.level_kernel(prop, x, **kwargs)
            if fast is not None:
                return fast
        return self.compute(prop, x, **kwargs)

    @eager(reason="host-side input checks and level schedule, run eagerly")
    def _prepare(self, graph: dgl.DGLGraph, x: torch.Tensor, schedule: LevelSchedule | None,
                 kwargs: dict) -> Propagator:
        """The preamble of :meth:`forward`: validate the input, and bind the engine to the
        graph (the level engine builds its schedule here unless one is given). A batch
        this cell checked before, unchanged since (:class:`_Seen`), is not checked again."""
        seen = _Seen.of(self, graph, x, schedule)
        checked = seen is not None and any(seen == s for s in _CHECKED.get(self, ()))
        if not checked:
            self.check_input(graph, x)
        self.check_kwargs(graph, **kwargs)
        prop = Propagator(self.engine, graph, schedule, who=type(self).__name__,
                          check=not checked)
        prop.prepare()
        if not checked and seen is not None:
            _CHECKED[self] = [seen, *_CHECKED.get(self, ())][:_SEEN_PER_CELL]
        return prop

    def compute(self, prop: Propagator, x: torch.Tensor, **kwargs
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """The cell's math: input terms, then its recurrences through ``prop``."""
        raise NotImplementedError

    def level_kernel(self, prop: Propagator, x: torch.Tensor, **kwargs
                     ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """An optional fast path of the level engine (``None``: none applies here, the
        general level driver runs :meth:`compute`). A cell that has one overrides this
        method (:attr:`has_kernel`), and runs the Triton kernels or the C++ loops as
        :meth:`kernel_path` says: every cell's the same way, the choice made once per
        forward by :mod:`gnn_treelstm.kernels.backend`."""
        return None

    @staticmethod
    def kernel_path(prop: Propagator, x: torch.Tensor) -> str:
        """The level engine's path for this forward, ``"triton"``, ``"loops"`` or
        ``"general"`` (:func:`gnn_treelstm.kernels.backend.path`): ``prop.path``, which
        :meth:`forward` sets once per forward; decided here for a propagator made by hand."""
        if prop.path is None:
            prop.path = backend.path(x)
        return prop.path

    @property
    def has_kernel(self) -> bool:
        """Whether the cell names a fast kernel (overrides :meth:`level_kernel`); where one
        applies (float32 on the CPU, the library built) it must return states."""
        return type(self).level_kernel is not TreeCell.level_kernel

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
        self._check_place(graph, x, params)
        tree_kw.setdefault("edge_fields", self.edge_fields)
        G.validate_tree(graph, who=name, **tree_kw)
        if x.shape[0] != graph.num_nodes():
            raise ValueError(
                f"{name}: x has {x.shape[0]} rows but the graph has {graph.num_nodes()} nodes"
            )
        if self.reads_words:
            G.check_words(graph, who=name)

    def _check_place(self, graph: dgl.DGLGraph, x: torch.Tensor, params: list) -> None:
        """``x``, the cell's parameters and the graph on one device, and a dtype the engine
        takes there; ``ValueError`` naming both sides and the fix."""
        name = type(self).__name__
        if params and x.device != params[0].device:
            raise ValueError(f"{name}: x is on {x.device} but the cell's parameters are on "
                             f"{params[0].device}; move one of them (e.g. cell.to(x.device))")
        if self.engine == "dgl" and graph.device != x.device:  # DGL's kernels need one device
            raise ValueError(f"{name}: x is on {x.device} but the graph is on {graph.device}; "
                             f"move the graph (graph.to(x.device))")
        if self.engine == "dgl" and x.device.type == "cpu" and x.dtype == torch.float16:
            raise ValueError(f"{name}: the dgl engine on the CPU takes float32, float64 or "
                             "bfloat16 features (DGL's CPU kernels), not float16; use "
                             "engine='level', or convert with cell.float() and x.float()")

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
