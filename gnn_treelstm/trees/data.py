"""Loading the cached sentence graphs written by ``gnn-treelstm build``.

A built data directory holds ``meta.json``, ``vocab.json``, ``relations/<tree>.json``,
``<tree>/<split>.packed/`` (or ``.a.packed/``/``.b.packed/`` for pair data sets, targets in
the A side; :mod:`gnn_treelstm.trees.packed`) and ``text/<split>.jsonl`` (see
``docs/design.md``). A split's trees are memory-mapped arrays (:class:`PackedTrees`);
``collate`` builds a batch's graph from them directly. A directory built before the packed
format (``<split>.bin``, ``dgl.save_graphs``) is converted on load, in memory::

    split = load_split("data/built/sst", "train", "constituency")
    loader = DataLoader(TreeDataset(split), batch_size=25, shuffle=True, collate_fn=collate)
    for batch in loader:  # Batch(graph, graph_b, targets, index)
        ...

SST's binary task: :func:`to_sst2` maps every node label with :data:`SST2_MAP`
(0, 1 -> 0; 3, 4 -> 1; 2 -> IGNORE: neutral phrases unlabelled) and drops sentences whose
root is neutral (Tai et al. §5.1). With ``neutral_class=True`` it maps them with
:data:`SST2_NEUTRAL_MAP` instead (neutral phrases -> :data:`SST2_NEUTRAL`, a third class), as
Tai et al.'s released code trains the binary task (``remap_labels``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import dgl
import numpy as np
import torch

from gnn_treelstm import _dgl_compat
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees import manifest
from gnn_treelstm.trees.graph import IGNORE, LABEL, REL, WORD
from gnn_treelstm.trees.packed import (
    PackedTrees,
    TreeStore,
    arrays_graph,
    batch_arrays,
    forest_graph,
    load_packed,
    pack_graphs,
    packed_exists,
)
from gnn_treelstm.trees.schedule import Builder, LevelSchedule
from gnn_treelstm.trees.vocab import Relations, Vocab

_dgl_compat.attach()
log = logging.getLogger(__name__)

__all__ = [
    "Split",
    "Example",
    "Batch",
    "label_order",
    "TreeDataset",
    "SST2_MAP",
    "SST2_NEUTRAL",
    "SST2_NEUTRAL_MAP",
    "load_meta",
    "load_split",
    "load_vocab",
    "load_relations",
    "load_text",
    "collate",
    "remap_split",
    "split_paths",
    "sst2_labels",
    "to_sst2",
]

#: SST-5 node label -> SST-2 label (IGNORE for neutral), indexable by a label tensor.
SST2_MAP = torch.tensor([0, 0, IGNORE, 1, 1], dtype=torch.int64)
#: the SST-2 label of a neutral phrase when neutral is trained as a class of its own
SST2_NEUTRAL = 2
#: SST-5 node label -> SST-2 label with neutral as its own class (Tai et al.'s code:
#: negative, neutral, positive; here negative 0, positive 1, neutral 2)
SST2_NEUTRAL_MAP = torch.tensor([0, 0, SST2_NEUTRAL, 1, 1], dtype=torch.int64)


def sst2_labels(labels: torch.Tensor, *, neutral_class: bool = False) -> torch.Tensor:
    """Map SST-5 labels (0-4, or IGNORE) to SST-2: 0/1, and for neutral IGNORE
    (:data:`SST2_MAP`) or, with ``neutral_class``, :data:`SST2_NEUTRAL`
    (:data:`SST2_NEUTRAL_MAP`); IGNORE stays IGNORE."""
    out = torch.full_like(labels, IGNORE)
    keep = labels != IGNORE
    if keep.any():
        bad = labels[keep]
        if int(bad.min()) < 0 or int(bad.max()) > 4:
            raise ValueError(f"sst2_labels: labels must be 0-4 or IGNORE, got range "
                             f"[{int(bad.min())}, {int(bad.max())}]")
        table = SST2_NEUTRAL_MAP if neutral_class else SST2_MAP
        out[keep] = table.to(labels.device)[labels[keep]]
    return out


@dataclass
class Split:
    """One split of one tree kind."""

    #: sentence / premise / sentence A: memory-mapped :class:`PackedTrees` (a sequence of
    #: graphs built on access) as loaded, or a list of graphs
    graphs: Sequence[dgl.DGLGraph]
    graphs_b: Sequence[dgl.DGLGraph] | None  # hypothesis / sentence B (pair data sets)
    targets: dict[str, torch.Tensor]  # graph-level targets aligned with graphs
    name: str = ""
    tree: str = ""
    meta: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        n = len(self.graphs)
        if self.graphs_b is not None and len(self.graphs_b) != n:
            raise ValueError(f"Split: {n} graphs but {len(self.graphs_b)} graphs_b")
        for k, v in self.targets.items():
            if len(v) != n:
                raise ValueError(f"Split: target {k!r} has {len(v)} entries for {n} graphs")

    def __len__(self) -> int:
        return len(self.graphs)

    @property
    def pair(self) -> bool:
        return self.graphs_b is not None

    def head(self, limit: int | None) -> Split:
        """The first ``limit`` examples (all of them if ``limit`` is None or not smaller
        than the split: ``--max-train`` / ``--max-eval``)."""
        if limit is None or len(self) <= limit:
            return self
        return self.subset(range(limit))

    def subset(self, index: Sequence[int] | torch.Tensor) -> Split:
        """The examples at ``index`` (in that order)."""
        idx = torch.as_tensor(index, dtype=torch.int64)
        return Split(_take(self.graphs, idx), None if self.graphs_b is None
                     else _take(self.graphs_b, idx),
                     {k: v[idx] for k, v in self.targets.items()}, self.name, self.tree,
                     self.meta)

    @property
    def packed(self) -> bool:
        """The trees are held as arrays (:class:`PackedTrees`, phrase chains): batches are
        built from them."""
        return isinstance(self.graphs, TreeStore)


def _take(graphs: Sequence[dgl.DGLGraph], idx: torch.Tensor) -> Sequence[dgl.DGLGraph]:
    if isinstance(graphs, TreeStore):
        return graphs.take(idx.numpy())
    return [graphs[i] for i in idx.tolist()]


def _dir(data_dir: str | os.PathLike) -> Path:
    d = Path(data_dir)
    if not (d / "meta.json").exists():
        raise FileNotFoundError(f"{d}: no meta.json; build the data first with "
                                f"`gnn-treelstm build --dataset ... --src RAW --out {d}`")
    return d


def _rebuild_hint(d: Path) -> str:
    return (f"rebuild it with `gnn-treelstm build --dataset DATASET --src RAW "
            f"--out {d}`")


def load_meta(data_dir: str | os.PathLike) -> dict:
    """The ``meta.json`` of a built data directory.

    Raises:
        ValueError: the file is not valid JSON (cut short, edited), naming it."""
    path = _dir(data_dir) / "meta.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: damaged ({exc}); {_rebuild_hint(path.parent)}") from exc
    return manifest.check_meta(path.parent, meta)  # the files are those the build wrote


def load_graphs(path: str | os.PathLike) -> tuple[list[dgl.DGLGraph], dict]:
    """``dgl.load_graphs`` with a clear error for a missing or damaged file.

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: DGL cannot read it (truncated, not a graph file); the message names the
            file and the command that rebuilds it instead of DGL's C++ backtrace.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing from the built data; "
                                f"{_rebuild_hint(path.parent.parent)}")
    try:
        return dgl.load_graphs(str(path))
    except Exception as exc:  # DGLError with a C++ backtrace
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"{path}: damaged graph file ({first}); "
                         f"{_rebuild_hint(path.parent.parent)}") from None


