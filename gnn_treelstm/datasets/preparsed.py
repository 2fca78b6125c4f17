"""Pre-parsed trees in the ``.toks/.parents/.rels/.cparents`` format.

This is the ``stanfordnlp/treelstm`` preprocessing of SICK (``sick/stanford_parsed/`` in
the data mirror): per split directory, one line per sentence in

* ``a.toks`` / ``b.toks``: tokens separated by single spaces;
* ``a.parents``: dependency heads, 1-based, 0 for the root;
* ``a.rels``: Stanford basic dependency label per token;
* ``a.cparents``: binarized constituency tree as parent pointers: the first N entries are
  the N tokens (leaves), later entries are internal nodes, 1-based, 0 for the root.

Dependency graphs get the Stanford relations (ids from :class:`gnn_treelstm.trees.vocab.Relations`,
seeded with ``rels_set.txt`` when present); constituency graphs keep the leaves as nodes
``0..N-1`` and the internal nodes in file order, children ordered by span (left = position
0), relations = child positions (``left``/``right``), like the SST trees.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import dgl

from gnn_treelstm.datasets.arrays import TreeRecord, record_graph
from gnn_treelstm.datasets.dependency import dependency_record
from gnn_treelstm.trees.graph import NO_WORD
from gnn_treelstm.trees.vocab import Relations

__all__ = [
    "PreParsed",
    "PreParsedError",
    "read_preparsed",
    "read_relation_set",
    "cparents_tree",
    "preparsed_dependency_record",
    "preparsed_dependency_graph",
    "cparents_record",
    "preparsed_constituency_record",
    "preparsed_constituency_graph",
]


class PreParsedError(ValueError):
    """Inconsistent pre-parsed files; the message names the file and line."""


@dataclass
class PreParsed:
    """One pre-parsed sentence. ``heads`` are 0-based, -1 for the root; ``cparents`` are
    0-based over the constituency nodes (leaves first), -1 for the root."""

    tokens: list[str]
    heads: list[int]
    rels: list[str]
    cparents: list[int] | None


def _read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return [line.rstrip("\r\n") for line in fh]


def _ints(text: str, path: Path, lineno: int) -> list[int]:
    try:
        return [int(x) for x in text.split(" ") if x != ""]
    except ValueError:
        raise PreParsedError(f"{path}:{lineno}: expected space-separated integers, "
                             f"got {text[:60]!r}") from None


def read_preparsed(directory: str | os.PathLike, side: str = "a") -> list[PreParsed]:
    """Read ``<side>.toks/.parents/.rels`` (and ``.cparents`` if present) of one split.

    Raises:
        PreParsedError: files with different line counts, a line whose token / parent /
            relation counts disagree, not exactly one root, a head out of range, an empty
            sentence, or a ``cparents`` line that is not a tree over the tokens.
    """
    d = Path(directory)
    toks_p, par_p, rel_p, cpar_p = (d / f"{side}.{ext}" for ext in
                                    ("toks", "parents", "rels", "cparents"))
    for p in (toks_p, par_p, rel_p):
        if not p.exists():
            raise PreParsedError(f"{p}: missing pre-parsed file")
    toks, pars, rels = _read_lines(toks_p), _read_lines(par_p), _read_lines(rel_p)
    cpars = _read_lines(cpar_p) if cpar_p.exists() else None
    files = [(toks_p, toks), (par_p, pars), (rel_p, rels)]
    if cpars is not None:
        files.append((cpar_p, cpars))
    counts = {str(p): len(lines) for p, lines in files}
    if len(set(counts.values())) != 1:
        raise PreParsedError(f"{d}: the {side}.* files have different line counts: {counts}")
    out = []
    for i in range(len(toks)):
        lineno = i + 1
        tokens = toks[i].split(" ")
        if toks[i] == "" or any(t == "" for t in tokens):
            raise PreParsedError(f"{toks_p}:{lineno}: empty sentence or empty token")
        n = len(tokens)
        heads1 = _ints(pars[i], par_p, lineno)
        rel = rels[i].split(" ")
        if len(heads1) != n or len(rel) != n:
            raise PreParsedError(f"{par_p}:{lineno}: {n} tokens but {len(heads1)} parents and "
                                 f"{len(rel)} relations ({rel_p})")
        if sum(h == 0 for h in heads1) != 1 or any(h < 0 or h > n for h in heads1):
            raise PreParsedError(f"{par_p}:{lineno}: parents must be 1..{n} with exactly one 0 "
                                 f"(the root), got {pars[i]!r}")
        cp = None
        if cpars is not None:
            c1 = _ints(cpars[i], cpar_p, lineno)
            if len(c1) < n or sum(h == 0 for h in c1) != 1 or any(
                    h < 0 or h > len(c1) for h in c1):
                raise PreParsedError(f"{cpar_p}:{lineno}: expected >= {n} entries with "
                                     f"exactly one 0 and parents in 1..{len(c1)}")
            cp = [h - 1 for h in c1]
        out.append(PreParsed(tokens, [h - 1 for h in heads1], rel, cp))
    return out


def read_relation_set(path: str | os.PathLike) -> Relations:
    """``rels_set.txt`` (one relation per line) -> :class:`Relations` (file order)."""
    names = [x.strip() for x in _read_lines(Path(path)) if x.strip()]
    return Relations(names)


def cparents_tree(
    cparents: Sequence[int], num_words: int, *, binary: bool = True, where: str = "cparents"
) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """Check a 0-based ``cparents`` tree and return ``(parents, positions, spans)``.

    Leaves must be exactly the first ``num_words`` nodes; children are ordered by span start.

    Raises:
        ValueError: a word node with children, an internal node without children, more
            than two children when ``binary``, or a cycle.
    """
    total = len(cparents)
    children: list[list[int]] = [[] for _ in range(total)]
    for c, p in enumerate(cparents):
        if p >= 0:
            children[p].append(c)
    for node in range(total):
        if node < num_words and children[node]:
            raise ValueError(f"{where}: word node {node + 1} has children")
        if node >= num_words and not children[node]:
            raise ValueError(f"{where}: internal node {node + 1} has no children")
        if binary and len(children[node]) > 2:
            raise ValueError(f"{where}: node {node + 1} has {len(children[node])} children; "
                             "a binary tree is required")
    spans: list[tuple[int, int] | None] = [None] * total
    for i in range(num_words):
        spans[i] = (i, i + 1)
    # resolve spans bottom-up (iteratively, any node order)
    pending = list(range(num_words, total))
    while pending:
        rest = []
        for node in pending:
            cs = [spans[c] for c in children[node]]
            if all(s is not None for s in cs):
                spans[node] = (min(s[0] for s in cs), max(s[1] for s in cs))
            else:
                rest.append(node)
        if len(rest) == len(pending):
            raise ValueError(f"{where}: the parent pointers contain a cycle")
        pending = rest
    positions = [0] * total
    for node in range(total):
        for k, c in enumerate(sorted(children[node], key=lambda c: spans[c][0])):
            positions[c] = k
    return list(cparents), positions, [s for s in spans]  # type: ignore[misc]


def preparsed_dependency_record(
    sent: PreParsed, word_ids: Sequence[int], relations: Relations, *,
    add_relations: bool = True,
) -> TreeRecord:
    """Dependency tree of a pre-parsed sentence with its (Stanford) relations."""
    return dependency_record(sent.heads, sent.rels, word_ids, relations,
                             add_relations=add_relations)


def preparsed_dependency_graph(
    sent: PreParsed, word_ids: Sequence[int], relations: Relations, *,
    add_relations: bool = True,
) -> dgl.DGLGraph:
    """Dependency graph of a pre-parsed sentence with its (Stanford) relations."""
    return record_graph(preparsed_dependency_record(sent, word_ids, relations,
                                                    add_relations=add_relations))


def cparents_record(cparents: Sequence[int], word_ids: Sequence[int], *,
                    where: str = "cparents") -> TreeRecord:
    """The binarized constituency tree of ``cparents`` over the words ``word_ids``
    (leaves = words, internal nodes ``NO_WORD``; relations = child positions)."""
    n = len(word_ids)
    parents, positions, spans = cparents_tree(cparents, n, where=where)
    words = list(word_ids) + [NO_WORD] * (len(parents) - n)
    return TreeRecord(parents, words, rels=positions, positions=positions, spans=spans)


def preparsed_constituency_record(
    sent: PreParsed, word_ids: Sequence[int], *, where: str = "cparents"
) -> TreeRecord:
    """Binarized constituency tree from ``cparents`` (:func:`cparents_record`)."""
    if sent.cparents is None:
        raise ValueError(f"{where}: no cparents for this sentence")
    return cparents_record(sent.cparents, word_ids, where=where)


def preparsed_constituency_graph(
    sent: PreParsed, word_ids: Sequence[int], *, where: str = "cparents"
) -> dgl.DGLGraph:
    """Binarized constituency graph from ``cparents`` (leaves = words, internal NO_WORD)."""
    return record_graph(preparsed_constituency_record(sent, word_ids, where=where))
