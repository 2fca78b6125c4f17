"""Level schedules: the propagation order of a (batched) tree graph, computed once per batch.

``dgl.prop_nodes_topo`` recomputes the topological frontiers on every call and, with
Python reduce functions, buckets every frontier by in-degree. A :class:`LevelSchedule`
computes the frontiers once, on the CPU (typically in the data loader's collate
function), as a handful of flat index tensors that any cell's level kernel can slice.

Two directions:

* ``up`` (bottom-up, the frontiers of ``prop_nodes_topo``): level 0 holds every leaf, a
  parent sits one level above its highest child (its *height*). The sources of a node
  are its children.
* ``down`` (top-down, for the cells of Teng & Zhang §4.3): level 0 holds the roots, a
  child sits one level below its parent (its *depth*). The single source of a node is
  its parent.

Layout of one direction (:class:`Levels`; ``N`` nodes, ``E`` edges, ``L`` levels):

* ``order`` (N,): node ids sorted by level (then id). Kernels keep their state buffers in
  this *schedule order*, so the nodes of level ``l`` are the contiguous rows
  ``node_offsets[l]:node_offsets[l + 1]`` and each level is written with one slice copy.
* ``rank`` (N,): the inverse permutation, node id -> row in schedule order.
* Edges sorted by (level of the computed node, its row, child position):
  ``edge_src`` (E,) the row (schedule order) of the node whose state is read;
  ``edge_dst`` (E,) the row of the node computed; ``edge_seg`` (E,) the index of the
  computed node *within its level* (segment ids for ``index_add_`` / scatter-sum);
  ``edge_rel``/``edge_pos`` the edge's ``edata['rel']``/``edata['pos']`` (0 when absent);
  ``edge_id`` the original edge id. The edges of level ``l`` are
  ``edge_offsets[l]:edge_offsets[l + 1]``.
* ``slots`` (N, W) int64 and ``slot_mask`` (N, W) bool: per node (schedule order) the rows
  of its sources placed by child position (column ``pos``; ``W`` = largest position + 1,
  at least 1), padding = ``N`` so that a buffer with one extra zero row at the end gathers
  zeros for missing children. For ``down``, ``W`` is 1 (the parent).
* ``up`` only (``None`` for ``down``), each row's edge to its parent (a node has at most
  one): ``next_row`` (N,) the parent's row (``N``: a root), ``next_pos`` (N,) that edge's
  ``edge_pos`` (0: a root), ``next_edge`` (N,) its index in the edge arrays (``E``: a
  root); and ``edge_start`` (N + 1,) the first edge into each row (the edges into row
  ``r`` are ``edge_start[r]:edge_start[r + 1]``). Built with the rest, once per batch, so
  that the level kernels do not compute them every step.

Offsets are host-side Python ints: slicing a level never synchronises with a device.
Nothing here assumes binary trees, a maximum depth or a batch composition.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Protocol

import dgl
import numpy as np
import torch

from gnn_treelstm.eager import eager
from gnn_treelstm.trees import graph as G

__all__ = ["Levels", "LevelSchedule", "heights", "depths"]


def _ancestors(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Depth of every node of the forest with edges ``src -> dst`` (child -> parent) and its
    ``2^k``-th ancestors (clamped at the root), ``k = 0, 1, ...`` until every node reaches
    its root, by pointer doubling (O(log depth) passes).

    Raises:
        ValueError: a node with two parents, a self-loop or a cycle.
    """
    anc = np.arange(n, dtype=np.int64)
    anc[src] = dst  # a root is its own ancestor
    depth = np.zeros(n, dtype=np.int64)
    depth[src] = 1  # the steps from a node to its ancestor in ``anc``
    if np.count_nonzero(depth) != len(src):
        bad = int(np.flatnonzero(np.bincount(src, minlength=n) > 1)[0])
        raise ValueError(
            f"LevelSchedule: node {bad} has more than one parent; the graph is not a forest of "
            "trees with edges pointing child -> parent"
        )
    ancs = [anc]
    # After k passes, anc is the 2^k-th ancestor (clamped at the root) and depth counts
    # the steps taken; a root's anc is itself and adds 0 (only a root has 0 steps to go).
    for _ in range(max(1, int(n).bit_length()) + 1):
        add = depth[anc]
        if not add.any():
            return depth, ancs
        depth += add
        anc = anc[anc]
        ancs.append(anc)
    loops = np.flatnonzero(src == dst)
    if len(loops):
        raise ValueError(
            f"LevelSchedule: node {int(src[loops[0]])} is its own parent (self-loop); tree "
            "graphs must be acyclic with edges pointing child -> parent"
        )
    raise ValueError(
        "LevelSchedule: the graph has a cycle (some node never reaches a root); tree "
        "graphs must be acyclic with edges pointing child -> parent"
    )