def load_vocab(data_dir: str | os.PathLike) -> Vocab:
    return Vocab.load(_dir(data_dir) / "vocab.json")


def load_relations(data_dir: str | os.PathLike, tree: str) -> Relations:
    path = _dir(data_dir) / "relations" / f"{tree}.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no relation vocabulary for tree kind {tree!r}")
    return Relations.load(path)


def load_text(data_dir: str | os.PathLike, split: str) -> list[dict]:
    """The ``text/<split>.jsonl`` records (tokens and labels per example, in split order)."""
    path = _dir(data_dir) / "text" / f"{split}.jsonl"
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_split(data_dir: str | os.PathLike, split: str, tree: str) -> Split:
    """Load one split of one tree kind.

    Raises:
        ValueError: the tree kind or split was not built (the message lists what was).
    """
    d = _dir(data_dir)
    meta = load_meta(d)
    if tree not in meta.get("trees", []):
        raise ValueError(f"{d}: tree kind {tree!r} not built; built: {meta.get('trees')}")
    if split not in meta.get("splits", {}):
        raise ValueError(f"{d}: no split {split!r}; splits: {list(meta.get('splits', {}))}")
    paths = split_paths(d, tree, split, bool(meta.get("pair")))
    manifest.check_split(d, meta, split, paths)  # its digests and tree count
    if any(packed_exists(p) for p in paths) or not any(
            p.with_suffix(".bin").exists() for p in paths):
        hint = _rebuild_hint(d)
        graphs, targets = load_packed(paths[0], rebuild=hint)
        graphs_b = load_packed(paths[1], rebuild=hint)[0] if len(paths) == 2 else None
        return Split(graphs, graphs_b, targets, split, tree, meta)
    # a directory built before the packed format: converted here, in memory
    log.info("%s: %s/%s is in the graph format before packed trees (.bin), converted in "
             "memory; %s to map it instead", d, tree, split, _rebuild_hint(d))
    sides = [load_graphs(p.with_suffix(".bin")) for p in paths]
    packed = [PackedTrees(*pack_graphs(graphs)) for graphs, _ in sides]
    return Split(packed[0], packed[1] if len(packed) == 2 else None, dict(sides[0][1]),
                 split, tree, meta)


