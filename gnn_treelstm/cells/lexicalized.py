r"""Head-lexicalized binary Tree-LSTM (Teng & Zhang 2017, §3 and §4.1-4.2).

Binary constituency trees; node ``t`` has a left child ``L`` (``edata["pos"] == 0``) and a
right child ``R`` (``pos == 1``); ``h^N, c^N, x^N`` are that child's states (``t-1`` in the
paper's notation). A missing child (leaf, or a unary node) contributes zeros.

**Head lexicon** (§4.1, eqs 9-10). Leaves take their word vector ``x_t`` (the rows of
``x`` where ``graph.ndata["word"] != NO_WORD``; Teng §1: "only leaf cells ... directly
depend on corresponding input words"). An internal node's head lexicon is::

    z_t = σ(W_zx^L x^L + W_zx^R x^R + b_z)               (eq 10)   z_t ∈ R^{x_size}
    x_t = z_t ⊙ x^L + (1 - z_t) ⊙ x^R                    (eq 9)

``head="gate"`` (Table 3 "G"); the heuristic baselines of §7.5 / Table 3: ``"left"``
(``x_t = x^L``, "L"), ``"right"`` (``x_t = x^R``, "R"), ``"average"``
(``x_t = (x^L + x^R) / 2``, "A").

**Cell**, ``lexicalized=True`` (ConTree+Lex, eqs 11-12 with eqs 5 and 1)::

    i_t   = σ(W_xi x_t + Σ_N (W_hi^N h^N + W_ci^N c^N) + b_i)            (eq 11)
    f_t^L = σ(W_xf x_t + Σ_N (W_hfl^N h^N + W_cfl^N c^N) + b_fl)         (eq 11)
    f_t^R = σ(W_xf x_t + Σ_N (W_hfr^N h^N + W_cfr^N c^N) + b_fr)         (eq 11, same W_xf)
    g_t   = tanh(W_xg x_t + Σ_N W_hg^N h^N + b_g)                         (eq 12)
    c_t   = f_t^L ⊙ c^L + f_t^R ⊙ c^R + i_t ⊙ g_t                         (eq 5)
    o_t   = σ(W_xo x_t + Σ_N W_ho^N h^N + W_co c_t + b_o)                 (eq 11)
    h_t   = o_t ⊙ tanh(c_t)                                               (eq 1)

Peepholes (Gers & Schmidhuber 2000, §2/§3): full ``h×h`` matrices, as in the paper's
notation and as Table 5's counts require. The input and both forget gates peep at the
*children's* cells ``c^N``; the output gate peeps at the node's *own new* cell ``c_t``
(eq 6/11: ``W_co c_t``); ``g_t`` has no peephole (eqs 8/12).

``lexicalized=False`` (the ConTree baseline of Zhu et al. 2015, eqs 5-8): internal nodes
have no ``x`` term at all (eq 8: "it does not depend on x_t"), so ``W_xf`` and the head
gate do not exist; leaves (no children) compute the same equations with
``x_t`` = their word vector, which uses ``W_xi, W_xg, W_xo`` (Figure 1(c)).

Leaves in both modes are the equations above with zero children (``h^N = c^N = 0``):
``c = i ⊙ g``, ``o = σ(W_xo x + W_co c + b_o)``. (The authors' released code omits the
``W_co c`` peephole at leaves; the paper gives no separate leaf equation, we keep the
uniform one. Parameter counts are unaffected.)

**Parameters** (public names, the reference implementation ``tests/reference/teng.py``
slices them): ``W_x`` ``(4h, x)`` rows ``[W_xi; W_xf; W_xg; W_xo]`` (baseline ``(3h, x)``
rows ``[W_xi; W_xg; W_xo]``); ``b`` ``(5h,)`` ``[b_i, b_fl, b_fr, b_g, b_o]``; ``U_h``
``(5h, 2h)``: row blocks ``i, fl, fr, g, o``, column blocks ``[L | R]`` (``W_h*^N``);
``U_c`` ``(3h, 2h)``: row blocks ``i, fl, fr``, column blocks ``[L | R]`` (``W_c*^N``);
``W_co`` ``(h, h)``; head gate ``head_lexicon.W_z`` ``(x, 2x)`` = ``[W_zx^L | W_zx^R]``,
``head_lexicon.b_z`` ``(x,)``. Count: ``17h² + 5h + 4hx + 2x² + x`` (baseline
``17h² + 5h + 3hx``) — see :func:`teng_table5_count`.

**Propagation.** (1) head lexicons bottom-up (eqs 9-10, only needs ``x``):
:meth:`HeadLexicon.recurrence`; (2) all input terms ``W_x x_t + b`` of all nodes in one
matrix product (:func:`lex_input_terms`); (3) the cell's recurrence
(:meth:`LexicalizedTreeLSTM.recurrence`): slotted, each child's state ``h, c`` in the slot
of its position, and :func:`lex_node_update` (eqs 11, 12, 5, 1) makes ``(h_t, c_t)``. Both
engines run these functions (the DGL engine places a child in its slot with the built-in
``u_mul_e`` and ``sum``). The level engine's fast kernel (``level_kernel``, float32 CPU) runs
both recurrences as C++ level loops (:mod:`gnn_treelstm.kernels.fused_teng`, every head
mode native), the input terms still one product by :func:`lex_input_terms`.
"""

