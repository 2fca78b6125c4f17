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

The recurrence (:meth:`MeanVectors.recurrence`): state ``s, n``; each child edge sends
its state as it is, the engine sums them and the update adds the node's own inputs
``s = w_j x_j`` and ``n = w_j``; both engines run it.
"""

from __future__ import annotations

import torch

from gnn_treelstm.cells.base import TreeCell
from gnn_treelstm.cells.registry import cells
from gnn_treelstm.engine.propagator import Propagator
from gnn_treelstm.engine.recurrence import Recurrence
from gnn_treelstm.trees import graph as G

__all__ = ["MeanVectors", "mean_states"]


def mean_states(sums: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, c)`` from the subtree sums ``s_j`` (N, d) and word counts ``n_j`` (N, 1):
    ``h_j = s_j / n_j`` (0 where ``n_j = 0``) and ``c_j = s_j``, each (N, d)."""
    return sums / counts.clamp(min=1.0), sums


@cells.register("mean")
class MeanVectors(TreeCell):
    """Subtree means of the word vectors (Tai Table 3's "Mean vectors" at the root).

    Args:
        x_size: word vector size; also the size of the state.
        h_size: not used (the mean has the inputs' size); kept for the registry's signature.
        engine: ``"dgl"`` or ``"level"``.
    """

    edge_fields = ()
    tree_kinds = ("chain", "dependency", "constituency", "amr")
    runs_top_down = False

    def __init__(self, x_size: int, h_size: int, *, engine: str = "dgl") -> None:
        super().__init__(x_size, h_size, engine=engine)
        self.reset_parameters()

    @property
    def out_size(self) -> int:
        """The state is a mean of word vectors: ``x_size``."""
        return self.x_size

    def reset_parameters(self) -> None:
        """Nothing to initialize: the cell has no parameters."""

    def recurrence(self) -> Recurrence:
        """Subtree sums: state ``s`` (word vectors, x_size) and ``n`` (words, 1); a child
        sends its state, the update adds the node's own inputs ``s``, ``n`` to the sums."""

        def message(src, dst, rel):  # a child's subtree sums, as they are
            return src

        def update(x, m):
            return {"s": x.s + m.s, "n": x.n + m.n}

        return Recurrence(state={"s": self.x_size, "n": 1}, inputs=("s", "n"),
                          message=message, update=update)

    def compute(self, prop: Propagator, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(h, c)``: subtree means and subtree sums, each (N, x_size)."""
        graph = prop.graph
        # keys(): torch 2.4's Dynamo does not trace Mapping.__contains__ (DGL's ndata is one)
        if G.WORD in graph.ndata.keys():
            w = (graph.ndata[G.WORD] != G.NO_WORD).to(x.device, x.dtype).unsqueeze(-1)  # (N, 1)
        else:
            w = x.new_ones(x.shape[0], 1)
        out = prop(self.recurrence(), s=x * w, n=w)
        return mean_states(out.s, out.n)
