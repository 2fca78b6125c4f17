r"""Mean vectors: the word-averaging baseline of Tai, Socher & Manning (2015, §5.2, Table 3).

"Mean vectors" represents a sentence by the average of its word vectors and feeds it to the
same relatedness head as the Tree-LSTMs. As a cell over a tree, every node gets the mean of
the word vectors in its subtree, so the root holds the sentence mean on any tree (chain,
dependency or constituency) and per-node heads still work. For node ``j`` with children
``C(j)``, ``w_j = 1`` if ``j`` has a word (``ndata["word"] != NO_WORD``) else 0::

    s_j  = w_j x_j + Σ_{k∈C(j)} s_k           subtree sum of word vectors
    n_j  = w_j     + Σ_{k∈C(j)} n_k           subtree word count
    h_j  = s_j / n_j                           (0 where the subtree has no word)
    c_j  = s_j

The cell has no parameters: with fixed vectors (the relatedness default, Tai §5.3) only
the head trains. Its state has the inputs' size, so ``out_size`` is ``x_size``; ``h_size``
is accepted for the registry's common signature ``(x_size, h_size)`` and not used.

Engines: ``"dgl"`` sends ``[s_k ; n_k]`` along each child edge with DGL's built-in
``copy_u``/``sum`` under ``dgl.prop_nodes_topo`` and adds the node's own word in the apply
function; ``"level"`` adds each level's children sums with one ``index_add`` per level
(:func:`subtree_sums_by_level`). Both compute the same sums.
"""

from __future__ import annotations

import dgl
import dgl.function as fn
import torch

from .. import graph as G
from . import cells
from .base import TreeCell

__all__ = ["MeanVectors", "mean_states", "subtree_sums_by_level"]


def mean_states(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, c)`` from the subtree sums ``s = [s_j ; n_j]`` (N, d + 1): ``h_j = s_j / n_j``
    (0 where ``n_j = 0``) and ``c_j = s_j``, each (N, d)."""
    sums, counts = s[:, :-1], s[:, -1:]
    return sums / counts.clamp(min=1.0), sums


def subtree_sums_by_level(acc: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor,
                          edge_offsets: list[int]) -> torch.Tensor:
    """Bottom-up subtree sums on a level schedule (rows in schedule order).

    ``acc`` (N, d) holds every node's own term; the edges into level ``l`` are positions
    ``edge_offsets[l]:edge_offsets[l+1]`` of ``edge_src`` (child rows) and ``edge_dst``
    (parent rows). Children sit in lower levels, so their sums are final when read.
    """
    out = acc.clone()
    for lo, hi in zip(edge_offsets[:-1], edge_offsets[1:]):
        if hi > lo:
            out = out.index_add(0, edge_dst[lo:hi], out.index_select(0, edge_src[lo:hi]))
    return out


@cells.register("mean")
class MeanVectors(TreeCell):
    """Subtree means of the word vectors (Tai Table 3's "Mean vectors" at the root).

    Args:
        x_size: word vector size; also the size of the state.
        h_size: not used (the mean has the inputs' size); kept for the registry's signature.
        engine: ``"dgl"`` or ``"level"``.
    """

    tree_kinds = ("chain", "dependency", "constituency", "amr")

    def __init__(self, x_size: int, h_size: int, *, engine: str = "dgl") -> None:
        super().__init__(x_size, h_size, engine=engine)
        self.reset_parameters()

    @property
    def out_size(self) -> int:
        """The state is a mean of word vectors: ``x_size``."""
        return self.x_size

    def reset_parameters(self) -> None:
        """Nothing to initialize: the cell has no parameters."""

    def forward(self, graph: dgl.DGLGraph, x: torch.Tensor, schedule=None,
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(h, c)``: subtree means and subtree sums, each (N, x_size)."""
        self.check_input(graph, x)
        w = (graph.ndata[G.WORD] != G.NO_WORD).to(x.dtype).unsqueeze(-1)  # (N, 1)
        own = torch.cat([x * w, w], dim=-1)                                 # (N, d + 1)
        if self.engine == "level":
            return self.level_forward(graph, x, schedule, own=own)
        with graph.local_scope():
            graph.ndata["own"] = own
            graph.ndata["s"] = torch.zeros_like(own)

            def apply(nodes):  # s_j = own_j + Σ_k s_k (leaves: the sum is zeros)
                return {"s": nodes.data["own"] + nodes.data["m"]}

            if graph.num_edges():
                dgl.prop_nodes_topo(graph, fn.copy_u("s", "msg"), fn.sum("msg", "m"),
                                    apply_node_func=apply)
                s = graph.ndata["s"]
            else:  # single nodes: every subtree is the node itself
                s = own
        return mean_states(s)