from __future__ import annotations

import math
from types import MappingProxyType

import dgl
import torch
from torch import nn
from torch.nn import functional as F

from gnn_treelstm.cells.base import TreeCell
from gnn_treelstm.cells.registry import cells
from gnn_treelstm.engine.propagator import Propagator
from gnn_treelstm.engine.recurrence import Recurrence
from gnn_treelstm.kernels import fused_teng, fused_triton
from gnn_treelstm.trees import graph as G

__all__ = [
    "LexicalizedTreeLSTM",
    "HeadLexicon",
    "HEAD_MODES",
    "head_combine",
    "head_gate",
    "lex_input_terms",
    "lex_node_update",
    "leaf_word_inputs",
    "leaf_word_rows",
    "glorot_",
    "teng_table5_count",
]

#: Head lexicalization methods of Teng Table 3: G(ate), L(eft), R(ight), A(verage).
HEAD_MODES = ("gate", "left", "right", "average")


# ---------------------------------------------------------------- plain-tensor math
def glorot_(t: torch.Tensor, fan_out: int, fan_in: int) -> None:
    """Glorot-uniform init of ``t`` in place for one ``fan_out × fan_in`` matrix block
    (DyNet's default for ``add_parameters``, which the authors used)."""
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        t.uniform_(-bound, bound)


def head_gate(x_slots: torch.Tensor, W_z: torch.Tensor, b_z: torch.Tensor) -> torch.Tensor:
    """Teng eq 10: ``z_t = σ(W_zx^L x^L + W_zx^R x^R + b_z)`` from the children's heads
    ``x_slots`` (n, 2, x); ``W_z`` (x, 2x), ``b_z`` (x,). Returns (n, x)."""
    return torch.sigmoid(F.linear(x_slots.flatten(1), W_z, b_z))


def head_combine(
    x_slots: torch.Tensor, mode: str, W_z: torch.Tensor | None = None,
    b_z: torch.Tensor | None = None,
) -> torch.Tensor:
    """Head lexicon of internal nodes from their children's (Teng eqs 9-10, Table 3).

    ``x_slots`` (n, 2, x): ``[:, 0]`` the left child's head ``x^L``, ``[:, 1]`` the right
    child's ``x^R`` (zeros for a missing child). ``W_z`` (x, 2x) = ``[W_zx^L | W_zx^R]``,
    ``b_z`` (x,). Returns (n, x).
    """
    x_l, x_r = x_slots[:, 0], x_slots[:, 1]  # 2 x (n, x)
    if mode == "gate":
        z = head_gate(x_slots, W_z, b_z)  # eq 10
        return z * x_l + (1.0 - z) * x_r  # eq 9
    if mode == "left":
        return x_l
    if mode == "right":
        return x_r
    if mode == "average":
        return 0.5 * (x_l + x_r)
    raise ValueError(f"unknown head mode {mode!r}; choose one of {HEAD_MODES}")


