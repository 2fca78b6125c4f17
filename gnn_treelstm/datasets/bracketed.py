"""Penn-Treebank bracketed trees with any labels, as binary trees over the words.

``gnn_treelstm.datasets.ptb`` reads the SST's strictly binary trees with 0-4 sentiment labels; a
user's own parses (``"ptb"`` in a JSONL row, e.g. ``(ROOT (S (NP (DT A) (NN man)) (VP (VBZ
plays))))``) have phrase labels and any number of children. :func:`parse_bracketed` makes
them the binary constituency trees the N-ary Tree-LSTM reads (Tai et al. 2015 §3.2 use
binarized parses):

* labels are ignored; a preterminal ``(DT A)`` is the word ``A``;
* empty elements (``(-NONE- *T*-1)``) and the constituents left empty by removing them are
  dropped;
* unary chains collapse to their child (``(NP (NN man))`` is the word ``man``);
* a node with k > 2 children is right-factored: ``(X a b c)`` -> ``(X a (X' b c))``.

Reading, simplifying and binarizing are iterative, so a tree of any depth is read (a
right-branching tree 10,000 deep in ``tests/datasets/test_jsonl.py``).

The result is ``cparents``, the ``stanford_parsed`` layout of
:mod:`gnn_treelstm.datasets.preparsed`:
the n words are nodes ``0..n-1`` in sentence order, internal nodes follow in post-order
(the root last), each entry is the parent's index (-1 for the root); a sentence of n words
has ``2n - 1`` nodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["BracketError", "parse_bracketed"]

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_EMPTY = "-NONE-"


class BracketError(ValueError):
    """A malformed bracketed tree; the message names where it is and what is wrong."""


def _read(text: str, where: str) -> tuple[str, list]:
    """The tree as nested ``(label, children)`` with words as strings."""
    toks = _TOKEN.findall(text)
    if not toks:
        raise BracketError(f"{where}: empty PTB tree; expected e.g. '(S (NP (DT A) (NN man)) "
                           "(VP (VBZ plays)))'")
    frames: list[list] = []  # [label, children]
    roots: list[tuple[str, list]] = []
    for k, t in enumerate(toks):
        if t == "(":
            frames.append([None, []])
        elif t == ")":
            if not frames:
                raise BracketError(f"{where}: unbalanced ')' (token {k + 1} of the tree)")
            label, kids = frames.pop()
            node = (label or "", kids)
            (frames[-1][1] if frames else roots).append(node)
        else:
            if not frames:
                raise BracketError(f"{where}: word {t!r} outside any bracket")
            f = frames[-1]
            if f[0] is None and not f[1]:
                f[0] = t
            else:
                f[1].append(t)
    if frames:
        raise BracketError(f"{where}: {len(frames)} '(' not closed")
    if len(roots) != 1:
        raise BracketError(f"{where}: {len(roots)} trees; expected exactly one bracketed tree")
    return roots[0]


#: the end of a node's children in the iterative walks
_DONE = object()


def _simplify(root: tuple[str, list] | str) -> tuple[str, list] | str | None:
    """Words stay; empty elements and empty constituents vanish; unary chains collapse.
    Iterative (post-order with an explicit stack): a tree of any depth."""
    if isinstance(root, str):
        return root
    if root[0] == _EMPTY:
        return None
    frames: list[tuple[str, Iterator, list]] = [(root[0], iter(root[1]), [])]
    done: tuple[str, list] | str | None = None
    while frames:
        label, kids, out = frames[-1]
        kid = next(kids, _DONE)
        if kid is _DONE:
            frames.pop()
            node = None if not out else out[0] if len(out) == 1 else (label, out)
            if not frames:
                done = node
            elif node is not None:
                frames[-1][2].append(node)
        elif isinstance(kid, str):
            out.append(kid)
        elif kid[0] != _EMPTY:
            frames.append((kid[0], iter(kid[1]), []))
    return done


def _binarize(tree: tuple[str, list] | str) -> tuple[list[str], list[list[tuple[str, int]]]]:
    """The words in order and the internal nodes in post-order, each as its two (or one)
    children (``("w", i)`` a word, ``("n", j)`` an internal node); a node with k > 2
    children right-factored. Iterative: a tree of any depth."""
    tokens: list[str] = []
    internal: list[list[tuple[str, int]]] = []
    if isinstance(tree, str):
        return [tree], internal
    frames: list[tuple[Iterator, list]] = [(iter(tree[1]), [])]
    while frames:
        kids_in, kids = frames[-1]
        kid = next(kids_in, _DONE)
        if kid is _DONE:
            frames.pop()
            while len(kids) > 2:  # right-factoring: the last two first
                internal.append([kids[-2], kids[-1]])
                kids = kids[:-2] + [("n", len(internal) - 1)]
            internal.append(kids)
            if frames:
                frames[-1][1].append(("n", len(internal) - 1))
        elif isinstance(kid, str):
            tokens.append(kid)
            kids.append(("w", len(tokens) - 1))
        else:
            frames.append((iter(kid[1]), []))
    return tokens, internal


def parse_bracketed(text: str, *, where: str = "ptb") -> tuple[list[str], list[int]]:
    """``(tokens, cparents)`` of a bracketed tree (see the module docstring).

    Raises:
        BracketError: unbalanced brackets, a word outside any bracket, more than one tree,
            or a tree without words.
    """
    tree = _simplify(_read(text, where))
    if tree is None:
        raise BracketError(f"{where}: the PTB tree has no words")
    tokens, internal = _binarize(tree)
    n = len(tokens)
    parents = [-1] * (n + len(internal))
    for j, kids in enumerate(internal):
        for kind, i in kids:
            parents[i if kind == "w" else n + i] = n + j
    return tokens, parents
