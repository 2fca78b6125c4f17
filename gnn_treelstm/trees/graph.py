"""The sentence-graph schema every part of gnn_treelstm agrees on.

One :class:`dgl.DGLGraph` per sentence (or per AMR graph turned into a tree):

* **Edges point child -> parent.** ``dgl.prop_nodes_topo`` therefore visits the leaves
  first and the root last; top-down cells run on ``dgl.reverse(graph)``.
* **Node data** (``graph.ndata``):

    * ``word``, int64 (N,): vocabulary id of the node's word; :data:`NO_WORD` (-1) for
      nodes without one (internal constituency nodes).
    * ``leaf``, bool (N,): the node has no children.
    * ``label``, int64 (N,): gold label of the node (SST: 0-4 on every node);
      :data:`IGNORE` (-1) where the node carries no label.
    * ``span``, int64 (N, 2): token span ``[start, end)`` the node covers in the sentence.
    * ``root``, bool (N,): the node is the graph's root (exactly one per graph).

* **Edge data** (``graph.edata``):

    * ``rel``, int64 (E,): relation id: dependency label, AMR role, or for constituency
      trees the child position (so relation-aware cells see left/right).
    * ``pos``, int64 (E,): the child's position among its parent's children, 0..N-1, in
      sentence order. N-ary cells order children by this field, never by edge id.

Relation ids index a relation vocabulary saved with the data (``relations.json``).
Batching is plain :func:`dgl.batch`; :func:`batch_roots` and :func:`batch_leaves` give
per-graph roots and leaves of a batch. :func:`make_tree` is the one constructor all
builders use, and :func:`validate_tree` is the boundary check cells call.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import dgl
import numpy as np
import torch

from gnn_treelstm import _dgl_compat  # the package __init__ ran it before dgl was imported

_dgl_compat.attach()

__all__ = [
    "NO_WORD",
    "IGNORE",
    "WORD",
    "LEAF",
    "LABEL",
    "SPAN",
    "ROOT",
    "REL",
    "POS",
    "make_tree",
    "validate_tree",
    "check_direction",
    "host_edges",
    "field_views",
    "remember_edges",
    "remember_moved",
    "made_edges",
    "made_forest",
    "made_with",
    "missing_field",
    "topological_levels",
    "batch_roots",
    "batch_leaves",
]

#: ``ndata["word"]`` of a node without a word (an internal constituency node)
NO_WORD = -1
#: ``ndata["label"]`` of a node without a gold label
IGNORE = -1
WORD, LEAF, LABEL, SPAN, ROOT = "word", "leaf", "label", "span", "root"
REL, POS = "rel", "pos"


def make_tree(
    parents: Sequence[int],
    words: Sequence[int],
    *,
    labels: Sequence[int] | None = None,
    rels: Sequence[int] | None = None,
    positions: Sequence[int] | None = None,
    spans: Sequence[Sequence[int]] | None = None,
) -> dgl.DGLGraph:
    """Build one tree graph to the schema from parent pointers.

    Args:
        parents: ``parents[i]`` is the node index of node i's parent, ``-1`` for the root.
        words: word id per node, :data:`NO_WORD` where the node has no word.
        labels: label per node (default all :data:`IGNORE`).
        rels: relation id of the edge from node i to its parent, per node (the root's
            entry is ignored; default 0).
        positions: node i's position among its siblings (default: siblings numbered in
            increasing node index order).
        spans: ``[start, end)`` token span per node (default ``[-1, -1]``).

    Raises:
        ValueError: wrong lengths, not exactly one root, a parent out of range, a cycle,
            or duplicate sibling positions.
    """
    n = len(parents)
    _check_lengths(n, words=words, labels=labels, rels=rels, positions=positions, spans=spans)
    par, root_id = _parent_array(parents)
    child = np.flatnonzero(par >= 0)
    pos = _child_positions(par, child, positions)
    g = dgl.graph((torch.from_numpy(child), torch.from_numpy(par[child])), num_nodes=n)
    g.ndata[WORD] = torch.as_tensor(_ints("words", words))
    g.ndata[LEAF] = g.in_degrees() == 0
    g.ndata[LABEL] = (torch.full((n,), IGNORE, dtype=torch.int64) if labels is None
                      else torch.as_tensor(_ints("labels", labels)))
    g.ndata[SPAN] = (torch.full((n, 2), -1, dtype=torch.int64) if spans is None
                     else torch.as_tensor(_ints("spans", spans).reshape(n, 2)))
    root = torch.zeros(n, dtype=torch.bool)
    root[root_id] = True
    g.ndata[ROOT] = root
    rel_arr = _relation_ids(rels, child, n)
    g.edata[REL] = torch.from_numpy(rel_arr[child].copy())
    g.edata[POS] = torch.from_numpy(pos[child].copy())
    return g


def _check_lengths(n: int, **per_node: Sequence | None) -> None:
    if n == 0:
        raise ValueError("make_tree: a tree needs at least one node (got an empty sentence)")
    for name, seq in per_node.items():
        if seq is not None and len(seq) != n:
            raise ValueError(f"make_tree: {name} has {len(seq)} entries but there are {n} nodes")


def _parent_array(parents: Sequence[int]) -> tuple[np.ndarray, int]:
    """The parent pointers as an array and the root, checked to form one tree."""
    n = len(parents)
    par = _ints("parents", parents)
    roots = np.flatnonzero(par == -1)
    if len(roots) != 1:
        raise ValueError(f"make_tree: expected exactly one root (parent -1), found {len(roots)}")
    bad = np.flatnonzero((par < -1) | (par >= n) | (par == np.arange(n)))
    if len(bad):
        raise ValueError(f"make_tree: node {int(bad[0])} has invalid parent {int(par[bad[0]])}")
    _check_acyclic(par, int(roots[0]))
    return par, int(roots[0])


def _child_positions(par: np.ndarray, child: np.ndarray,
                     positions: Sequence[int] | None) -> np.ndarray:
    """Every node's position among its siblings: the given ones, checked, else the
    siblings numbered in increasing node index order."""
    if positions is None:
        pos = np.zeros(len(par), dtype=np.int64)
        counts: dict[int, int] = {}
        for c in child:  # increasing node index
            p = int(par[c])
            pos[c] = counts.get(p, 0)
            counts[p] = pos[c] + 1
        return pos
    pos = _ints("positions", positions)
    pairs = set()
    for c in child:
        key = (int(par[c]), int(pos[c]))
        if key in pairs or pos[c] < 0:
            raise ValueError(f"make_tree: node {c} has duplicate or negative position {pos[c]}")
        pairs.add(key)
    return pos


def _relation_ids(rels: Sequence[int] | None, child: np.ndarray, n: int) -> np.ndarray:
    """Relation id per node (0 by default), every non-root one >= 0."""
    rel_arr = np.zeros(n, dtype=np.int64) if rels is None else _ints("rels", rels)
    if len(child) and int(rel_arr[child].min()) < 0:
        c = int(child[np.argmin(rel_arr[child])])
        raise ValueError(f"make_tree: node {c} has relation id {int(rel_arr[c])}; relation ids "
                         "are >= 0 (only the root's entry is ignored)")
    return rel_arr


def _ints(name: str, seq: Sequence) -> np.ndarray:
    """``seq`` as an int64 array; ``ValueError`` for anything but integers (a float would be
    truncated, a string is not an id)."""
    arr = np.asarray(seq)
    if arr.size and arr.dtype.kind not in "iub":
        values = arr.reshape(-1).tolist()
        i = next((k for k, v in enumerate(values) if not isinstance(v, (int, np.integer))), 0)
        hint = ("; map words to ids with a vocabulary (gnn_treelstm.trees.vocab.Vocab), -1 "
                "where a node has none" if name == "words" else "")
        raise ValueError(f"make_tree: {name} must be integers, got {values[i]!r} "
                         f"(entry {i}){hint}")
    return arr.astype(np.int64, copy=False)


def _check_acyclic(par: np.ndarray, root: int) -> None:
    """Parent pointers form a tree iff every node reaches the root (pointer doubling)."""
    anc = par.copy()
    anc[root] = root
    for _ in range(max(1, int(np.ceil(np.log2(len(par)))) + 1)):
        anc = anc[anc]
    stuck = np.flatnonzero(anc != root)
    if len(stuck):
        raise ValueError(
            f"make_tree: the parent pointers contain a cycle (node {int(stuck[0])} never "
            "reaches the root); tree graphs must be acyclic with edges pointing child -> parent"
        )


#: the host edges of the graph structures read last (:func:`host_edges`), by identity
_HOST_EDGES: dict[int, tuple[object, np.ndarray, np.ndarray]] = {}
#: the attribute of a graph that holds what :func:`remember_edges` was told of it
_MADE = "_made_edges"


class _Made:
    """What a graph's maker told of it (:func:`remember_edges`), valid while the graph's
    structure object is ``index`` (DGL replaces it when the edges change): its edges as
    host tensors, whether they are a proven forest, the mark of the schedule made of them
    (``LevelSchedule.made``; None: none)."""

    __slots__ = ("index", "src", "dst", "host", "forest", "mark")

    def __init__(self, index, src, dst, forest, mark) -> None:
        self.index, self.src, self.dst = index, src, dst
        self.forest, self.mark = forest, mark
        self.host: tuple[np.ndarray, np.ndarray] | None = None


def remember_edges(graph: dgl.DGLGraph, src: torch.Tensor, dst: torch.Tensor, *,
                   forest: bool = False, schedule: object | None = None) -> None:
    """Tell the checks what ``graph``'s maker knows of it, so that they do not read or
    prove it again: its edges are ``src -> dst`` (int64 CPU tensors, the graph's edge
    order: read back through DGL they cost tens of µs); ``forest``: the maker proved them
    a forest of child -> parent edges (each node at most one parent, no cycle, every edge
    within the graph), so :func:`validate_tree` skips those proofs (and what they imply:
    no self-loop, no edge both ways, no node with two outgoing edges); ``schedule``: the
    :class:`~gnn_treelstm.trees.schedule.LevelSchedule` made from the same edges, marked
    (its ``made``) so that a cell does not compare it, or its copies moved or pickled,
    with the graph again (:func:`made_with`). All of it is taken as given, and forgotten
    as soon as DGL changes the graph's edges (it replaces the graph's structure object);
    writing into the tensors ``graph.edges()`` returns is no change DGL supports (its other
    sparse formats keep the old edges), nor one these records see.

    Raises:
        ValueError: ``src``/``dst`` that are not int64 CPU tensors of the graph's number of
            edges."""
    e = graph.num_edges()
    for name, t in (("src", src), ("dst", dst)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.device.type != "cpu" \
                or t.shape != (e,):
            got = (f"{t.dtype} {t.device} {tuple(t.shape)}" if isinstance(t, torch.Tensor)
                   else type(t).__name__)
            raise ValueError(f"remember_edges: {name} must be the graph's {e} edges as an int64 "
                             f"CPU tensor, got {got}")
    mark = None
    if schedule is not None:
        mark = schedule.made
        if mark is None:
            mark = schedule.made = secrets.randbits(62)
    setattr(graph, _MADE, _Made(graph._graph, src, dst, bool(forest), mark))


def remember_moved(graph: dgl.DGLGraph, moved: dgl.DGLGraph) -> dgl.DGLGraph:
    """``moved`` (``graph.to(device)``, the same edges) knows what ``graph``'s maker told
    of ``graph`` (:func:`remember_edges`), its edges kept as host tensors: its checks then
    read no edge back from the device. Returns ``moved``."""
    made = _made(graph)
    if made is not None and moved is not graph:
        rec = _Made(moved._graph, made.src, made.dst, made.forest, made.mark)
        rec.host = made.host
        setattr(moved, _MADE, rec)
    return moved


def _made(graph: dgl.DGLGraph) -> _Made | None:
    made = graph.__dict__.get(_MADE)
    return made if made is not None and made.index is graph._graph else None


def made_edges(graph: dgl.DGLGraph) -> tuple[torch.Tensor, torch.Tensor]:
    """``graph.edges()``: for a graph whose maker gave them (:func:`remember_edges`) and
    whose edges have not changed since, the (host) tensors it gave."""
    made = _made(graph)
    return (made.src, made.dst) if made is not None else graph.edges()


def made_forest(graph: dgl.DGLGraph) -> bool:
    """Whether ``graph``'s maker proved its edges a forest (:func:`remember_edges`), the
    edges unchanged since."""
    made = _made(graph)
    return made is not None and made.forest


def made_with(graph: dgl.DGLGraph, schedule: object) -> bool:
    """Whether ``schedule`` (or a copy of it: moved, pinned, pickled) was made from
    ``graph``'s edges by the graph's maker (:func:`remember_edges`), the edges unchanged
    since."""
    made = _made(graph)
    return (made is not None and made.mark is not None
            and getattr(schedule, "made", None) == made.mark)


def host_edges(graph: dgl.DGLGraph) -> tuple[np.ndarray, np.ndarray]:
    """``graph``'s edges ``(src, dst)`` as read-only host arrays, read from DGL once per
    graph structure (DGL replaces a graph's structure object when its edges change; the
    last few are remembered), or taken from what its maker gave (:func:`remember_edges`):
    a batch's checks read them more than once, and each read through DGL costs tens of
    µs."""
    made = _made(graph)
    if made is not None:
        if made.host is None:
            made.host = _read_only(made.src.numpy(), made.dst.numpy())
        return made.host
    index = graph._graph
    hit = _HOST_EDGES.get(id(index))
    if hit is not None and hit[0] is index:
        return hit[1], hit[2]
    src, dst = _read_only(*(t.cpu().numpy() for t in graph.edges()))
    for key in list(_HOST_EDGES)[:-3]:  # the oldest (list(): safe beside other threads)
        _HOST_EDGES.pop(key, None)
    _HOST_EDGES[id(index)] = (index, src, dst)
    return src, dst


def _read_only(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Read-only views of ``src`` and ``dst``."""
    src, dst = src.view(), dst.view()
    src.flags.writeable = False
    dst.flags.writeable = False
    return src, dst


