r"""N-ary Tree-LSTM (Tai, Socher & Manning 2015, §3.2, eqs 9-14), any N.

Children are ordered: the child at position ``ℓ`` (``graph.edata["pos"]``, 0-based here,
1-based in the paper) of node ``j`` has states ``h_jℓ, c_jℓ``; a node with fewer than ``N``
children has zeros at the missing positions. For node ``j``::

    i_j   = σ(W^(i) x_j + Σ_ℓ U^(i)_ℓ h_jℓ + b^(i))                      (eq 9)
    f_jk  = σ(W^(f) x_j + Σ_ℓ U^(f)_kℓ h_jℓ + b^(f))    k = 1..N          (eq 10)
    o_j   = σ(W^(o) x_j + Σ_ℓ U^(o)_ℓ h_jℓ + b^(o))                      (eq 11)
    u_j   = tanh(W^(u) x_j + Σ_ℓ U^(u)_ℓ h_jℓ + b^(u))                   (eq 12)
    c_j   = i_j ⊙ u_j + Σ_ℓ f_jℓ ⊙ c_jℓ                                   (eq 13)
    h_j   = o_j ⊙ tanh(c_j)                                               (eq 14)

``x_j`` enters only where the node has a word (``ndata["word"] != NO_WORD``); elsewhere the
``W x_j`` terms are absent (Tai §3.2: "in Constituency Tree-LSTMs, a node j receives an input
vector x_j only if it is a leaf node"), so rows of ``x`` for nodes without a word are ignored.
The biases are always there. Consequence: on constituency trees (words only at leaves, and
leaves have no children) ``W^(f)`` never influences anything and gets no gradient; it is kept
because eq 10 has it and a word-bearing internal node (e.g. a chain) uses it.

Without output gate (``output_gate=False``): eq 11 is dropped and eq 14 becomes
``h_j = tanh(c_j)``, as in Tai et al.'s semantic-relatedness (SICK) models: the authors'
Torch code (stanfordnlp/treelstm, ``relatedness/TreeLSTMSim.lua`` builds
``BinaryTreeLSTM{gate_output = false}``), and Tai Table 1's relatedness counts assume it.
The gates are laid out as Child-Sum's, with or without output gate
(:mod:`gnn_treelstm.cells.gates`).

Forget-gate parameterisation: by default the full set of ``N x N`` matrices ``U^(f)_kℓ``
(eq 10, with the "off-diagonal" ``k ≠ ℓ`` terms). With ``tie_forget=True`` — Tai: "for large
values of N, these additional parameters are impractical and may be tied or fixed to zero" —
the off-diagonal matrices are tied to one shared matrix ``U^(f)_off`` while each position
keeps its own diagonal ``U^(f)_kk``: ``(N + 1) h²`` parameters instead of ``N² h²``.

Parameters (see :meth:`NaryTreeLSTM.paper_weights` for the mapping to the paper's names):
``W_x`` (Linear ``x -> 4h`` with all biases, rows ``i, o, u, f``); untied: ``U`` (Linear
``N h -> (3 + N) h``, no bias; input columns ``[h_j1 ; ... ; h_jN]``, output rows
``i, o, u, f_1, ..., f_N``); tied: ``U_iou`` (Linear ``N h -> 3h``), ``U_f_diag``
(``N x h x h``) and ``U_f_off`` (Linear ``h -> h``). With ``output_gate=False`` there are no
output-gate parameters at all: ``W_x`` is ``x -> 3h`` (rows ``i, u, f``), ``U`` is
``N h -> (2 + N) h`` (rows ``i, u, f_1, ..., f_N``) and, tied, ``U_iu`` (Linear
``N h -> 2h``, rows ``i, u``) replaces ``U_iou``. Count ``4h(x + 1) + 3N h²`` plus the forget
matrices (``N² h²``, tied ``(N + 1) h²``); ``3h(x + 1) + 2N h²`` plus them without output gate.
Tai's Table 1 count for the Constituency Tree-LSTM differs by more than biases: the authors'
``BinaryTreeLSTM`` has a separate leaf module ``c = W_c x + b`` (no ``W^(i), W^(f)`` on words),
see :func:`gnn_treelstm.cells.sequential.num_params`.

Propagation. ``W x + b`` for all nodes is one matrix product before propagation
(:meth:`NaryTreeLSTM.input_terms`). The recurrence (:meth:`NaryTreeLSTM.recurrence`) is
slotted: each child's state ``h_k, c_k`` goes to the slot of its position, so the node
update (:meth:`NaryTreeLSTM.node_update` = :meth:`~NaryTreeLSTM.child_terms` +
:func:`nary_gates`) gets every node's children ordered by position, zeros at the missing
ones, ``(n, N, h)`` each.
Both engines run these functions; the level engine's fast kernels, input products inside,
the Triton kernels (:func:`gnn_treelstm.kernels.fused_triton.nary_levels`, CUDA) or the C++
loops in float32 on the CPU (:func:`gnn_treelstm.kernels.fused.nary_levels`), as the
forward's path says, are their acceleration, with or without output gate.
"""

