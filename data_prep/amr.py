"""AMR graphs (PENMAN notation) as tree graphs for the Tree-LSTM cells.

Tran & Cheng (2018), §4 "AMR tree structures": an AMR is a single-rooted directed
acyclic graph whose nodes are concepts and whose edges are relations (roles). To feed it
to a Tree-LSTM they "transform the graphs to tree structures ... [following] Takase et al.
(2016), [which] splits the nodes with an indegree larger than one, which mainly present
coreferential concepts, to a set of separate nodes, whose indegrees exactly equal one";
§5 uses the relation of each edge in the multiplicative cells (``:ARG0``, ``:mod``,
``:polarity`` ...).

The conversion here (:func:`amr_tree`, :func:`amr_to_tree`):

* **Nodes** are visited in the PENMAN traversal order (pre-order of the text), so node 0
  is the AMR's top. Every concept ``(v / concept)`` is a node whose word is the concept
  label; with ``strip_senses`` (default) the PropBank sense suffix is removed
  (``see-01`` -> ``see``) so the label can be looked up in GloVe. Surface alignment marks
  (``~e.3``) are always removed.
* **Constants** (attribute values: ``:polarity -``, ``:quant 6``, ``:op1 "True"``) are
  leaf nodes whose word is the value with the quotes removed. ``:wiki`` links are
  dropped by default (``drop_roles``): they name Wikipedia pages, not meaning in the
  sentence.
* **Edges** point child -> parent (the schema of :mod:`gnn_treelstm.graph`); the
  relation is the role as it is written in the PENMAN tree, e.g. ``:ARG0``.
  **Inverse roles** (``:ARG0-of``) are kept as their own relations by default: in the
  tree the edge goes from the inner concept to the outer one, so ``:ARG0`` ("the child is
  the ARG0 of the parent") and ``:ARG0-of`` ("the parent is the ARG0 of the child") are
  different compositions and a relation-aware cell should be able to tell them apart.
  ``normalize_inverse=True`` maps them to the base role instead (``:ARG0-of`` ->
  ``:ARG0``, using penman's AMR model, so ``:consist-of`` stays as it is).
* **Re-entrancies** (a variable referred to again, e.g. the second ``i`` in
  ``(s / see-01 :ARG0 (i / i) ... :ARG1 i)``): the first occurrence in the traversal, the
  one that carries the concept and its subtree, stays where it is. With
  ``reentrancy="copy"`` (default, Takase et al. 2016 as used by Tran & Cheng) each later
  reference becomes a new **leaf** node with the same concept label (the split node);
  with ``reentrancy="drop"`` the later references are removed. Either way every node
  has one parent, so the result is a tree; since only leaves are added, cycles in the
  AMR cannot recur.
* **Children order** (``edata["pos"]``) is the order of the branches in the PENMAN text.
* ``ndata["span"]`` is ``[-1, -1]`` (the corpus has no token alignments) and
  ``ndata["label"]`` is ``IGNORE``.

Vocabularies: :func:`build_amr_vocabs` collects the concept and relation labels of a
corpus; both lists start with ``"<unk>"`` (id 0), which unseen concepts and relations
are mapped to. Concept ids may equally come from the dataset's word vocabulary
(``vocab.json``) so that AMR nodes share the GloVe-initialised embeddings of words.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import penman
from penman.models.amr import model as _amr_model

import gnn_treelstm  # noqa: F401  (dgl compatibility before dgl)
from gnn_treelstm.graph import NO_WORD, make_tree

log = logging.getLogger(__name__)

__all__ = [
    "UNK",
    "AmrEntry",
    "AmrTree",
    "read_amr",
    "amr_tree",
    "amr_to_tree",
    "build_amr_vocabs",
]

UNK = "<unk>"
_SENSE = re.compile(r"-\d+$")
_ALIGN = re.compile(r"~[A-Za-z]*\.?\d+(?:,\d+)*$")


@dataclass
class AmrEntry:
    """One AMR of a corpus file."""

    id: str
    sentence: str
    graph_penman: str  # the PENMAN text of the graph, without the metadata lines
    metadata: dict[str, str] = field(default_factory=dict)
    tree: penman.Tree | None = field(default=None, repr=False, compare=False)

    def penman_tree(self) -> penman.Tree:
        if self.tree is None:
            self.tree = penman.parse(self.graph_penman)
        return self.tree


@dataclass
class AmrTree:
    """The tree form of an AMR before ids are assigned (pre-order node numbering)."""

    parents: list[int]  # parent node index, -1 for the root (node 0)
    labels: list[str]  # concept label or constant per node
    roles: list[str]  # role of the edge node -> parent ("" for the root)
    is_constant: list[bool]  # node is an attribute value, not a concept
    is_copy: list[bool]  # node is a split re-entrancy (reentrancy="copy")


def read_amr(path: str | os.PathLike) -> list[AmrEntry]:
    """Read a PENMAN AMR file with ``# ::id`` / ``# ::snt`` metadata.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a graph that does not parse; the message names the file, the graph
            number and the AMR id before it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"AMR file not found: {path}")
    text = path.read_text(encoding="utf-8")
    entries: list[AmrEntry] = []
    try:
        for i, tree in enumerate(penman.iterparse(text)):
            meta = dict(tree.metadata)
            ident = meta.get("id") or f"{path.name}#{i + 1}"
            entries.append(AmrEntry(
                id=ident,
                sentence=meta.get("snt", ""),
                graph_penman=penman.format(penman.Tree(tree.node)),
                metadata=meta,
                tree=tree,
            ))
    except penman.DecodeError as exc:
        after = f" (after {entries[-1].id})" if entries else ""
        raise ValueError(
            f"{path}: graph {len(entries) + 1}{after} is not valid PENMAN: {exc}"
        ) from exc
    log.info("read %d AMR graphs from %s", len(entries), path)
    return entries