def lex_input_terms(
    x_in: torch.Tensor, W_x: torch.Tensor, b: torch.Tensor, lexicalized: bool,
) -> torch.Tensor:
    """All input-only gate terms of every node in one matrix product.

    ``x_in`` (N, x): head lexicons ``x_t`` (eqs 11-12), or for the baseline the word
    vectors at leaves and zeros elsewhere (eqs 6-8 have no ``x`` at internal nodes).
    Returns (N, 5h) in gate order ``i, fl, fr, g, o``: ``W_x* x_t + b_*``; ``W_xf`` feeds
    both forget gates (eq 11); the baseline has no ``x`` term in the forget gates.
    """
    wx = F.linear(x_in, W_x)  # (N, 4h) or (N, 3h)
    h = b.shape[0] // 5
    if lexicalized:
        wi, wf, wg, wo = torch.split(wx, h, dim=-1)
    else:
        wi, wg, wo = torch.split(wx, h, dim=-1)
        wf = torch.zeros_like(wi)
    return torch.cat([wi, wf, wf, wg, wo], dim=-1) + b  # (N, 5h)


def lex_node_update(
    x_terms: torch.Tensor, h_kids: torch.Tensor, c_kids: torch.Tensor, U_h: torch.Tensor,
    U_c: torch.Tensor, W_co: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One bottom-up step for n nodes (Teng eqs 11, 12, 5, 1; baseline eqs 6, 7, 8, 5, 1).

    ``x_terms`` (n, 5h) from :func:`lex_input_terms`; ``h_kids``, ``c_kids`` (n, 2, h):
    slot 0 = ``h^L`` / ``c^L``, slot 1 = ``h^R`` / ``c^R`` (zeros where a child is
    missing); ``U_h`` (5h, 2h), ``U_c`` (3h, 2h), ``W_co`` (h, h). Returns ``(h_t, c_t)``,
    (n, h) each.
    """
    n, h = h_kids.shape[0], h_kids.shape[-1]
    hs = h_kids.reshape(n, 2 * h)  # (n, 2h) = [h^L, h^R]
    cs = c_kids  # (n, 2, h)
    rec_h = F.linear(hs, U_h)  # (n, 5h): Σ_N W_h*^N h^N for i, fl, fr, g, o
    rec_c = F.linear(cs.reshape(n, 2 * h), U_c)  # (n, 3h): Σ_N W_c*^N c^N for i, fl, fr
    pre = x_terms + torch.cat([rec_h[:, : 3 * h] + rec_c, rec_h[:, 3 * h:]], dim=-1)
    pi, pfl, pfr, pg, po = torch.split(pre, h, dim=-1)  # 5 x (n, h)
    c = (torch.sigmoid(pfl) * cs[:, 0] + torch.sigmoid(pfr) * cs[:, 1]  # eq 5 (f^N: eq 11/7)
         + torch.sigmoid(pi) * torch.tanh(pg))  # i: eq 11/6, g: eq 12/8
    o = torch.sigmoid(po + F.linear(c, W_co))  # eq 11/6: peephole on the new c_t
    return o * torch.tanh(c), c  # eq 1


def leaf_word_inputs(prop: Propagator, x: torch.Tensor) -> torch.Tensor:
    """``x`` at leaves that carry a word, zeros elsewhere (constituency cells read words
    only at the leaves; rows of internal nodes and word-less nodes are ignored)."""
    graph = prop.graph
    mask = prop.leaves()
    # keys(): torch 2.4's Dynamo does not trace Mapping.__contains__ (DGL's ndata is one)
    if G.WORD in graph.ndata.keys():
        word = graph.ndata[G.WORD]
        mask = mask.to(word.device) & (word != G.NO_WORD)
    return x * mask.to(device=x.device, dtype=x.dtype).unsqueeze(-1)  # (N, x)


def leaf_word_rows(prop: Propagator, x: torch.Tensor) -> torch.Tensor:
    """``x`` in the up schedule's order as the head-lexicon loops read it (the C++ loops'
    and the Triton kernels' eqs 9-10, which read the leaves' rows only and give the other
    rows a zero gradient): the words at the leaves, zeros at a leaf without a word, the
    rows of internal nodes unspecified. Where every leaf has a word (the schedule's
    ``num_leaf_words``, as in PTB constituency trees) that is the rows of ``x`` as they are:
    :func:`leaf_word_inputs`' mask would multiply each leaf by one, the same values and
    gradients, five operations more."""
    sched = prop.schedule_on(x.device)
    lv = sched.up
    leaves = lv.node_offsets[1] if lv.num_levels else 0
    if sched.word_ids is None or sched.num_leaf_words != leaves:
        x = leaf_word_inputs(prop, x)
    return fused_teng.to_levels(x, lv)


def teng_table5_count(
    model: str, h_size: int, x_size: int = 300, hidden: int = 128, num_classes: int = 5,
) -> int:
    """Parameter count of Teng & Zhang's models as Table 5 counts them (no lookup table;
    cell plus the eq-17 classifier ``ReLU(W_hl h + b_hl)`` -> softmax): the formula our
    cells and a ``hidden``/``num_classes`` classifier give. ``model``: ``"contree"``,
    ``"lex"``, ``"bitree"``."""
    h, x = h_size, x_size
    lex_extra = h * x + 2 * x * x + x  # W_xf, head gate W_zx^L, W_zx^R, b_z
    up = 17 * h * h + 5 * h + 3 * h * x
    if model == "contree":
        cell, feat = up, h
    elif model == "lex":
        cell, feat = up + lex_extra, h
    elif model == "bitree":
        cell, feat = up + lex_extra + 14 * h * h + 4 * h * x + 4 * h, 3 * h
    else:
        raise ValueError(f"unknown model {model!r}; choose contree, lex or bitree")
    return cell + feat * hidden + hidden + hidden * num_classes + num_classes


# ---------------------------------------------------------------- modules
class HeadLexicon(nn.Module):
    """Bottom-up head-lexicon propagation (Teng §4.1, eqs 9-10; Table 3 modes).

    ``forward(graph, x) -> (N, x_size)``: leaves get their word vector (zeros for a leaf
    without a word), internal nodes :func:`head_combine` of their children's heads.
    Parameters only for ``mode="gate"``: ``W_z`` (x, 2x) = ``[W_zx^L | W_zx^R]``, ``b_z``.
    The caller validates the graph.
    """

    def __init__(self, x_size: int, mode: str = "gate") -> None:
        super().__init__()
        if mode not in HEAD_MODES:
            raise ValueError(f"unknown head mode {mode!r}; choose one of {HEAD_MODES}")
        self.x_size = int(x_size)
        self.mode = mode
        if mode == "gate":
            self.W_z = nn.Parameter(torch.empty(self.x_size, 2 * self.x_size))
            self.b_z = nn.Parameter(torch.empty(self.x_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform per matrix ``W_zx^L``, ``W_zx^R``; ``b_z`` zero."""
        if self.mode == "gate":
            x = self.x_size
            glorot_(self.W_z.data[:, :x], x, x)
            glorot_(self.W_z.data[:, x:], x, x)
            nn.init.zeros_(self.b_z)

    def recurrence(self) -> Recurrence:
        """Eqs 9-10 as a slotted recurrence over the head vectors (state ``head``): a leaf
        keeps its word vector, an internal node combines its children's heads
        (:func:`head_combine`). Inputs: ``word``, ``x`` at the leaves (zeros elsewhere), and
        ``is_leaf``, a leaf flag (N, 1)."""
        W_z = self.W_z if self.mode == "gate" else None
        b_z = self.b_z if self.mode == "gate" else None
        mode = self.mode

        def update(x, kids):  # eqs 9-10 at internal nodes; a leaf keeps its word
            combined = head_combine(kids.head, mode, W_z, b_z)
            return {"head": torch.where(x.is_leaf > 0, x.word, combined)}

        return Recurrence(state={"head": self.x_size}, inputs=("word", "is_leaf"), slots=2,
                          update=update)

    def run(self, prop: Propagator, x: torch.Tensor) -> torch.Tensor:
        """Head lexicons of every node through ``prop`` (either engine), (N, x_size)."""
        is_leaf = prop.leaves().to(device=x.device, dtype=x.dtype).unsqueeze(-1)
        return prop(self.recurrence(), word=leaf_word_inputs(prop, x), is_leaf=is_leaf).head

    def forward(self, graph: dgl.DGLGraph, x: torch.Tensor) -> torch.Tensor:
        """Head lexicons with the DGL engine, (N, x_size). The caller validates the graph."""
        return self.run(Propagator("dgl", graph), x)

    def level_kernel(self, prop: Propagator, x: torch.Tensor) -> torch.Tensor | None:
        """Head lexicons through the C++ level loops (every mode; float32 CPU), (N, x_size)
        in the *up schedule's* order, or ``None`` off the loops' path
        (:meth:`TreeCell.kernel_path`: the Triton path runs the head lexicons inside its
        cells' loops)."""
        if TreeCell.kernel_path(prop, x) != "loops":
            return None
        lv = prop.schedule_on(x.device).up
        return fused_teng.head_levels(leaf_word_rows(prop, x), lv, self.mode,
                                      getattr(self, "W_z", None), getattr(self, "b_z", None))

    def extra_repr(self) -> str:
        return f"x_size={self.x_size}, mode={self.mode!r}"


