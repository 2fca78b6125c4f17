"""Penn-Treebank bracketed trees with any labels, as binary trees over the words.

``data_prep.ptb`` reads the SST's strictly binary trees with 0-4 sentiment labels; a user's
own parses (``"ptb"`` in a JSONL row, e.g. ``(ROOT (S (NP (DT A) (NN man)) (VP (VBZ
plays))))``) have phrase labels and any number of children. :func:`parse_bracketed` makes
them the binary constituency trees the N-ary Tree-LSTM reads (Tai et al. 2015 §3.2 use
binarized parses):

* labels are ignored; a preterminal ``(DT A)`` is the word ``A``;
* empty elements (``(-NONE- *T*-1)``) and the constituents left empty by removing them are
  dropped;
* unary chains collapse to their child (``(NP (NN man))`` is the word ``man``);
* a node with k > 2 children is right-factored: ``(X a b c)`` -> ``(X a (X' b c))``.

The result is ``cparents``, the ``stanford_parsed`` layout of :mod:`data_prep.preparsed`:
the n words are nodes ``0..n-1`` in sentence order, internal nodes follow in post-order
(the root last), each entry is the parent's index (-1 for the root); a sentence of n words
has ``2n - 1`` nodes.
"""

from __future__ import annotations

import re

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


def _simplify(node: tuple[str, list] | str) -> tuple[str, list] | str | None:
    """Words stay; empty elements and empty constituents vanish; unary chains collapse."""
    if isinstance(node, str):
        return node
    label, kids = node
    if label == _EMPTY:
        return None
    out = [s for s in (_simplify(k) for k in kids) if s is not None]
    if not out:
        return None
    if len(out) == 1:
        return out[0]
    return (label, out)


def parse_bracketed(text: str, *, where: str = "ptb") -> tuple[list[str], list[int]]:
    """``(tokens, cparents)`` of a bracketed tree (see the module docstring).

    Raises:
        BracketError: unbalanced brackets, a word outside any bracket, more than one tree,
            or a tree without words.
    """
    tree = _simplify(_read(text, where))
    if tree is None:
        raise BracketError(f"{where}: the PTB tree has no words")
    tokens: list[str] = []
    internal: list[list[int]] = []  # children (as ("w", i) / ("n", j) refs) per node

    def walk(node: tuple[str, list] | str) -> tuple[str, int]:
        if isinstance(node, str):
            tokens.append(node)
            return ("w", len(tokens) - 1)
        kids = [walk(k) for k in node[1]]
        while len(kids) > 2:  # right-factoring: the last two first
            internal.append([kids[-2], kids[-1]])
            kids = kids[:-2] + [("n", len(internal) - 1)]
        internal.append(kids)
        return ("n", len(internal) - 1)

    walk(tree)
    n = len(tokens)
    parents = [-1] * (n + len(internal))
    for j, kids in enumerate(internal):
        for kind, i in kids:
            parents[i if kind == "w" else n + i] = n + j
    return tokens, parents