def split_paths(data_dir: str | os.PathLike, tree: str, split: str, pair: bool) -> list[Path]:
    """The packed directories of one split of one tree kind (two for a pair data set)."""
    d = Path(data_dir) / tree
    if pair:
        return [d / f"{split}.a.packed", d / f"{split}.b.packed"]
    return [d / f"{split}.packed"]


def remap_split(split: Split, word_map: torch.Tensor | None,
                rel_map: torch.Tensor | None) -> Split:
    """``split`` with word ids (``>= 0``) read through ``word_map`` and relation ids through
    ``rel_map`` (either may be None): a view of packed trees, or for a list of graphs the
    graphs changed in place."""
    def fix(graphs: Sequence[dgl.DGLGraph] | None) -> Sequence[dgl.DGLGraph] | None:
        if graphs is None:
            return None
        if isinstance(graphs, TreeStore):
            if word_map is not None:
                graphs = graphs.remap("n." + WORD, word_map)
            if rel_map is not None and "e." + REL in graphs.dtypes:
                graphs = graphs.remap("e." + REL, rel_map)
            return graphs
        for g in graphs:
            if word_map is not None:
                w = g.ndata[WORD]
                g.ndata[WORD] = torch.where(w >= 0, word_map[w.clamp(min=0)], w)
            if rel_map is not None and g.num_edges():
                g.edata[REL] = rel_map[g.edata[REL]]
        return graphs

    return Split(fix(split.graphs), fix(split.graphs_b), split.targets, split.name,
                 split.tree, split.meta)


def to_sst2(split: Split, *, neutral_class: bool = False) -> Split:
    """SST-2 view of an SST split: node labels mapped by :func:`sst2_labels` (neutral
    phrases IGNORE, or with ``neutral_class`` the class :data:`SST2_NEUTRAL`), targets
    mapped, sentences with a neutral root dropped (6920/872/1821 on the full SST)."""
    label = split.targets["label"]
    keep = torch.nonzero(label != 2, as_tuple=True)[0]
    sub = split.subset(keep)
    if isinstance(sub.graphs, PackedTrees):
        # the labels are mapped as batches are built; checked here, once, vectorised
        sst2_labels(torch.from_numpy(sub.graphs.field_values("n." + LABEL)))
        table = SST2_NEUTRAL_MAP if neutral_class else SST2_MAP
        graphs: Sequence[dgl.DGLGraph] = sub.graphs.remap("n." + LABEL, table)
    else:
        graphs = []
        for g in sub.graphs:
            g = g.clone()
            g.ndata[LABEL] = sst2_labels(g.ndata[LABEL], neutral_class=neutral_class)
            graphs.append(g)
    targets = dict(sub.targets)
    targets["label"] = sst2_labels(targets["label"])
    return Split(graphs, sub.graphs_b, targets, split.name, split.tree, split.meta)