def _edges_of(par: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    src = np.flatnonzero(np.asarray(par) >= 0)
    return src, np.asarray(par, dtype=np.int64)[src]


def depths(par: np.ndarray) -> np.ndarray:
    """Distance of every node to its root (``par``: the parent of every node, -1 for a
    root), by pointer doubling (O(log depth) passes)."""
    return _ancestors(*_edges_of(par), len(par))[0]


def _heights(depth: np.ndarray, ancs: list[np.ndarray]) -> np.ndarray:
    """Heights from the depths and the doubling ancestors of :func:`_ancestors`: the
    deepest descendant's depth, less the node's own. Pass ``k`` sends what every node has
    (the largest depth below it within ``2^k - 1`` steps) to its ``2^k``-th ancestor
    (clamped: any ancestor may take a descendant's depth), so after the passes every node
    has seen its whole subtree: O(log depth) scatters instead of one a level."""
    deepest = depth.copy()
    for anc in ancs:
        np.maximum.at(deepest, anc, deepest.copy())
    return deepest - depth


def heights(par: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Height of every node (leaves 0, parent = 1 + max over its children)."""
    if len(par) == 0:
        return np.zeros(0, dtype=np.int64)
    return _heights(np.asarray(depth, dtype=np.int64), _ancestors(*_edges_of(par), len(par))[1])


@dataclass
class Levels:
    """One direction of a :class:`LevelSchedule` (see the module docstring for the layout)."""

    direction: str
    num_nodes: int
    node_offsets: list[int]
    edge_offsets: list[int]
    order: torch.Tensor
    rank: torch.Tensor
    edge_src: torch.Tensor
    edge_dst: torch.Tensor
    edge_seg: torch.Tensor
    edge_rel: torch.Tensor
    edge_pos: torch.Tensor
    edge_id: torch.Tensor
    slots: torch.Tensor
    slot_mask: torch.Tensor
    next_row: torch.Tensor | None = None
    next_pos: torch.Tensor | None = None
    next_edge: torch.Tensor | None = None
    edge_start: torch.Tensor | None = None

    @property
    def num_levels(self) -> int:
        return len(self.node_offsets) - 1

    @property
    def width(self) -> int:
        """Columns of :attr:`slots` (largest child position + 1; 1 for ``down``)."""
        return int(self.slots.shape[1])

    @property
    def device(self) -> torch.device:
        return self.order.device

    def level_nodes(self, level: int) -> tuple[int, int]:
        """Rows ``[lo, hi)`` (schedule order) of the nodes of ``level``."""
        return self.node_offsets[level], self.node_offsets[level + 1]

    def level_edges(self, level: int) -> tuple[int, int]:
        """Positions ``[lo, hi)`` in the edge arrays of the edges into ``level``."""
        return self.edge_offsets[level], self.edge_offsets[level + 1]

    def to(self, device: torch.device | str, non_blocking: bool = True) -> Levels:
        """A copy whose index tensors live on ``device`` (offsets stay host ints)."""
        moved = {
            f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
            for f in fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return replace(self, **moved)

    def pin_memory(self) -> Levels:
        moved = {
            f.name: getattr(self, f.name).pin_memory()
            for f in fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return replace(self, **moved)


#: the largest key numpy's stable sort orders by radix (16-bit keys)
_SMALL = int(np.iinfo(np.int16).max)


def _sorted_levels(level: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``order`` (nodes by level, then id), its inverse ``rank`` and the level offsets."""
    counts = np.bincount(level)
    num_levels = len(counts) if n else 0
    # a stable sort of small keys is numpy's radix sort
    order = (level.astype(np.int16) if num_levels <= _SMALL else level).argsort(kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    offsets = np.zeros(num_levels + 1, dtype=np.int64)
    counts.cumsum(out=offsets[1:])
    return order, rank, offsets


def _levels(direction: str, n: int, sorted_levels: tuple[np.ndarray, np.ndarray, np.ndarray],
            edges: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
            rel: np.ndarray, slot: tuple[np.ndarray, int]) -> Levels:
    """The :class:`Levels` of nodes in ``sorted_levels`` (:func:`_sorted_levels`) and edges
    already in their order: ``edges = (eorder, e_src, e_dst, e_pos)`` (``e_dst``
    ascending), ``slot = (slot index of every sorted edge in the flat (n, width) table,
    width)``."""
    order, rank, node_offsets = sorted_levels
    eorder, e_src, e_dst, e_pos = edges
    flat, width = slot
    # the edges into level l are those whose computed row lies in level l's rows
    edge_offsets = e_dst.searchsorted(node_offsets)
    e_seg = e_dst - node_offsets[:-1].repeat(edge_offsets[1:] - edge_offsets[:-1])
    slots = np.empty((n, width), dtype=np.int64)
    slots.fill(n)
    slots.reshape(-1)[flat] = e_src
    t = torch.from_numpy
    up = {}
    if direction == "up":  # every row read by one row at most (its parent)
        next_row, next_pos = np.full(n, n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        next_edge = np.full(n, len(e_src), dtype=np.int64)
        next_row[e_src], next_pos[e_src] = e_dst, e_pos
        next_edge[e_src] = np.arange(len(e_src), dtype=np.int64)
        up = {"next_row": t(next_row), "next_pos": t(next_pos), "next_edge": t(next_edge),
              "edge_start": t(e_dst.searchsorted(np.arange(n + 1, dtype=np.int64)))}
    return Levels(
        direction=direction,
        num_nodes=n,
        node_offsets=node_offsets.tolist(),
        edge_offsets=edge_offsets.tolist(),
        order=t(order),
        rank=t(rank),
        edge_src=t(e_src),
        edge_dst=t(e_dst),
        edge_seg=t(e_seg),
        edge_rel=t(rel[eorder]),
        edge_pos=t(e_pos),
        edge_id=t(eorder),
        slots=t(slots),
        slot_mask=t(slots != n),
        **up,
    )


def _up_levels(n: int, height: np.ndarray, src: np.ndarray, dst: np.ndarray, rel: np.ndarray,
               pos: np.ndarray) -> tuple[Levels, np.ndarray]:
    """Bottom-up levels (and their ``order`` as a numpy array): nodes by height, the edges
    ``src -> dst`` by (row of the parent, child position, edge id); a node's children fill
    its slots by position."""
    sorted_levels = _sorted_levels(height, n)
    rank = sorted_levels[1]
    comp_r = rank[dst]
    width = int(pos.max()) + 1 if len(pos) else 1
    key = comp_r * width + pos if width > 1 else comp_r
    eorder = _edge_order(key, comp_r, pos, n, width)
    edges = (eorder, rank[src[eorder]], comp_r[eorder], pos[eorder])
    return _levels("up", n, sorted_levels, edges, rel, (key[eorder], width)), sorted_levels[0]


def _down_levels(n: int, depth: np.ndarray, src: np.ndarray, dst: np.ndarray, rel: np.ndarray,
                 pos: np.ndarray) -> Levels:
    """Top-down levels: nodes by depth, every edge ``src -> dst`` read by its child, the
    one node it computes. The roots (depth 0) are the first rows and every other node has
    exactly one edge (one parent), so the edges in row order are a scatter, not a sort."""
    sorted_levels = _sorted_levels(depth, n)
    rank, offsets = sorted_levels[1], sorted_levels[2]
    roots = int(offsets[1]) if n else 0
    e = len(src)
    eorder = np.empty(e, dtype=np.int64)
    eorder[rank[src] - roots] = np.arange(e, dtype=np.int64)
    e_dst = np.arange(roots, n, dtype=np.int64)
    edges = (eorder, rank[dst[eorder]], e_dst, pos[eorder])
    return _levels("down", n, sorted_levels, edges, rel, (e_dst, 1))


def _edge_order(key: np.ndarray, comp_r: np.ndarray, pos: np.ndarray, n: int,
                width: int) -> np.ndarray:
    """The edges by ``key = comp_r * width + pos`` (row of the computed node, then child
    position), ties in edge order, as a stable sort would order them: where no two edges
    share a key (a node's children have distinct positions, as in every built tree) the
    edges are placed in a table of ``n * width`` slots; else by two stable radix sorts of
    16-bit keys (position, then row); else one stable sort."""
    small = _SMALL
    if n * width <= 8 * len(key) + 1024:
        table = np.empty(n * width, dtype=np.int64)
        table.fill(-1)
        table[key] = np.arange(len(key), dtype=np.int64)
        order = table[table >= 0]
        if len(order) == len(key):  # no shared key: the table holds every edge once
            return order
    if n <= small and width <= small:
        by_pos = np.argsort(pos.astype(np.int16), kind="stable") if width > 1 \
            else np.arange(len(key), dtype=np.int64)
        return by_pos[np.argsort(comp_r[by_pos].astype(np.int16), kind="stable")]
    return np.argsort(key, kind="stable")


#: a stored field of packed trees, as :meth:`Builder.gather` reads it: the stored array (a
#: CPU tensor), the type it is read as (None: as stored) and its map (None, or an integer
#: table: a value ``v >= 0`` reads as ``table[v]``, -1 stays -1)
Field = tuple[torch.Tensor, "torch.dtype | None", "torch.Tensor | None"]


class Builder(Protocol):
    """What builds a batch's arrays and level schedule instead of numpy, such as the C++
    routines :func:`gnn_treelstm.kernels.native.batch_builder` gives (the data loader
    passes it to :func:`~gnn_treelstm.trees.data.collate`): the same arrays, element for
    element, as the numpy code it stands in for."""

    def schedule(self, n: int, edges: tuple, levels: tuple, word: np.ndarray | None,
                 batch_size: int, top_down: bool) -> LevelSchedule:
        """:meth:`LevelSchedule.from_levels`'s schedule of ``n`` nodes, ``edges = (src, dst,
        rel, pos)`` and ``levels = (depth, height)``."""

    def gather(self, offsets: tuple[torch.Tensor, torch.Tensor], ids: torch.Tensor,
               edges: tuple[torch.Tensor, torch.Tensor], base: int, nodes: list[Field],
               edge_fields: list[Field], label: int | None = None) -> list[torch.Tensor]:
        """The stored trees ``ids`` of packed trees (``offsets``: their node and edge
        offsets; ``edges``: the stored ``src``, ``dst``): ``[nn, ne, src, dst, *nodes,
        *edges]``: each tree's nodes and edges (int64), the edges numbered within the
        batch from node ``base`` (int64), and every stored field's rows of those nodes and
        edges, as the field reads (:data:`Field`; what
        :func:`gnn_treelstm.trees.packed.batch_arrays` takes in numpy); then, where
        ``label`` is the index of the node labels among ``nodes``, the batch's label order
        (int64: what :func:`gnn_treelstm.trees.data.label_order` makes of those labels).

        Raises:
            ValueError: an edge naming a node outside its tree, or an offset outside the
                arrays (damaged packed trees).
        """


@dataclass
class LevelSchedule:
    """Bottom-up (``up``) and optionally top-down (``down``) levels of a batched forest.

    Build it once per batch with :meth:`from_graph` on the CPU, move it with :meth:`to`.
    Built in numpy, or by a ``builder`` given to :meth:`from_levels` (and
    :func:`~gnn_treelstm.trees.data.collate`): a :class:`Builder`, such as the C++ routines
    :func:`gnn_treelstm.kernels.native.batch_builder` gives (the data loader passes
    them).
    """

    num_nodes: int
    batch_size: int
    up: Levels
    down: Levels | None = None
    #: node ids with a word (``ndata['word'] != NO_WORD``) sorted by their row in the up
    #: schedule, so the first :attr:`num_leaf_words` are leaves; None if the graph has no
    #: ``word`` field. Lets cells that read ``x`` only at words project only those rows
    #: (and skip the forget-gate input terms at leaves, which have no child to forget).
    word_ids: torch.Tensor | None = None
    num_leaf_words: int = 0
    #: True when the rows of :attr:`word_ids` are exactly rows ``0..len(word_ids)-1`` of
    #: the up schedule (every leaf has a word and no other node has one, as in PTB
    #: constituency trees, or every node has one, as in chains): kernels then copy the
    #: input terms with one slice instead of a scatter.
    word_rows_contiguous: bool = False
    #: the nodes without a parent (no edge leaves them), in node order: each tree's root,
    #: as :func:`~gnn_treelstm.trees.graph.batch_roots` finds them in the graph, computed
    #: once per batch with the schedule from its edges (None: built without them)
    roots: torch.Tensor | None = None
    #: the host (CPU) schedule this one was moved from by :meth:`to` (``None`` on the CPU):
    #: a schedule is checked against a CPU graph there, so a device forward does not wait
    #: for the device (:func:`~gnn_treelstm.engine.propagator.check_schedule`)
    host: LevelSchedule | None = field(default=None, compare=False, repr=False)
    #: the mark of a schedule made from a graph's own edges by the graph's maker (a data
    #: loader's batch; :func:`~gnn_treelstm.trees.graph.remember_edges` sets it and the
    #: graph remembers it too), kept by :meth:`to`, :meth:`pin_memory` and pickling: a cell
    #: does not compare such a schedule with its graph again (None: compared)
    made: int | None = field(default=None, compare=False, repr=False)

    @classmethod
    @eager  # host-side numpy work: eager under torch.compile, never traced
    def from_graph(cls, graph: dgl.DGLGraph, *, top_down: bool = True) -> LevelSchedule:
        """Compute the schedule of ``graph`` (edges child -> parent, one parent per node).

        Raises:
            ValueError: a node with two parents or a cycle.
        """
        n = graph.num_nodes()
        src_t, dst_t = graph.edges()
        e = len(src_t)
        rel = graph.edata[G.REL].cpu().numpy() if e and G.REL in graph.edata else None
        pos = graph.edata[G.POS].cpu().numpy() if e and G.POS in graph.edata else None
        word = graph.ndata[G.WORD].cpu().numpy() if G.WORD in graph.ndata else None
        return cls.from_arrays(n, src_t.cpu().numpy(), dst_t.cpu().numpy(), rel=rel, pos=pos,
                               word=word, batch_size=int(graph.batch_size),
                               top_down=top_down)

    @classmethod
    @eager
    def from_arrays(cls, num_nodes: int, src: np.ndarray, dst: np.ndarray, *,
                    rel: np.ndarray | None = None, pos: np.ndarray | None = None,
                    word: np.ndarray | None = None, batch_size: int = 1,
                    top_down: bool = True) -> LevelSchedule:
        """The schedule of a forest given as arrays, without a graph: ``num_nodes`` nodes,
        edges ``src[i] -> dst[i]`` (child -> parent, edge id ``i``), the edges' ``rel``
        and ``pos`` (None: 0) and the nodes' ``word`` ids (None: no words), as a batch of
        ``batch_size`` trees. The same schedule :meth:`from_graph` builds of the graph
        with these edges and fields (the data loader builds it from the packed trees'
        arrays, :func:`gnn_treelstm.trees.data.collate`).

        Raises:
            ValueError: a node with two parents, a cycle or a negative child position.
        """
        n = int(num_nodes)
        src = np.asarray(src).astype(np.int64, copy=False)
        dst = np.asarray(dst).astype(np.int64, copy=False)
        e = len(src)
        zeros = np.zeros(e, dtype=np.int64)
        rel = zeros if rel is None or not e else np.asarray(rel).astype(np.int64, copy=False)
        pos = zeros if pos is None or not e else np.asarray(pos).astype(np.int64, copy=False)
        if e and pos.min() < 0:
            raise ValueError("LevelSchedule: negative child position in edata['pos']")
        depth, ancs = _ancestors(src, dst, n)
        return cls._build(n, (src, dst, rel, pos), (depth, _heights(depth, ancs)), word,
                          int(batch_size), top_down)

    @classmethod
    @eager
    def from_levels(cls, num_nodes: int,
                    edges: tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None],
                    levels: tuple[np.ndarray, np.ndarray], *, word: np.ndarray | None = None,
                    batch_size: int = 1, top_down: bool = True,
                    builder: Builder | None = None) -> LevelSchedule:
        """:meth:`from_arrays` of a forest whose levels are known: ``edges = (src, dst,
        rel, pos)`` (int64; ``rel``/``pos`` None: 0) and ``levels = (depth, height)`` of
        every node (collate reads them from the levels the packed trees computed once,
        :meth:`gnn_treelstm.trees.packed.PackedTrees.node_levels`). The same schedule,
        without walking the trees: the forest is not checked again, its levels come from
        a check of the same trees. ``builder``: what builds it instead of numpy (see the
        class docstring; None: numpy).

        Raises:
            ValueError: a negative child position.
        """
        src, dst, rel, pos = edges
        if rel is None or pos is None:
            zeros = np.zeros(len(src), dtype=np.int64)
            rel = zeros if rel is None else rel
            pos = zeros if pos is None else pos
        if builder is None and len(pos) and pos.min() < 0:  # (a builder checks its input)
            raise ValueError("LevelSchedule: negative child position in edata['pos']")
        return cls._build(int(num_nodes), (src, dst, rel, pos), levels, word,
                          int(batch_size), top_down, builder)

    @classmethod
    def _build(cls, n: int, edges: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
               levels: tuple[np.ndarray, np.ndarray], word: np.ndarray | None,
               batch_size: int, top_down: bool, builder: Builder | None = None
               ) -> LevelSchedule:
        if builder is not None:  # e.g. the C++ routine (gnn_treelstm.kernels.native)
            return builder.schedule(n, edges, levels, word, batch_size, top_down)
        src, dst, rel, pos = edges
        depth, height = levels
        up, order = _up_levels(n, height, src, dst, rel, pos)
        down = _down_levels(n, depth, src, dst, rel, pos) if top_down else None
        word_ids, num_leaf_words, contiguous = None, 0, False
        if word is not None:
            rows = (np.asarray(word).take(order) != G.NO_WORD).nonzero()[0]  # rows with a word
            num_leaf_words = int(rows.searchsorted(up.node_offsets[1] if n else 0))
            word_ids = torch.from_numpy(order[rows])
            contiguous = len(rows) == 0 or int(rows[-1]) == len(rows) - 1
        has_parent = np.zeros(n, dtype=bool)
        has_parent[src] = True
        return cls(num_nodes=n, batch_size=batch_size, up=up, down=down,
                   word_ids=word_ids, num_leaf_words=num_leaf_words,
                   word_rows_contiguous=contiguous,
                   roots=torch.from_numpy(np.flatnonzero(~has_parent)))

    @property
    def device(self) -> torch.device:
        return self.up.device

    def on_host(self) -> LevelSchedule | None:
        """This schedule if it lives on the CPU, else the CPU schedule it was moved from
        (``None`` if it was not moved from one)."""
        return self if self.device.type == "cpu" else self.host

    def to(self, device: torch.device | str, non_blocking: bool = True) -> LevelSchedule:
        """Move the index tensors (only) to ``device``; offsets stay host-side ints. Off
        the CPU the copy keeps the CPU schedule (:attr:`host`)."""
        nb = non_blocking
        return replace(
            self,
            host=None if torch.device(device).type == "cpu" else self.on_host(),
            up=self.up.to(device, non_blocking=nb),
            down=None if self.down is None else self.down.to(device, non_blocking=nb),
            word_ids=None if self.word_ids is None else self.word_ids.to(device, non_blocking=nb),
            roots=None if self.roots is None else self.roots.to(device, non_blocking=nb),
        )

    def pin_memory(self) -> LevelSchedule:
        """Pinned copy (for ``DataLoader(pin_memory=True)`` and asynchronous copies)."""
        return replace(
            self,
            up=self.up.pin_memory(),
            down=None if self.down is None else self.down.pin_memory(),
            word_ids=None if self.word_ids is None else self.word_ids.pin_memory(),
            roots=None if self.roots is None else self.roots.pin_memory(),
        )

    def require_down(self) -> Levels:
        if self.down is None:
            raise ValueError(
                "this cell runs top-down but the schedule was built with top_down=False; "
                "build it with LevelSchedule.from_graph(graph, top_down=True) (the data "
                "loader builds it for a cell whose runs_top_down is True)"
            )
        return self.down
