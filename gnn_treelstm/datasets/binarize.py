"""A binarized constituency-style tree derived from a dependency parse.

For data sets without gold constituency trees (SICK with spaCy, TREC, SNLI) the
constituency Tree-LSTMs (binary N-ary cells) need binary trees whose leaves are the
words. The conversion is head-outward binarization:

* every word is a leaf (nodes ``0..n-1``, sentence order, with its word id);
* a head ``h`` starts as its own leaf; it then attaches its dependents one at a time,
  **right dependents first, nearest first, then left dependents, nearest first**. Each
  attachment creates one new binary internal node without a word (``NO_WORD``) whose
  children are the current head constituent and the dependent's (recursively built)
  constituent, in sentence order (left child = position 0, right child = position 1);
* a dependent's constituent is built the same way before it is attached.

Right-before-left mirrors the usual phrase structure (the verb takes its object to form
the VP before the subject attaches to form the S). Every attachment adds exactly one
internal node, so a sentence of n words gives ``2n - 1`` nodes, like the Stanford
``cparents`` trees. With a projective parse every constituent covers a contiguous span;
for a non-projective arc the node's span is the ``[min, max + 1)`` extent of its words.
Internal nodes get the ``IGNORE`` label, relations are the child positions
(``left``/``right``) as for gold constituency trees.

Example: "the cat sat down" with heads ``the->cat, cat->sat, down->sat``::

    (((the) cat) ((sat) down))   i.e.  [[the cat] [sat down]]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import dgl

from gnn_treelstm.datasets.arrays import TreeRecord, record_graph
from gnn_treelstm.trees.graph import IGNORE, NO_WORD

__all__ = ["BinaryTree", "binarize_dependency", "binary_record", "binary_graph"]


@dataclass
class BinaryTree:
    """Parent pointers of a binary tree: words first (0..n-1), internal nodes after;
    the root is the last node."""

    parents: list[int]
    positions: list[int]
    spans: list[tuple[int, int]]
    num_words: int


def binarize_dependency(heads: Sequence[int]) -> BinaryTree:
    """Binarize a dependency tree (``heads[i]``: head of word i, -1 for the root).

    See the module docstring for the conversion. Raises ``ValueError`` for an empty
    sentence, not exactly one root, or a head out of range.
    """
    n = len(heads)
    if n == 0:
        raise ValueError("binarize_dependency: empty sentence")
    roots = [i for i, h in enumerate(heads) if h == -1]
    if len(roots) != 1:
        raise ValueError(f"binarize_dependency: expected one root (head -1), got {len(roots)}")
    deps: list[list[int]] = [[] for _ in range(n)]
    for i, h in enumerate(heads):
        if h >= n or h < -1 or h == i:
            raise ValueError(f"binarize_dependency: word {i} has invalid head {h}")
        if h >= 0:
            deps[h].append(i)
    parents = [-1] * n
    positions = [0] * n
    spans: list[tuple[int, int]] = [(i, i + 1) for i in range(n)]

    def new_node(a: int, b: int) -> int:
        # a, b: node ids of two constituents; order them by span start
        left, right = (a, b) if spans[a][0] <= spans[b][0] else (b, a)
        node = len(parents)
        parents.append(-1)
        positions.append(0)
        spans.append((min(spans[a][0], spans[b][0]), max(spans[a][1], spans[b][1])))
        parents[left], positions[left] = node, 0
        parents[right], positions[right] = node, 1
        return node

    # build bottom-up without recursion: process heads in order of decreasing depth
    depth = [0] * n
    for i in range(n):
        j, d = i, 0
        while heads[j] >= 0:
            j = heads[j]
            d += 1
            if d > n:
                raise ValueError("binarize_dependency: the heads contain a cycle")
        depth[i] = d
    top = list(range(n))  # the constituent node of each word's full subtree
    for h in sorted(range(n), key=lambda k: -depth[k]):
        node = h
        right = sorted(d for d in deps[h] if d > h)
        left = sorted((d for d in deps[h] if d < h), reverse=True)
        for d in right + left:
            node = new_node(node, top[d])
        top[h] = node
    assert len(parents) == 2 * n - 1
    return BinaryTree(parents, positions, spans, n)


def binary_record(
    heads: Sequence[int],
    word_ids: Sequence[int],
    *,
    labels: Sequence[int] | None = None,
) -> TreeRecord:
    """The binarized constituency tree of a dependency parse (see module docstring) as
    parent pointers. ``labels`` (optional, one per node of the binary tree) default to
    ``IGNORE``.
    """
    tree = binarize_dependency(heads)
    total = len(tree.parents)
    words = list(word_ids) + [NO_WORD] * (total - tree.num_words)
    if labels is None:
        labels = [IGNORE] * total
    return TreeRecord(tree.parents, words, labels=labels, rels=tree.positions,
                      positions=tree.positions, spans=tree.spans)


def binary_graph(
    heads: Sequence[int],
    word_ids: Sequence[int],
    *,
    labels: Sequence[int] | None = None,
) -> dgl.DGLGraph:
    """The binarized constituency graph of a dependency parse (:func:`binary_record`)."""
    return record_graph(binary_record(heads, word_ids, labels=labels))