def topological_levels(graph: dgl.DGLGraph) -> np.ndarray:
    """Bottom-up level of every node: leaves 0, a parent 1 + the max of its children.

    Works on batched graphs. Raises ``ValueError`` if the edges contain a cycle.
    """
    n = graph.num_nodes()
    src, dst = (t.cpu().numpy() for t in graph.edges())
    indeg = np.bincount(dst, minlength=n)
    level = np.zeros(n, dtype=np.int64)
    frontier = np.flatnonzero(indeg == 0)
    done = len(frontier)
    order = np.argsort(src, kind="stable")
    src_sorted, dst_sorted = src[order], dst[order]
    starts = np.searchsorted(src_sorted, np.arange(n + 1))
    depth = 0
    while len(frontier):
        depth += 1
        lo, hi = starts[frontier], starts[frontier + 1]
        if (hi > lo).any():
            idx = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi) if b > a])
            parents = dst_sorted[idx]
        else:
            parents = np.empty(0, dtype=np.int64)
        np.subtract.at(indeg, parents, 1)
        frontier = np.unique(parents[indeg[parents] == 0])
        level[frontier] = depth
        done += len(frontier)
    if done != n:
        raise ValueError(
            f"graph has a cycle: {n - done} of {n} nodes are never reached from the leaves; "
            "tree graphs must be acyclic with edges pointing child -> parent"
        )
    return level