def label_order(labels: torch.Tensor) -> torch.Tensor:
    """(N,) the nodes with a label first, in their order, then those without (``IGNORE``):
    a stable sort. The phrase loss sums over the nodes in this order, so that it adds the
    labelled nodes' terms in the order a sum over them alone would (the same loss to the
    bit). :func:`collate` makes it once per batch (:attr:`Batch.label_order`)."""
    if labels.device.type == "cpu":  # the same permutation, in half the time
        return _label_order(labels.numpy())
    return torch.argsort((labels == IGNORE).to(torch.int8), stable=True)


def _label_order(labels: torch.Tensor | np.ndarray | None) -> torch.Tensor | None:
    """:func:`label_order` of a batch's node labels (None: the nodes have none) on the CPU:
    the labelled nodes' ids, then the others'."""
    if labels is None:
        return None
    ignored = (labels.numpy() if isinstance(labels, torch.Tensor) else labels) == IGNORE
    return torch.from_numpy(np.concatenate(((~ignored).nonzero()[0], ignored.nonzero()[0])))


def _moved(t: torch.Tensor | dgl.DGLGraph | None, device: torch.device | str
           ) -> torch.Tensor | dgl.DGLGraph | None:
    return None if t is None else t.to(device, non_blocking=True)


class Example(NamedTuple):
    index: int
    graph: dgl.DGLGraph
    graph_b: dgl.DGLGraph | None
    targets: dict[str, torch.Tensor]


