r"""Bidirectional head-lexicalized Tree-LSTM, BiConTree (Teng & Zhang 2017, §4.3, §5).

The bottom-up lexicalized cell (:class:`~gnn_treelstm.cells.lexicalized.LexicalizedTreeLSTM`,
eqs 9-12, 5, 1) and the top-down cell (:class:`~gnn_treelstm.cells.topdown.TopDownTreeLSTM`,
eqs 14-15) run over the same tree with separate parameters; the head lexicons ``x_t``
(eqs 9-10) are computed once, by the bottom-up cell's head gate, and feed both directions
(the top-down cell has no head parameters of its own here). As in a bidirectional
sequential LSTM (eq 13) a node's state is the concatenation of both directions::

    h_t = h_t↑ ⊕ h_t↓        c_t = c_t↑ ⊕ c_t↓           (N, 2h)   (eq 13 analogue)

Sentence representation (eq 16), :meth:`BidirectionalTreeLSTM.sentence_vector`::

    h = h_ROOT↑ ⊕ h_ROOT↓ ⊕ (1/n) Σ_{i=1..n} h'_i                  (B, 3h)

where ``h'_i`` is the top-down state of the i-th word (leaf). :meth:`node_vectors` gives
the same three parts for every node, averaging the top-down states of the leaves the node
covers, which is what the authors' code feeds the classifier of eq 17 at every phrase
(phrase-level training on SST).

Parameters: ``up`` (ConTree+Lex: ``17h² + 5h + 4hx + 2x² + x``) and ``down`` (``14h² + 4hx
+ 4h`` with the default ``tie_input=True``); Table 5 (BiConTree, |h|=150, x=300, classifier
450 -> 128 -> 5) is reproduced exactly, see
:func:`~gnn_treelstm.cells.lexicalized.teng_table5_count`.

The level engine's fast kernel (``level_kernel``, float32 CPU) computes the head lexicons
once and composes the two cells' C++ level loops (:mod:`gnn_treelstm.kernels.fused_teng`).
"""

from __future__ import annotations

from types import MappingProxyType

import dgl
import torch

from gnn_treelstm.cells.base import TreeCell
from gnn_treelstm.cells.lexicalized import LexicalizedTreeLSTM, leaf_word_rows
from gnn_treelstm.cells.registry import cells
from gnn_treelstm.cells.topdown import TopDownTreeLSTM, covered_leaf_mean, leaf_mean
from gnn_treelstm.engine.propagator import Propagator
from gnn_treelstm.kernels import fused_teng, fused_triton
from gnn_treelstm.trees import graph as G

__all__ = ["BidirectionalTreeLSTM"]


