"""Tiny random and hand-built trees shared by the tests (schema of gnn_treelstm.trees.graph)."""

from __future__ import annotations

import random

import dgl

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from gnn_treelstm.trees.graph import NO_WORD, make_tree


def random_tree(
    rng: random.Random,
    n_leaves: int,
    *,
    max_children: int | None = 2,
    exact_children: bool = False,
    words: str = "all",
    num_relations: int = 1,
    vocab_size: int = 50,
) -> dgl.DGLGraph:
    """A random tree over ``n_leaves`` leaves.

    Built bottom-up by repeatedly merging 1..max_children adjacent subtrees under a new
    parent (exactly ``max_children`` when ``exact_children``, e.g. binary constituency trees;
    a final group may be smaller only when fewer subtrees remain). ``words="all"`` gives every
    node a word (dependency-like), ``"leaves"`` only the leaves (constituency-like).
    Relations are random in ``[0, num_relations)``; positions follow the left-to-right order.
    """
    parents: list[int] = [-1] * n_leaves
    pos: list[int] = [0] * n_leaves
    spans = [[i, i + 1] for i in range(n_leaves)]
    frontier = list(range(n_leaves))
    while len(frontier) > 1:
        new_frontier = []
        i = 0
        while i < len(frontier):
            hi = max_children if max_children is not None else 4
            k = hi if exact_children else rng.randint(1, hi)
            k = min(k, len(frontier) - i)
            if len(frontier) - i == 1 and (new_frontier or exact_children):
                new_frontier.append(frontier[i])
                i += 1
                continue
            new_frontier.append(_merge(parents, pos, spans, frontier[i:i + k]))
            i += k
        if len(new_frontier) == len(frontier):  # no progress (all groups of size 1): force merge
            new_frontier = new_frontier[:-2] + [_merge(parents, pos, spans, new_frontier[-2:])]
        frontier = new_frontier
    n = len(parents)
    if words == "all":
        w = [rng.randrange(vocab_size) for _ in range(n)]
    elif words == "leaves":
        w = [rng.randrange(vocab_size) if i < n_leaves else NO_WORD for i in range(n)]
    else:
        raise ValueError(f"words must be 'all' or 'leaves', got {words!r}")
    rels = [rng.randrange(num_relations) for _ in range(n)]
    labels = [rng.randrange(5) for _ in range(n)]
    return make_tree(parents, w, labels=labels, rels=rels, positions=pos, spans=spans)


def _merge(parents: list[int], pos: list[int], spans: list[list[int]], group: list[int]) -> int:
    """Put the subtrees ``group`` under a new parent node; return its index."""
    node = len(parents)
    parents.append(-1)
    pos.append(0)
    spans.append([spans[group[0]][0], spans[group[-1]][1]])
    for p, c in enumerate(group):
        parents[c] = node
        pos[c] = p
    return node


def random_dependency_tree(
    rng: random.Random, n_words: int, *, num_relations: int = 5, max_children: int | None = None,
    vocab_size: int = 50,
) -> dgl.DGLGraph:
    """A random dependency-style tree: every node is a word, any fan-out (bounded if asked)."""
    parents = [-1] * n_words
    order = list(range(n_words))
    rng.shuffle(order)
    root = order[0]
    placed = [root]
    n_kids = {root: 0}
    for node in order[1:]:
        choices = [p for p in placed if max_children is None or n_kids[p] < max_children]
        p = rng.choice(choices)
        parents[node] = p
        n_kids[p] += 1
        n_kids[node] = 0
        placed.append(node)
    words = [rng.randrange(vocab_size) for _ in range(n_words)]
    rels = [rng.randrange(num_relations) for _ in range(n_words)]
    # positions: siblings in sentence (node index) order -> make_tree's default
    return make_tree(parents, words, rels=rels, spans=[[i, i + 1] for i in range(n_words)])


def chain(n: int, vocab_size: int = 50, seed: int = 0) -> dgl.DGLGraph:
    """Word i -> word i+1; the root is the last word."""
    rng = random.Random(seed)
    parents = list(range(1, n)) + [-1]
    return make_tree(parents, [rng.randrange(vocab_size) for _ in range(n)],
                     spans=[[i, i + 1] for i in range(n)])


def random_batch(seed: int = 0, count: int = 20, **kw) -> list[dgl.DGLGraph]:
    """``count`` random trees of varied size (1 to 12 leaves)."""
    rng = random.Random(seed)
    return [random_tree(rng, rng.randint(1, 12), **kw) for _ in range(count)]


def random_dependency_batch(seed: int = 0, count: int = 20, **kw) -> dgl.DGLGraph:
    """``count`` random dependency trees of 1 to 15 words, batched."""
    rng = random.Random(seed)
    return dgl.batch([random_dependency_tree(rng, rng.randint(1, 15), **kw)
                      for _ in range(count)])