@dataclass
class Batch:
    """A collated batch: ``graph`` (and ``graph_b``) are batched graphs.

    A pair batch is batched once, as the encoder runs on it: ``graph`` holds every A
    sentence, then every B sentence, and ``num_a`` says how many are A sentences
    (``graph_b`` is then None; a batch made by hand may instead hold the two sides in
    ``graph`` and ``graph_b``, with ``num_a`` None). ``schedule`` (optional) is the
    :class:`~gnn_treelstm.trees.schedule.LevelSchedule` of the graph the encoder runs on
    (:meth:`encoder_graph`). ``collate`` builds it once per batch when asked
    (``schedule=True``), from the trees' arrays, so the level engine does no scheduling in
    the training step. The model takes ``model(batch.graph, batch.graph_b,
    schedule=batch.schedule, num_a=batch.num_a)``.

    ``global_size`` (data parallel training) is the size of the global batch this batch is
    one rank's share of; None: the batch is the whole of its step's batch.

    ``label_order`` (N,) (optional): the nodes of ``graph`` with a label first, in their
    order, then those without (``IGNORE``), as :func:`label_order` makes it; ``collate``
    builds it once per batch where the nodes carry labels, so that the phrase loss does not
    sort them every step.
    """

    graph: dgl.DGLGraph
    graph_b: dgl.DGLGraph | None
    targets: dict[str, torch.Tensor]
    index: torch.Tensor  # example ids within the split, (batch,)
    schedule: LevelSchedule | None = None
    num_a: int | None = None
    global_size: int | None = None
    label_order: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.index)

    @property
    def pair(self) -> bool:
        """Whether the examples are sentence pairs."""
        return self.graph_b is not None or self.num_a is not None

    @property
    def num_trees(self) -> int:
        """Sentences in the batch (two an example for pairs)."""
        return self.graph.batch_size + (0 if self.graph_b is None else self.graph_b.batch_size)

    def encoder_graph(self) -> dgl.DGLGraph:
        """The graph the encoder runs on: ``graph``, or A-graphs then B-graphs for pairs."""
        return self.graph if self.graph_b is None else dgl.batch([self.graph, self.graph_b])

    def to(self, device: torch.device | str, *, graphs: bool = True) -> Batch:
        """Graphs, targets, ids and the schedule's index tensors on ``device``, copied
        without waiting (``non_blocking``): a blocking copy to a GPU waits for every kernel
        queued before it, the last step's included (from pinned memory, as the loader
        gives, the copies run in the device's queue). ``graphs=False`` (a CPU-only DGL
        build): the graphs and ids stay where they are, the rest moves."""
        nb = {"non_blocking": True}
        graph = G.remember_moved(self.graph, self.graph.to(device, **nb)) if graphs \
            else self.graph
        return Batch(graph, _moved(self.graph_b, device) if graphs else self.graph_b,
                     {k: v.to(device, **nb) for k, v in self.targets.items()},
                     self.index.to(device, **nb) if graphs else self.index,
                     None if self.schedule is None else self.schedule.to(device),
                     num_a=self.num_a, global_size=self.global_size,
                     label_order=_moved(self.label_order, device))

    def pin_memory(self) -> Batch:
        """Pinned host copies of the tensors (``DataLoader(pin_memory=True)``, CUDA only)."""
        return dataclasses.replace(
            self, targets={k: v.pin_memory() for k, v in self.targets.items()},
            index=self.index.pin_memory(),
            schedule=None if self.schedule is None else self.schedule.pin_memory(),
            label_order=None if self.label_order is None else self.label_order.pin_memory())

    def __reduce__(self) -> tuple:
        """Pickled (a loader process sending the batch to the training process) as one
        byte array holding every tensor of the batch, sent by value, and a small layout:
        ``torch`` moves each tensor between processes in a shared-memory file of its own,
        about a millisecond each, and a batch with its schedule has some thirty. The
        tensors are laid out by one ``np.concatenate`` (widest types first, so every tensor
        starts at a multiple of its item size); unpickled, they are views of that one array
        made by one ``split`` (:func:`_unpack_batch`), and the graph is made again from its
        edges and fields. A batch whose graphs are not plain CPU graphs of one node and
        edge type pickles field by field."""
        by_field = (Batch, (self.graph, self.graph_b, self.targets, self.index, self.schedule,
                            self.num_a, self.global_size, self.label_order))
        graphs = [g for g in (self.graph, self.graph_b) if g is not None]
        if not all(_plain_graph(g) for g in graphs):
            return by_field
        tensors: list[torch.Tensor] = []
        layouts = tuple(_graph_layout(tensors, g, self.schedule) for g in graphs)
        packed = _reduce_packed(self, tensors, layouts, self.graph_b is not None)
        # None: a tensor numpy cannot hold (bfloat16) or one with gradients
        return by_field if packed is None else packed


def _reduce_packed(batch: Batch | _Wire, tensors: list[torch.Tensor], graphs: tuple,
                   pair: bool) -> tuple | None:
    """What a batch (or :class:`_Wire`) pickles as: its graphs' layouts ``graphs`` (their
    tensors already in ``tensors``), then its targets, index, schedule and label order,
    all packed by :func:`_pack` for :func:`_unpack_batch`. None: a tensor numpy cannot
    hold."""
    meta = (graphs, pair, {k: _add(tensors, v) for k, v in batch.targets.items()},
            _add(tensors, batch.index), batch.num_a, batch.global_size,
            None if batch.schedule is None else _fields_layout(tensors, batch.schedule),
            None if batch.label_order is None else _add(tensors, batch.label_order))
    packed = _pack(tensors)
    return None if packed is None else (_unpack_batch, (meta, *packed))


def _collate_packed(examples: _Examples, schedule: bool, top_down: bool,
                    wire: bool, builder: Builder | None) -> Batch:
    """:func:`collate` of packed trees (``wire``: their arrays, for another process)."""
    if not examples.index.shape[0]:
        raise ValueError("collate: empty batch")
    positions = examples.index.numpy() if examples.positions is None else examples.positions
    parts = [(examples.graphs, positions)]
    if examples.graphs_b is not None:
        parts.append((examples.graphs_b, positions))
    num_a = None if examples.graphs_b is None else len(positions)
    arrays, sched = batch_arrays(parts, schedule=schedule, top_down=top_down, builder=builder)
    order = arrays.get("label_order")  # (made by the builder's call where it took the trees)
    if order is None:
        order = _label_order(arrays["values"].get("n." + LABEL))
    if wire:
        return _Wire(arrays, dict(examples.targets), examples.index, sched, num_a,
                     order)  # type: ignore[return-value]
    return Batch(arrays_graph(arrays, sched), None, dict(examples.targets), examples.index,
                 sched, num_a, label_order=order)


