r"""Child-Sum Tree-LSTM (Tai, Socher & Manning 2015, §3.1, eqs 2-8).

For node ``j`` with children ``C(j)`` and word vector ``x_j`` (every node has a word:
dependency trees, Tai's "Dependency Tree-LSTM")::

    h~_j  = Σ_{k∈C(j)} h_k                                   (eq 2)
    i_j   = σ(W^(i) x_j + U^(i) h~_j + b^(i))                (eq 3)
    f_jk  = σ(W^(f) x_j + U^(f) h_k  + b^(f))    k ∈ C(j)    (eq 4)
    o_j   = σ(W^(o) x_j + U^(o) h~_j + b^(o))                (eq 5)
    u_j   = tanh(W^(u) x_j + U^(u) h~_j + b^(u))             (eq 6)
    c_j   = i_j ⊙ u_j + Σ_{k∈C(j)} f_jk ⊙ c_k                (eq 7)
    h_j   = o_j ⊙ tanh(c_j)                                  (eq 8)

Leaves have no children, so ``h~_j = 0`` and the forget sum of eq 7 is 0. Unlike DGL's
Tree-LSTM example, the forget gate keeps the ``W^(f) x_j`` term of eq 4.

Without output gate (``output_gate=False``): eq 5 is dropped and eq 8 becomes
``h_j = tanh(c_j)``. This is the cell of Tai et al.'s semantic-relatedness (SICK) models: the
authors' Torch code (stanfordnlp/treelstm, ``relatedness/TreeLSTMSim.lua`` builds
``ChildSumTreeLSTM{gate_output = false}``; ``models/ChildSumTreeLSTM.lua``:
``h = nn.Tanh()(c)``), and Tai Table 1's relatedness parameter counts assume it. The gates
are laid out as N-ary's, with or without output gate (:mod:`gnn_treelstm.cells.gates`).

Parameters (the public mapping used by the reference implementation and the tests; see
:meth:`ChildSumTreeLSTM.paper_weights`): ``W_x`` (Linear ``x_size -> 4h`` holding all biases,
output rows in gate order ``i, o, u, f``), ``U_iou`` (Linear ``h -> 3h``, rows ``i, o, u``,
no bias), ``U_f`` (Linear ``h -> h``, no bias). Count: ``4h(x + h + 1)``; Tai Table 1 counts
``4h(x + h + 2)`` because the authors' Torch code gives both the ``W`` and the ``U`` layer of
every gate a bias (see :func:`gnn_treelstm.cells.sequential.num_params`).
With ``output_gate=False`` there are no output-gate parameters at all: ``W_x`` is
``x_size -> 3h`` (rows ``i, u, f``), ``U_iu`` (Linear ``h -> 2h``, rows ``i, u``) replaces
``U_iou`` (the different name makes code that expects the gated layout fail loudly), ``U_f``
is unchanged. Count: ``3h(x + h + 1)`` (Tai: ``3h(x + h + 2)``).

Propagation. Everything that depends only on the inputs, ``W x + b`` for all gates, is
one matrix product over all nodes before propagation (:func:`childsum_input_terms`). The
recurrence (:meth:`ChildSumTreeLSTM.recurrence`) sends ``h_k`` and ``f_jk ⊙ c_k`` per
child edge (:func:`childsum_forget_term`, eqs 2 and 4 and the summand of eq 7); the engine
sums them per node and :func:`childsum_node_update` applies eqs 3, 5-8. Both engines run
these functions; the level engine's fast kernels, the Triton kernels
(:func:`gnn_treelstm.kernels.fused_triton.childsum_levels`, CUDA) or the C++ loops in
float32 on the CPU (:func:`gnn_treelstm.kernels.fused.childsum_levels`), as the forward's
path says, are their acceleration, with or without output gate.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from gnn_treelstm.cells.base import TreeCell
from gnn_treelstm.cells.gates import OutputGateLayout, split_non_forget
from gnn_treelstm.cells.registry import cells
from gnn_treelstm.engine.propagator import Propagator
from gnn_treelstm.engine.recurrence import Recurrence
from gnn_treelstm.kernels import fused, fused_triton

__all__ = [
    "ChildSumTreeLSTM",
    "childsum_input_terms",
    "childsum_forget_term",
    "childsum_node_update",
]



# ---------------------------------------------------------------- plain-tensor math
def childsum_input_terms(x: torch.Tensor, W_x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``W^(*) x_j + b^(*)`` of eqs 3-6 for every node at once, gate order ``i, o, u, f``.

    ``x`` (N, x_size), ``W_x`` (4h, x_size), ``b`` (4h,) -> (N, 4h).
    """
    return F.linear(x, W_x, b)