#: how to provide each field a cell may read, for graphs built without make_tree
FIELD_HELP = {
    WORD: ("set graph.ndata['word'] (int64, one per node) to each node's word id, or to any "
           f"value other than NO_WORD ({NO_WORD}) where the node's row of x is an input and "
           f"to {NO_WORD} where it is not (every node has features: "
           "torch.zeros(graph.num_nodes(), dtype=torch.int64)); make_tree sets it from its "
           "words"),
    POS: ("set graph.edata['pos'] (int64, one per edge) to each child's position among its "
          "parent's children, 0, 1, ... in order; make_tree sets it"),
    REL: ("set graph.edata['rel'] (int64, one per edge) to each edge's relation id, "
          "0..num_relations-1; make_tree(..., rels=...) sets it"),
}


def missing_field(field: str, kind: str, who: str = "cell") -> str:
    """The message for a graph without the ``kind`` (``"node"`` / ``"edge"``) field
    ``field`` that ``who`` reads (docs/trees.md tabulates them per cell); ``who`` is
    :func:`validate_tree` itself where a caller asked it for the field."""
    store = "ndata" if kind == "node" else "edata"
    fix = FIELD_HELP.get(field, f"set graph.{store}[{field!r}] or build graphs with make_tree")
    reader = "fields= asks for" if who == _VALIDATE else "the cell reads"
    return f"{who}: graph has no {kind} field {field!r}, which {reader}; {fix}"