class _Wire:
    """A batch of packed trees on its way to another process, as the arrays
    :func:`~gnn_treelstm.trees.packed.batch_arrays` made (``collate(wire=True)``): it
    pickles as the :class:`Batch` :func:`collate` makes of them would (the same bytes
    and layout, :func:`_unpack_batch` unpickles it), without making the graph first.
    ``global_size`` may be set before it is sent, as on a batch."""

    def __init__(self, arrays: dict, targets: dict[str, torch.Tensor], index: torch.Tensor,
                 schedule: LevelSchedule | None, num_a: int | None,
                 label_order: torch.Tensor | None = None) -> None:
        self.arrays, self.targets, self.index = arrays, targets, index
        self.schedule, self.num_a, self.label_order = schedule, num_a, label_order
        self.global_size: int | None = None

    def __reduce__(self) -> tuple:
        a, tensors = self.arrays, []
        values = a["values"]
        graph = (a["n"], _add(tensors, a["src"]), _add(tensors, a["dst"]),
                 {k[2:]: _add(tensors, v) for k, v in values.items() if k[0] == "n"},
                 {k[2:]: _add(tensors, v) for k, v in values.items() if k[0] == "e"},
                 _add(tensors, a["nn"]), _add(tensors, a["ne"]),
                 bool(a.get("forest", False)), self.schedule is not None)
        packed = _reduce_packed(self, tensors, (graph,), False)
        if packed is None:  # a target numpy cannot hold: the batch, field by field
            return Batch(arrays_graph(a, self.schedule), None, self.targets, self.index,
                         self.schedule, self.num_a, self.global_size,
                         self.label_order).__reduce__()
        return packed


def _plain_graph(g: dgl.DGLGraph) -> bool:
    return (g.device.type == "cpu" and g.idtype == torch.int64 and len(g.ntypes) == 1
            and len(g.canonical_etypes) == 1)


def _add(tensors: list[torch.Tensor], t: torch.Tensor) -> int:
    """Its number among the batch's tensors."""
    tensors.append(t)
    return len(tensors) - 1


def _pack(tensors: list[torch.Tensor]) -> tuple[list, np.ndarray] | None:
    """The tensors' bytes in one array and the layout :func:`_unpack_tensors` reads them
    back by. The tensors are grouped by type, widest first (each group then starts at a
    multiple of its item size): a group is ``(numpy dtype, [(shape, count), ...])``, and
    ``where`` says which of the sorted tensors each of ``tensors`` is. Done in numpy: a
    ``torch`` call costs some microseconds, the same in numpy a fraction of one. None: a
    tensor numpy cannot view (a type it lacks, such as ``bfloat16``, or one that requires
    gradients)."""
    try:
        arrays = [t if isinstance(t, np.ndarray) else t.numpy() for t in tensors]
    except (TypeError, RuntimeError):
        return None
    order = sorted(range(len(arrays)),
                   key=lambda i: (-arrays[i].itemsize, arrays[i].dtype.str))
    groups: list[tuple[np.dtype, list]] = []
    flat = []
    where = [0] * len(order)
    for j, i in enumerate(order):
        a = arrays[i]
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        if not groups or groups[-1][0] != a.dtype:
            groups.append((a.dtype, []))
        groups[-1][1].append((a.shape, a.size))
        flat.append(a.reshape(-1).view(np.uint8))
        where[i] = j
    data = np.concatenate(flat) if flat else np.empty(0, dtype=np.uint8)
    return [groups, where], data


def _unpack_tensors(layout: list, data: np.ndarray) -> list[torch.Tensor]:
    """The tensors :func:`_pack` laid out, as views of ``data``, in their first order: one
    ``split`` a type."""
    groups, where = layout
    views: list[torch.Tensor] = []
    start = 0
    for dtype, items in groups:
        counts = [count for _, count in items]
        stop = start + sum(counts) * dtype.itemsize
        parts = torch.from_numpy(data[start:stop].view(dtype)).split(counts)
        views += [p if len(shape) == 1 else p.view(shape)
                  for p, (shape, _) in zip(parts, items)]
        start = stop
    return [views[j] for j in where]


