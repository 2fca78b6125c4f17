"""Packed tree storage: the trees of one side of a split as a few flat arrays, memory-mapped.

A split of ``T`` trees, ``N`` nodes and ``E`` edges is stored in a directory
(``<tree>/<split>.packed/``, pairs ``<split>.a.packed/`` and ``<split>.b.packed/``)::

    header.json          format, counts, every field's file and the dtype it is read as
    node_offsets.npy     (T + 1,) int64: tree t owns nodes node_offsets[t]:node_offsets[t+1]
    edge_offsets.npy     (T + 1,) int64: and edges edge_offsets[t]:edge_offsets[t+1]
    src.npy, dst.npy     (E,) child and parent of every edge, numbered within the tree
    n.<field>.npy        (N, ...) every ndata field (word, leaf, label, span, root, ...)
    e.<field>.npy        (E, ...) every edata field (rel, pos)
    target.<key>.npy     (T,) graph-level targets (the A side of a pair)

Integers are stored in the smallest signed type that holds their range (a word id in
``int32``, a child position in ``int8``) and read back as the type the graphs had, so a
node of SST's training trees takes 11.6 bytes on disk and 12.8 resident once read, against
454 in memory as ``DGLGraph`` objects (``docs/speed.md``, Scale). :func:`load_packed`
maps the files (``np.load(mmap_mode="r")``): loading is O(1) in the corpus, pages are read
when a batch first touches them, and the loader workers of one machine share them through
the page cache.

:class:`PackedTrees` is a read-only sequence of trees: ``trees[i]`` builds the
``DGLGraph`` of tree ``i`` (the same graph :func:`gnn_treelstm.trees.graph.make_tree`
made when the data was built), :meth:`PackedTrees.batch` builds the batched graph of a
list of trees directly from the arrays (the same graph as ``dgl.batch`` of those
trees: node and edge order, every field, ``batch_num_nodes``/``batch_num_edges``),
:meth:`PackedTrees.take` selects trees without copying them, and
:meth:`PackedTrees.remap` maps a field through a table (SST-2 labels, a checkpoint's
vocabulary) as batches are built.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import dgl
import numpy as np
import torch
from dgl import heterograph_index
from dgl.frame import Column, Frame, Scheme
from dgl.heterograph import DGLGraph

from gnn_treelstm import _dgl_compat
from gnn_treelstm.files import atomic_dir
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees import manifest
from gnn_treelstm.trees.schedule import Builder, LevelSchedule, _ancestors, _heights

_dgl_compat.attach()

__all__ = ["FORMAT", "TreeStore", "PackedTrees", "ranges", "batch_trees", "batch_arrays",
           "arrays_graph", "forest_graph", "pack_graphs",
           "concat_packed",
           "write_packed", "write_packed_parts", "load_packed", "packed_exists"]

#: version of the on-disk layout, in ``header.json``
FORMAT = 1
_OFFSETS = ("node_offsets", "edge_offsets")
_INT_TYPES = (np.int8, np.int16, np.int32, np.int64)
#: the numpy type of a field's torch dtype name (the stored field is converted in numpy)
_NUMPY_TYPES = {"int64": np.int64, "int32": np.int32, "int16": np.int16, "int8": np.int8,
                "uint8": np.uint8, "bool": np.bool_, "float32": np.float32,
                "float64": np.float64}


def _small(arr: np.ndarray) -> np.ndarray:
    """An integer array in the smallest signed type that holds its values."""
    if arr.dtype.kind not in "iu" or arr.size == 0:
        return arr
    lo, hi = int(arr.min()), int(arr.max())
    for t in _INT_TYPES:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return arr.astype(t, copy=False)
    return arr


def ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for every (s, n), vectorised."""
    ends = np.asarray(lens).cumsum()
    if not len(ends) or ends[-1] == 0:
        return np.zeros(0, dtype=np.int64)
    shift = (starts - ends + lens).repeat(lens)
    shift += np.arange(len(shift), dtype=np.int64)
    return shift


class TreeStore(Sequence):
    """Trees held as arrays, built as graphs on access: ``store[i]`` is a ``DGLGraph``,
    :meth:`batch` the batched graph of several (what ``collate`` calls), :meth:`take` a
    selection (no copy), :meth:`remap` a field read through a table."""

    dtypes: dict[str, str]

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        n = len(self)
        i = int(i)
        if not -n <= i < n:
            raise IndexError(f"tree {i} out of range for {n} trees")
        return self.batch([i % n])

    def __iter__(self) -> Iterator[dgl.DGLGraph]:
        for i in range(len(self)):
            yield self[i]

    def batch(self, positions: Sequence[int] | np.ndarray | torch.Tensor) -> dgl.DGLGraph:
        raise NotImplementedError

    def take(self, index: Sequence[int] | np.ndarray | torch.Tensor) -> TreeStore:
        raise NotImplementedError

    def remap(self, field: str, table: torch.Tensor) -> TreeStore:
        raise NotImplementedError

    def sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """Nodes and edges of every tree."""
        raise NotImplementedError

    def field_values(self, field: str) -> np.ndarray:
        """Every value of ``field`` over the trees, in order (maps applied)."""
        raise NotImplementedError

    def max_children(self) -> tuple[int, int]:
        """The largest number of children of a node, and the first tree that has it;
        ``(0, -1)`` without edges."""
        raise NotImplementedError


