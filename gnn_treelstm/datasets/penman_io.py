"""Reading PENMAN files: AMR graphs with their ``# ::`` metadata, each checked to be one
well-formed graph, with errors that name the file, the line and the graph id.

``penman`` alone is too forgiving for a data set builder: it stops at a stray ``)`` and
silently drops the rest of a file, ignores text after a graph, and warns (without failing)
about a missing concept or role value. :func:`parse_amr` therefore splits the text into
graphs itself (a graph ends where its parentheses balance, quoted strings skipped), refuses
text after a graph, unbalanced parentheses and metadata without a graph, and parses each
graph with ``penman``. The conversion to trees is :mod:`gnn_treelstm.datasets.amr`.

``penman``'s parser is recursive, so a graph nested more than :data:`MAX_DEPTH` levels
deep is refused (file, line and column of the first '(' too deep) before it is parsed;
AMR banks' graphs are a few tens of levels deep. A file that is not UTF-8 is refused with
the file, the line and the column of the first bad byte.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import penman

from gnn_treelstm.datasets.readers import numbered_lines

log = logging.getLogger("gnn_treelstm.datasets.amr")

__all__ = ["AmrError", "AmrEntry", "parse_amr", "parse_graph", "read_amr"]

_ID = re.compile(r"::id\s+(\S+)")
#: the deepest nesting of a graph's parentheses read (``penman`` parses recursively)
MAX_DEPTH = 200


class AmrError(ValueError):
    """A malformed AMR; the message names the file, the line and the graph id."""


@dataclass
class AmrEntry:
    """One AMR of a corpus file."""

    id: str
    sentence: str
    graph_penman: str  # the PENMAN text of the graph, without the metadata lines
    metadata: dict[str, str] = field(default_factory=dict)
    tree: penman.Tree | None = field(default=None, repr=False, compare=False)
    where: str = ""  # "file:line" of the graph's first line, for messages

    def penman_tree(self) -> penman.Tree:
        if self.tree is None:
            self.tree = parse_graph(self.graph_penman, self.where or self.id)
        return self.tree

    def tokens(self) -> list[str]:
        """The sentence's tokens: ``# ::tok`` if present, else ``# ::snt`` split on spaces
        (the token indices of ``~e.N`` alignments count in these)."""
        return (self.metadata.get("tok") or self.sentence).split()


def parse_graph(text: str, where: str) -> penman.Tree:
    """One PENMAN graph (``AmrError`` naming ``where`` if it does not parse or is nested
    deeper than :data:`MAX_DEPTH`)."""
    depth = 0
    for line in text.splitlines():
        depth, _ = _scan(line, depth, where)
    try:
        return penman.parse(text)
    except penman.DecodeError as exc:
        raise AmrError(f"{where}: not valid PENMAN: {exc.message} "
                       f"(line {exc.lineno}, column {exc.offset + 1} of the graph)") from None


def _scan(line: str, depth: int, where: str) -> tuple[int, str]:
    """Parenthesis depth after ``line`` (quoted strings skipped), and the text after the
    point where the depth returned to 0."""
    quoted = escaped = False
    for k, ch in enumerate(line):
        if quoted:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
            continue
        if ch == '"':
            quoted = True
        elif ch == "(":
            depth += 1
            if depth > MAX_DEPTH:
                raise AmrError(f"{where}: the graph is nested more than {MAX_DEPTH} levels "
                               f"deep at column {k + 1}; graphs are read up to {MAX_DEPTH} "
                               "levels (AMR banks nest a few tens): split or flatten it")
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise AmrError(f"{where}: unbalanced ')' at column {k + 1}")
            if depth == 0:
                return 0, line[k + 1:].strip()
    return depth, ""


def _graph_id(meta: list[str], number: int) -> str:
    """The ``# ::id`` of a graph's metadata, else its number in the text."""
    return next((m.group(1) for m in map(_ID.search, meta) if m), str(number))


def _entry(source: str, start: int, meta: list[str], graph: list[str],
           number: int) -> AmrEntry:
    """The graph ``number`` of the text (its lines from ``start``), parsed."""
    where = f"{source}:{start} (graph {_graph_id(meta, number)})"
    try:
        tree = penman.parse("\n".join(meta + graph))
    except penman.DecodeError as exc:
        line = start + max(exc.lineno - 1 - len(meta), 0)
        raise AmrError(f"{where}: not valid PENMAN: {exc.message} at line {line}, column "
                       f"{exc.offset + 1}") from None
    md = dict(tree.metadata)
    return AmrEntry(
        id=md.get("id") or f"{Path(source).name}#{number}",
        sentence=md.get("snt", ""),
        graph_penman=penman.format(penman.Tree(tree.node)),
        metadata=md, tree=tree, where=where)


def _graph_start(stripped: str, where: str) -> bool:
    """Whether a line outside a graph starts one (False: a blank or a comment line)."""
    if not stripped or stripped.startswith("#"):
        return False
    if not stripped.startswith("("):
        raise AmrError(f"{where}: expected a PENMAN graph starting with "
                       f"'(' or a '#' comment line, got {stripped[:40]!r}")
    return True


def parse_amr(text: str, source: str = "<string>") -> list[AmrEntry]:
    """Split PENMAN text into graphs (with their ``# ::`` metadata) and parse each.

    Graphs end where their parentheses balance; blank lines and comment lines between
    graphs are skipped, comments without a graph after them are ignored.

    Raises:
        AmrError: text that is not a graph, unbalanced parentheses, text after a graph on
            its last line, metadata (``# ::id``) with no graph, a graph that does not parse.
    """
    entries: list[AmrEntry] = []
    meta: list[str] = []
    graph: list[str] = []
    start = depth = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if depth == 0:
            if not _graph_start(stripped, f"{source}:{lineno}"):
                if stripped:
                    meta.append(line)
                continue
            start, graph = lineno, []
        graph.append(line)
        where = f"{source}:{lineno} (graph {_graph_id(meta, len(entries) + 1)})"
        depth, trailing = _scan(line, depth, where)
        if trailing:
            raise AmrError(f"{where}: {trailing[:40]!r} after the "
                           f"end of the graph (an extra ')'?); one graph per block, blocks "
                           "separated by a blank line")
        if depth == 0:
            entries.append(_entry(source, start, meta, graph, len(entries) + 1))
            meta, graph = [], []
    if depth > 0:
        raise AmrError(f"{source}:{start} (graph {_graph_id(meta, len(entries) + 1)}): the "
                       f"graph is not closed ({depth} '(' still open at the end of the file)")
    if any("::" in m for m in meta):
        raise AmrError(f"{source}: metadata at the end of the file has no graph after it "
                       f"({meta[0].strip()[:60]!r}); an empty graph")
    return entries


def read_amr(path: str | os.PathLike) -> list[AmrEntry]:
    """Read a PENMAN AMR file with ``# ::id`` / ``# ::snt`` metadata (:func:`parse_amr`).

    Raises:
        FileNotFoundError: no such file.
        AmrError: malformed PENMAN, or nested deeper than :data:`MAX_DEPTH`; the message
            names the file, the line and the graph.
        ValueError: a byte that is not UTF-8 (the file, the line and the column).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"AMR file not found: {path}")
    text = "\n".join(line for _, line in numbered_lines(path))  # bad bytes: file:line
    entries = parse_amr(text, str(path))
    log.info("read %d AMR graphs from %s", len(entries), path)
    return entries
