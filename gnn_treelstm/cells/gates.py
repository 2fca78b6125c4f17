"""The output-gate layout that Child-Sum and N-ary share (Tai et al. 2015, §3.1-3.2).

With the output gate (the default) a cell's input layer ``W_x`` has the rows of the gates
``i, o, u, f`` (:func:`gate_order`) and its recurrent layer of the non-forget gates is
``U_iou`` (rows ``i, o, u``). Without it (``output_gate=False``: Tai et al.'s
semantic-relatedness models, ``h_j = tanh(c_j)``) there are no output-gate parameters at
all: ``W_x`` has the rows ``i, u, f`` and the recurrent layer is ``U_iu`` (rows ``i, u``),
named apart so that code expecting the gated layout fails loudly. The equations that read
the gates are written in each cell's file; this module only lays the gates out.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["OutputGateLayout", "gate_order", "split_non_forget"]


def gate_order(output_gate: bool) -> str:
    """The gates in the order of the rows of ``W_x``: ``"iouf"``, or ``"iuf"`` without
    output gate; all but the last (``f``) are the non-forget gates."""
    return "iouf" if output_gate else "iuf"


def split_non_forget(
    pre: torch.Tensor, output_gate: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The pre-activations of the non-forget gates, (n, 3h) in order ``i, o, u``, as
    ``(i, o, u)``, (n, h) each; without output gate (n, 2h) in order ``i, u``, and ``o`` is
    ``None``."""
    if output_gate:
        i, o, u = torch.chunk(pre, 3, dim=-1)  # 3 x (n, h)
        return i, o, u
    i, u = torch.chunk(pre, 2, dim=-1)  # 2 x (n, h)
    return i, None, u


class OutputGateLayout:
    """Mixed into a cell that has an ``output_gate`` attribute (Child-Sum, N-ary): its
    gate order (:attr:`gates`) and its recurrent layer of the non-forget gates, ``U_iou``
    or ``U_iu`` (:meth:`add_non_forget_layer`, :meth:`non_forget_layer`)."""

    output_gate: bool

    @property
    def gates(self) -> str:
        """Gate order of the rows of ``W_x``: ``"iouf"``, or ``"iuf"`` without output gate."""
        return gate_order(self.output_gate)

    @property
    def non_forget_name(self) -> str:
        """The attribute of the recurrent layer of the non-forget gates."""
        return "U_iou" if self.output_gate else "U_iu"

    def add_non_forget_layer(self, in_size: int, h_size: int) -> None:
        """Create that layer, ``in_size -> (len(gates) - 1) * h_size``, no bias."""
        layer = nn.Linear(in_size, (len(self.gates) - 1) * h_size, bias=False)
        setattr(self, self.non_forget_name, layer)

    def non_forget_layer(self) -> nn.Linear:
        """The recurrent layer of the non-forget gates, ``U_iou`` or ``U_iu``."""
        return getattr(self, self.non_forget_name)
