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

from gnn_treelstm.trees.graph import NO_WORD, make_tree

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


def parse_ptb(
    text: str, *, source: str = "<string>", lineno: int = 0, binary: bool = True
) -> PTBTree:
    """Parse one labelled PTB tree.

    Args:
        text: the tree, e.g. ``"(3 (2 good) (2 film))"``.
        source, lineno: used in error messages.
        binary: raise if a node has more than two children.

    Raises:
        PTBError: unbalanced parentheses, a missing or non-integer label, a label outside
            0-4, a node with more than two children (``binary``), an empty tree or
            sentence, or trailing text.
    """
    where = _where(source, lineno)
    toks = list(tokenize_ptb(text))
    if not toks:
        raise PTBError(f"{where}: empty line; expected a PTB tree like '(3 (2 good) (2 film))'")
    tokens: list[str] = []
    # internal nodes are collected as (label, children ids, span); leaves get ids 0..n-1
    internal: list[tuple[int, list[int], tuple[int, int]]] = []
    leaf_labels: list[int] = []
    pos = 0

    def parse_label(k: int) -> int:
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

    # iterative: a tree of any depth parses (no recursion); a node is a ("leaf", id) or
    # ("int", idx) reference; ``open_nodes`` holds the internal nodes not yet closed as
    # [column of their '(', label, first token, children]
    open_nodes: list[list] = []
    root: tuple[str, int] | None = None
    k = 0
    while root is None:
        if k >= len(toks):
            raise PTBError(f"{where}: unbalanced parentheses: the tree ends early")
        if toks[k][0] != "(":
            raise PTBError(
                f"{where}: expected '(' at column {toks[k][1] + 1}, got {toks[k][0]!r}"
            )
        open_col = toks[k][1]
        lab = parse_label(k + 1)
        k += 2
        if k >= len(toks):
            raise PTBError(f"{where}: unbalanced parentheses: '(' at column {open_col + 1} "
                           "is never closed")
        node: tuple[str, int] | None = None
        if toks[k][0] not in "()":  # pre-terminal (label word)
            word = toks[k][0]
            k += 1
            if k >= len(toks) or toks[k][0] != ")":
                got = "end of line" if k >= len(toks) else repr(toks[k][0])
                raise PTBError(f"{where}: unbalanced parentheses: expected ')' after word "
                               f"{word!r} (column {toks[k - 1][1] + 1}), got {got}")
            tokens.append(unescape(word))
            leaf_labels.append(lab)
            pos += 1
            node, k = ("leaf", len(tokens) - 1), k + 1
        else:
            open_nodes.append([open_col, lab, pos, []])
            if toks[k][0] == "(":
                continue  # its first child
        while True:  # attach the finished node, then close the nodes that end here
            if node is not None:
                if not open_nodes:
                    root = node
                    break
                open_nodes[-1][3].append(node)
            col, nlab, start, children = open_nodes[-1]
            if k >= len(toks):
                raise PTBError(f"{where}: unbalanced parentheses: '(' at column {col + 1} "
                               "is never closed")
            if toks[k][0] == "(":
                break  # the next child
            if toks[k][0] != ")":
                raise PTBError(f"{where}: unexpected {toks[k][0]!r} at column "
                               f"{toks[k][1] + 1}; words must be wrapped as '(label word)'")
            if not children:
                raise PTBError(f"{where}: node at column {col + 1} has no children and no "
                               "word")
            if binary and len(children) > 2:
                raise PTBError(f"{where}: node at column {col + 1} has {len(children)} "
                               "children; a binary tree is required (at most 2)")
            internal.append((nlab, [c[1] if c[0] == "int" else -1 - c[1] for c in children],
                             (start, pos)))
            open_nodes.pop()
            node, k = ("int", len(internal) - 1), k + 1
    if k != len(toks):
        raise PTBError(f"{where}: unbalanced parentheses or trailing text at column "
                       f"{toks[k][1] + 1}: {toks[k][0]!r}")
    n = len(tokens)
    if n == 0:
        raise PTBError(f"{where}: empty sentence (the tree has no words)")
    total = n + len(internal)
    parents = [-1] * total
    positions = [0] * total
    labels = leaf_labels + [lab for lab, _, _ in internal]
    spans: list[tuple[int, int]] = [(i, i + 1) for i in range(n)]
    for j, (_, children, span) in enumerate(internal):
        node = n + j
        spans.append(span)
        for p, c in enumerate(children):
            cid = -1 - c if c < 0 else n + c  # leaf ids were encoded as -1 - id
            parents[cid] = node
            positions[cid] = p
    assert root[0] == "int" or total == 1  # a one-word sentence is "(2 word)"
    return PTBTree(tokens, parents, labels, spans, positions, source=source, lineno=lineno)


def read_ptb_file(path: str | os.PathLike, *, binary: bool = True) -> list[PTBTree]:
    """Parse every line of an SST tree file (UTF-8). Blank lines are errors."""
    from gnn_treelstm.datasets.readers import numbered_lines

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


def tree_to_graph(tree: PTBTree, word_id: Callable[[str], int]) -> dgl.DGLGraph:
    """The constituency graph of ``tree``; ``word_id`` maps a token to its vocabulary id."""
    n = len(tree.tokens)
    words = [word_id(t) for t in tree.tokens] + [NO_WORD] * (tree.num_nodes - n)
    return make_tree(tree.parents, words, labels=tree.labels, rels=tree.positions,
                     positions=tree.positions, spans=tree.spans)
