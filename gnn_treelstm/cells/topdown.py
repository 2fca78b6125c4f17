r"""Top-down Tree-LSTM over head lexicons (Teng & Zhang 2017, §4.3, eqs 14-15).

Information flows from the root to the leaves: "the path from the root of a tree down to
any node forms a sequential LSTM" (§4.3). Node ``t`` has exactly one predecessor, its
parent (``t-1``); ``N ∈ {L, R}`` is ``t``'s side under that parent (``edata["pos"]`` 0 / 1
of ``t``'s edge) and selects the parameter set ``U_N``. ``x_t`` is the node's **head
lexicon** (§4.1, eqs 9-10; a leaf's is its word vector)::

    i_t = σ(W_xi^N x_t + W_hi^N h_{t-1} + W_ci^N c_{t-1} + b_i^N)        (eq 15)
    f_t = σ(W_xf^N x_t + W_hf^N h_{t-1} + W_cf^N c_{t-1} + b_f^N)        (eq 15)
    g_t = tanh(W_xg^N x_t + W_hg^N h_{t-1} + b_g^N)                       (eq 14)
    c_t = f_t ⊙ c_{t-1} + i_t ⊙ g_t                                       (eq 14)
    o_t = σ(W_xo^N x_t + W_ho^N h_{t-1} + W_co^N c_t + b_o^N)             (eq 15)
    h_t = o_t ⊙ tanh(c_t)                                                 (eq 14 / eq 1)

Peepholes: ``i`` and ``f`` peep at the parent's cell ``c_{t-1}``, ``o`` at the node's own
new cell ``c_t``; ``g`` has none (eqs 14-15). Eq 14 as printed reads ``h_t = o_t ⊙
tanh(c_{t-1})`` and ``g_t = tanh(W_xg x_{t-1} + ...)``; the text says the step "follows
the sequential LSTM model" (eqs 1, 3: ``tanh(c_t)``, ``x_t``) and the authors' released
code uses ``c_t`` and the node's own ``x_t``, so we read both subscripts as typos.

**The root** is "seeded from the head lexicon" (§4.3, last paragraph): it has no
predecessor (``h_{t-1} = c_{t-1} = 0``) and its input is the root's head lexicon, computed
with the left parameter set (the authors' code: "root node as left"). The root's output
gate keeps its peephole ``W_co^L c_t`` (eq 15 with a zero predecessor); the authors' code
drops it at the root, as it does at the bottom-up leaves (no effect on parameter counts).

**Parameter sharing** (``tie_input``). Eq 15 lists ``W_x*^N`` and ``b_*^N`` per side. Teng
Table 5's counts and the authors' code share the input matrices and the biases between
``U_L`` and ``U_R`` (only the ``h``/``c`` matrices are per side): ``tie_input=True``
(default, reproduces Table 5: ``14h² + 4hx + 4h``). ``tie_input=False`` gives eq 15 with
fully separate sets (``14h² + 8hx + 8h``). Either way ``W_co^N`` is per side as in eq 15
(the authors' code allocates ``W_co^R`` but uses ``W_co^L`` for both sides; same count).

**Parameters** (public names): ``W_x`` ``(S, 4h, x)`` rows ``[W_xi; W_xf; W_xg; W_xo]``,
``b`` ``(S, 4h)``, ``S = 1`` (tied) or 2 (``[L, R]``); ``U_h`` ``(4h, 2h)``: row blocks
``i, f, g, o``, column blocks ``[L | R]``; ``U_c`` ``(2h, 2h)``: row blocks ``i, f``, column
blocks ``[L | R]``; ``W_co`` ``(2, h, h)`` = ``[W_co^L, W_co^R]``; with ``head`` set, the
head lexicon's ``W_z, b_z`` (see :class:`~gnn_treelstm.cells.lexicalized.HeadLexicon`).

**Interface.** ``forward(graph, x, heads=None) -> (h, c)``, each (N, h_size).
``heads`` (N, x_size) are the head lexicons; when omitted, the cell computes them with its
own bottom-up :class:`HeadLexicon` (``head="gate"`` by default; ``head=None`` builds a
cell without one, which then requires ``heads`` — that is how the bidirectional cell shares
the bottom-up cell's lexicon).

**Propagation.** All input terms ``W_x^N x_t + b^N`` are one matrix product before
propagation (:func:`topdown_input_terms`). The recurrence
(:meth:`TopDownTreeLSTM.recurrence`) runs top-down (``direction="down"``; the DGL engine
uses ``dgl.reverse(graph)`` with the edge fields copied, the caller's graph is untouched):
the parent's state ``h, c`` is placed in the slot of the child's side, so one matrix product
with ``[W^L | W^R]`` applies the side's weights (:func:`topdown_node_update`). The level
engine's fast kernel (``level_kernel``, float32 CPU) runs the head lexicon and eqs 14-15 as
C++ level loops (:mod:`gnn_treelstm.kernels.fused_teng`; each level's nodes grouped by side,
so each side's weights multiply only its own nodes).
"""

