"""Chain graphs for the sequential LSTM baselines.

Word i -> word i+1 (child -> parent), so the root is the last word and a bottom-up pass is
a left-to-right LSTM; the backward chain is ``dgl.reverse`` of this graph at train time
(a top-down pass), or :func:`chain_graph` with ``reverse=True`` (word i+1 -> word i, root
the first word) when a separate graph is wanted. Node i's span is the prefix ``[0, i+1)``
(``[i, n)`` when reversed). Relations are all 0 (one relation, ``next``).
"""

from __future__ import annotations

from collections.abc import Sequence

import dgl

from gnn_treelstm.datasets.arrays import TreeRecord, record_graph
from gnn_treelstm.trees.graph import NO_WORD, WORD

__all__ = ["CHAIN_RELATIONS", "chain_parents", "chain_spans", "chain_record", "chain_graph",
           "word_chains"]

CHAIN_RELATIONS = ["next"]


def chain_parents(n: int, *, reverse: bool = False) -> list[int]:
    """Parent pointers of a chain of ``n`` words (root: last word, first if ``reverse``)."""
    if n <= 0:
        raise ValueError("chain_parents: empty sentence")
    if reverse:
        return [-1] + list(range(n - 1))
    return list(range(1, n)) + [-1]


def chain_spans(n: int, *, reverse: bool = False) -> list[tuple[int, int]]:
    """The words each node's sub-chain covers."""
    return [(i, n) for i in range(n)] if reverse else [(0, i + 1) for i in range(n)]


def chain_record(word_ids: Sequence[int], *, labels: Sequence[int] | None = None,
                 reverse: bool = False) -> TreeRecord:
    """The chain over ``word_ids`` as parent pointers (every node is a word)."""
    n = len(word_ids)
    return TreeRecord(chain_parents(n, reverse=reverse), list(word_ids), labels=labels,
                      spans=chain_spans(n, reverse=reverse))


def chain_graph(
    word_ids: Sequence[int],
    *,
    labels: Sequence[int] | None = None,
    reverse: bool = False,
) -> dgl.DGLGraph:
    """The chain graph over ``word_ids`` (every node is a word)."""
    return record_graph(chain_record(word_ids, labels=labels, reverse=reverse))


def word_chains(trees: Sequence[dgl.DGLGraph]) -> list[dgl.DGLGraph]:
    """The chain graph (:func:`chain_graph`) of each tree's words, its word nodes in node
    order: the sequential baselines' input over the sentences of ``trees``."""
    out = []
    for g in trees:
        words = g.ndata[WORD]
        out.append(chain_graph(words[words != NO_WORD].tolist()))
    return out