class LexicalizedTreeLSTM(TreeCell):
    """Teng & Zhang's bottom-up ConTree+Lex cell (eqs 9-12, 5, 1), or ConTree (eqs 5-8).

    Args:
        x_size: word vector size.
        h_size: hidden / memory size.
        head: head lexicalization, one of :data:`HEAD_MODES` (Table 3 G/L/R/A).
            Ignored when ``lexicalized=False``.
        lexicalized: ``False`` gives the ConTree baseline (no ``x`` at internal nodes).
        engine: ``"dgl"`` (``dgl.prop_nodes_topo``, the reference) or ``"level"``
            (:mod:`gnn_treelstm.engine.level`).

    ``forward(graph, x, heads=None) -> (h, c)``, each (N, h_size). ``heads`` (N, x_size)
    optionally supplies precomputed head lexicons (the bidirectional cell computes them once
    for both directions); by default :meth:`head_lexicon` computes them.
    """

    #: Teng & Zhang §6: Adam, dropout 0.5 on the word vectors, eq 17's classifier
    run_defaults = MappingProxyType({"optimizer": "adam", "emb_dropout": 0.5, "teng_head": True})


    max_children = 2
    uses_relations = False
    reads_words = True
    runs_top_down = False
    tree_kinds = ("constituency",)

    def __init__(
        self, x_size: int, h_size: int, *, head: str = "gate", lexicalized: bool = True,
        engine: str = "dgl",
    ) -> None:
        super().__init__(x_size, h_size, engine=engine)
        if head not in HEAD_MODES:
            raise ValueError(f"unknown head mode {head!r}; choose one of {HEAD_MODES}")
        self.lexicalized = bool(lexicalized)
        self.head_mode = head
        h, x = self.h_size, self.x_size
        self.W_x = nn.Parameter(torch.empty((4 if self.lexicalized else 3) * h, x))
        self.b = nn.Parameter(torch.empty(5 * h))
        self.U_h = nn.Parameter(torch.empty(5 * h, 2 * h))
        self.U_c = nn.Parameter(torch.empty(3 * h, 2 * h))
        self.W_co = nn.Parameter(torch.empty(h, h))
        self.head_lexicon_module = HeadLexicon(x, head) if self.lexicalized else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform for every paper matrix separately (DyNet default), biases zero."""
        h, x = self.h_size, self.x_size
        for k in range(self.W_x.shape[0] // h):
            glorot_(self.W_x.data[k * h:(k + 1) * h], h, x)
        for mat in (self.U_h, self.U_c):
            for r in range(mat.shape[0] // h):
                for s in range(2):
                    glorot_(mat.data[r * h:(r + 1) * h, s * h:(s + 1) * h], h, h)
        glorot_(self.W_co.data, h, h)
        nn.init.zeros_(self.b)
        if self.head_lexicon_module is not None:
            self.head_lexicon_module.reset_parameters()

    # ------------------------------------------------------------ plain-tensor API
    def input_terms(self, x_in: torch.Tensor) -> torch.Tensor:
        """``W_x x_t + b`` for all nodes, (N, x) -> (N, 5h) (see :func:`lex_input_terms`)."""
        return lex_input_terms(x_in, self.W_x, self.b, self.lexicalized)

    def node_update(
        self, x_terms: torch.Tensor, h_kids: torch.Tensor, c_kids: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eqs 11, 12, 5, 1 from the children's states by slot, (n, 2, h) each (see
        :func:`lex_node_update`)."""
        return lex_node_update(x_terms, h_kids, c_kids, self.U_h, self.U_c, self.W_co)

    # ------------------------------------------------------------ forward
    def check_input(self, graph: dgl.DGLGraph, x: torch.Tensor, **tree_kw) -> None:
        super().check_input(graph, x, max_children=self.max_children, **tree_kw)

    def check_heads(self, graph: dgl.DGLGraph, heads: torch.Tensor) -> None:
        if heads.dim() != 2 or heads.shape != (graph.num_nodes(), self.x_size):
            raise ValueError(
                f"{type(self).__name__}: heads has shape {tuple(heads.shape)} but must be "
                f"(num_nodes={graph.num_nodes()}, x_size={self.x_size}) (one head lexicon "
                "per node, e.g. from head_lexicon(graph, x))"
            )

    def head_lexicon(self, graph: dgl.DGLGraph, x: torch.Tensor) -> torch.Tensor:
        """Head lexicon ``x_t`` of every node (eqs 9-10), (N, x_size). Validates input."""
        if self.head_lexicon_module is None:
            raise ValueError("LexicalizedTreeLSTM(lexicalized=False) has no head lexicon")
        self.check_input(graph, x)
        return self.head_lexicon_module.run(Propagator(self.engine, graph), x)

    def check_kwargs(self, graph: dgl.DGLGraph, heads: torch.Tensor | None = None) -> None:
        if heads is not None:
            if not self.lexicalized:
                raise ValueError("LexicalizedTreeLSTM(lexicalized=False) takes no heads")
            self.check_heads(graph, heads)

    # ------------------------------------------------------------ declaration
    def recurrence(self) -> Recurrence:
        """Eqs 11, 12, 5, 1 as a slotted recurrence: state ``h, c``, children by position
        (slot 0 left, 1 right), input ``wx``: the input terms (N, 5h)."""
        h, U_h, U_c, W_co = self.h_size, self.U_h, self.U_c, self.W_co

        def update(x, kids):  # eqs 11, 12, 5, 1 (leaves: the children slots are zeros)
            hj, cj = lex_node_update(x.wx, kids.h, kids.c, U_h, U_c, W_co)
            return {"h": hj, "c": cj}

        return Recurrence(state={"h": h, "c": h}, inputs=("wx",), slots=2, update=update)

    def compute(self, prop: Propagator, x: torch.Tensor, heads: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Bottom-up states ``(h, c)``, each (N, h_size); ``heads`` as in the class doc."""
        if self.lexicalized:
            x_in = self.head_lexicon_module.run(prop, x) if heads is None else heads  # (N, x)
        else:
            x_in = leaf_word_inputs(prop, x)  # eqs 6-8: x only at the leaves
        out = prop(self.recurrence(), wx=self.input_terms(x_in))  # one matmul for all inputs
        return out.h, out.c

    def level_kernel(self, prop: Propagator, x: torch.Tensor,
                     heads: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The level loops on the forward's path (:meth:`kernel_path`). The C++ loops
        (float32 CPU): head lexicons (:meth:`HeadLexicon.level_kernel`, unless ``heads`` are
        given), then eqs 11, 12, 5, 1 bottom-up; the input terms are one product
        (:meth:`input_terms`) in the up schedule's order. The Triton kernels
        (:mod:`gnn_treelstm.kernels.fused_triton`; CUDA): the head lexicons and the cell in
        one level loop."""
        path = self.kernel_path(prop, x)
        if prop.graph.num_nodes() == 0 or path == "general":
            return None
        if path == "triton":
            lv = prop.schedule_on(x.device).up
            mode = "given" if not self.lexicalized or heads is not None else self.head_mode
            if heads is not None:  # every row's x_t given
                x0 = fused_teng.to_levels(heads, lv)
            elif mode == "given":  # eqs 6-8: x only at the leaves, every row read
                x0 = fused_teng.to_levels(leaf_word_inputs(prop, x), lv)
            else:  # eqs 9-10 in the loop, which reads the leaves' rows
                x0 = leaf_word_rows(prop, x)
            hl = self.head_lexicon_module
            w = fused_triton.LexWeights(self.W_x, self.b, self.U_h, self.U_c, self.W_co,
                                        getattr(hl, "W_z", None), getattr(hl, "b_z", None))
            return fused_triton.lex_levels(x0, w, self.lexicalized, mode, lv)
        lv = prop.schedule_on(x.device).up  # the C++ loops
        if not self.lexicalized:
            x_in = fused_teng.to_levels(leaf_word_inputs(prop, x), lv)  # eqs 6-8
        elif heads is not None:
            x_in = fused_teng.to_levels(heads, lv)
        else:
            x_in = self.head_lexicon_module.level_kernel(prop, x)  # eqs 9-10
        if x_in is None:
            return None
        return fused_teng.lex_levels(self.input_terms(x_in), self.U_h, self.U_c, self.W_co, lv)

    def extra_repr(self) -> str:
        head = f", head={self.head_mode!r}" if self.lexicalized else ""
        return f"{super().extra_repr()}, lexicalized={self.lexicalized}{head}"


cells.register("lex")(LexicalizedTreeLSTM)