from __future__ import annotations

from types import MappingProxyType

import dgl
import torch
from torch import nn
from torch.nn import functional as F

from gnn_treelstm.cells.base import TreeCell
from gnn_treelstm.cells.lexicalized import HEAD_MODES, HeadLexicon, glorot_, leaf_word_rows
from gnn_treelstm.cells.registry import cells
from gnn_treelstm.engine.propagator import Propagator
from gnn_treelstm.engine.recurrence import Recurrence
from gnn_treelstm.kernels import fused_teng, fused_triton
from gnn_treelstm.trees import graph as G

__all__ = ["TopDownTreeLSTM", "node_sides", "topdown_input_terms", "topdown_node_update",
           "leaf_mean", "covered_leaf_mean"]


# ---------------------------------------------------------------- plain-tensor math
def node_sides(prop: Propagator) -> torch.Tensor:
    """Side ``N`` of every node under its parent (child ``pos``: 0 = L, 1 = R); roots get
    0 (the root uses the left set). ``prop`` runs on the bottom-up (child -> parent)
    graph. (N,) int64."""
    return prop.parent_edge_data(G.POS, 0)


def topdown_input_terms(
    heads: torch.Tensor, W_x: torch.Tensor, b: torch.Tensor, side: torch.Tensor,
) -> torch.Tensor:
    """``W_x*^N x_t + b_*^N`` for all nodes in one matrix product (eqs 14-15 input terms).

    ``heads`` (N, x); ``W_x`` (S, 4h, x); ``b`` (S, 4h); ``side`` (N,). Returns (N, 4h) in
    gate order ``i, f, g, o``; with ``S = 2`` each node takes its side's rows.
    """
    S, G4 = W_x.shape[0], W_x.shape[1]
    wx = F.linear(heads, W_x.reshape(S * G4, -1), b.reshape(-1))  # (N, S*4h)
    if S == 1:
        return wx
    wx = wx.view(-1, S, G4)  # (N, S, 4h)
    return wx.gather(1, side.view(-1, 1, 1).expand(-1, 1, G4)).squeeze(1)  # (N, 4h)


