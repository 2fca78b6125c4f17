"""Stanford Sentiment Treebank PTB trees -> binarized constituency graphs.

Input lines look like ``(3 (2 It) (4 (4 (2 's) ...)) (2 .)))``: every node carries a
sentiment label 0-4, a pre-terminal ``(label word)`` is a leaf, and internal nodes have
one or two children (SST itself is strictly binary). Leaves are split on the ASCII space
only (two SST tokens contain a NO-BREAK SPACE, ``2\\u00a01\\/2``), and ``\\/`` is unescaped
to ``/`` (Teng & Zhang's ``.clean`` preprocessing; ``-LRB-``/``-RRB-`` are kept). The
parser is iterative: a tree of any depth parses (10,000 deep in the tests).

Graph layout (see :mod:`gnn_treelstm.trees.graph`): nodes ``0..n-1`` are the n words in sentence
order, internal nodes follow in post-order, so the root is the last node. Internal nodes
have ``word = NO_WORD``; every node has its 0-4 label and its ``[start, end)`` token span;
an edge's ``rel`` and ``pos`` are both the child position (0 = left, 1 = right;
relation names :data:`CONSTITUENCY_RELATIONS`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import dgl

from gnn_treelstm.datasets.arrays import TreeRecord, record_graph
from gnn_treelstm.datasets.readers import numbered_lines
from gnn_treelstm.trees.graph import NO_WORD

__all__ = [
    "CONSTITUENCY_RELATIONS",
    "PTBError",
    "PTBTree",
    "parse_ptb",
    "read_ptb_file",
    "tree_to_graph",
    "tokenize_ptb",
]

#: Relation names of constituency trees: the relation id is the child position.
CONSTITUENCY_RELATIONS = ["left", "right"]
NUM_LABELS = 5


class PTBError(ValueError):
    """A malformed PTB tree; the message names the file, the line and the problem."""


@dataclass
class PTBTree:
    """One parsed tree in graph order (words first, internal nodes in post-order).

    Attributes:
        tokens: the n leaf words (unescaped).
        parents: parent node index per node, -1 for the root (the last node).
        labels: 0-4 label per node.
        spans: ``(start, end)`` token span per node.
        positions: child position per node (0 left, 1 right; 0 for the root).
    """

    tokens: list[str]
    parents: list[int]
    labels: list[int]
    spans: list[tuple[int, int]]
    positions: list[int]
    source: str = field(default="<string>", repr=False)
    lineno: int = field(default=0, repr=False)

    @property
    def label(self) -> int:
        """The sentence (root) label."""
        return self.labels[-1]

    @property
    def num_nodes(self) -> int:
        return len(self.parents)

    def span_labels(self) -> dict[tuple[int, int], int]:
        """Label of every constituent span (the outermost node wins for unary chains)."""
        out: dict[tuple[int, int], int] = {}
        for span, lab in zip(self.spans, self.labels):
            out[span] = lab  # post-order: a parent comes after its children
        return out


def _where(source: str, lineno: int) -> str:
    return f"{source}:{lineno}" if lineno else source


def tokenize_ptb(text: str) -> Iterator[tuple[str, int]]:
    """Yield ``(token, char_offset)``: ``(``, ``)`` or an atom between ASCII spaces/parens."""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == " " or ch in "\r\n\t":
            i += 1
        elif ch in "()":
            yield ch, i
            i += 1
        else:
            j = i
            while j < n and text[j] not in "() \r\n\t":
                j += 1
            yield text[i:j], i
            i = j


def unescape(token: str) -> str:
    """SST escapes: ``\\/`` -> ``/`` (nothing else is changed)."""
    return token.replace("\\/", "/")


_Node = tuple[str, int]  # ("leaf", word id) or ("int", index of the internal node)


@dataclass
class _Open:
    """An internal node whose ')' is not read yet."""

    col: int  # column of its '('
    label: int
    start: int  # its first token
    children: list[_Node] = field(default_factory=list)


class _PtbParser:
    """The iterative parse of one tree (no recursion, so a tree of any depth parses).

    Leaves get ids ``0..n-1`` in sentence order; internal nodes are collected as
    ``(label, children, span)`` in post-order, a child being its internal index, or
    ``-1 - id`` for a leaf.
    """

    def __init__(self, text: str, where: str, binary: bool) -> None:
        self.toks = list(tokenize_ptb(text))
        self.where, self.binary = where, binary
        self.k = 0  # the next token
        self.tokens: list[str] = []
        self.leaf_labels: list[int] = []
        self.internal: list[tuple[int, list[int], tuple[int, int]]] = []
        self.open: list[_Open] = []

    def parse(self) -> _Node:
        """Read the whole tree; its root."""
        if not self.toks:
            raise PTBError(f"{self.where}: empty line; expected a PTB tree like "
                           "'(3 (2 good) (2 film))'")
        root: _Node | None = None
        while root is None:
            node = self.read_open()
            if node is None and self.toks[self.k][0] == "(":
                continue  # the first child of the node just opened
            root = self.close(node)
        if self.k != len(self.toks):
            raise PTBError(f"{self.where}: unbalanced parentheses or trailing text at column "
                           f"{self.toks[self.k][1] + 1}: {self.toks[self.k][0]!r}")
        if not self.tokens:
            raise PTBError(f"{self.where}: empty sentence (the tree has no words)")
        return root

    def label(self, k: int) -> int:
        toks, where = self.toks, self.where
        if k >= len(toks) or toks[k][0] in "()":
            raise PTBError(f"{where}: missing label after '(' at column {toks[k - 1][1] + 1}")
        lab_s, col = toks[k]
        try:
            lab = int(lab_s)
        except ValueError:
            raise PTBError(
                f"{where}: label {lab_s!r} at column {col + 1} is not an integer 0-4"
            ) from None
        if not 0 <= lab < NUM_LABELS:
            raise PTBError(f"{where}: label {lab} at column {col + 1} is outside 0-4")
        return lab

    def read_open(self) -> _Node | None:
        """Read ``(label`` and, for a pre-terminal, ``word)``: the leaf, or None when an
        internal node was opened."""
        toks, where, k = self.toks, self.where, self.k
        if k >= len(toks):
            raise PTBError(f"{where}: unbalanced parentheses: the tree ends early")
        if toks[k][0] != "(":
            raise PTBError(
                f"{where}: expected '(' at column {toks[k][1] + 1}, got {toks[k][0]!r}"
            )
        open_col = toks[k][1]
        lab = self.label(k + 1)
        self.k = k = k + 2
        if k >= len(toks):
            raise PTBError(f"{where}: unbalanced parentheses: '(' at column {open_col + 1} "
                           "is never closed")
        if toks[k][0] not in "()":
            return self.leaf(lab)
        self.open.append(_Open(open_col, lab, len(self.tokens)))
        return None

    def leaf(self, lab: int) -> _Node:
        """Read ``word)`` of a pre-terminal ``(label word)``."""
        toks, k = self.toks, self.k
        word = toks[k][0]
        k += 1
        if k >= len(toks) or toks[k][0] != ")":
            got = "end of line" if k >= len(toks) else repr(toks[k][0])
            raise PTBError(f"{self.where}: unbalanced parentheses: expected ')' after word "
                           f"{word!r} (column {toks[k - 1][1] + 1}), got {got}")
        self.tokens.append(unescape(word))
        self.leaf_labels.append(lab)
        self.k = k + 1
        return ("leaf", len(self.tokens) - 1)

    def close(self, node: _Node | None) -> _Node | None:
        """Attach the finished node, then close the nodes that end here: the root when the
        tree is done, None when a next child starts."""
        toks, where = self.toks, self.where
        while True:
            if node is not None:
                if not self.open:
                    return node
                self.open[-1].children.append(node)
            top = self.open[-1]
            if self.k >= len(toks):
                raise PTBError(f"{where}: unbalanced parentheses: '(' at column {top.col + 1} "
                               "is never closed")
            tok = toks[self.k][0]
            if tok == "(":
                return None
            if tok != ")":
                raise PTBError(f"{where}: unexpected {tok!r} at column "
                               f"{toks[self.k][1] + 1}; words must be wrapped as "
                               "'(label word)'")
            self.check_children(top)
            self.internal.append((top.label, [c[1] if c[0] == "int" else -1 - c[1]
                                              for c in top.children],
                                  (top.start, len(self.tokens))))
            self.open.pop()
            node, self.k = ("int", len(self.internal) - 1), self.k + 1

    def check_children(self, top: _Open) -> None:
        if not top.children:
            raise PTBError(f"{self.where}: node at column {top.col + 1} has no children and "
                           "no word")
        if self.binary and len(top.children) > 2:
            raise PTBError(f"{self.where}: node at column {top.col + 1} has "
                           f"{len(top.children)} children; a binary tree is required "
                           "(at most 2)")

    def tree(self, source: str, lineno: int) -> PTBTree:
        """The parsed tree in graph order (words, then internal nodes in post-order)."""
        n = len(self.tokens)
        total = n + len(self.internal)
        parents = [-1] * total
        positions = [0] * total
        labels = self.leaf_labels + [lab for lab, _, _ in self.internal]
        spans: list[tuple[int, int]] = [(i, i + 1) for i in range(n)]
        for j, (_, children, span) in enumerate(self.internal):
            spans.append(span)
            for p, c in enumerate(children):
                cid = -1 - c if c < 0 else n + c  # leaf ids were encoded as -1 - id
                parents[cid] = n + j
                positions[cid] = p
        return PTBTree(list(self.tokens), parents, labels, spans, positions, source=source,
                       lineno=lineno)


def parse_ptb(
    text: str, *, source: str = "<string>", lineno: int = 0, binary: bool = True
) -> PTBTree:
    """Parse one labelled PTB tree.

    Args:
        text: the tree, e.g. ``"(3 (2 good) (2 film))"``.
        source: the file the tree came from, for error messages.
        lineno: its line in that file, for error messages.
        binary: raise if a node has more than two children.

    Raises:
        PTBError: unbalanced parentheses, a missing or non-integer label, a label outside
            0-4, a node with more than two children (``binary``), an empty tree or
            sentence, or trailing text.
    """
    parser = _PtbParser(text, _where(source, lineno), binary)
    root = parser.parse()
    tree = parser.tree(source, lineno)
    assert root[0] == "int" or tree.num_nodes == 1  # a one-word sentence is "(2 word)"
    return tree


def read_ptb_file(path: str | os.PathLike, *, binary: bool = True) -> list[PTBTree]:
    """Parse every line of an SST tree file (UTF-8). Blank lines are errors."""
    path = Path(path)
    trees = []
    for lineno, line in numbered_lines(path):
        if not line.strip(" \t"):
            raise PTBError(f"{path}:{lineno}: empty line; expected a PTB tree")
        trees.append(parse_ptb(line, source=str(path), lineno=lineno, binary=binary))
    if not trees:
        raise PTBError(f"{path}: no trees (the file is empty); expected one PTB tree per "
                       "line")
    return trees


def tree_record(tree: PTBTree, word_id: Callable[[str], int]) -> TreeRecord:
    """``tree`` as parent pointers; ``word_id`` maps a token to its vocabulary id."""
    n = len(tree.tokens)
    words = [word_id(t) for t in tree.tokens] + [NO_WORD] * (tree.num_nodes - n)
    return TreeRecord(tree.parents, words, labels=tree.labels, rels=tree.positions,
                      positions=tree.positions, spans=tree.spans)


def tree_to_graph(tree: PTBTree, word_id: Callable[[str], int]) -> dgl.DGLGraph:
    """The constituency graph of ``tree``; ``word_id`` maps a token to its vocabulary id."""
    return record_graph(tree_record(tree, word_id))