def _clean_concept(label: str, strip_senses: bool) -> str:
    label = _ALIGN.sub("", label)
    if strip_senses:
        label = _SENSE.sub("", label) or label
    return label


def _clean_constant(value: str) -> str:
    value = _ALIGN.sub("", value)
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value


def amr_tree(
    entry: AmrEntry | penman.Tree | str,
    *,
    strip_senses: bool = True,
    reentrancy: str = "copy",
    normalize_inverse: bool = False,
    drop_roles: Iterable[str] = (":wiki",),
) -> AmrTree:
    """Turn one AMR into a tree (see the module docstring for the rules).

    Args:
        entry: an :class:`AmrEntry`, a parsed ``penman.Tree`` or PENMAN text.
        strip_senses: remove the sense suffix (``-01``) from concept labels.
        reentrancy: ``"copy"`` (a later reference becomes a leaf copy of the concept) or
            ``"drop"`` (later references are removed).
        normalize_inverse: map ``:X-of`` roles to ``:X``.
        drop_roles: roles whose branches are left out.
    """
    if reentrancy not in ("copy", "drop"):
        raise ValueError(f"reentrancy must be 'copy' or 'drop', got {reentrancy!r}")
    if isinstance(entry, AmrEntry):
        tree = entry.penman_tree()
    elif isinstance(entry, penman.Tree):
        tree = entry
    else:
        tree = penman.parse(entry)
    drop = set(drop_roles)
    concept_of: dict[str, str] = {}
    for var, branches in tree.nodes():
        concept = next((t for r, t in branches if r == "/"), None)
        concept_of[var] = concept if concept is not None else var

    out = AmrTree([], [], [], [], [])

    def add(parent: int, label: str, role: str, constant: bool, copy: bool) -> int:
        out.parents.append(parent)
        out.labels.append(label)
        out.roles.append(role)
        out.is_constant.append(constant)
        out.is_copy.append(copy)
        return len(out.parents) - 1

    # iterative pre-order traversal (deep AMRs must not hit the recursion limit); stack
    # items are (kind, payload, parent, role), children pushed in reverse branch order
    stack: list[tuple[str, Any, int, str]] = [("concept", tree.node, -1, "")]
    while stack:
        kind, payload, parent, role = stack.pop()
        if kind == "copy":  # a split re-entrancy: leaf copy of the concept
            add(parent, _clean_concept(concept_of[payload], strip_senses), role, False, True)
            continue
        if kind == "const":
            add(parent, _clean_constant(payload), role, True, False)
            continue
        var, branches = payload
        me = add(parent, _clean_concept(concept_of[var], strip_senses), role, False, False)
        todo: list[tuple[str, Any, int, str]] = []
        for r, target in branches:
            if r == "/" or r in drop:
                continue
            if normalize_inverse and _amr_model.is_role_inverted(r):
                r = _amr_model.invert_role(r)
            if isinstance(target, tuple):
                todo.append(("concept", target, me, r))
            elif target in concept_of:  # a re-entrancy: a variable named again
                if reentrancy == "copy":
                    todo.append(("copy", target, me, r))
            else:
                todo.append(("const", target, me, r))
        stack.extend(reversed(todo))
    return out