def topdown_node_update(
    x_terms: torch.Tensor, h_parent: torch.Tensor, c_parent: torch.Tensor, U_h: torch.Tensor,
    U_c: torch.Tensor, W_co: torch.Tensor, side: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One top-down step for n nodes (Teng eqs 14-15).

    ``x_terms`` (n, 4h) from :func:`topdown_input_terms`; ``h_parent``, ``c_parent``
    (n, 2, h): the parent's ``h_{t-1}`` / ``c_{t-1}`` in the slot of the node's side, zeros
    in the other slot (and both for the root); ``U_h`` (4h, 2h), ``U_c`` (2h, 2h), ``W_co``
    (2, h, h); ``side`` (n,). Returns ``(h_t, c_t)``, (n, h) each.
    """
    n, h = h_parent.shape[0], h_parent.shape[-1]
    hs = h_parent.reshape(n, 2 * h)  # (n, 2h): [h_{t-1}, 0] or [0, h_{t-1}]
    cs = c_parent.reshape(n, 2 * h)  # (n, 2h)
    rec_h = F.linear(hs, U_h)  # (n, 4h): W_h*^N h_{t-1} for i, f, g, o
    rec_c = F.linear(cs, U_c)  # (n, 2h): W_c*^N c_{t-1} for i, f
    pre = x_terms + torch.cat([rec_h[:, : 2 * h] + rec_c, rec_h[:, 2 * h:]], dim=-1)
    pi, pf, pg, po = torch.split(pre, h, dim=-1)  # 4 x (n, h)
    c_prev = c_parent[:, 0] + c_parent[:, 1]  # (n, h): c_{t-1} (one slot is zero)
    c = torch.sigmoid(pf) * c_prev + torch.sigmoid(pi) * torch.tanh(pg)  # eq 14 (i, f: 15)
    peep = torch.einsum("nk,sjk->nsj", c, W_co)  # (n, 2, h): W_co^L c_t, W_co^R c_t
    peep = peep.gather(1, side.view(-1, 1, 1).expand(-1, 1, h)).squeeze(1)  # (n, h)
    o = torch.sigmoid(po + peep)  # eq 15
    return o * torch.tanh(c), c  # eq 14 (read as eq 1)


# ---------------------------------------------------------------- module
def leaf_mean(graph: dgl.DGLGraph, h_down: torch.Tensor) -> torch.Tensor:
    """Eq 16's last part per graph of the batch: ``(1/n) Σ_i h'_i``, the mean top-down state
    of the graph's leaves (its words), (B, h). Rows follow the batch order."""
    # the graph (DGL's CPU wheel) keeps its indices on the CPU; h may live on a GPU
    leaves, gid = (t.to(h_down.device) for t in G.batch_leaves(graph))  # (L,), (L,)
    sums = h_down.new_zeros(graph.batch_size, h_down.shape[1]).index_add_(0, gid,
                                                                        h_down[leaves])
    counts = torch.bincount(gid, minlength=graph.batch_size).to(h_down.dtype).unsqueeze(-1)
    return sums / counts


def covered_leaf_mean(graph: dgl.DGLGraph, h_down: torch.Tensor) -> torch.Tensor:
    """Eq 16's last part for every node: the mean top-down state of the leaves the node
    covers, (N, h) (the authors' per-phrase classifier input; at a root, :func:`leaf_mean`'s
    row).

    Computed from the (ancestor, leaf) pairs of the batch, found by walking every leaf up to
    its root on the parent pointers (one vectorized hop per tree level, index work only),
    then one ``index_add`` of the leaves' states: no message passing, which cost about as
    much as the cell's own forward when this ran as ``dgl.prop_nodes_topo``."""
    src, dst = (t.long() for t in graph.edges())  # child -> parent
    parent = torch.full((graph.num_nodes(),), -1, dtype=torch.int64, device=src.device)
    parent[src] = dst
    leaf = torch.nonzero(graph.in_degrees() == 0, as_tuple=True)[0].to(src.device)
    node, anc, of = leaf, [leaf], [leaf]  # every leaf covers itself
    for _ in range(graph.num_nodes()):  # a tree is at most N levels deep
        up = parent[node]
        keep = up >= 0
        node, leaf = up[keep], leaf[keep]
        if not node.numel():
            break
        anc.append(node)
        of.append(leaf)
    assert not node.numel(), "covered_leaf_mean: the graph is not a forest (checked by forward)"
    # the graph (DGL's CPU wheel) keeps its indices on the CPU; h may live on a GPU
    anc_t, of_t = (torch.cat(t).to(h_down.device) for t in (anc, of))
    sums = h_down.new_zeros(h_down.shape).index_add_(0, anc_t, h_down[of_t])
    counts = torch.bincount(anc_t, minlength=h_down.shape[0]).to(h_down.dtype)
    return sums / counts.unsqueeze(-1)


class TopDownTreeLSTM(TreeCell):
    """Teng & Zhang's top-down Tree-LSTM (eqs 14-15) over head lexicons (eqs 9-10).

    Args:
        x_size: word vector size (= head lexicon size).
        h_size: hidden / memory size.
        head: head lexicalization of the cell's own bottom-up head propagation, one of
            ``gate | left | right | average``, or ``None`` for no own head lexicon
            (then ``forward`` requires ``heads``).
        tie_input: share ``W_x*`` and ``b_*`` between ``U_L`` and ``U_R`` (Table 5 /
            authors' code, default) or keep them per side (eq 15 as printed).
        engine: ``"dgl"`` (``dgl.prop_nodes_topo``, the reference) or ``"level"``
            (:mod:`gnn_treelstm.engine.level`).
    """

    #: Teng & Zhang §6: Adam, dropout 0.5 on the word vectors, eq 17's classifier
    run_defaults = MappingProxyType({"optimizer": "adam", "emb_dropout": 0.5, "teng_head": True})


    max_children = 2
    reads_words = True
    uses_relations = False
    tree_kinds = ("constituency",)

    def __init__(
        self, x_size: int, h_size: int, *, head: str | None = "gate", tie_input: bool = True,
        engine: str = "dgl",
    ) -> None:
        super().__init__(x_size, h_size, engine=engine)
        if head is not None and head not in HEAD_MODES:
            raise ValueError(f"unknown head mode {head!r}; choose one of {HEAD_MODES} or None")
        self.head_mode = head
        self.tie_input = bool(tie_input)
        h, x = self.h_size, self.x_size
        S = 1 if self.tie_input else 2
        self.W_x = nn.Parameter(torch.empty(S, 4 * h, x))
        self.b = nn.Parameter(torch.empty(S, 4 * h))
        self.U_h = nn.Parameter(torch.empty(4 * h, 2 * h))
        self.U_c = nn.Parameter(torch.empty(2 * h, 2 * h))
        self.W_co = nn.Parameter(torch.empty(2, h, h))
        self.head_lexicon_module = HeadLexicon(x, head) if head is not None else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform for every paper matrix separately (DyNet default), biases zero."""
        h, x = self.h_size, self.x_size
        for s in range(self.W_x.shape[0]):
            for k in range(4):
                glorot_(self.W_x.data[s, k * h:(k + 1) * h], h, x)
        for mat in (self.U_h, self.U_c):
            for r in range(mat.shape[0] // h):
                for s in range(2):
                    glorot_(mat.data[r * h:(r + 1) * h, s * h:(s + 1) * h], h, h)
        for s in range(2):
            glorot_(self.W_co.data[s], h, h)
        nn.init.zeros_(self.b)
        if self.head_lexicon_module is not None:
            self.head_lexicon_module.reset_parameters()

    # ------------------------------------------------------------ plain-tensor API
    def input_terms(self, heads: torch.Tensor, side: torch.Tensor) -> torch.Tensor:
        """(N, x) -> (N, 4h), see :func:`topdown_input_terms`."""
        return topdown_input_terms(heads, self.W_x, self.b, side)

    def node_update(
        self, x_terms: torch.Tensor, h_parent: torch.Tensor, c_parent: torch.Tensor,
        side: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eqs 14-15 from the parent's slotted state, (n, 2, h) each (see
        :func:`topdown_node_update`)."""
        return topdown_node_update(x_terms, h_parent, c_parent, self.U_h, self.U_c, self.W_co,
                                   side)

    # ------------------------------------------------------------ forward
    def check_input(self, graph: dgl.DGLGraph, x: torch.Tensor, **tree_kw) -> None:
        super().check_input(graph, x, max_children=self.max_children, **tree_kw)

    def check_heads(self, graph: dgl.DGLGraph, heads: torch.Tensor | None) -> None:
        if heads is None:
            if self.head_lexicon_module is None:
                raise ValueError(
                    "TopDownTreeLSTM(head=None) has no head lexicon of its own: pass "
                    "heads=<(num_nodes, x_size) head lexicons>, or build it with head='gate'"
                )
            return
        if heads.dim() != 2 or heads.shape != (graph.num_nodes(), self.x_size):
            raise ValueError(
                f"TopDownTreeLSTM: heads has shape {tuple(heads.shape)} but must be "
                f"(num_nodes={graph.num_nodes()}, x_size={self.x_size})"
            )

    def check_kwargs(self, graph: dgl.DGLGraph, heads: torch.Tensor | None = None) -> None:
        self.check_heads(graph, heads)

    # ------------------------------------------------------------ declaration
    def recurrence(self) -> Recurrence:
        """Eqs 14-15 as a top-down slotted recurrence: state ``h, c``, the parent's state
        in the slot of the node's side; inputs ``wx``, the input terms (N, 4h), and
        ``side`` (N,)."""
        h, U_h, U_c, W_co = self.h_size, self.U_h, self.U_c, self.W_co

        def update(x, parent):  # eqs 14-15 (root: the parent slots are zeros)
            hj, cj = topdown_node_update(x.wx, parent.h, parent.c, U_h, U_c, W_co, x.side)
            return {"h": hj, "c": cj}

        return Recurrence(state={"h": h, "c": h}, inputs=("wx", "side"), slots=2,
                          update=update, direction="down")

    def compute(self, prop: Propagator, x: torch.Tensor, heads: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-down states ``(h, c)``, each (N, h_size)."""
        if heads is None:
            heads = self.head_lexicon_module.run(prop, x)  # (N, x), eqs 9-10
        side = node_sides(prop).to(x.device)  # (N,)
        out = prop(self.recurrence(), wx=self.input_terms(heads, side), side=side)
        return out.h, out.c

    def level_kernel(self, prop: Propagator, x: torch.Tensor,
                     heads: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The level loops on the forward's path (:meth:`kernel_path`). The C++ loops
        (float32 CPU): head lexicons bottom-up (own :class:`HeadLexicon` unless ``heads`` are
        given), then eqs 14-15 over the down levels; the input terms are one product
        (:meth:`input_terms`) in the down schedule's order. The Triton kernels
        (:mod:`gnn_treelstm.kernels.fused_triton`; CUDA): both loops as Triton kernels."""
        path = self.kernel_path(prop, x)
        if prop.graph.num_nodes() == 0 or path == "general":
            return None
        if path == "triton":
            sched = prop.schedule_on(x.device)
            up, down = sched.up, sched.require_down()
            if heads is None:
                hl = self.head_lexicon_module
                heads_up = fused_triton.head_levels(  # eqs 9-10
                    leaf_word_rows(prop, x), up, hl.mode, getattr(hl, "W_z", None),
                    getattr(hl, "b_z", None))
                heads_dn = fused_teng.up_to_down(heads_up, up, down)
            else:
                heads_dn = fused_teng.to_levels(heads, down)
            return fused_triton.topdown_levels(heads_dn, self.W_x, self.b, self.U_h, self.U_c,
                                               self.W_co, fused_teng.down_sides(down), down)
        sched = prop.schedule_on(x.device)  # the C++ loops
        up, down = sched.up, sched.require_down()
        if heads is None:
            heads_up = self.head_lexicon_module.level_kernel(prop, x)  # eqs 9-10
            if heads_up is None:
                return None
            heads_dn = fused_teng.up_to_down(heads_up, up, down)
        else:
            heads_dn = fused_teng.to_levels(heads, down)
        side = fused_teng.down_sides(down)
        return fused_teng.topdown_levels(self.input_terms(heads_dn, side), self.U_h, self.U_c,
                                         self.W_co, side, down)

    # ------------------------------------------------------------ classifier inputs
    @property
    def sentence_size(self) -> int:
        """Size of :meth:`sentence_vector` rows: ``2 * h_size``."""
        return 2 * self.h_size

    def sentence_vector(self, graph: dgl.DGLGraph, h: torch.Tensor) -> torch.Tensor:
        """The top-down half of eq 16 per graph: ``[h_ROOT↓ ; (1/n) Σ_i h'_i]``, (B, 2h).

        Teng & Zhang's Top-down ConTree row is "the top-down half of the final bidirectional
        model" (the discussion of Table 1). The root's own top-down state has read nothing
        but the root's head lexicon, so alone it would classify a sentence from one word;
        the leaves' mean carries what the top-down paths have read."""
        self.check_output(graph, h)
        roots = G.batch_roots(graph).to(h.device)  # (B,)
        return torch.cat([h[roots], leaf_mean(graph, h)], dim=-1)

    def node_vectors(self, graph: dgl.DGLGraph, h: torch.Tensor) -> torch.Tensor:
        """The top-down half of eq 16 for every node, (N, 2h): ``[h↓ ; mean of h'_i over the
        leaves the node covers]`` (at a root, :meth:`sentence_vector`'s row)."""
        self.check_output(graph, h)
        return torch.cat([h, covered_leaf_mean(graph, h)], dim=-1)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, head={self.head_mode!r}, tie_input={self.tie_input}"


cells.register("topdown")(TopDownTreeLSTM)