_VALIDATE = "validate_tree"
#: the schema's fields by where they live, for ``validate_tree(graph, fields=...)``
NODE_FIELDS, EDGE_FIELDS = (WORD, LEAF, LABEL, SPAN, ROOT), (REL, POS)


def validate_tree(
    graph: dgl.DGLGraph,
    *,
    fields: Sequence[str] = (),
    edge_fields: Sequence[str] = (),
    node_fields: Sequence[str] = (),
    max_children: int | None = None,
    num_relations: int | None = None,
    distinct_positions: bool = False,
    who: str = _VALIDATE,
) -> None:
    """Check ``graph`` before any computation; raises a ``ValueError`` naming the fix.

    The structure always: one or more trees with edges pointing child -> parent (a
    reversed tree, self-loops and edges both ways each get their own message, see
    :func:`check_direction`), no node with two parents, no cycle, and at most
    ``max_children`` children per node. A field only when asked: ``fields`` names fields
    of the schema (node fields ``word leaf label span root``, edge fields ``rel pos``),
    ``edge_fields`` / ``node_fields`` any field by where it lives; a cell passes its own
    (``cell.edge_fields``), so ``validate_tree(graph, fields=cell.edge_fields)`` asks
    what the cell will. ``num_relations`` bounds ``edata['rel']`` where present, and
    ``max_children`` the child positions ``edata['pos']``; ``distinct_positions``: no two
    children of a node share a position (where ``edata['pos']`` is present; a cell that
    sums the children by position would silently add them up). ``who`` begins each message
    (a cell passes its class name)."""
    if not isinstance(graph, dgl.DGLGraph):
        raise ValueError(f"{who}: expected a dgl.DGLGraph, got {type(graph).__name__}")
    unknown = [f for f in fields if f not in NODE_FIELDS + EDGE_FIELDS]
    if unknown:
        raise ValueError(f"{who}: fields={list(fields)} names {unknown[0]!r}, not a field of "
                         f"the schema (node fields {NODE_FIELDS}, edge fields {EDGE_FIELDS}); "
                         "name any other field with node_fields= or edge_fields=")
    nodes, edge_data = field_views(graph)
    edges = _validate_structure(graph, max_children, who, nodes)
    for f in [*edge_fields, *(f for f in fields if f in EDGE_FIELDS)]:
        if edges is not None and f not in edge_data:
            raise ValueError(missing_field(f, "edge", who))
    for f in [*node_fields, *(f for f in fields if f in NODE_FIELDS)]:
        if f not in nodes:
            raise ValueError(missing_field(f, "node", who))
    if (max_children is not None or distinct_positions) and POS in edge_data and edges is not None:
        _check_positions(graph.num_nodes(), edges[1], edge_data[POS], max_children,
                         distinct_positions, who)
    if num_relations is not None and REL in edge_data and edges is not None:
        r = edge_data[REL]
        if int(r.max()) >= num_relations or int(r.min()) < 0:
            raise ValueError(
                f"{who}: relation ids span [{int(r.min())}, {int(r.max())}] but the cell has "
                f"num_relations={num_relations}; build the cell with the size of the data's "
                "relation vocabulary"
            )