def _graph_layout(tensors: list[torch.Tensor], g: dgl.DGLGraph,
                  schedule: LevelSchedule | None) -> tuple:
    """``g`` as its tensors' numbers, and what its maker knew of it: its edges a proven
    forest, ``schedule`` made of them (:func:`~gnn_treelstm.trees.graph.remember_edges`),
    which the unpickled graph knows again."""
    src, dst = G.made_edges(g)
    return (g.num_nodes(), _add(tensors, src), _add(tensors, dst),
            {k: _add(tensors, v) for k, v in g.ndata.items()},
            {k: _add(tensors, v) for k, v in g.edata.items()},
            _add(tensors, g.batch_num_nodes()), _add(tensors, g.batch_num_edges()),
            G.made_forest(g), G.made_with(g, schedule))


def _unpack_graph(t: list[torch.Tensor], layout: tuple,
                  schedule: LevelSchedule | None) -> dgl.DGLGraph:
    n, src, dst, ndata, edata, bnn, bne, forest, with_schedule = layout
    return forest_graph(t[src], t[dst], n, ({k: t[i] for k, i in ndata.items()},
                                            {k: t[i] for k, i in edata.items()}),
                        (t[bnn], t[bne]), forest=forest,
                        schedule=schedule if with_schedule else None)


#: the field names of each dataclass a batch holds (a schedule, its levels)
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _fields_layout(tensors: list[torch.Tensor], obj: object) -> tuple:
    """A dataclass (a schedule, its levels) as its type and its fields: tensors by number,
    dataclasses by their layout, any other value as it is."""
    kind = type(obj)
    names = _FIELD_NAMES.get(kind)
    if names is None:
        names = _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(obj))  # type: ignore[arg-type]
    numbered, nested, values = {}, {}, {}
    for name in names:
        v = getattr(obj, name)
        if isinstance(v, torch.Tensor):
            numbered[name] = _add(tensors, v)
        elif dataclasses.is_dataclass(v):
            nested[name] = _fields_layout(tensors, v)
        else:
            values[name] = v
    return kind, numbered, nested, values


def _unpack_fields(t: list[torch.Tensor], layout: tuple) -> object:
    """The dataclass ``layout`` describes: its plain values, its tensors from ``t`` and its
    nested dataclasses (the layout itself left as it was)."""
    kind, numbered, nested, values = layout
    fields = dict(values)
    for name, i in numbered.items():
        fields[name] = t[i]
    for name, sub in nested.items():
        fields[name] = _unpack_fields(t, sub)
    return kind(**fields)


def _unpack_batch(meta: tuple, layout: list, data: np.ndarray) -> Batch:
    """The batch :meth:`Batch.__reduce__` packed, its tensors views of ``data``."""
    graph_layouts, pair_graphs, targets, index, num_a, global_size, schedule, order = meta
    t = _unpack_tensors(layout, data)
    sched = None if schedule is None else _unpack_fields(t, schedule)
    graphs = [_unpack_graph(t, g, sched) for g in graph_layouts]  # type: ignore[arg-type]
    return Batch(graphs[0], graphs[1] if pair_graphs else None,
                 {k: t[i] for k, i in targets.items()}, t[index], sched,
                 num_a=num_a, global_size=global_size,
                 label_order=None if order is None else t[order])


