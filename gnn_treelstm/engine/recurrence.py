r"""A cell's recurrence, declared once and run by every engine.

A Tree-LSTM cell is three kinds of math (PyG's ``MessagePassing`` split, for trees):

* **input terms**: everything that depends only on a node's own input (``W x_j + b``),
  computed for all nodes at once by the cell, before propagation;
* **message**: what one source node (a child, or for top-down cells the parent) sends
  over its edge, as a function of the source's state, the receiving node's input terms
  and the edge's relation id; the engine sums the messages of a node's sources;
* **update**: the node's new state from its input terms and the summed messages.

Cells whose update needs its sources *by position* (N-ary, Teng & Zhang's binary cells)
declare ``slots=K`` and no message: the engine hands the update the sources' states
placed by child position, ``(n, K, width)``, zeros where a position is empty.

A :class:`Recurrence` holds those plain-tensor functions (written in the cell's file,
with the paper's equation numbers) and the state width. The engines run it:
:func:`gnn_treelstm.engine.dgl_engine.propagate` as message / built-in ``sum`` / apply
under ``dgl.prop_nodes_topo``, :func:`gnn_treelstm.engine.level.propagate` level by level
on a precomputed schedule with autograd. A fast kernel (C++ level loops with a
hand-written backward) is an optional acceleration that a cell names beside its
declaration (:meth:`gnn_treelstm.cells.base.TreeCell.level_kernel`); one registry-wide
test checks that every kernel equals the declaration it accelerates.

Inputs of a recurrence are a tuple of per-node tensors (all with ``N`` rows in node
order), so a cell may pass integer side information (e.g. the side of a node under its
parent) next to its float input terms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Recurrence", "DIRECTIONS"]

DIRECTIONS = ("up", "down")

Inputs = tuple[torch.Tensor, ...]
#: ``message(src_state (E, width), dst_inputs (tuple of (E, ...)), rel (E,) or None) -> (E, M)``
Message = Callable[[torch.Tensor, Inputs, "torch.Tensor | None"], torch.Tensor]
#: ``update(inputs (tuple of (n, ...)), sources) -> state (n, width)``; ``sources`` is the
#: summed messages ``(n, M)`` or the slotted source states ``(n, K, width)``
Update = Callable[[Inputs, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Recurrence:
    """One propagation over a forest of trees.

    Attributes:
        width: size of the per-node state that sources send (e.g. ``2h`` for ``[h ; c]``).
        update: the node update (see :data:`Update`).
        message: the per-edge summand (see :data:`Message`); ``None`` for slotted cells.
        msg_width: size ``M`` of a message (summed cells).
        slots: number of source positions ``K`` (slotted cells; the edge's
            ``edata['pos']`` picks the slot).
        direction: ``"up"`` (children -> parent, leaves first) or ``"down"`` (parent ->
            children, roots first; the slot is the node's own position under its parent).
        uses_rel: the message reads the edge's relation id (``edata['rel']``).
    """

    width: int
    update: Update
    message: Message | None = None
    msg_width: int = 0
    slots: int = 0
    direction: str = "up"
    uses_rel: bool = False

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"Recurrence: direction {self.direction!r} not in {DIRECTIONS}")
        if (self.message is None) == (self.slots <= 0):
            raise ValueError("Recurrence: declare either a message (summed sources) or "
                             "slots=K (sources by position), not both or neither")
        if self.message is not None and self.msg_width <= 0:
            raise ValueError("Recurrence: a message needs msg_width > 0")

    def sources(self, like: torch.Tensor, n: int) -> torch.Tensor:
        """The sources of ``n`` nodes that have none (leaves going up, roots going down):
        zeros of the shape ``update`` receives."""
        if self.message is not None:
            return like.new_zeros(n, self.msg_width)
        return like.new_zeros(n, self.slots, self.width)