def field_views(graph: dgl.DGLGraph) -> tuple:
    """The node and the edge fields of ``graph``, each a mapping from name to tensor: for a
    graph of one node and one edge type (a tree batch) its two frames, which
    ``graph.ndata``/``graph.edata`` read through (a view costs some µs to make and read),
    else those views."""
    nodes, edges = graph._node_frames, graph._edge_frames
    if len(nodes) == 1 and len(edges) == 1:
        return nodes[0], edges[0]
    return graph.ndata, graph.edata


def _check_positions(n: int, dst: np.ndarray, pos: torch.Tensor, max_children: int | None,
                     distinct: bool, who: str) -> None:
    """The child positions ``pos`` of the edges into ``dst``: 1-d integers from 0, below
    ``max_children`` (where given), and (``distinct``) no two edges into one node with the
    same one (O(E + N·K)). Read once, on the host."""
    if pos.dtype.is_floating_point or pos.dtype == torch.bool or pos.dim() != 1:
        raise ValueError(f"{who}: edata['pos'] must be a 1-d integer tensor of child "
                         f"positions, got dtype {pos.dtype}, shape {tuple(pos.shape)}")
    pos = pos.cpu().numpy().astype(np.int64, copy=False)
    lo, hi = int(pos.min()), int(pos.max())
    if lo < 0:
        raise ValueError(f"{who}: edata['pos'] has a negative child position {lo}; "
                         "positions count from 0")
    if max_children is not None and hi >= max_children:
        raise ValueError(
            f"{who}: an edge has child position {hi} but nodes may have at most "
            f"{max_children} children here; child positions must be 0..{max_children - 1}")
    if distinct and np.bincount(dst.astype(np.int64) * (hi + 1) + pos).max() > 1:
        raise ValueError(f"{who}: two children of one node share a child position "
                         "(edata['pos']); positions must be distinct per parent")


