r"""A cell's recurrence, declared once and run by every engine.

A Tree-LSTM cell is three kinds of math (PyG's ``MessagePassing`` split, for trees):

* **input terms**: everything that depends only on a node's own input (``W x_j + b``),
  computed for all nodes at once by the cell, before propagation;
* **message**: what one source node (a child, or for top-down cells the parent) sends
  over its edge, as a function of the source's state, the receiving node's input terms
  and the edge's relation id; the engine sums the messages of a node's sources;
* **update**: the node's new state from its input terms and the aggregated messages.

The messages of a node's sources are aggregated by ``aggregate`` (PyTorch Geometric's
``MessagePassing(aggr=...)`` names): ``"sum"`` (the default, every Tree-LSTM of the papers),
``"mean"`` (the sum over the number of sources) or ``"max"`` (the element-wise maximum).
A node without sources (a leaf going up, a root going down) gets zeros under each of them.
The gradient of ``max`` goes to the maximal message of each element, split evenly between
equal maxima (``torch.amax``'s rule), on both engines.

Cells whose update needs its sources *by position* (N-ary, Teng & Zhang's binary cells)
declare ``slots=K`` and no message: the engine hands the update the sources' states
placed by child position, ``(n, K, width)`` per part, zeros where a position is empty.

**Everything is named.** A :class:`Recurrence` declares

* ``inputs``: the names of its per-node input tensors, given by name when it runs
  (``prop(rec, iou=..., f=...)``; any trailing shape and dtype, ``N`` rows in node order,
  so integer side information may sit beside the float input terms);
* ``state``: the parts of a node's state and their widths, e.g. ``{"h": H, "c": H}``;
* ``msg``: the parts of a message and their widths (summed recurrences; by default the
  state's, for a message that forwards the source's state).

Its two functions are plain-tensor math on :class:`Parts` (read ``src.h``, ``x.iou``) and
return a dict of parts::

    message(src, dst, rel) -> {"h": ..., "fc": ...}   # src: the source's state (E, ...)
                                                      # dst: the receiver's inputs (E, ...)
                                                      # rel: (E,) relation ids or None
    update(x, m) -> {"h": ..., "c": ...}              # x: the nodes' inputs (n, ...)
                                                      # m: summed messages (n, width) per
                                                      #    part, or the slotted sources'
                                                      #    states (n, K, width) per part

The engines keep a state (and a message) as one packed tensor, the parts side by side in
declaration order; :class:`Layout` unpacks it into views and packs a function's result
once per level (a message that returns its ``src`` unchanged is not copied). The functions
never see the packing, and a fast kernel may still consume the packed tensors. A complete
new cell, with its per-node reference and test, is the "Write a cell" page of the
documentation (``docs/write-a-cell.md``).

The engines run a recurrence: :func:`gnn_treelstm.engine.dgl_engine.propagate` as
message / built-in ``sum`` / apply under ``dgl.prop_nodes_topo``,
:func:`gnn_treelstm.engine.level.propagate` level by level on a precomputed schedule with
autograd; :class:`gnn_treelstm.engine.propagator.Propagator` picks one by name. A fast
kernel (C++ level loops with a hand-written backward) is an optional acceleration that a
cell names beside its declaration (:meth:`gnn_treelstm.cells.base.TreeCell.level_kernel`);
one registry-wide test checks that every kernel equals the declaration it accelerates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch

__all__ = ["Recurrence", "Parts", "Layout", "DIRECTIONS", "AGGREGATIONS", "lazy_parts"]

DIRECTIONS = ("up", "down")
#: how a node's messages are aggregated (:attr:`Recurrence.aggregate`)
AGGREGATIONS = ("sum", "mean", "max")

#: per-node input tensors in the order of :attr:`Recurrence.inputs` (the engines' form)
Inputs = tuple[torch.Tensor, ...]
#: ``message(src (Parts of (E, w)), dst (Parts of the receivers' inputs, (E, ...)),
#: rel (E,) or None) -> {part: (E, w)}``
Message = Callable[["Parts", "Parts", "torch.Tensor | None"], Mapping[str, torch.Tensor]]
#: ``update(x (Parts of the nodes' inputs, (n, ...)), m (Parts: summed messages (n, w) or
#: slotted source states (n, K, w))) -> {part: (n, w)}``
Update = Callable[["Parts", "Parts"], Mapping[str, torch.Tensor]]


def _check_name(name: object, who: str) -> str:
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"{who}: part name {name!r} must be a Python identifier that does "
                         "not start with '_' (it is read as an attribute, e.g. src.h)")
    return name


class Parts:
    """Named tensors with the same rows: read a part as an attribute (``src.h``) or an
    item (``src["h"]``); iterating gives the names, ``"h" in parts`` tests one.

    What a recurrence's functions receive. ``Parts(h=h, c=c)`` (or a plain dict) is what
    they may return. Parts has no public methods, so any identifier is a valid part name.
    """

    __slots__ = ("_items", "_packed", "_layout")

    def __init__(self, items: Mapping[str, torch.Tensor] | None = None, /,
                 **parts: torch.Tensor) -> None:
        self._items: dict[str, torch.Tensor] = {**(items or {}), **parts}
        self._packed: torch.Tensor | None = None  # the packed tensor these parts view
        self._layout: Layout | None = None

    def __getattr__(self, name: str) -> torch.Tensor:
        if name.startswith("_"):  # slots not set yet (copy, pickle): not a part
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(str(e.args[0])) from None

    def __getitem__(self, name: str) -> torch.Tensor:
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"no part {name!r} here; the parts are: "
                           f"{', '.join(self) or 'none'}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={tuple(self._items[k].shape)}" if k in self._items
                           else f"{k}=<not read>" for k in self)
        return f"Parts({shapes})"


class _LazyParts(Parts):
    """Parts read on first use from ``fetch(name)``: the engines' per-edge input gathers,
    so that a message pays only for the inputs it reads."""

    __slots__ = ("_names", "_fetch")

    def __init__(self, names: tuple[str, ...], fetch: Callable[[str], torch.Tensor]) -> None:
        super().__init__()
        self._names = names
        self._fetch = fetch

    def __getitem__(self, name: str) -> torch.Tensor:
        got = self._items.get(name)
        if got is None:
            if name not in self._names:
                raise KeyError(f"no part {name!r} here; the parts are: "
                               f"{', '.join(self._names) or 'none'}")
            got = self._items[name] = self._fetch(name)
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


def lazy_parts(names: tuple[str, ...], fetch: Callable[[str], torch.Tensor]) -> Parts:
    """:class:`Parts` named ``names`` whose part ``k`` is ``fetch(k)``, called on first read
    (at most once per part)."""
    return _LazyParts(names, fetch)


class Layout:
    """Named parts side by side along the last dimension of one packed tensor.

    ``Layout({"h": 3, "c": 3}, who)``: :meth:`unpack` turns a packed ``(..., 6)`` tensor into
    :class:`Parts` of views (``h = t[..., 0:3]``, ``c = t[..., 3:6]``; no copy),
    :meth:`pack` concatenates a function's named result in declaration order (one
    ``torch.cat``; none for a single part or for unpacked parts returned unchanged).
    """

    __slots__ = ("names", "widths", "width", "who", "_bounds")

    def __init__(self, widths: Mapping[str, int], who: str) -> None:
        if not isinstance(widths, Mapping) or not widths:
            raise ValueError(f"{who}: declare the parts as a non-empty mapping of names to "
                             f"widths, e.g. {{'h': 64, 'c': 64}}; got {widths!r}")
        self.who = who
        self.names = tuple(_check_name(k, who) for k in widths)
        ws = []
        for k, w in widths.items():
            if isinstance(w, bool) or not isinstance(w, int) or w <= 0:
                raise ValueError(f"{who}: the width of part {k!r} must be a positive int, "
                                 f"got {w!r}")
            ws.append(int(w))
        self.widths = tuple(ws)
        self.width = sum(ws)
        offsets = [0]
        for w in ws:
            offsets.append(offsets[-1] + w)
        # (start, end) of each part as ints: torch 2.4's Dynamo reads a tuple of ints, not
        # one of slice objects, as a constant
        self._bounds = tuple(zip(offsets[:-1], offsets[1:]))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Layout) and self.names == other.names
                and self.widths == other.widths)

    def __hash__(self) -> int:
        return hash((self.names, self.widths))

    def __repr__(self) -> str:
        return "Layout(" + ", ".join(f"{k}={w}" for k, w in zip(self.names, self.widths)) + ")"

    def unpack(self, t: torch.Tensor) -> Parts:
        """Views of the parts of ``t`` (``(..., width)``), each ``(..., part width)``."""
        if len(self.names) == 1:
            parts = Parts({self.names[0]: t})
        else:
            parts = Parts({k: t[..., a:b] for k, (a, b) in zip(self.names, self._bounds)})
        parts._packed, parts._layout = t, self
        return parts

    def pack(self, parts: Mapping[str, torch.Tensor] | Parts) -> torch.Tensor:
        """One ``(..., width)`` tensor of ``parts`` (every declared part, each of its width)."""
        if isinstance(parts, Parts) and parts._packed is not None and parts._layout == self:
            return parts._packed  # returned unchanged: no copy
        # a tuple, not ``Mapping | Parts``: torch 2.4's Dynamo cannot trace a union type
        if not isinstance(parts, (Mapping, Parts)):  # noqa: UP038
            raise TypeError(f"{self.who} must return its parts by name (a dict or Parts "
                            f"with {', '.join(self.names)}), got {type(parts).__name__}")
        if len(parts) != len(self.names) or any(k not in parts for k in self.names):
            raise ValueError(f"{self.who} returned the parts {sorted(parts)}; the recurrence "
                             f"declares {list(self.names)}")
        tensors = [parts[k] for k in self.names]
        for k, w, t in zip(self.names, self.widths, tensors):
            if t.shape[-1] != w:
                raise ValueError(f"{self.who} returned part {k!r} of shape {tuple(t.shape)}; "
                                 f"the recurrence declares its width {w}")
        return tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim=-1)


@dataclass(frozen=True, kw_only=True)
class Recurrence:
    """One propagation over a forest of trees (see the module docstring).

    Attributes:
        state: the parts of a node's state and their widths, e.g. ``{"h": H, "c": H}``.
        inputs: the names of the per-node inputs (``prop(rec, name=tensor, ...)``).
        update: the node update (see :data:`Update`).
        message: the per-edge summand (see :data:`Message`); ``None`` for slotted cells.
        msg: the parts of a message and their widths (summed cells); default: ``state``.
        slots: number of source positions ``K`` (slotted cells; the edge's
            ``edata['pos']`` picks the slot).
        direction: ``"up"`` (children -> parent, leaves first) or ``"down"`` (parent ->
            children, roots first; the slot is the node's own position under its parent).
        uses_rel: the message reads the edge's relation id (``edata['rel']``).
        aggregate: how a node's messages are combined (message recurrences): ``"sum"``,
            ``"mean"`` or ``"max"``, element-wise; zeros where a node has no sources.
    """

    state: Mapping[str, int]
    inputs: Sequence[str]
    update: Update
    message: Message | None = None
    msg: Mapping[str, int] | None = None
    slots: int = 0
    direction: str = "up"
    uses_rel: bool = False
    aggregate: str = "sum"
    #: the packed layout of a state
    state_layout: Layout = field(init=False, repr=False, compare=False)
    #: what the update receives: the message layout (summed) or the state's (slotted)
    source_layout: Layout = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"Recurrence: direction {self.direction!r} not in {DIRECTIONS}")
        if (self.message is None) == (self.slots <= 0):
            raise ValueError("Recurrence: declare either a message (summed sources) or "
                             "slots=K (sources by position), not both or neither")
        if self.aggregate not in AGGREGATIONS:
            raise ValueError(f"Recurrence: aggregate {self.aggregate!r} not in {AGGREGATIONS}")
        if self.message is None and self.aggregate != "sum":
            raise ValueError("Recurrence: aggregate applies to messages; a slotted recurrence "
                             "gets its sources by position (leave aggregate='sum')")
        if self.message is None and self.msg is not None:
            raise ValueError("Recurrence: msg declares a message's parts, but there is no "
                             "message (slotted recurrences get the sources' states)")
        names = (self.inputs,) if isinstance(self.inputs, str) else tuple(self.inputs)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"Recurrence: inputs must name one or more distinct per-node "
                             f"inputs, e.g. inputs=('x',); got {self.inputs!r}")
        for k in names:
            _check_name(k, "Recurrence inputs")
        object.__setattr__(self, "inputs", names)
        state = Layout(self.state, "Recurrence update")
        object.__setattr__(self, "state_layout", state)
        if self.message is None:  # slotted: the update gets the sources' states
            src = state
        else:  # summed: the update gets the summed messages (by default, states forwarded)
            src = Layout(self.state if self.msg is None else self.msg, "Recurrence message")
        object.__setattr__(self, "source_layout", src)

    @property
    def width(self) -> int:
        """Width of the packed state (the sum of the state's parts)."""
        return self.state_layout.width

    # ------------------------------------------------------------ used by the engines
    def sources(self, like: torch.Tensor, n: int) -> torch.Tensor:
        """The packed sources of ``n`` nodes that have none (leaves going up, roots going
        down): zeros of the shape the update receives, ``(n, msg width)`` or
        ``(n, K, width)``."""
        if self.message is not None:
            return like.new_zeros(n, self.source_layout.width)
        return like.new_zeros(n, self.slots, self.width)

    def run_message(self, src: torch.Tensor, dst: Parts, rel: torch.Tensor | None
                    ) -> torch.Tensor:
        """The packed messages ``(E, msg width)`` from the packed source states ``src``."""
        return self.source_layout.pack(self.message(self.state_layout.unpack(src), dst, rel))

    def run_update(self, x: Parts, sources: torch.Tensor) -> torch.Tensor:
        """The packed new states ``(n, width)`` from the packed sources
        (:meth:`sources`' shape)."""
        return self.state_layout.pack(self.update(x, self.source_layout.unpack(sources)))

    def input_parts(self, tensors: Sequence[torch.Tensor]) -> Parts:
        """The inputs (in :attr:`inputs` order) by name."""
        return Parts(dict(zip(self.inputs, tensors)))

    def order_inputs(self, given: Mapping[str, torch.Tensor], who: str) -> Inputs:
        """The named inputs as a tuple in :attr:`inputs` order, checked: every declared
        name, nothing else, tensors with the same number of rows."""
        if set(given) != set(self.inputs):
            missing = [k for k in self.inputs if k not in given]
            extra = sorted(k for k in given if k not in self.inputs)
            raise ValueError(f"{who}: the recurrence's inputs are {list(self.inputs)}; "
                             f"missing {missing}, not declared {extra}")
        tensors = tuple(given[k] for k in self.inputs)
        for k, t in zip(self.inputs, tensors):
            if not isinstance(t, torch.Tensor) or t.dim() == 0:
                raise ValueError(f"{who}: input {k!r} must be a tensor with one row per "
                                 f"node, got {type(t).__name__}")
            if t.shape[0] != tensors[0].shape[0]:
                raise ValueError(f"{who}: input {k!r} has {t.shape[0]} rows, input "
                                 f"{self.inputs[0]!r} has {tensors[0].shape[0]}; every "
                                 "input has one row per node")
        return tensors
