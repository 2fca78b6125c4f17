"""Trees straight to packed arrays: a tree as parent pointers (:class:`TreeRecord`), many
trees as the arrays of :mod:`gnn_treelstm.trees.packed` (:class:`Packer`), with no
``DGLGraph`` in between.

A :class:`TreeRecord` holds exactly what :func:`gnn_treelstm.trees.graph.make_tree` takes
(parents, words, and optionally labels, relation ids, child positions, spans), so
:func:`record_graph` is the graph of a record and :meth:`Packer.arrays` the arrays
:func:`gnn_treelstm.trees.packed.pack_graphs` makes of those graphs: the same node and
edge order (edges child -> parent in increasing child order), the same fields and
defaults (``label`` :data:`IGNORE`, ``span`` ``[-1, -1]``, relation 0, siblings numbered
in node order where no positions are given), the same checks (one root, parents in
range, no cycle, no duplicate sibling position), computed for all the trees at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import dgl
import numpy as np

from gnn_treelstm.trees.graph import IGNORE, make_tree

__all__ = ["TreeRecord", "record_graph", "Packer", "DTYPES", "SUBTREE"]

#: ``TreeRecord.spans`` of a tree whose node spans are its subtrees' extents
#: (``[min, max + 1)`` of the node numbers below and at each node: a dependency tree's)
SUBTREE = "subtree"

#: the fields of a packed tree and the torch dtype each is read as (``make_tree``'s)
DTYPES = {"n.word": "int64", "n.leaf": "bool", "n.label": "int64", "n.span": "int64",
          "n.root": "bool", "e.rel": "int64", "e.pos": "int64"}


class TreeRecord(NamedTuple):
    """One tree as :func:`gnn_treelstm.trees.graph.make_tree` takes it."""

    parents: Sequence[int]
    words: Sequence[int]
    labels: Sequence[int] | None = None
    rels: Sequence[int] | None = None
    positions: Sequence[int] | None = None
    spans: Sequence[Sequence[int]] | str | None = None  # or SUBTREE


def record_graph(rec: TreeRecord) -> dgl.DGLGraph:
    """The ``DGLGraph`` of a record (:func:`gnn_treelstm.trees.graph.make_tree`)."""
    spans = rec.spans
    if isinstance(spans, str):
        packer = Packer()
        packer.add(rec)
        spans = packer.arrays()["n.span"]
    return make_tree(rec.parents, rec.words, labels=rec.labels, rels=rec.rels,
                     positions=rec.positions, spans=spans)


class Packer:
    """Trees added one at a time, packed at the end (see the module docstring)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.where: list[str] = []
        self.parents: list[int] = []
        self.words: list[int] = []
        self.labels: list[int] = []
        self.rels: list[int] = []
        self.positions: list[int] = []
        self.given: list[bool] = []  # per tree: positions given
        self.subtree: list[bool] = []  # per tree: spans are subtree extents
        self.spans: list[int] = []

    def __len__(self) -> int:
        return len(self.sizes)

    def add(self, rec: TreeRecord, where: str = "") -> None:
        """Append a tree; ``where`` names it in an error."""
        n = len(rec.parents)
        if n == 0:
            raise ValueError(f"{where}: a tree needs at least one node (an empty sentence)")
        for name in TreeRecord._fields[1:]:
            seq = getattr(rec, name)
            if seq is not None and not isinstance(seq, str) and len(seq) != n:
                raise ValueError(f"{where}: {name} has {len(seq)} entries but the tree has "
                                 f"{n} nodes")
        self.sizes.append(n)
        self.where.append(where)
        self.parents.extend(rec.parents)
        self.words.extend(rec.words)
        self.labels.extend(rec.labels if rec.labels is not None else [IGNORE] * n)
        self.rels.extend(rec.rels if rec.rels is not None else [0] * n)
        self.given.append(rec.positions is not None)
        self.positions.extend(rec.positions if rec.positions is not None else [0] * n)
        self.subtree.append(isinstance(rec.spans, str))
        if rec.spans is None or isinstance(rec.spans, str):
            self.spans.extend([-1] * (2 * n))
        else:
            for s in rec.spans:
                self.spans.extend(s)

    def _fail(self, tree: np.ndarray, node: np.ndarray, base: np.ndarray, what: str) -> None:
        t = int(tree[node[0]])
        raise ValueError(f"{self.where[t]}: node {int(node[0] - base[node[0]])} {what}")

    def arrays(self) -> dict[str, np.ndarray]:
        """The packed arrays of the trees added (``node_offsets``, ``edge_offsets``,
        ``src``, ``dst``, ``n.<field>``, ``e.<field>``), as
        :func:`~gnn_treelstm.trees.packed.pack_graphs` makes them.

        Raises:
            ValueError: a tree without exactly one root, with a parent out of range, a
                cycle, a duplicate or negative child position, or a negative relation.
        """
        nn = np.asarray(self.sizes, dtype=np.int64)
        t_count, n = len(nn), int(nn.sum())
        offsets = np.zeros(t_count + 1, dtype=np.int64)
        np.cumsum(nn, out=offsets[1:])
        tree = np.repeat(np.arange(t_count), nn)
        base = offsets[:-1][tree]
        par = np.asarray(self.parents, dtype=np.int64).reshape(n)
        local = np.arange(n, dtype=np.int64) - base
        roots = par == -1
        if t_count and not (np.bincount(tree[roots], minlength=t_count) == 1).all():
            t = int(np.flatnonzero(np.bincount(tree[roots], minlength=t_count) != 1)[0])
            raise ValueError(f"{self.where[t]}: expected exactly one root (parent -1)")
        bad = np.flatnonzero((par < -1) | (par >= nn[tree]) | (par == local))
        if len(bad):
            self._fail(tree, bad, base, f"has invalid parent {int(par[bad[0]])}")
        gpar = np.where(roots, np.arange(n), par + base)
        self._check_acyclic(gpar, tree, base, int(nn.max()) if t_count else 1)
        child = np.flatnonzero(~roots)
        dst = gpar[child]
        pos = self._positions(child, dst, tree, base)
        rel = np.asarray(self.rels, dtype=np.int64)[child]
        if len(rel) and int(rel.min()) < 0:
            self._fail(tree, child[rel < 0], base, "has a negative relation id")
        spans = np.asarray(self.spans, dtype=np.int64).reshape(n, 2)
        if any(self.subtree):
            self._subtree_spans(spans, gpar, local, tree, int(nn.max()))
        ne = np.bincount(tree[child], minlength=t_count)
        edge_offsets = np.zeros(t_count + 1, dtype=np.int64)
        np.cumsum(ne, out=edge_offsets[1:])
        return {
            "node_offsets": offsets, "edge_offsets": edge_offsets,
            "src": local[child], "dst": par[child],
            "n.word": np.asarray(self.words, dtype=np.int64).reshape(n),
            "n.leaf": np.bincount(dst, minlength=n) == 0,
            "n.label": np.asarray(self.labels, dtype=np.int64).reshape(n),
            "n.span": spans,
            "n.root": roots,
            "e.rel": rel, "e.pos": pos,
        }

    def _check_acyclic(self, gpar: np.ndarray, tree: np.ndarray, base: np.ndarray,
                       largest: int) -> None:
        """Every node reaches its tree's root (pointer doubling, all trees at once)."""
        anc = gpar
        for _ in range(max(1, int(np.ceil(np.log2(max(largest, 2)))) + 1)):
            anc = anc[anc]
        stuck = np.flatnonzero(gpar[anc] != anc)
        if len(stuck):
            self._fail(tree, stuck, base, "never reaches the root: the parent pointers "
                       "contain a cycle")

    def _subtree_spans(self, spans: np.ndarray, gpar: np.ndarray, local: np.ndarray,
                       tree: np.ndarray, largest: int) -> None:
        """``[min, max + 1)`` of the node numbers of every node's subtree, written into
        ``spans`` for the trees that asked for it: depths by pointer doubling, then the
        extents carried up one depth at a time, deepest first."""
        depth = (gpar != np.arange(len(gpar))).astype(np.int64)
        anc = gpar
        for _ in range(max(1, int(np.ceil(np.log2(max(largest, 2)))) + 1)):
            depth = depth + depth[anc]
            anc = anc[anc]
        lo, hi = local.copy(), local + 1
        order = np.argsort(-depth, kind="stable")
        cuts = np.flatnonzero(np.diff(depth[order])) + 1
        for level in np.split(order, cuts):
            if depth[level[0]] == 0:
                break
            np.minimum.at(lo, gpar[level], lo[level])
            np.maximum.at(hi, gpar[level], hi[level])
        mine = np.asarray(self.subtree, dtype=bool)[tree]
        spans[mine, 0], spans[mine, 1] = lo[mine], hi[mine]

    def _positions(self, child: np.ndarray, dst: np.ndarray, tree: np.ndarray,
                   base: np.ndarray) -> np.ndarray:
        """Each child's position: the given one (checked), else its rank among its
        siblings in node order."""
        order = np.argsort(dst, kind="stable")
        sorted_dst = dst[order]
        first = np.searchsorted(sorted_dst, sorted_dst, side="left")
        rank = np.empty(len(child), dtype=np.int64)
        rank[order] = np.arange(len(child)) - first
        given = np.asarray(self.given, dtype=bool)
        if not given.any():
            return rank
        pos = np.asarray(self.positions, dtype=np.int64)[child]
        mine = given[tree[child]]
        if (pos[mine] < 0).any():
            self._fail(tree, child[mine & (pos < 0)], base, "has a negative position")
        key = dst[mine] * (int(pos[mine].max(initial=0)) + 1) + pos[mine]
        uniq, first_at, counts = np.unique(key, return_index=True, return_counts=True)
        if (counts > 1).any():
            dup = np.flatnonzero(np.isin(key, uniq[counts > 1]))
            self._fail(tree, child[mine][dup], base, "has a duplicate position")
        return np.where(mine, pos, rank)