def _validate_structure(graph: dgl.DGLGraph, max_children: int | None, who: str,
                        nodes) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`validate_tree`'s structural checks: direction, children, parents, cycles;
    the edges ``(src, dst)`` as host arrays (None where there are none)."""
    n, e = graph.num_nodes(), graph.num_edges()
    if not e:
        return None
    # the edges once, as host arrays: DGL's degree queries cost ~60 µs each in Python
    src, dst = host_edges(graph)
    if made_forest(graph):  # proven by its maker: the marks and the children per node
        _check_marks(nodes, n, src, dst, who)
        _check_max_children(dst, max_children, who)
        return src, dst
    _check_direction(nodes, n, src, dst, who)
    if int(np.bincount(src).max()) > 1:
        out_deg = np.bincount(src)
        node = int(out_deg.argmax())
        raise ValueError(
            f"{who}: node {node} has {int(out_deg[node])} outgoing edges: a node has more than "
            "one parent, so the graph is not a tree (edges point child -> parent, one per "
            "child)")
    _check_forest_acyclic(n, src, dst, who)
    _check_max_children(dst, max_children, who)
    return src, dst


def _check_max_children(dst: np.ndarray, max_children: int | None, who: str) -> None:
    if max_children is None:
        return
    in_deg = np.bincount(dst)
    deg = int(in_deg.max())
    if deg > max_children:
        raise ValueError(
            f"{who}: node {int(in_deg.argmax())} has {deg} children but the cell is "
            f"{max_children}-ary (at most {max_children} children per node); binarize the "
            "trees, or use a cell without that limit (childsum takes any number of "
            "children; nary takes n_ary of them)"
        )


def check_direction(graph: dgl.DGLGraph, *, who: str = "check_direction") -> None:
    """The most common ways a graph built by hand misses the schema's edge direction, each
    with its own ``ValueError``: self-loops (``dgl.add_self_loop``), edges both ways
    (``dgl.add_reverse_edges``, ``dgl.to_bidirected``), and edges pointing parent -> child
    (a reversed tree: a node with several outgoing edges where none has several incoming;
    or, where the graph carries ``ndata['root']`` / ``ndata['leaf']``, a marked root with
    an outgoing edge or a marked leaf with an incoming one). :func:`validate_tree` runs it
    before its other structural checks.

    A reversed chain (each node with at most one edge in and one out) is still a chain: its
    shape alone cannot tell its direction, since any end may be the root. Only the marks
    of :func:`make_tree` (``root``, ``leaf``) can; without them it is taken as given."""
    if graph.num_edges():
        src, dst = host_edges(graph)
        _check_direction(field_views(graph)[0], graph.num_nodes(), src, dst, who)


def _edges_word(k: int) -> str:
    return f"{k} outgoing edge{'s' if k != 1 else ''}"


def _incoming(k: int) -> str:
    return "no incoming" if k == 0 else f"{k} incoming"


#: how to fix a graph whose edges point parent -> child
_REVERSE_FIX = ("reverse it with dgl.reverse(graph, copy_ndata=True, copy_edata=True) and fix "
                "ndata['root'] / ndata['leaf'] if it has them, or build it with make_tree")


def _check_direction(nodes, n: int, src: np.ndarray, dst: np.ndarray, who: str) -> None:
    """:func:`check_direction` of edges ``src -> dst`` of ``n`` nodes with node fields
    ``nodes`` (:func:`field_views`)."""
    loops = np.flatnonzero(src == dst)
    if len(loops):
        looped = np.unique(src[loops])
        if len(looped) == n and n > 1:
            raise ValueError(
                f"{who}: every node has an edge to itself, as dgl.add_self_loop adds; tree "
                "graphs have edges from each child to its parent only: drop them with "
                "dgl.remove_self_loop(graph) (the cells' update already reads a node's own "
                "input)")
        raise ValueError(
            f"{who}: node {int(looped[0])} has an edge to itself (self-loop); tree graphs "
            "have edges from each child to its parent only (dgl.remove_self_loop(graph) "
            "drops them)")
    back = _reversed_edges(n, src, dst)
    if back.any():
        i = int(np.flatnonzero(back)[0])
        raise ValueError(
            f"{who}: nodes {int(src[i])} and {int(dst[i])} are joined by edges both ways (a "
            "cycle of two), as dgl.add_reverse_edges and dgl.to_bidirected make; tree graphs "
            "have one edge per "
            "child, pointing child -> parent: keep the graph from before the reverse edges "
            "were added (or build it with make_tree)")
    out_deg = np.bincount(src, minlength=n)
    in_deg = np.bincount(dst, minlength=n)
    if out_deg.max() > 1 and in_deg.max() <= 1:
        node = int(out_deg.argmax())
        raise ValueError(
            f"{who}: edges must point child -> parent; this graph looks reversed: node {node} "
            f"has {_edges_word(int(out_deg[node]))} and {_incoming(int(in_deg[node]))}; "
            + _REVERSE_FIX)
    _check_marks(nodes, n, src, dst, who)


def _check_marks(nodes, n: int, src: np.ndarray, dst: np.ndarray, who: str) -> None:
    """The ``root`` / ``leaf`` marks of the edges ``src -> dst``, where the node fields
    ``nodes`` (:func:`field_views`) have them: no marked root is an edge's child, no marked
    leaf an edge's parent (the degrees counted only to name a node that is)."""
    for field, ends, what in ((ROOT, src, "root"), (LEAF, dst, "leaf")):
        mark = nodes[field] if field in nodes else None
        if mark is None or mark.dim() != 1 or mark.dtype.is_floating_point:
            continue
        mark = mark.cpu().numpy()
        if not mark[ends].any():
            continue
        out_deg, in_deg = np.bincount(src, minlength=n), np.bincount(dst, minlength=n)
        wrong = out_deg if field == ROOT else in_deg
        node = int(np.flatnonzero(mark.astype(bool) & (wrong > 0))[0])
        if field == ROOT:
            state = f"{_edges_word(int(out_deg[node]))} and {_incoming(int(in_deg[node]))}"
        else:
            state = f"{int(in_deg[node])} incoming edge{'s' if in_deg[node] != 1 else ''}"
        if (field == ROOT and in_deg[node] == 0) or (field == LEAF and out_deg[node] == 0):
            raise ValueError(
                f"{who}: edges must point child -> parent; this graph looks reversed: node "
                f"{node} is marked {what} (ndata[{field!r}]) but has {state}; " + _REVERSE_FIX)
        raise ValueError(
            f"{who}: node {node} is marked {what} (ndata[{field!r}]) but has {state}: the "
            f"marks do not match the edges (a {what} has "
            f"{'no parent' if field == ROOT else 'no children'}); fix ndata[{field!r}] or "
            "the edges (make_tree sets both)")