def _lookup(vocab: Mapping[str, int] | Sequence[str] | Any) -> Mapping[str, int]:
    if hasattr(vocab, "stoi"):
        return vocab.stoi
    if isinstance(vocab, Mapping):
        return vocab
    return {w: i for i, w in enumerate(vocab)}


def amr_to_tree(
    entry: AmrEntry | penman.Tree | str,
    concept_vocab: Mapping[str, int] | Sequence[str] | Any,
    rel_vocab: Mapping[str, int] | Sequence[str] | Any,
    **options: Any,
):
    """One AMR as a tree graph (``gnn_treelstm.graph.make_tree`` schema).

    Args:
        entry: the AMR (:class:`AmrEntry`, ``penman.Tree`` or PENMAN text).
        concept_vocab: word -> id (a dict, a list in id order, or an object with
            ``stoi``). A label not in it is tried lowercased, else gets the id of
            ``"<unk>"`` (0 when absent).
        rel_vocab: role -> id, same forms. An unseen role gets the id of ``"<unk>"``;
            without one it is a ``ValueError``.
        **options: passed to :func:`amr_tree` (``strip_senses``, ``reentrancy``,
            ``normalize_inverse``, ``drop_roles``).

    Returns:
        A ``DGLGraph`` with ``ndata["word"]`` concept ids, edges child -> parent,
        ``edata["rel"]`` role ids and ``edata["pos"]`` branch order.
    """
    t = amr_tree(entry, **options)
    cv, rv = _lookup(concept_vocab), _lookup(rel_vocab)
    unk_word = cv.get(UNK, 0)
    words = []
    for label in t.labels:
        wid = cv.get(label)
        if wid is None:
            wid = cv.get(label.lower(), unk_word)
        words.append(wid if wid is not None else NO_WORD)
    rels = [0] * len(t.parents)
    for i, role in enumerate(t.roles):
        if t.parents[i] < 0:
            continue
        rid = rv.get(role, rv.get(UNK))
        if rid is None:
            ident = entry.id if isinstance(entry, AmrEntry) else "<amr>"
            raise ValueError(
                f"AMR {ident}: relation {role!r} is not in the relation vocabulary and it has "
                f"no {UNK!r} entry; build the vocabulary with build_amr_vocabs on this data"
            )
        rels[i] = rid
    return make_tree(t.parents, words, rels=rels)


def build_amr_vocabs(
    entries: Iterable[AmrEntry], *, min_count: int = 1, **options: Any
) -> tuple[list[str], list[str]]:
    """Concept and relation vocabularies of a corpus, ``"<unk>"`` first, then by
    decreasing frequency (ties alphabetical). ``options`` as for :func:`amr_tree`;
    concepts seen fewer than ``min_count`` times are left to ``"<unk>"``."""
    concepts: Counter[str] = Counter()
    roles: Counter[str] = Counter()
    for e in entries:
        t = amr_tree(e, **options)
        concepts.update(t.labels)
        roles.update(r for r, p in zip(t.roles, t.parents) if p >= 0)

    def order(c: Counter[str], keep: int) -> list[str]:
        return [UNK] + sorted((w for w, n in c.items() if n >= keep and w != UNK),
                              key=lambda w: (-c[w], w))

    return order(concepts, min_count), order(roles, 1)