class TreeDataset(torch.utils.data.Dataset):
    """A map-style dataset over a :class:`Split`; items are :class:`Example` tuples."""

    def __init__(self, split: Split) -> None:
        self.split = split

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int) -> Example:
        s = self.split
        return Example(int(i), s.graphs[i], None if s.graphs_b is None else s.graphs_b[i],
                       {k: v[i] for k, v in s.targets.items()})

    def __getitems__(self, indices: Sequence[int]) -> _Examples:
        """A whole minibatch at once (the ``DataLoader`` calls this instead of
        ``__getitem__`` per example): targets are gathered with one index per key."""
        s = self.split
        positions = np.asarray(indices, dtype=np.int64).reshape(-1)
        idx = torch.from_numpy(positions)
        if isinstance(s.graphs, TreeStore):
            return _Examples(idx, s.graphs, s.graphs_b,
                             {k: v.index_select(0, idx) for k, v in s.targets.items()},
                             positions)
        il = idx.tolist()
        return _Examples(idx, [s.graphs[i] for i in il],
                         None if s.graphs_b is None else [s.graphs_b[i] for i in il],
                         {k: v[idx] for k, v in s.targets.items()})


class _Examples(NamedTuple):
    """Several examples, as :meth:`TreeDataset.__getitems__` fetches them: their graphs,
    or the :class:`PackedTrees` of the whole split (the batch is built from its arrays)."""

    index: torch.Tensor
    graphs: list[dgl.DGLGraph] | TreeStore
    graphs_b: list[dgl.DGLGraph] | TreeStore | None
    targets: dict[str, torch.Tensor]
    #: ``index`` as a numpy array (sharing its memory)
    positions: np.ndarray | None = None


def collate(examples: Sequence[Example] | _Examples, *, schedule: bool = False,
            top_down: bool = True, wire: bool = False, builder: Builder | None = None) -> Batch:
    """Batch examples (``DataLoader(collate_fn=collate)``).

    Args:
        examples: :class:`Example` tuples, or what :meth:`TreeDataset.__getitems__` returns.
        schedule: also build the level schedule of the encoder's graph
            (:attr:`Batch.schedule`, for ``engine="level"``), here on the CPU, once per batch.
        top_down: the schedule includes the top-down levels (cells of Teng & Zhang §4.3 and
            the backward sequential LSTM need them).
        wire: the batch is for another process (a loader process's): a batch of packed
            trees is returned as its arrays, which pickle as the :class:`Batch` they make,
            its graph made once, by the process that unpickles it.
        builder: what takes a batch of packed trees from their arrays and builds its
            schedule instead of numpy (the same arrays;
            :class:`~gnn_treelstm.trees.schedule.Builder`), e.g. the C++ routines
            :func:`gnn_treelstm.kernels.native.batch_builder` gives.
    """
    if isinstance(examples, _Examples) and isinstance(examples.graphs, PackedTrees) and (
            examples.graphs_b is None or isinstance(examples.graphs_b, PackedTrees)):
        return _collate_packed(examples, schedule, top_down, wire, builder)
    if isinstance(examples, _Examples):
        if not len(examples.index):
            raise ValueError("collate: empty batch")

        def side(trees: list[dgl.DGLGraph] | TreeStore) -> list[dgl.DGLGraph]:
            if isinstance(trees, TreeStore):  # other stores build their batch graph
                return [trees.batch(examples.index.numpy())]
            return list(trees)

        side_a = side(examples.graphs)
        side_b = None if examples.graphs_b is None else side(examples.graphs_b)
        targets, index = dict(examples.targets), examples.index
    else:
        if not examples:
            raise ValueError("collate: empty batch")
        side_a = [e.graph for e in examples]
        has_b = [e.graph_b is not None for e in examples]
        if any(has_b) and not all(has_b):
            raise ValueError("collate: some examples have a second graph and some do not")
        side_b = [e.graph_b for e in examples] if all(has_b) else None
        targets = {k: torch.stack([e.targets[k] for e in examples])
                   for k in examples[0].targets}
        index = torch.tensor([e.index for e in examples], dtype=torch.int64)
    # graphs given one by one: one dgl.batch (pairs: every A, then every B); a store's
    # own batch graph as it is
    made = isinstance(examples, _Examples) and isinstance(examples.graphs, TreeStore)
    graph = side_a[0] if made and side_b is None else dgl.batch(
        side_a if side_b is None else side_a + side_b)
    batch = Batch(graph, None, targets, index, None, None if side_b is None else len(index),
                  label_order=_label_order(graph.ndata.get(LABEL)))
    if schedule:
        batch.schedule = LevelSchedule.from_graph(graph, top_down=top_down)
    return batch