class PackedTrees(TreeStore):
    """Trees held as flat arrays (see the module); ``trees[i]`` is a ``DGLGraph``.

    Args:
        arrays: ``node_offsets``, ``edge_offsets``, ``src``, ``dst``, ``n.<field>``,
            ``e.<field>`` (numpy arrays, memory-mapped or in memory).
        dtypes: the torch dtype name each ``n.``/``e.`` field is read as.
        index: which stored trees this sequence holds, in order (None: all of them).
        maps: ``{field: table}``: values ``v >= 0`` of the field read as ``table[v]``
            (-1, i.e. ``NO_WORD``/``IGNORE``, stays -1).
    """

    def __init__(self, arrays: dict[str, np.ndarray], dtypes: dict[str, str], *,
                 index: np.ndarray | None = None,
                 maps: dict[str, torch.Tensor] | None = None) -> None:
        self.arrays = arrays
        self.dtypes = dtypes
        self.index = index
        self.maps = dict(maps or {})
        self._stored = len(arrays["node_offsets"]) - 1
        self._views: dict[str, np.ndarray] = {}
        self._tensors: dict[str, torch.Tensor] = {}
        self._gather_plans: dict[bool, tuple] = {}
        self._derived_plan: list | None = None
        #: what is computed once from the stored trees (:meth:`node_levels`), shared by the
        #: views :meth:`take` and :meth:`remap` make
        self._derived: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------ sequence
    def __len__(self) -> int:
        return self._stored if self.index is None else len(self.index)

    @property
    def num_stored(self) -> int:
        """Trees in the arrays (a :meth:`take` view may hold fewer)."""
        return self._stored

    def stored_ids(self) -> np.ndarray:
        """The stored tree of each tree of this sequence."""
        return np.arange(self._stored) if self.index is None else self.index

    def take(self, index: Sequence[int] | np.ndarray | torch.Tensor) -> PackedTrees:
        """The trees at ``index`` (in that order), sharing the arrays (no copy)."""
        idx = np.asarray(index, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < -len(self) or idx.max() >= len(self)):
            raise IndexError(f"take: index out of range for {len(self)} trees")
        idx = idx % max(len(self), 1)
        ids = idx if self.index is None else self.index[idx]
        return self._view(PackedTrees(self.arrays, self.dtypes, index=ids, maps=self.maps))

    def remap(self, field: str, table: torch.Tensor) -> PackedTrees:
        """A view whose ``field`` (``n.label``, ``n.word``, ``e.rel``) reads as ``table[v]``
        where ``v >= 0`` (composed with an earlier map of the field)."""
        if field not in self.dtypes:
            raise KeyError(f"remap: no field {field!r}; fields: {sorted(self.dtypes)}")
        table = torch.as_tensor(table)
        old = self.maps.get(field)
        if old is not None:  # v -> old[v] -> table[old[v]] (where old[v] >= 0)
            table = torch.where(old >= 0, table[old.clamp(min=0)], old)
        return self._view(PackedTrees(self.arrays, self.dtypes, index=self.index,
                                      maps={**self.maps, field: table}))

    def _view(self, view: PackedTrees) -> PackedTrees:
        view._derived = self._derived  # the same stored trees
        return view

    # ------------------------------------------------------------------ statistics
    def sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """Nodes and edges of every tree of this sequence."""
        no, eo = self.arrays["node_offsets"], self.arrays["edge_offsets"]
        ids = self.stored_ids()
        return no[ids + 1] - no[ids], eo[ids + 1] - eo[ids]

    def field_values(self, field: str) -> np.ndarray:
        """Every value of ``field`` over the trees of this sequence (maps applied)."""
        arr = self.arrays[field]
        if self.index is not None:
            key = "node_offsets" if field.startswith("n.") else "edge_offsets"
            off = self.arrays[key]
            arr = arr[ranges(off[self.index], off[self.index + 1] - off[self.index])]
        out = torch.from_numpy(np.asarray(arr).astype(np.int64))
        table = self.maps.get(field)
        if table is not None:
            out = torch.where(out >= 0, table[out.clamp(min=0)], out)
        return out.numpy()

    def max_children(self) -> tuple[int, int]:
        """The largest number of children of a node, and the first tree (position in this
        sequence) that has it; ``(0, -1)`` without edges."""
        no, eo = self.arrays["node_offsets"], self.arrays["edge_offsets"]
        ids = self.stored_ids()
        ne = eo[ids + 1] - eo[ids]
        if ne.sum() == 0:
            return 0, -1
        tree_of = np.repeat(np.arange(len(ids)), ne)
        dst = np.asarray(self.arrays["dst"][ranges(eo[ids], ne)]).astype(np.int64)
        key = dst + np.repeat(np.cumsum(no[ids + 1] - no[ids]) - (no[ids + 1] - no[ids]), ne)
        deg = np.bincount(key)
        best = int(deg.max())
        first = int(tree_of[np.flatnonzero(deg[key] == best)[0]])
        return best, first

    def node_levels(self) -> tuple[np.ndarray, np.ndarray]:
        """Depth (distance to the root) and height (leaves 0) of every stored node within
        its tree, in the smallest of int16/int32 that holds them: what a batch's level
        schedule sorts its nodes by (a tree's levels do not depend on the batch it is in),
        computed once for all stored trees by pointer doubling, in chunks of about
        :data:`LEVEL_CHUNK` nodes (its memory does not grow with the corpus beyond the two
        arrays), and kept (shared with the views of :meth:`take`/:meth:`remap`; the data
        loader computes them before it starts its worker processes, which share them).

        Raises:
            ValueError: stored trees that are not trees (a node with two parents, a cycle,
                an edge to a node of another tree), naming them.
        """
        if "depth" not in self._derived:
            no, eo = self._plain("node_offsets"), self._plain("edge_offsets")
            parts = [_chunk_levels(self._plain("src"), self._plain("dst"), no, eo, lo, hi)
                     for lo, hi in _chunks(no, LEVEL_CHUNK)]
            top = max([int(d.max(initial=0)) for d, _ in parts], default=0)
            kind = np.int16 if top <= np.iinfo(np.int16).max else np.int32
            for i, key in enumerate(("depth", "height")):
                self._derived[key] = np.concatenate(
                    [p[i].astype(kind) for p in parts] or [np.zeros(0, dtype=kind)])
        return self._derived["depth"], self._derived["height"]

    @property
    def proven(self) -> bool:
        """Whether every stored tree was proven a tree (:meth:`node_levels` ran on them:
        each node at most one parent, no cycle, every edge within its tree), so that a
        batch of them needs no such check again."""
        return "depth" in self._derived

    # ------------------------------------------------------------------ batching
    def batch(self, positions: Sequence[int] | np.ndarray | torch.Tensor) -> dgl.DGLGraph:
        """The batched graph of the trees at ``positions``: the graph ``dgl.batch`` makes
        of those trees, built from the arrays in one pass (:func:`batch_trees`)."""
        return batch_trees([(self, positions)])[0]

    def _select(self, positions: Sequence[int] | np.ndarray | torch.Tensor
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Stored node and edge numbers of the trees at ``positions``, and their sizes."""
        pos = np.asarray(positions, dtype=np.int64).reshape(-1)
        ids = pos if self.index is None else self.index.take(pos)
        no, eo = self._plain("node_offsets"), self._plain("edge_offsets")
        after = ids + 1
        n0, e0 = no.take(ids), eo.take(ids)
        nn, ne = no.take(after) - n0, eo.take(after) - e0
        return ranges(n0, nn), ranges(e0, ne), nn, ne

    def _plain(self, key: str) -> np.ndarray:
        """``arrays[key]`` as a plain ``ndarray`` over the same memory (indexing a
        ``np.memmap`` costs a subclass round trip each time)."""
        plain = self._views.get(key)
        if plain is None:
            plain = self._views[key] = np.asarray(self.arrays[key]).view(np.ndarray)
        return plain

    def gather_values(self, key: str, idx: np.ndarray) -> torch.Tensor:
        """``field[idx]`` (stored node or edge numbers), in its stored type, maps applied."""
        return torch.from_numpy(self._take(key, idx, None))

    def _take(self, key: str, idx: np.ndarray, dtype: str | None) -> np.ndarray:
        """``field[idx]`` as a numpy array of ``dtype`` (None: the stored type), maps
        applied. ``np.take`` along the first axis: for a field of several columns (``span``)
        a tenth of the time of fancy indexing."""
        return self._read(key, self._plain(key).take(idx, axis=0), dtype)

    def _read(self, key: str, vals: np.ndarray, dtype: str | None) -> np.ndarray:
        """Stored values ``vals`` of ``key`` as read: maps applied, in ``dtype`` (None: the
        stored type)."""
        table = self.maps.get(key)
        if table is not None:  # v -> table[v] where v >= 0 (NO_WORD / IGNORE stay -1)
            vals = vals.astype(np.int64, copy=False)
            looked = self._table(key, table)[np.maximum(vals, 0)]
            vals = np.where(vals >= 0, looked, vals)
        if dtype is not None:
            vals = vals.astype(_NUMPY_TYPES.get(dtype, vals.dtype), copy=False)
        return vals

    def _take_fields(self, nidx: np.ndarray, eidx: np.ndarray) -> dict[str, np.ndarray]:
        """Every ``n.``/``e.`` field at stored nodes ``nidx`` and edges ``eidx``, each in the
        type it is read as, maps applied: :meth:`_take` of each, with what it looks up
        found once (:meth:`_field_plan`)."""
        out = {}
        for key, arr, node, kind in self._field_plan():
            if arr is None:  # a mapped field
                out[key] = self._take(key, nidx if node else eidx, self.dtypes[key])
                continue
            vals = arr.take(nidx if node else eidx, axis=0)
            out[key] = vals if kind is None else vals.astype(kind)
        return out

    def _stored_tensor(self, key: str) -> torch.Tensor:
        """A stored array (or a level array, ``depth``/``height``) as a CPU tensor over its
        memory, made once (read-only memory included: the native routines only read it)."""
        t = self._tensors.get(key)
        if t is None:
            arr = self._derived[key] if key in ("depth", "height") else self._plain(key)
            with warnings.catch_warnings():  # a memory-mapped file opened read-only
                warnings.simplefilter("ignore", UserWarning)
                t = self._tensors[key] = torch.from_numpy(np.ascontiguousarray(arr))
        return t

    def _gather_trees(self, positions: Sequence[int] | np.ndarray | torch.Tensor, base: int,
                      levels: bool, builder: Builder, label_order: bool = False) -> tuple:
        """The trees at ``positions`` by ``builder``'s routine (:meth:`Builder.gather`), as
        CPU tensors: each tree's nodes and edges, ``src``/``dst`` numbered within the batch
        from node ``base``, every field as read (:meth:`_take_fields`'s values),
        (``levels``) each node's depth and height, and (``label_order``, where the nodes
        have labels) their label order: ``(nn, ne, src, dst, values, depth, height,
        order)``, None for what was not asked or is not there."""
        pos = np.asarray(positions, dtype=np.int64).reshape(-1)
        ids = pos if self.index is None else self.index.take(pos)
        nodes, edges, keys = self._gather_plan(levels)
        label = keys.index(_LABEL_KEY) if label_order and _LABEL_KEY in self.dtypes else None
        t = self._stored_tensor
        out = builder.gather((t("node_offsets"), t("edge_offsets")), torch.from_numpy(ids),
                             (t("src"), t("dst")), base, nodes, edges, label)
        order = out.pop() if label is not None else None
        nn, ne, src, dst, *fields = out
        values = dict(zip(keys, fields))
        depth, height = (values.pop("depth"), values.pop("height")) if levels else (None, None)
        return nn, ne, src, dst, values, depth, height, order

    def _gather_plan(self, levels: bool) -> tuple[list, list, list[str]]:
        """What :meth:`_gather_trees` asks the builder for (made once): the node fields (and
        ``levels``: depth, height) and edge fields, each a
        :data:`~gnn_treelstm.trees.schedule.Field` (the stored tensor, the type it reads as
        where that differs, its map as int64), and every key in the order of the routine's
        results (nodes first)."""
        plan = self._gather_plans.get(levels)
        if plan is None:
            if levels:
                self.node_levels()
            nodes, edges, node_keys, edge_keys = [], [], [], []
            for key, dtype in self.dtypes.items():
                stored = self._stored_tensor(key)
                want = getattr(torch, dtype)
                table = self.maps.get(key)
                field = (stored, None if want == stored.dtype else want,
                         None if table is None else table.to(torch.int64).contiguous())
                (nodes if key[0] == "n" else edges).append(field)
                (node_keys if key[0] == "n" else edge_keys).append(key)
            for key in ("depth", "height") if levels else ():
                nodes.append((self._stored_tensor(key), None, None))
                node_keys.append(key)
            plan = self._gather_plans[levels] = (nodes, edges, node_keys + edge_keys)
        return plan

    def _field_plan(self) -> list:
        """(key, plain array or None for a mapped field, node field?, numpy type to convert
        to or None) of every field, in :attr:`dtypes` order."""
        plan = self._derived_plan
        if plan is None:
            plan = []
            for key, dtype in self.dtypes.items():
                arr = None if key in self.maps else self._plain(key)
                kind = None
                if arr is not None:
                    kind = np.dtype(_NUMPY_TYPES.get(dtype, arr.dtype))
                    kind = None if kind == arr.dtype else kind
                plan.append((key, arr, key[0] == "n", kind))
            self._derived_plan = plan
        return plan

    def _table(self, key: str, table: torch.Tensor) -> np.ndarray:
        """The map of ``key`` as an int64 numpy array (converted once)."""
        plain = self._views.get("map." + key)
        if plain is None:
            plain = self._views["map." + key] = table.to(torch.int64).numpy()
        return plain

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (on disk, or in memory once every page was read)."""
        return int(sum(v.nbytes for v in self.arrays.values()))


#: the key of the node labels among a store's fields
_LABEL_KEY = "n." + G.LABEL

#: nodes a chunk of :meth:`PackedTrees.node_levels` holds (its int64 work arrays: some
#: 100 MB)
LEVEL_CHUNK = 1 << 20


def _chunks(node_offsets: np.ndarray, size: int) -> list[tuple[int, int]]:
    """Consecutive ranges of trees ``[lo, hi)`` of about ``size`` nodes (at least one tree)."""
    out, lo, trees = [], 0, len(node_offsets) - 1
    while lo < trees:
        hi = int(np.searchsorted(node_offsets, node_offsets[lo] + size, side="right")) - 1
        hi = min(max(hi, lo + 1), trees)
        out.append((lo, hi))
        lo = hi
    return out


def _chunk_levels(src: np.ndarray, dst: np.ndarray, no: np.ndarray, eo: np.ndarray,
                  lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Depth and height (int64) of the nodes of stored trees ``lo..hi-1``."""
    nn, ne = np.diff(no[lo:hi + 1]), np.diff(eo[lo:hi + 1])
    first = np.repeat(no[lo:hi] - no[lo], ne)
    s, d = (np.asarray(a[eo[lo]:eo[hi]], dtype=np.int64) for a in (src, dst))
    size = np.repeat(nn, ne)
    if len(s) and ((s < 0) | (s >= size) | (d < 0) | (d >= size)).any():
        raise ValueError(f"packed trees {lo}-{hi - 1}: an edge names a node outside its "
                         "tree; the packed trees are damaged, rebuild them")
    try:
        depth, ancs = _ancestors(s + first, d + first, int(nn.sum()))
    except ValueError as exc:
        raise ValueError(f"packed trees {lo}-{hi - 1} (node numbers counted from the first "
                         f"of tree {lo}): {exc}; the packed trees are damaged, rebuild "
                         "them") from None
    return depth, _heights(depth, ancs)


def batch_trees(parts: Sequence[tuple[PackedTrees, Sequence[int] | np.ndarray | torch.Tensor]],
                *, schedule: bool = False, top_down: bool = True,
                builder: Builder | None = None) -> tuple[dgl.DGLGraph, LevelSchedule | None]:
    """One batched graph of the trees of several packed sequences, in order (for a pair
    batch: every A tree, then every B tree), built from their arrays in one pass: the
    graph ``dgl.batch`` makes of those trees (node and edge order, every field,
    ``batch_num_nodes``/``batch_num_edges``). ``schedule``: also its level schedule
    (:meth:`LevelSchedule.from_levels`, ``top_down`` levels too), computed from the same
    arrays (child -> parent edges, positions, relations, words), never read back from the
    graph; ``builder`` as in :func:`batch_arrays`.

    Raises:
        ValueError: no part, or parts whose trees have other fields.
    """
    arrays, sched = batch_arrays(parts, schedule=schedule, top_down=top_down, builder=builder)
    return arrays_graph(arrays, sched), sched


def arrays_graph(arrays: dict, schedule: LevelSchedule | None = None) -> dgl.DGLGraph:
    """The batched graph of what :func:`batch_arrays` made (:func:`forest_graph`; the
    tensors share the arrays' memory), a proven forest where the arrays say so
    (``arrays["forest"]``); ``schedule``: the schedule :func:`batch_arrays` made of the
    same arrays, which a cell then does not compare with the graph."""
    t = torch.as_tensor  # over the same memory
    values = arrays["values"]
    return forest_graph(t(arrays["src"]), t(arrays["dst"]), arrays["n"],
                        ({k[2:]: t(v) for k, v in values.items() if k[0] == "n"},
                         {k[2:]: t(v) for k, v in values.items() if k[0] == "e"}),
                        (t(arrays["nn"]), t(arrays["ne"])),
                        forest=bool(arrays.get("forest", False)), schedule=schedule)


def batch_arrays(parts: Sequence[tuple[PackedTrees, Sequence[int] | np.ndarray | torch.Tensor]],
                 *, schedule: bool = False, top_down: bool = True,
                 builder: Builder | None = None) -> tuple[dict, LevelSchedule | None]:
    """What :func:`batch_trees` makes its graph of, as numpy arrays (CPU tensors where a
    ``builder`` took them): ``n`` (nodes),
    ``src``/``dst`` (int64, numbered within the batch), ``values`` (every ``n.``/``e.``
    field), ``nn``/``ne`` (each tree's nodes and edges), and where a builder took the trees
    of one part whose nodes have labels, ``label_order`` (the batch's
    :func:`~gnn_treelstm.trees.data.label_order`, by the same call); and the schedule. ``builder``
    (:class:`~gnn_treelstm.trees.schedule.Builder`; None: numpy): the routines that take
    the trees from the arrays and build the schedule, the same arrays either way. A loader
    process sends these (:func:`gnn_treelstm.trees.data.collate` with ``wire=True``), and
    the graph is made once, where it is used.

    Raises:
        ValueError: no part, or parts whose trees have other fields.
    """
    if not parts:
        raise ValueError("batch_trees: no trees")
    dtypes = parts[0][0].dtypes
    if any(store.dtypes != dtypes for store, _ in parts[1:]):
        raise ValueError("batch_trees: the trees do not all have the same node and edge "
                         "fields; batch trees of one built data set")
    order = None
    if builder is not None:  # each part's arrays (CPU tensors) in one call of the builder's
        got, base = [], 0
        for store, positions in parts:  # (one part: its label order by the same call)
            got.append(store._gather_trees(positions, base, schedule, builder, len(parts) == 1))
            base += sum(got[-1][0].tolist())  # its nodes (a Python sum: a third of numpy's time)

        def join(tensors: list[torch.Tensor]) -> torch.Tensor:
            return tensors[0] if len(tensors) == 1 else torch.cat(tensors)

        nn, ne, src, dst = (join([g[i] for g in got]) for i in range(4))
        values = got[0][4] if len(got) == 1 else {key: join([g[4][key] for g in got])
                                                   for key in dtypes}
        n = base
        levels = (join([g[5] for g in got]), join([g[6] for g in got])) if schedule else None
        order = got[0][7]
    else:
        nn, ne, n, src, dst, values, levels = _take_arrays(parts, schedule)
    # every stored tree proven a tree (the levels computed): the batch is a forest
    arrays = {"n": n, "src": src, "dst": dst, "values": values, "nn": nn, "ne": ne,
              "forest": all(store.proven for store, _ in parts)}
    if order is not None:
        arrays["label_order"] = order
    if levels is None:
        return arrays, None
    sched = LevelSchedule.from_levels(
        n, (src, dst, values.get("e." + G.REL), values.get("e." + G.POS)), levels,
        word=values.get("n." + G.WORD), batch_size=nn.shape[0], top_down=top_down, builder=builder)
    return arrays, sched


def _take_arrays(parts: Sequence[tuple[PackedTrees, Sequence[int] | np.ndarray | torch.Tensor]],
                 levels: bool) -> tuple:
    """:func:`batch_arrays`'s arrays taken in numpy: ``(nn, ne, n, src, dst, values,
    (depth, height) or None)``."""
    picked = [(store, *store._select(positions)) for store, positions in parts]

    def cat(arrays: list[np.ndarray]) -> np.ndarray:
        return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)

    nn, ne = cat([p[3] for p in picked]), cat([p[4] for p in picked])
    n = sum(len(p[1]) for p in picked)
    # node numbers within each tree -> within the batch: add the tree's first node
    base = (nn.cumsum() - nn).repeat(ne)
    src = cat([store._take("src", eidx, "int64") for store, _, eidx, _, _ in picked]) + base
    dst = cat([store._take("dst", eidx, "int64") for store, _, eidx, _, _ in picked]) + base
    taken = [store._take_fields(nidx, eidx) for store, nidx, eidx, _, _ in picked]
    values = taken[0] if len(taken) == 1 else {key: cat([t[key] for t in taken])
                                               for key in parts[0][0].dtypes}
    # the levels (computed once a store) checked every stored edge against its tree's nodes
    stored = [store.node_levels() for store, *_ in picked] if levels else None
    if len(src) and stored is None and max(int(src.max()), int(dst.max())) >= n:
        raise ValueError(f"batch_trees: an edge names node {max(int(src.max()), int(dst.max()))}"
                         f" of a batch of {n} nodes; the packed trees are damaged, rebuild them")
    if stored is None:
        return nn, ne, n, src, dst, values, None
    depth = cat([lv[0].take(p[1]) for lv, p in zip(stored, picked)])
    height = cat([lv[1].take(p[1]) for lv, p in zip(stored, picked)])
    return nn, ne, n, src, dst, values, (depth, height)


#: the sparse formats DGL gives a graph made by ``dgl.graph`` (made lazily, as needed)
_FORMATS = ["coo", "csr", "csc"]
#: the node and edge type names of a homogeneous graph (``dgl.graph``'s)
_NTYPES, _ETYPES = ["_N"], ["_E"]


def _unit_graph_maker():
    """``heterograph_index.create_unitgraph_from_coo(1, n, n, src, dst, _FORMATS, False,
    False)`` as ``make(n, src, dst)``: DGL's graph index constructor called with the
    formats converted to DGL's list object once and the int64 CPU edge tensors passed
    through DLPack as they are (the public function converts the formats' list and checks
    each tensor's type on every call: some 6 of its 10 us). A DGL without that
    constructor gets the public function."""
    create = getattr(heterograph_index, "_CAPI_DGLHeteroCreateUnitGraphFromCOO", None)
    if create is None:
        return lambda n, src, dst: heterograph_index.create_unitgraph_from_coo(
            1, n, n, src, dst, _FORMATS, False, False)
    from dgl._ffi.object_generic import convert_to_object
    from dgl.ndarray import from_dlpack
    from torch.utils.dlpack import to_dlpack

    formats = convert_to_object(_FORMATS)
    return lambda n, src, dst: create(1, n, n, from_dlpack(to_dlpack(src)),
                                      from_dlpack(to_dlpack(dst)), formats, False, False)


_unit_graph = _unit_graph_maker()


def forest_graph(src: torch.Tensor, dst: torch.Tensor, n: int,
                 fields: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]],
                 sizes: tuple[torch.Tensor, torch.Tensor], *, forest: bool = False,
                 schedule: LevelSchedule | None = None) -> dgl.DGLGraph:
    """The batched graph of ``n`` nodes, edges ``src -> dst`` (int64, CPU, contiguous),
    node and edge ``fields`` and the trees' node and edge counts (``sizes``): what
    ``dgl.graph`` and setting the fields and ``set_batch_num_nodes``/``edges`` make, made
    by the graph index constructor ``dgl.graph`` ends in and one frame a side, without
    their argument conversions and checks (most of the time for a batch of 25 trees): the
    caller's edges name nodes below ``n`` (:func:`batch_trees` checks them); the fields
    are used as they are (not copied). The graph keeps its edges for the checks
    (:func:`~gnn_treelstm.trees.graph.remember_edges`, with ``forest``, the edges proven a
    forest, and ``schedule``, made of the same edges)."""
    src, dst = src.contiguous(), dst.contiguous()  # (DLPack passes strides; DGL reads none)
    index = _unit_graph(n, src, dst)
    g = DGLGraph.__new__(DGLGraph)  # DGLGraph(index, ...) less its argument checks
    g._init(index, _NTYPES, _ETYPES, [_frame(fields[0], n)], [_frame(fields[1], src.shape[0])])
    # what set_batch_num_nodes/edges store
    g._batch_num_nodes = {"_N": sizes[0]}
    g._batch_num_edges = {("_N", "_E", "_N"): sizes[1]}
    G.remember_edges(g, src, dst, forest=forest, schedule=schedule)
    return g


#: DGL's column scheme of each (trailing shape, dtype) of a field (made once each)
_SCHEMES: dict[tuple, Scheme] = {}


def _frame(columns: dict[str, torch.Tensor], rows: int) -> Frame:
    """``Frame(columns, num_rows=rows)`` without its conversions: each tensor a column of
    a known scheme (inferring a column's scheme is most of what a frame of a batch costs)."""
    frame = Frame(num_rows=rows)
    for name, t in columns.items():
        if t.shape[0] != rows:
            raise ValueError(f"forest_graph: field {name!r} has {t.shape[0]} rows for {rows}")
        key = (t.shape[1:], t.dtype)
        scheme = _SCHEMES.get(key)
        if scheme is None:
            scheme = _SCHEMES[key] = Scheme(tuple(t.shape[1:]), t.dtype)
        frame._columns[name] = Column(t, scheme)
    return frame


# ---------------------------------------------------------------------- packing
def pack_graphs(graphs: Iterable[dgl.DGLGraph]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Arrays and dtypes (see :class:`PackedTrees`) of ``graphs``, which must share their
    field names (as the graphs of one built split do)."""
    graphs = list(graphs)
    nn = np.array([g.num_nodes() for g in graphs], dtype=np.int64)
    ne = np.array([g.num_edges() for g in graphs], dtype=np.int64)
    arrays: dict[str, np.ndarray] = {
        "node_offsets": np.concatenate([[0], np.cumsum(nn)]).astype(np.int64),
        "edge_offsets": np.concatenate([[0], np.cumsum(ne)]).astype(np.int64),
    }
    dtypes: dict[str, str] = {}
    if not graphs:
        arrays["src"] = arrays["dst"] = np.zeros(0, dtype=np.int64)
        return arrays, dtypes
    edges = [g.edges() for g in graphs]
    arrays["src"] = np.concatenate([s.numpy() for s, _ in edges]).astype(np.int64)
    arrays["dst"] = np.concatenate([d.numpy() for _, d in edges]).astype(np.int64)
    first = graphs[0]
    for prefix, names in (("n.", list(first.ndata.keys())), ("e.", list(first.edata.keys()))):
        for name in names:
            parts = [(g.ndata if prefix == "n." else g.edata)[name] for g in graphs]
            dtypes[prefix + name] = str(parts[0].dtype).replace("torch.", "")
            arrays[prefix + name] = torch.cat(parts).numpy()
    if any(set(g.ndata.keys()) != set(first.ndata.keys())
           or set(g.edata.keys()) != set(first.edata.keys()) for g in graphs):
        raise ValueError("pack_graphs: the graphs do not all have the same node and edge "
                         "fields; build them all with make_tree")
    return arrays, dtypes


def concat_packed(parts: Sequence[tuple[dict[str, np.ndarray], dict[str, str]]]
                  ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """One set of arrays from several (:func:`pack_graphs` of consecutive chunks)."""
    parts = [p for p in parts if len(p[0]["node_offsets"]) > 1] or list(parts[:1])
    if not parts:
        return pack_graphs([])
    dtypes = parts[0][1]
    out: dict[str, np.ndarray] = {}
    for key in _OFFSETS:
        offs, base = [np.zeros(1, dtype=np.int64)], 0
        for arrays, _ in parts:
            offs.append(arrays[key][1:] + base)
            base += int(arrays[key][-1])
        out[key] = np.concatenate(offs)
    for key in parts[0][0]:
        if key not in _OFFSETS:
            out[key] = np.concatenate([arrays[key] for arrays, _ in parts])
    return out, dtypes


def write_packed(path: str | os.PathLike, arrays: dict[str, np.ndarray], dtypes: dict[str, str],
                 targets: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a packed directory atomically (:func:`gnn_treelstm.files.atomic_dir`: a
    temporary directory renamed into place; a full disk is a ``NoSpaceError`` naming
    ``path``)."""
    path = Path(path)
    with atomic_dir(path) as tmp:
        files = {}
        for key, arr in arrays.items():
            np.save(tmp / f"{key}.npy", _small(np.asarray(arr)) if key not in _OFFSETS
                    else np.asarray(arr, dtype=np.int64))
            files[key] = f"{key}.npy"
        target_dtypes = {}
        for key, val in (targets or {}).items():
            np.save(tmp / f"target.{key}.npy", val.numpy())
            target_dtypes[key] = str(val.dtype).replace("torch.", "")
        header = {"format": FORMAT, "trees": len(arrays["node_offsets"]) - 1,
                  "nodes": int(arrays["node_offsets"][-1]),
                  "edges": int(arrays["edge_offsets"][-1]),
                  "files": files, "dtypes": dtypes, "targets": target_dtypes}
        (tmp / "header.json").write_text(json.dumps(header, indent=1) + "\n")
    return path


def _disk_type(dtype: str, lo: int | None, hi: int | None) -> np.dtype:
    """The type :func:`write_packed` stores a field of torch dtype ``dtype`` whose values
    span ``[lo, hi]`` (None: no values) in: the smallest signed type that holds them."""
    base = np.dtype(_NUMPY_TYPES[dtype])
    if base.kind not in "iu" or lo is None or hi is None:
        return base
    for t in _INT_TYPES:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return np.dtype(t)
    return base


def write_packed_parts(path: str | os.PathLike, parts: Iterable[dict[str, np.ndarray]],
                       dtypes: dict[str, str], ranges: dict[str, tuple[int, int] | None],
                       targets: dict[str, np.ndarray] | None = None) -> Path:
    """Write a packed directory from consecutive parts, one part in memory at a time: the
    same files :func:`write_packed` writes of :func:`concat_packed` of the parts.

    ``parts``: arrays as :func:`pack_graphs` makes them (each part's offsets from 0, any
    integer type holding the values); ``ranges``: the ``(min, max)`` of every ``n.``/``e.``
    field and of ``src``/``dst`` over all the parts (None where there are none), which
    fixes the stored types before the first part is written; ``targets``: graph-level
    targets. Written atomically, as :func:`write_packed`.
    """
    path = Path(path)
    keys = [*_OFFSETS, "src", "dst", *dtypes]
    types = {k: np.dtype(np.int64) if k in _OFFSETS
             else _disk_type(dtypes.get(k, "int64"), *(ranges.get(k) or (None, None)))
             for k in keys}
    with atomic_dir(path) as tmp:
        handles = {k: open(tmp / f"{k}.npy", "w+b") for k in keys}
        try:
            rows = _write_parts(handles, parts, types)
        finally:
            for fh in handles.values():
                fh.close()
        for key, val in (targets or {}).items():
            np.save(tmp / f"target.{key}.npy", val)
        header = {"format": FORMAT, "trees": rows["node_offsets"] - 1,
                  "nodes": rows["nodes"], "edges": rows["edges"],
                  "files": {k: f"{k}.npy" for k in keys}, "dtypes": dict(dtypes),
                  "targets": {k: str(v.dtype) for k, v in (targets or {}).items()}}
        (tmp / "header.json").write_text(json.dumps(header, indent=1) + "\n")
    return path


def _write_parts(handles: dict, parts: Iterable[dict[str, np.ndarray]],
                 types: dict[str, np.dtype]) -> dict[str, int]:
    """The data of every part appended to its field's file (headers rewritten at the end
    with the rows written); the rows of each file, and the nodes and edges."""
    rows = dict.fromkeys(handles, 0)
    shapes: dict[str, tuple[int, ...]] = {}
    base = dict.fromkeys(_OFFSETS, 0)
    header_at = {}
    for part in parts:
        for key, fh in handles.items():
            arr = np.asarray(part[key])
            if key not in shapes:  # room for the header; written once the rows are known
                shapes[key] = arr.shape[1:]
                _npy_header(fh, types[key], (1 << 40,) + shapes[key])
                header_at[key] = fh.tell()
            if key in _OFFSETS:
                arr = arr[1:] if rows[key] else arr
                arr = arr.astype(np.int64) + (base[key] - int(part[key][0]))
                base[key] += int(part[key][-1]) - int(part[key][0])
            fh.write(np.ascontiguousarray(arr, dtype=types[key]).tobytes())
            rows[key] += len(arr)
    if not shapes:
        raise ValueError("write_packed_parts: no parts; a packed split holds one tree or more")
    for key, fh in handles.items():
        fh.seek(0)
        _npy_header(fh, types[key], (rows[key],) + shapes[key])
        assert fh.tell() == header_at[key], "the .npy header changed size"
    rows["nodes"], rows["edges"] = base["node_offsets"], base["edge_offsets"]
    return rows


def _npy_header(fh, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    """The header ``np.save`` writes for an array of ``dtype`` and ``shape``."""
    np.lib.format.write_array_header_1_0(
        fh, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
             "shape": shape})


def packed_exists(path: str | os.PathLike) -> bool:
    return (Path(path) / "header.json").is_file()


def load_packed(path: str | os.PathLike, *, rebuild: str = ""
                ) -> tuple[PackedTrees, dict[str, torch.Tensor]]:
    """Map a packed directory: the trees and the graph-level targets (read into memory).

    Each mapped file's identity is recorded (:func:`gnn_treelstm.trees.manifest.watch`),
    so that a file changed on disk while it is mapped can be named
    (:func:`gnn_treelstm.trees.manifest.check_unchanged`).

    Raises:
        FileNotFoundError: the directory or one of its files is missing.
        PermissionError: a file this process may not read (its ``filename`` names it).
        ValueError: a damaged or foreign directory; the message names ``rebuild``.
    """
    path = Path(path)
    fix = f"; {rebuild}" if rebuild else ""
    if not packed_exists(path):
        raise FileNotFoundError(f"{path}: missing from the built data{fix}")
    try:
        header = json.loads((path / "header.json").read_text(encoding="utf-8"))
        if header.get("format") != FORMAT:
            raise ValueError(f"format {header.get('format')!r}, this version reads {FORMAT}")
        arrays = {k: manifest.watch(np.load(path / f, mmap_mode="r"))
                  for k, f in header["files"].items()}
        targets = {k: torch.from_numpy(np.array(np.load(path / f"target.{k}.npy")))
                   for k in header.get("targets", {})}
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{path}: {Path(exc.filename or '').name} missing{fix}") \
            from None
    except PermissionError:  # not damage: the caller names the file and the permission
        raise
    except (ValueError, KeyError, OSError) as exc:
        raise ValueError(f"{path}: damaged packed trees ({exc}){fix}") from None
    t, n, e = header["trees"], header["nodes"], header["edges"]
    sizes = {"node_offsets": t + 1, "edge_offsets": t + 1, "src": e, "dst": e}
    for key, arr in arrays.items():
        want = sizes.get(key, n if key.startswith("n.") else e)
        if len(arr) != want:
            raise ValueError(f"{path}: {key}.npy holds {len(arr)} entries, the header says "
                             f"{want}{fix}")
    if any(len(v) != t for v in targets.values()):
        raise ValueError(f"{path}: targets do not match its {t} trees{fix}")
    return PackedTrees(arrays, dict(header["dtypes"])), targets