def childsum_forget_term(
    h_child: torch.Tensor, c_child: torch.Tensor, fx_parent: torch.Tensor, U_f: torch.Tensor,
) -> torch.Tensor:
    """One row per child edge ``k -> j``: ``f_jk ⊙ c_k`` (E, h), the summand of eq 7.

    ``f_jk = σ(W^(f) x_j + b^(f) + U^(f) h_k)`` is eq 4; ``fx_parent`` is the parent's
    precomputed ``W^(f) x_j + b^(f)`` (E, h).
    """
    return torch.sigmoid(fx_parent + F.linear(h_child, U_f)) * c_child  # eqs 4, 7


def childsum_node_update(
    iou_x: torch.Tensor, h_tilde: torch.Tensor, fc_sum: torch.Tensor, U_iou: torch.Tensor,
    output_gate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs 3, 5-8 for a set of nodes.

    ``iou_x`` = ``W^(i,o,u) x_j + b^(i,o,u)`` (N, 3h), ``h_tilde`` = ``Σ_k h_k`` (N, h),
    ``fc_sum`` = ``Σ_k f_jk ⊙ c_k`` (N, h), ``U_iou`` (3h, h). Returns ``(h, c)``, (N, h) each.
    With ``output_gate=False`` the ``o`` rows are absent (``iou_x`` (N, 2h) and ``U_iou``
    (2h, h), rows ``i, u``), eq 5 is dropped and eq 8 is ``h_j = tanh(c_j)``.
    """
    iou = iou_x + F.linear(h_tilde, U_iou)  # (N, 3h) or (N, 2h) without output gate
    i, o, u = split_non_forget(iou, output_gate)  # (N, h) each; o None without output gate
    c = torch.sigmoid(i) * torch.tanh(u) + fc_sum  # eqs 3, 6, 7
    if o is None:
        return torch.tanh(c), c  # eq 8 without o_j (Tai's relatedness models)
    h = torch.sigmoid(o) * torch.tanh(c)  # eqs 5, 8
    return h, c


# ---------------------------------------------------------------- module
@cells.register("childsum")
class ChildSumTreeLSTM(OutputGateLayout, TreeCell):
    """Child-Sum Tree-LSTM (Tai et al. 2015, eqs 2-8): any number of unordered children.

    Args:
        x_size: node input size (word vector); ``x`` is read at every node.
        h_size: hidden / memory size ``d``.
        output_gate: keep the output gate (eqs 5, 8). ``False``: no output-gate parameters,
            ``h_j = tanh(c_j)``, as Tai et al.'s relatedness (SICK) models
            (stanfordnlp/treelstm ``gate_output = false``; Tai Table 1 relatedness counts).
        engine: ``"dgl"`` (``dgl.prop_nodes_topo``, the reference) or ``"level"``
            (:mod:`gnn_treelstm.engine.level`).
    """

    max_children = None
    uses_relations = False
    runs_top_down = False
    edge_fields = ()  # reads neither child positions nor relations
    tree_kinds = ("dependency", "constituency", "chain", "amr")

    def __init__(
        self, x_size: int, h_size: int, *, output_gate: bool = True, engine: str = "dgl",
    ) -> None:
        super().__init__(x_size, h_size, engine=engine)
        self.output_gate = bool(output_gate)
        h = self.h_size
        # rows i, o, u, f (i, u, f without output gate); holds the biases
        self.W_x = nn.Linear(self.x_size, len(self.gates) * h)
        self.add_non_forget_layer(h, h)  # U_iou, rows i, o, u (U_iu, rows i, u)
        self.U_f = nn.Linear(h, h, bias=False)
        self.reset_parameters()

    def _U_in(self) -> torch.Tensor:
        """The recurrent matrix of the non-forget gates, (3h, h) ``U_iou`` or (2h, h)
        ``U_iu``."""
        return self.non_forget_layer().weight

    def reset_parameters(self) -> None:
        """Every weight and bias uniform in ``±1/sqrt(h_size)`` (as ``torch.nn.LSTM``)."""
        bound = 1.0 / math.sqrt(self.h_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    # ------------------------------------------------------------ paper mapping
    def paper_weights(self) -> dict[str, torch.Tensor]:
        """The matrices and biases of eqs 3-6 by their paper names, as views of the
        parameters (gradients flow back): ``W_i, W_f, W_o, W_u`` (h, x), ``U_i, U_f, U_o,
        U_u`` (h, h), ``b_i, b_f, b_o, b_u`` (h,); without output gate no ``*_o``."""
        h = self.h_size
        out: dict[str, torch.Tensor] = {}
        for k, g in enumerate(self.gates):
            out[f"W_{g}"] = self.W_x.weight[k * h:(k + 1) * h]
            out[f"b_{g}"] = self.W_x.bias[k * h:(k + 1) * h]
        U_in = self._U_in()
        for k, g in enumerate(self.gates[:-1]):
            out[f"U_{g}"] = U_in[k * h:(k + 1) * h]
        out["U_f"] = self.U_f.weight
        return out

    # ------------------------------------------------------------ declaration
    def recurrence(self) -> Recurrence:
        """Eqs 2-8 as a summed recurrence: state ``h, c``; inputs ``iou`` (``W x + b`` of
        the non-forget gates, in the order of :attr:`gates`) and ``f`` (``W^(f) x + b^(f)``);
        message ``h`` (``h_k``, summed: ``h~_j``) and ``fc`` (``f_jk ⊙ c_k``, summed: the
        forget part of eq 7)."""
        h = self.h_size
        U_f, U_in, gated = self.U_f.weight, self._U_in(), self.output_gate

        def message(src, dst, rel):  # eq 2 summand, eq 4, eq 7 summand, per child edge
            return {"h": src.h, "fc": childsum_forget_term(src.h, src.c, dst.f, U_f)}

        def update(x, m):  # eqs 3, 5-8 (leaves: the summed messages are zeros)
            hj, cj = childsum_node_update(x.iou, m.h, m.fc, U_in, output_gate=gated)
            return {"h": hj, "c": cj}

        return Recurrence(state={"h": h, "c": h}, inputs=("iou", "f"), message=message,
                          msg={"h": h, "fc": h}, update=update)

    def input_terms(self, x: torch.Tensor) -> torch.Tensor:
        """``W x + b`` of every node, (N, 4h) (or (N, 3h) without output gate)."""
        return childsum_input_terms(x, self.W_x.weight, self.W_x.bias)

    def compute(self, prop: Propagator, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wx = self.input_terms(x)
        k = (len(self.gates) - 1) * self.h_size  # the i, o, u (i, u) columns; then f
        out = prop(self.recurrence(), iou=wx[:, :k], f=wx[:, k:])
        return out.h, out.c

    def level_kernel(self, prop: Propagator, x: torch.Tensor):
        """The level loops (with or without output gate) on the forward's path
        (:meth:`kernel_path`): the Triton kernels (:mod:`gnn_treelstm.kernels.fused_triton`;
        CUDA) or the C++ loops (:mod:`gnn_treelstm.kernels.fused`; float32 CPU)."""
        path = self.kernel_path(prop, x)
        if path == "general":
            return None
        loops = fused_triton.childsum_levels if path == "triton" else fused.childsum_levels
        lv = prop.schedule_on(x.device).up
        return loops(self.input_terms(x), self._U_in(), self.U_f.weight, lv)  # node order

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, output_gate={self.output_gate}"