class BidirectionalTreeLSTM(TreeCell):
    """BiConTree: bottom-up ConTree+Lex plus top-down Tree-LSTM (Teng & Zhang §4.3).

    Args:
        x_size: word vector size.
        h_size: hidden size of each direction; ``out_size = 2 * h_size``.
        head: head lexicalization (``gate | left | right | average``, Table 3).
        tie_input: top-down input weights shared between sides (Table 5), see
            :class:`~gnn_treelstm.cells.topdown.TopDownTreeLSTM`.
        engine: ``"dgl"`` (``dgl.prop_nodes_topo``, the reference) or ``"level"``
            (:mod:`gnn_treelstm.engine.level`).

    ``forward(graph, x) -> (h, c)``, each (N, 2*h_size) = ``[bottom-up ; top-down]``.
    """

    #: Teng & Zhang §6: Adam, dropout 0.5 on the word vectors, eq 17's classifier
    run_defaults = MappingProxyType({"optimizer": "adam", "emb_dropout": 0.5, "teng_head": True})


    max_children = 2
    uses_relations = False
    reads_words = True
    tree_kinds = ("constituency",)

    def __init__(
        self, x_size: int, h_size: int, *, head: str = "gate", tie_input: bool = True,
        engine: str = "dgl",
    ) -> None:
        super().__init__(x_size, h_size, engine=engine)
        self.up = LexicalizedTreeLSTM(x_size, h_size, head=head, lexicalized=True)
        self.down = TopDownTreeLSTM(x_size, h_size, head=None, tie_input=tie_input)
        self.reset_parameters()

    @property
    def out_size(self) -> int:
        return 2 * self.h_size

    @property
    def sentence_size(self) -> int:
        """Size of :meth:`sentence_vector` rows (eq 16): ``3 * h_size``."""
        return 3 * self.h_size

    def reset_parameters(self) -> None:
        self.up.reset_parameters()
        self.down.reset_parameters()

    def check_input(self, graph: dgl.DGLGraph, x: torch.Tensor, **tree_kw) -> None:
        super().check_input(graph, x, max_children=self.max_children, **tree_kw)

    def compute(self, prop: Propagator, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-node ``(h, c)``, each (N, 2h): ``[h↑ ; h↓]`` and ``[c↑ ; c↓]``."""
        heads = self.up.head_lexicon_module.run(prop, x)  # (N, x): eqs 9-10, once
        h_up, c_up = self.up.compute(prop, x, heads)  # eqs 11, 12, 5, 1
        h_dn, c_dn = self.down.compute(prop, x, heads)  # eqs 14-15
        return torch.cat([h_up, h_dn], dim=-1), torch.cat([c_up, c_dn], dim=-1)

    def level_kernel(self, prop: Propagator, x: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The level loops on the forward's path (:meth:`kernel_path`). The C++ loops
        (float32 CPU): the head lexicons once, then the two cells' kernels (bottom-up eqs 11,
        12, 5, 1; top-down eqs 14-15). The Triton kernels
        (:mod:`gnn_treelstm.kernels.fused_triton`; CUDA): the lex cell's loop also yields
        the head lexicons, so two loops."""
        path = self.kernel_path(prop, x)
        if prop.graph.num_nodes() == 0 or path == "general":
            return None
        if path == "triton":
            sched = prop.schedule_on(x.device)
            up, down = sched.up, sched.require_down()
            lex, td, hl = self.up, self.down, self.up.head_lexicon_module
            w = fused_triton.LexWeights(lex.W_x, lex.b, lex.U_h, lex.U_c, lex.W_co,
                                        getattr(hl, "W_z", None), getattr(hl, "b_z", None))
            h_up, c_up, heads = fused_triton.lex_levels(  # heads: (N, x) up order, eqs 9-10
                leaf_word_rows(prop, x), w, True, hl.mode, up, heads=True)
            h_dn, c_dn = fused_triton.topdown_levels(
                fused_teng.up_to_down(heads, up, down), td.W_x, td.b, td.U_h, td.U_c, td.W_co,
                fused_teng.down_sides(down), down)
            return torch.cat([h_up, h_dn], dim=-1), torch.cat([c_up, c_dn], dim=-1)
        sched = prop.schedule_on(x.device)  # the C++ loops
        up, down = sched.up, sched.require_down()
        heads = self.up.head_lexicon_module.level_kernel(prop, x)  # (N, x), up order
        if heads is None:
            return None
        lex, td = self.up, self.down
        h_up, c_up = fused_teng.lex_levels(lex.input_terms(heads), lex.U_h, lex.U_c, lex.W_co,
                                           up)
        side = fused_teng.down_sides(down)
        h_dn, c_dn = fused_teng.topdown_levels(
            td.input_terms(fused_teng.up_to_down(heads, up, down), side), td.U_h, td.U_c,
            td.W_co, side, down)
        return torch.cat([h_up, h_dn], dim=-1), torch.cat([c_up, c_dn], dim=-1)

    def sentence_vector(self, graph: dgl.DGLGraph, h: torch.Tensor) -> torch.Tensor:
        """Eq 16 per graph of the batch: ``[h_ROOT↑ ; h_ROOT↓ ; mean_i h'_i]``, (B, 3h).

        ``h`` is :meth:`forward`'s (N, 2h) output; ``h'_i`` are the top-down states of the
        graph's leaves (its words). Rows follow the batch order.
        """
        self.check_output(graph, h)
        k = self.h_size
        roots = G.batch_roots(graph).to(h.device)  # (B,)
        return torch.cat([h[roots], leaf_mean(graph, h[:, k:])], dim=-1)  # (B, 2h + h)

    def node_vectors(self, graph: dgl.DGLGraph, h: torch.Tensor) -> torch.Tensor:
        """Eq 16's three parts for every node, (N, 3h): ``[h↑ ; h↓ ; mean of h'_i over
        the leaves the node covers]`` (the authors' per-phrase classifier input; at a root
        this equals :meth:`sentence_vector`'s row)."""
        self.check_output(graph, h)
        return torch.cat([h, covered_leaf_mean(graph, h[:, self.h_size:])], dim=-1)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, out_size={self.out_size}"


cells.register("bitree")(BidirectionalTreeLSTM)