from __future__ import annotations

import math

import dgl
import torch
from torch import nn
from torch.nn import functional as F

from gnn_treelstm.cells.base import TreeCell
from gnn_treelstm.cells.gates import OutputGateLayout, gate_order, split_non_forget
from gnn_treelstm.cells.registry import cells
from gnn_treelstm.engine.propagator import Propagator
from gnn_treelstm.engine.recurrence import Recurrence
from gnn_treelstm.kernels import fused, fused_triton
from gnn_treelstm.trees import graph as G

__all__ = ["NaryTreeLSTM", "nary_gates"]



# ---------------------------------------------------------------- plain-tensor math
def nary_gates(
    wx: torch.Tensor, iou_h: torch.Tensor, f_h: torch.Tensor, c_kids: torch.Tensor,
    output_gate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs 9-14 from their pieces.

    ``wx`` = ``W x_j + b`` (n, 4h) in gate order ``i, o, u, f`` (``W x_j`` = 0 where the node
    has no word); ``iou_h`` = ``Σ_ℓ U^(i,o,u)_ℓ h_jℓ`` (n, 3h); ``f_h`` = ``Σ_ℓ U^(f)_kℓ h_jℓ``
    per child slot ``k`` (n, N, h); ``c_kids`` = ``c_jℓ`` by slot (n, N, h), zeros at missing
    children. Returns ``(h, c)``, (n, h) each. With ``output_gate=False`` the ``o`` parts are
    absent (``wx`` (n, 3h) in order ``i, u, f``, ``iou_h`` (n, 2h)), eq 11 is dropped and
    eq 14 is ``h_j = tanh(c_j)``.
    """
    hs = c_kids.shape[-1]
    n_iou = len(gate_order(output_gate)) - 1  # non-forget gates: 3, or 2
    pre = wx[:, : n_iou * hs] + iou_h  # eqs 9, 11, 12 pre-activations: (n, 3h) or (n, 2h)
    i, o, u = split_non_forget(pre, output_gate)  # (n, h) each; o None without output gate
    f = torch.sigmoid(wx[:, n_iou * hs:].unsqueeze(1) + f_h)  # eq 10: (n, N, h)
    c = torch.sigmoid(i) * torch.tanh(u) + (f * c_kids).sum(dim=1)  # eq 13
    if o is None:
        return torch.tanh(c), c  # eq 14 without o_j (Tai's relatedness models)
    h = torch.sigmoid(o) * torch.tanh(c)  # eq 14
    return h, c


# ---------------------------------------------------------------- module
@cells.register("nary")
class NaryTreeLSTM(OutputGateLayout, TreeCell):
    """N-ary Tree-LSTM (Tai et al. 2015, eqs 9-14); ``n_ary=2`` is the Constituency Tree-LSTM.

    Args:
        x_size: input size (word vector), read only where ``ndata["word"] != NO_WORD``.
        h_size: hidden / memory size ``d``.
        n_ary: maximum number of (ordered) children ``N``; ``edata["pos"]`` in ``[0, N)``.
        tie_forget: tie the off-diagonal forget matrices ``U^(f)_kℓ, k ≠ ℓ`` to one matrix
            (needs ``n_ary >= 2``).
        output_gate: keep the output gate (eqs 11, 14). ``False``: no output-gate
            parameters, ``h_j = tanh(c_j)``, as Tai et al.'s relatedness (SICK) models
            (stanfordnlp/treelstm ``gate_output = false``; Tai Table 1 relatedness counts).
        engine: ``"dgl"`` (``dgl.prop_nodes_topo``, the reference) or ``"level"``
            (:mod:`gnn_treelstm.engine.level`).
    """

    uses_relations = False
    reads_words = True
    runs_top_down = False
    tree_kinds = ("constituency", "chain")

    def __init__(
        self, x_size: int, h_size: int, n_ary: int = 2, tie_forget: bool = False, *,
        output_gate: bool = True, engine: str = "dgl",
    ) -> None:
        super().__init__(x_size, h_size, engine=engine)
        if int(n_ary) < 1:
            raise ValueError(f"n_ary must be >= 1, got {n_ary}")
        if tie_forget and int(n_ary) < 2:
            raise ValueError("tie_forget ties the off-diagonal U^(f)_kl (k != l), which needs "
                             f"n_ary >= 2 (got n_ary={n_ary}); use tie_forget=False")
        self.n_ary = int(n_ary)
        self.max_children = self.n_ary  # instance attribute shadows TreeCell.max_children
        self.tie_forget = bool(tie_forget)
        self.output_gate = bool(output_gate)
        h, n = self.h_size, self.n_ary
        g = len(self.gates) - 1  # non-forget gates: 3 (i, o, u) or 2 (i, u)
        # rows i, o, u, f (i, u, f without output gate); holds the biases
        self.W_x = nn.Linear(self.x_size, (g + 1) * h)
        if self.tie_forget:
            # U_iou: [h_j1..h_jN] -> i, o, u (U_iu: -> i, u without output gate)
            self.add_non_forget_layer(n * h, h)
            self.U_f_diag = nn.Parameter(torch.empty(n, h, h))  # U^(f)_kk
            self.U_f_off = nn.Linear(h, h, bias=False)  # U^(f)_kl, k != l (tied)
        else:
            self.U = nn.Linear(n * h, (g + n) * h, bias=False)  # -> i, (o,) u, f_1..f_N
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias uniform in ``±1/sqrt(h_size)`` (as ``torch.nn.LSTM``)."""
        bound = 1.0 / math.sqrt(self.h_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    # ------------------------------------------------------------ paper mapping
    def paper_weights(self) -> dict[str, object]:
        """The matrices of eqs 9-12 by their paper names, as views of the parameters:
        ``W_g`` (h, x) and ``b_g`` (h,) for ``g`` in ``i, f, o, u``; ``U_i, U_o, U_u``: lists
        over ``ℓ`` of (h, h); ``U_f``: list over ``k`` of lists over ``ℓ`` of (h, h).
        Without output gate there is no ``W_o, b_o, U_o``."""
        h, n = self.h_size, self.n_ary
        g_iou = len(self.gates) - 1
        out: dict[str, object] = {}
        for k, g in enumerate(self.gates):
            out[f"W_{g}"] = self.W_x.weight[k * h:(k + 1) * h]
            out[f"b_{g}"] = self.W_x.bias[k * h:(k + 1) * h]
        U_iou = self.non_forget_layer().weight if self.tie_forget else self.U.weight[: g_iou * h]
        for k, g in enumerate(self.gates[:-1]):
            out[f"U_{g}"] = [U_iou[k * h:(k + 1) * h, m * h:(m + 1) * h] for m in range(n)]
        if self.tie_forget:
            out["U_f"] = [[self.U_f_diag[k] if k == m else self.U_f_off.weight
                           for m in range(n)] for k in range(n)]
        else:
            Uf = self.U.weight[g_iou * h:]
            out["U_f"] = [[Uf[k * h:(k + 1) * h, m * h:(m + 1) * h] for m in range(n)]
                          for k in range(n)]
        return out

    # ------------------------------------------------------------ plain-tensor API
    def word_mask(self, graph: dgl.DGLGraph) -> torch.Tensor:
        """(N,) bool: the node has a word, so ``x_j`` enters eqs 9-12."""
        return graph.ndata[G.WORD] != G.NO_WORD

    def input_terms(self, x: torch.Tensor, has_word: torch.Tensor) -> torch.Tensor:
        """``W x_j + b`` for every node at once (``W x_j`` omitted where ``has_word`` is
        False), gate order ``i, o, u, f`` (``i, u, f`` without output gate).
        (N, x), (N,) -> (N, 4h) or (N, 3h). ``has_word`` may live on another device than
        ``x`` (the graph's: the CPU with a CPU-only DGL build, ``x`` on a GPU)."""
        has_word = has_word.to(x.device, non_blocking=True)
        x = torch.where(has_word.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype,
                                                               device=x.device))
        return F.linear(x, self.W_x.weight, self.W_x.bias)

    def child_terms(self, h_kids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Children's contributions from their hidden states by slot ``h_kids`` (n, N, h):
        ``Σ_ℓ U^(i,o,u)_ℓ h_jℓ`` (n, 3h; (n, 2h) without output gate) and
        ``Σ_ℓ U^(f)_kℓ h_jℓ`` per slot ``k`` (n, N, h)."""
        n_nodes, n, h = h_kids.shape
        g = len(self.gates) - 1  # 3, or 2 without output gate
        flat = h_kids.reshape(n_nodes, n * h)  # (n, N*h) = [h_j1 ; ... ; h_jN]
        if not self.tie_forget:
            pre = F.linear(flat, self.U.weight)  # (n, (g+N) h)
            return pre[:, : g * h], pre[:, g * h:].reshape(n_nodes, n, h)
        iou_h = F.linear(flat, self.non_forget_layer().weight)  # (n, g h)
        # U_kk h_k + U_off Σ_{l≠k} h_l = (U_kk h_k - U_off h_k) + U_off Σ_l h_l
        diag = torch.einsum("nkd,ked->nke", h_kids, self.U_f_diag)  # (n, N, h)
        off_k = F.linear(h_kids, self.U_f_off.weight)  # (n, N, h)
        f_h = diag - off_k + off_k.sum(dim=1, keepdim=True)
        return iou_h, f_h

    def node_update(
        self, wx: torch.Tensor, h_kids: torch.Tensor, c_kids: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eqs 9-14 for a set of nodes from ``W x + b`` (n, 4h; (n, 3h) without output gate)
        and the children's states by slot (n, N, h) each, zeros at missing children.
        Returns ``(h, c)``."""
        iou_h, f_h = self.child_terms(h_kids)
        return nary_gates(wx, iou_h, f_h, c_kids, output_gate=self.output_gate)

    # ------------------------------------------------------------ forward
    def check_input(self, graph: dgl.DGLGraph, x: torch.Tensor, **tree_kw) -> None:
        # positions: integers 0..n_ary-1, two children of one parent never at the same
        # one (they would silently add up)
        super().check_input(graph, x, edge_fields=(G.POS,), node_fields=(G.WORD,),
                            max_children=self.n_ary, distinct_positions=True, **tree_kw)

    # ------------------------------------------------------------ declaration
    def recurrence(self) -> Recurrence:
        """Eqs 9-14 as a slotted recurrence: state ``h, c``, input ``wx`` (``W x + b``,
        :meth:`input_terms`); the update gets the children's ``h, c`` by position,
        (n, N, h) each."""
        h = self.h_size

        def update(x, kids):  # eqs 9-14 (leaves: every slot is zero)
            hj, cj = self.node_update(x.wx, kids.h, kids.c)
            return {"h": hj, "c": cj}

        return Recurrence(state={"h": h, "c": h}, inputs=("wx",), slots=self.n_ary,
                          update=update)

    def compute(self, prop: Propagator, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = prop(self.recurrence(), wx=self.input_terms(x, self.word_mask(prop.graph)))
        return out.h, out.c

    def full_U(self) -> torch.Tensor:
        """The untied ``U`` ((3+N) h, N h) rows ``i, o, u, f_1..f_N``; for ``tie_forget`` it
        is assembled from ``U_iou``, ``U_f_diag`` and ``U_f_off`` (autograd routes the
        gradients back)."""
        if not self.tie_forget:
            return self.U.weight
        k = self.n_ary
        rows = [torch.cat([self.U_f_diag[r] if r == col else self.U_f_off.weight
                           for col in range(k)], 1) for r in range(k)]
        return torch.cat([self.non_forget_layer().weight, *rows], dim=0)

    def level_kernel(self, prop: Propagator, x: torch.Tensor):
        """The level loops with the input products inside (with or without output gate) on
        the forward's path (:meth:`kernel_path`): the Triton kernels
        (:mod:`gnn_treelstm.kernels.fused_triton`; CUDA) or the C++ loops
        (:mod:`gnn_treelstm.kernels.fused`; float32 CPU); ``x`` only at the rows with a word
        (``schedule.word_ids``)."""
        path = self.kernel_path(prop, x)
        if path == "general":
            return None
        sched = prop.schedule_on(x.device)
        lv = sched.up
        k = self.n_ary
        if sched.word_ids is None:  # a schedule built without the word field
            return None
        word_ids, m0 = sched.word_ids, sched.num_leaf_words
        rows_w = None if sched.word_rows_contiguous else lv.rank.index_select(0, word_ids)
        slots = lv.slots
        if lv.width < k:
            slots = F.pad(slots, (0, k - lv.width), value=lv.num_nodes)
        loops = fused_triton.nary_levels if path == "triton" else fused.nary_levels
        return loops(x.index_select(0, word_ids), self.W_x.weight, self.W_x.bias,
                     self.full_U(), fused.NaryRows(slots, lv, rows_w, m0, (lv.rank, lv.order)))

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, n_ary={self.n_ary}, tie_forget={self.tie_forget}, "
                f"output_gate={self.output_gate}")