def _reversed_edges(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """(E,) bool: edge ``src[i] -> dst[i]`` has an edge ``dst[i] -> src[i]`` beside it. Where
    no node has two outgoing edges (every tree), from each node's one parent: edge ``s ->
    d`` is reversed iff ``d``'s parent is ``s``, O(E); else by a set lookup of the
    reversed pairs (``np.isin``, which sorts: some 30 times the time on a batch of 25 SST
    trees)."""
    par = np.full(n, -1, dtype=np.int64)
    par[src] = dst
    if np.count_nonzero(par >= 0) == len(src):  # every node at most one outgoing edge
        return par[dst] == src
    key = src.astype(np.int64) * n + dst
    return np.isin(dst.astype(np.int64) * n + src, key)


def check_words(graph: dgl.DGLGraph, *, who: str = "cell") -> None:
    """For cells that read ``x`` only where ``ndata['word'] != NO_WORD``: refuse a graph
    in which no node has a word (the cell would silently ignore every row of ``x``)."""
    nodes = field_views(graph)[0]
    if WORD not in nodes or graph.num_nodes() == 0:
        return
    if not bool((nodes[WORD] != NO_WORD).any()):
        raise ValueError(
            f"{who}: ndata['word'] is NO_WORD ({NO_WORD}) at every node, so the cell would "
            "ignore x entirely; set ndata['word'] to the word ids (any value other than "
            f"{NO_WORD} marks a node whose row of x is read)"
        )


def _check_forest_acyclic(n: int, src: np.ndarray, dst: np.ndarray, who: str = "cell") -> None:
    """Edges ``src -> dst`` of ``n`` nodes, every node with at most one parent: a cycle
    exists iff some node never reaches a root by following parents (pointer doubling:
    O(N log N), a few vectorised ops). A self-loop, which pointer doubling would take for a
    root, is refused first."""
    loops = np.flatnonzero(src == dst)
    if len(loops):
        raise ValueError(
            f"{who}: node {int(src[loops[0]])} has an edge to itself (self-loop); tree "
            "graphs have edges from each child to its parent only"
        )
    par = np.arange(n)
    par[src] = dst
    is_root = par == np.arange(n)
    anc = par
    for _ in range(int(np.ceil(np.log2(n))) + 1):
        anc = anc[anc]
    if not is_root[anc].all():
        raise ValueError(
            f"{who}: graph has a cycle: some nodes never reach a root; tree graphs must be acyclic "
            "with edges pointing child -> parent"
        )


def batch_roots(graph: dgl.DGLGraph) -> torch.Tensor:
    """The root of every tree of ``graph`` (the nodes without a parent), in node order:
    for a :func:`dgl.batch` of single trees, one per graph in batch order, shape
    ``(batch_size,)``; for a graph holding several trees that :func:`dgl.batch` did not make
    (``dgl.graph`` of a forest, ``batch_size`` 1), each tree's root. A batch of several
    graphs, one of them with several roots, is refused: its roots would not line up with
    its graphs."""
    roots = torch.nonzero(graph.out_degrees() == 0, as_tuple=True)[0]
    if graph.batch_size > 1 and roots.numel() != graph.batch_size:
        raise ValueError(
            f"batch of {graph.batch_size} graphs has {roots.numel()} roots; every graph of a "
            "dgl.batch must be a single tree with edges pointing child -> parent (a graph "
            "holding several trees gives each tree's root when it is not batched with others)"
        )
    return roots.to(graph.device)


def batch_leaves(graph: dgl.DGLGraph) -> tuple[torch.Tensor, torch.Tensor]:
    """Leaf node ids of a batch and the index of the graph each belongs to."""
    leaves = torch.nonzero(graph.in_degrees() == 0, as_tuple=True)[0]
    graph_of = torch.repeat_interleave(
        torch.arange(graph.batch_size, device=graph.device), graph.batch_num_nodes()
    )
    return leaves, graph_of[leaves]
