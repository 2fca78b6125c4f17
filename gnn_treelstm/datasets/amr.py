"""AMR graphs (PENMAN notation) as tree graphs for the Tree-LSTM cells.

Tran & Cheng (2018), §4 "AMR tree structures": an AMR is a single-rooted directed
acyclic graph whose nodes are concepts and whose edges are relations (roles). To feed it
to a Tree-LSTM they "transform the graphs to tree structures ... [following] Takase et al.
(2016), [which] splits the nodes with an indegree larger than one, which mainly present
coreferential concepts, to a set of separate nodes, whose indegrees exactly equal one";
§5 uses the relation of each edge in the multiplicative cells (``:ARG0``, ``:mod``,
``:polarity``, "conjunction (:opN)" ...), and §6.1 embeds each node with the GloVe vector
of the sentence word the JAMR aligner links it to.

The conversion here (:func:`amr_tree`, :func:`amr_to_tree`):

* **Nodes** are visited in the PENMAN traversal order (pre-order of the text), so node 0
  is the AMR's top. Every concept ``(v / concept)`` is a node whose label is the concept;
  with ``strip_senses`` (default) the PropBank sense suffix is removed (``see-01`` ->
  ``see``) so the label can be looked up in GloVe.
* **Surface alignments** (``see-01~e.2``, ISI style: 0-based token indices) are removed
  from labels, roles and variables; the first index of a node's alignment is kept in
  :attr:`AmrTree.align`, and :func:`node_words` uses it to give the node the aligned
  sentence token instead of its label (Tran §6.1).
* **Constants** (attribute values: ``:polarity -``, ``:quant 6``, ``:op1 "True"``) are
  leaf nodes whose label is the value with the quotes removed. ``:wiki`` links are
  dropped by default (``drop_roles``): they name Wikipedia pages, not meaning in the
  sentence.
* **Edges** point child -> parent (the schema of :mod:`gnn_treelstm.trees.graph`); the
  relation is the role as it is written in the PENMAN tree, e.g. ``:ARG0``.
  **Inverse roles** (``:ARG0-of``) are kept as their own relations by default: in the
  tree the edge goes from the inner concept to the outer one, so ``:ARG0`` ("the child is
  the ARG0 of the parent") and ``:ARG0-of`` ("the parent is the ARG0 of the child") are
  different compositions and a relation-aware cell should be able to tell them apart.
  ``normalize_inverse=True`` maps them to the base role instead (``:ARG0-of`` ->
  ``:ARG0``, using penman's AMR model, so ``:consist-of`` stays as it is).
  ``merge_ops=True`` maps ``:op1``, ``:op2`` ... to ``:opN`` and ``:snt1`` ... to ``:sntN``
  (one relation matrix for every operand, Tran §6's ":opN").
* **Re-entrancies** (a variable referred to again, e.g. the second ``i`` in
  ``(s / see-01 :ARG0 (i / i) ... :ARG1 i)``): the first occurrence in the traversal, the
  one that carries the concept and its subtree, stays where it is. With
  ``reentrancy="copy"`` (default, Takase et al. 2016 as used by Tran & Cheng) each later
  reference becomes a new **leaf** node with the same concept label (the split node);
  with ``reentrancy="drop"`` the later references are removed. Either way every node
  has one parent, so the result is a tree. A re-entrancy may close a **cycle** in the
  AMR (``(h / hat :purpose (s / salute-01 :instrument h))``; 5 of the 1562 Little Prince
  graphs have one); the split breaks it like any other re-entrancy (``cycles="split"``,
  default) or the graph is refused (``cycles="error"``). A node that is its own
  argument (``(a / b :mod a)``) is always an error.
* **Children order** (``edata["pos"]``) is the order of the branches in the PENMAN text.
* ``ndata["span"]`` is ``[-1, -1]`` and ``ndata["label"]`` is ``IGNORE``.

Bad input raises :class:`AmrError` naming the file, line and graph id: PENMAN that does not
parse, unbalanced parentheses or text after a graph (:mod:`gnn_treelstm.datasets.penman_io`, which
reads the files), an empty graph ``()``, a node without a concept or a role without a value,
a variable defined twice, an alignment past the sentence's end, a self-loop.

Vocabularies: :func:`build_amr_vocabs` collects the concept and relation labels of a
corpus; both lists start with ``"<unk>"`` (id 0), which unseen concepts and relations
are mapped to. ``gnn-treelstm build --dataset amr`` instead uses the data set's word
vocabulary (the node words) and a :class:`gnn_treelstm.trees.vocab.Relations` of the roles.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dgl
import penman
from penman.models.amr import model as _amr_model

import gnn_treelstm  # noqa: F401  (dgl compatibility before dgl)
from gnn_treelstm.datasets.penman_io import AmrEntry, AmrError, parse_amr, parse_graph, read_amr
from gnn_treelstm.trees.graph import NO_WORD, make_tree

log = logging.getLogger(__name__)

__all__ = [
    "UNK",
    "AmrError",
    "AmrEntry",
    "AmrTree",
    "read_amr",
    "parse_amr",
    "amr_tree",
    "amr_to_tree",
    "node_words",
    "find_cycle",
    "build_amr_vocabs",
]

UNK = "<unk>"
_SENSE = re.compile(r"-\d+$")
_ALIGN = re.compile(r"~[A-Za-z]*\.?(\d+)(?:,\d+)*$")
_OPS = re.compile(r"^:(op|snt)\d+(-of)?$")


@dataclass
class AmrTree:
    """The tree form of an AMR before ids are assigned (pre-order node numbering)."""

    parents: list[int]  # parent node index, -1 for the root (node 0)
    labels: list[str]  # concept label or constant per node
    roles: list[str]  # role of the edge node -> parent ("" for the root)
    is_constant: list[bool]  # node is an attribute value, not a concept
    is_copy: list[bool]  # node is a split re-entrancy (reentrancy="copy")
    align: list[int | None] = field(default_factory=list)  # first aligned token index
    reentrancies: int = 0  # later references of variables (copied or dropped)
    cycle: list[str] | None = None  # a cycle of the AMR, as variables (cycles="split")


def _strip_align(s: str) -> tuple[str, int | None]:
    m = _ALIGN.search(s)
    return (s, None) if m is None else (s[: m.start()], int(m.group(1)))


def _clean_concept(label: str, strip_senses: bool) -> str:
    if strip_senses:
        label = _SENSE.sub("", label) or label
    return label


def _clean_constant(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value


def _role(r: str, normalize_inverse: bool, merge_ops: bool) -> str:
    r = _strip_align(r)[0]
    if normalize_inverse and _amr_model.is_role_inverted(r):
        r = _amr_model.invert_role(r)
    if merge_ops:
        m = _OPS.match(r)
        if m:
            r = f":{m.group(1)}N{m.group(2) or ''}"
    return r


def find_cycle(tree: penman.Tree) -> list[str] | None:
    """A directed cycle of the AMR graph (roles read in their normal direction, so
    ``:ARG0-of`` points from the inner to the outer concept), as its variables with the
    first repeated at the end; None if the graph is acyclic."""
    defined = {v for v, _ in tree.nodes()}
    succ: dict[str, list[str]] = {v: [] for v, _ in tree.nodes()}
    for var, branches in tree.nodes():
        for r, target in branches:
            if r == "/":
                continue
            tv = target[0] if isinstance(target, tuple) else _strip_align(target)[0]
            if tv not in defined:
                continue
            if _amr_model.is_role_inverted(_strip_align(r)[0]):
                succ[tv].append(var)
            else:
                succ[var].append(tv)
    state: dict[str, int] = {}  # 1 on the path, 2 done
    for start in succ:
        if start in state:
            continue
        path, stack = [start], [iter(succ[start])]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(succ[nxt]))
    return None


def _check_choices(reentrancy: str, cycles: str) -> None:
    if reentrancy not in ("copy", "drop"):
        raise ValueError(f"reentrancy must be 'copy' or 'drop', got {reentrancy!r}")
    if cycles not in ("split", "error"):
        raise ValueError(f"cycles must be 'split' or 'error', got {cycles!r}")


def _tree_and_name(entry: AmrEntry | penman.Tree | str) -> tuple[penman.Tree, str]:
    """The parsed tree and the name its errors give (file:line and id, or the id)."""
    if isinstance(entry, AmrEntry):
        return entry.penman_tree(), entry.where or entry.id
    if isinstance(entry, penman.Tree):
        return entry, str(entry.metadata.get("id", "<amr>"))
    return parse_graph(entry, "<amr>"), "<amr>"


def _check_node(var: str, branches: list, ident: str, concept_of: dict[str, str]) -> str:
    """The concept of one node, after checking its branches."""
    empty = [r for r, t in branches if isinstance(t, tuple) and t[0] is None]
    if empty:
        raise AmrError(f"{ident}: an empty node '()' as {empty[0]} of node {var!r}")
    missing = [r for r, t in branches if r != "/" and t is None]
    if missing:
        raise AmrError(f"{ident}: role {missing[0]} of node {var!r} has no value")
    concepts = [t for r, t in branches if r == "/"]
    if not concepts or concepts[0] is None:
        raise AmrError(f"{ident}: node {var!r} has no concept; write it as "
                       f"({var} / concept)")
    if var in concept_of:
        raise AmrError(f"{ident}: variable {var!r} is defined twice "
                       f"(/ {concept_of[var]} and / {concepts[0]}); refer to it again by "
                       "its name only, or give the second node another variable")
    for r, target in branches:
        if r != "/" and not isinstance(target, tuple) and _strip_align(target)[0] == var:
            raise AmrError(f"{ident}: node {var!r} ({concepts[0]}) is its own {r} "
                           "argument (a self-loop)")
    return concepts[0]


def _concepts(tree: penman.Tree, ident: str) -> dict[str, str]:
    """``{variable: concept as written}`` of a checked graph."""
    if tree.node[0] is None:
        raise AmrError(f"{ident}: empty graph '()'; an AMR needs at least one concept")
    concept_of: dict[str, str] = {}
    for var, branches in tree.nodes():
        concept_of[var] = _check_node(var, branches, ident, concept_of)
    return concept_of


@dataclass
class _AmrWalk:
    """The pre-order walk that numbers the nodes of the tree form (:func:`amr_tree`)."""

    concept_of: dict[str, str]
    strip_senses: bool
    copy: bool  # reentrancy == "copy"
    normalize_inverse: bool
    merge_ops: bool
    drop: set[str]
    out: AmrTree

    def add(self, parent: int, label: str, role: str, constant: bool, copy: bool,
            align: int | None) -> int:
        out = self.out
        out.parents.append(parent)
        out.labels.append(label)
        out.roles.append(role)
        out.is_constant.append(constant)
        out.is_copy.append(copy)
        out.align.append(align)
        return len(out.parents) - 1

    def concept(self, var: str) -> tuple[str, int | None]:
        label, al = _strip_align(self.concept_of[var])
        return _clean_concept(label, self.strip_senses), al

    def run(self, top: Any) -> AmrTree:
        # iterative (deep AMRs must not hit the recursion limit); stack items are
        # (kind, payload, parent, role), children pushed in reverse branch order
        stack: list[tuple[str, Any, int, str]] = [("concept", top, -1, "")]
        while stack:
            kind, payload, parent, role = stack.pop()
            if kind == "copy":  # a split re-entrancy: leaf copy of the concept
                var, al = payload
                label, own = self.concept(var)
                self.add(parent, label, role, False, True, al if al is not None else own)
            elif kind == "const":
                value, al = _strip_align(payload)
                self.add(parent, _clean_constant(value), role, True, False, al)
            else:
                stack.extend(reversed(self.visit(payload, parent, role)))
        return self.out

    def visit(self, node: Any, parent: int, role: str) -> list[tuple[str, Any, int, str]]:
        """Add a concept node; its branches to walk, in order."""
        var, branches = node
        label, al = self.concept(var)
        me = self.add(parent, label, role, False, False, al)
        todo: list[tuple[str, Any, int, str]] = []
        for r, target in branches:
            if r == "/" or _strip_align(r)[0] in self.drop:
                continue
            r = _role(r, self.normalize_inverse, self.merge_ops)
            if isinstance(target, tuple):
                todo.append(("concept", target, me, r))
                continue
            tv, tal = _strip_align(target)
            if tv in self.concept_of:  # a re-entrancy: a variable named again
                self.out.reentrancies += 1
                if self.copy:
                    todo.append(("copy", (tv, tal), me, r))
            else:
                todo.append(("const", target, me, r))
        return todo


def amr_tree(
    entry: AmrEntry | penman.Tree | str,
    *,
    strip_senses: bool = True,
    reentrancy: str = "copy",
    normalize_inverse: bool = False,
    merge_ops: bool = False,
    drop_roles: Iterable[str] = (":wiki",),
    cycles: str = "split",
) -> AmrTree:
    """Turn one AMR into a tree (see the module docstring for the rules).

    Args:
        entry: an :class:`AmrEntry`, a parsed ``penman.Tree`` or PENMAN text.
        strip_senses: remove the sense suffix (``-01``) from concept labels.
        reentrancy: ``"copy"`` (a later reference becomes a leaf copy of the concept) or
            ``"drop"`` (later references are removed).
        normalize_inverse: map ``:X-of`` roles to ``:X``.
        merge_ops: map ``:opK`` to ``:opN`` and ``:sntK`` to ``:sntN``.
        drop_roles: roles whose branches are left out.
        cycles: ``"split"`` (a cycle is broken by the re-entrancy split) or ``"error"``.

    Raises:
        AmrError: an empty graph, a node without a concept, a variable defined twice, a
            node that is its own argument, or a cycle with ``cycles="error"``.
    """
    _check_choices(reentrancy, cycles)
    tree, ident = _tree_and_name(entry)
    concept_of = _concepts(tree, ident)
    cycle = find_cycle(tree)
    if cycle is not None and cycles == "error":
        raise AmrError(f"{ident}: the graph has a cycle through re-entrancies "
                       f"({' -> '.join(cycle)}); fix the AMR or build with cycles='split' "
                       "(--amr-cycles split), which breaks it by the re-entrancy split")
    walk = _AmrWalk(concept_of, strip_senses, reentrancy == "copy", normalize_inverse,
                    merge_ops, set(drop_roles), AmrTree([], [], [], [], [], [], cycle=cycle))
    return walk.run(tree.node)


def node_words(t: AmrTree, tokens: Sequence[str] | None = None, *,
               where: str = "<amr>") -> list[str]:
    """The word of every node: the sentence token its ``~e.N`` alignment points at (Tran
    §6.1 embeds aligned words), else its label.

    Raises:
        AmrError: an alignment index past the end of ``tokens``.
    """
    words = []
    for label, al in zip(t.labels, t.align):
        if al is None or tokens is None:
            words.append(label)
            continue
        if al >= len(tokens):
            raise AmrError(f"{where}: alignment ~e.{al} of {label!r} points past the end of "
                           f"the sentence ({len(tokens)} tokens, counted from 0)")
        words.append(tokens[al])
    return words


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
) -> dgl.DGLGraph:
    """One AMR as a tree graph (``gnn_treelstm.trees.graph.make_tree`` schema).

    Args:
        entry: the AMR (:class:`AmrEntry`, ``penman.Tree`` or PENMAN text).
        concept_vocab: word -> id (a dict, a list in id order, or an object with
            ``stoi``). A label not in it is tried lowercased, else gets the id of
            ``"<unk>"`` (0 when absent).
        rel_vocab: role -> id, same forms. An unseen role gets the id of ``"<unk>"``;
            without one it is a ``ValueError``.
        **options: passed to :func:`amr_tree` (``strip_senses``, ``reentrancy``,
            ``normalize_inverse``, ``merge_ops``, ``drop_roles``, ``cycles``).

    Returns:
        The tree: ``ndata["word"]`` concept ids, edges child -> parent, ``edata["rel"]``
            role ids and ``edata["pos"]`` branch order.
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
