"""Your own data set: JSON Lines files for single-sentence and sentence-pair tasks.

    gnn-treelstm build --dataset jsonl --src train.jsonl dev.jsonl test.jsonl \\
        --out DIR [--trees dependency constituency chain amr] [--labels A B ...]
        [--score-range LO HI] [--name NAME]

One JSON object per line (blank lines are skipped). A **single-sentence** row::

    {"id": "r1", "text": "A man plays a guitar .", "label": "music"}

a **sentence-pair** row has the two sentences under ``"a"`` and ``"b"``::

    {"a": "A man plays a guitar .", "b": {"tokens": ["A", "man", "plays"]},
     "label": "ENTAILMENT", "score": 4.5}

A sentence (the row itself, or ``"a"`` / ``"b"``) is a string (its text) or an object with

* ``text``: the sentence, tokenized with spaCy's rule-based English tokenizer, or
  ``tokens``: the tokens (a list of strings);
* optional trees: ``ptb``: a bracketed PTB tree (``(S (NP (DT A) (NN man)) ...)``, any
  labels; binarized as :mod:`gnn_treelstm.datasets.bracketed`; its words are the tokens);
  ``heads`` + ``deprels``: CoNLL-U HEAD (1-based, 0 for the root) and DEPREL per token, or
  ``conllu``: a CoNLL-U block (its FORM, HEAD and DEPREL columns); ``amr``: the sentence's
  AMR in PENMAN (``~e.N`` alignments index the tokens, counted from 0);
* ``id`` and ``meta`` (anything) are kept aside and not read.

A row whose ``text`` and ``ptb`` (or ``tokens``, or ``conllu``) disagree on the words is
refused: the words compared are the tree's (PTB escapes such as ``-LRB-`` and ``\\/`` read
as the characters) against the text with its spaces removed. A row is refused when its
JSON nests more than :data:`MAX_NESTING` levels deep (Python's JSON reader is recursive)
or holds a lone UTF-16 surrogate (``"\\ud800"``: no character, cannot be written as
UTF-8); bracketed trees of any depth are read (:mod:`gnn_treelstm.datasets.bracketed`), AMRs up to
:data:`gnn_treelstm.datasets.penman_io.MAX_DEPTH` levels.

Targets, on the row: ``label`` (a class name, or an integer), ``score`` (a number), or both;
every row of the data set needs the same ones. Class ids are the order of ``--labels`` if
given, else the sorted class names (integers sorted as numbers). Scores are predicted in
``[LO, HI]`` (``--score-range``, default ``[floor(min), ceil(max)]`` of all the scores) with
Tai et al.'s (2015, §4.2) distribution over the integers ``LO..HI``.

Trees: ``dependency`` uses the row's heads, else spaCy's parse; ``constituency`` the row's
PTB tree, else the binarized dependency parse (as for SICK/TREC); ``chain`` the tokens;
``amr`` the row's AMR (:mod:`gnn_treelstm.datasets.amr`), so every sentence needs one. By default
the build makes ``dependency``, ``constituency``, ``chain`` and, when every sentence has an
AMR, ``amr``. Train with ``--task classify`` (single sentences, a label),
``pair-classify`` (pairs, a label) or ``pair-score`` (pairs, a score).

Split files: ``--src`` takes files whose names say the split (``train.jsonl``,
``my-dev.jsonl``, ``test.jsonl``), a directory of such ``.jsonl`` files, or ``SPLIT=FILE``.
Errors name the file and line (and side ``a``/``b``) of the bad row.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnn_treelstm.datasets import amr as A
from gnn_treelstm.datasets.bracketed import parse_bracketed
from gnn_treelstm.datasets.example import Example, Sentence, split_files
from gnn_treelstm.datasets.readers import numbered_lines

log = logging.getLogger(__name__)

__all__ = ["JsonlData", "JsonlError", "RowReader", "jsonl_files", "iter_lines", "read_jsonl",
           "class_names", "score_bounds", "TREE_KINDS", "DEFAULT_NAME"]

TREE_KINDS = ["dependency", "constituency", "chain", "amr"]
DEFAULT_NAME = "jsonl"
_SENT_KEYS = {"text", "tokens", "ptb", "heads", "deprels", "conllu", "amr", "id", "meta"}
_ROW_KEYS = {"a", "b", "label", "score"}
TARGETS = ("label", "score")
#: the deepest nesting of ``[`` / ``{`` a row may have (``meta`` included)
MAX_NESTING = 100
#: a JSON string (skipped when the nesting is counted) or a bracket (counted)
_JSON_NESTING = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
#: how PTB trees write characters that are brackets in their syntax, and ``\/``
_PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{",
                "-RCB-": "}", "``": '"', "''": '"'}


class JsonlError(ValueError):
    """A bad row of a JSONL data set; the message names the file and line."""


@dataclass
class JsonlData:
    """What :func:`read_jsonl` found: examples per split and what the build records."""

    splits: dict[str, list[Example]]
    pair: bool
    targets: list[str]
    label_names: list[str] | None
    score_range: list[int] | None
    files: dict[str, list[str]] = field(default_factory=dict)

    def sentences(self) -> list[Sentence]:
        return [s for exs in self.splits.values() for ex in exs for s in ex.sources]

    def default_trees(self) -> list[str]:
        """dependency, constituency, chain, and amr when every sentence has an AMR."""
        trees = TREE_KINDS[:3]
        if all(s.amr is not None for s in self.sentences()):
            trees.append("amr")
        return trees


def _check_nesting(line: str, where: str) -> None:
    """Refuse a row nested deeper than :data:`MAX_NESTING` before ``json.loads`` meets it."""
    if line.count("[") + line.count("{") <= MAX_NESTING:
        return
    depth = 0
    for m in _JSON_NESTING.finditer(line):
        if m.group()[0] == '"':
            continue
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_NESTING:
            raise JsonlError(f"{where}: the row nests more than {MAX_NESTING} levels of "
                             f"[ ] / {{ }} (at column {m.start() + 1}); rows are read up to "
                             f"{MAX_NESTING} levels deep: flatten its 'meta'")


def _check_characters(row: Any, line: str, where: str) -> None:
    """Refuse a row holding a lone UTF-16 surrogate (``"\\ud800"``), which JSON escapes
    allow but no UTF-8 file can hold. A line read as UTF-8 holds none of its own: only
    an escape (``\\u``) can make one."""
    if "\\u" not in line:
        return
    try:
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start]
        esc = f"\\u{ord(bad):04x}"
        col = line.lower().find(esc)
        at = f" at column {col + 1}" if col >= 0 else ""
        raise JsonlError(f"{where}: {esc!r}{at} is a lone UTF-16 surrogate, not a "
                         "character (it cannot be written as UTF-8); write the character "
                         "itself, or its surrogate pair") from None


def _same_words(text: str, words: list[str]) -> str | None:
    """``None`` if ``words`` (a tree's) spell ``text`` (spaces aside), else the first word
    that does not."""
    rest = "".join(text.split())
    for w in words:
        w = _PTB_ESCAPES.get(w, w.replace("\\/", "/"))
        if w == '"' and rest[:1] in ('"', "“", "”"):
            rest = rest[1:]
        elif rest.startswith(w):
            rest = rest[len(w):]
        else:
            return w
    return None if not rest else f"(the text goes on: {rest[:20]!r})"


class _Tokenizer:
    """spaCy's rule-based English tokenizer (no model), loaded on first use."""

    def __init__(self) -> None:
        self._tok = None

    def __call__(self, text: str) -> list[str]:
        if self._tok is None:
            import spacy

            self._tok = spacy.blank("en").tokenizer
        return [t.text for t in self._tok(text) if not t.is_space]


def _conllu(block: Any, where: str) -> tuple[list[str], list[int], list[str]]:
    if not isinstance(block, str):
        raise JsonlError(f"{where}: 'conllu' must be a string (CoNLL-U lines), got "
                         f"{type(block).__name__}")
    tokens, heads, rels = [], [], []
    for k, line in enumerate(block.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise JsonlError(f"{where}: conllu line {k} has {len(cols)} tab-separated "
                             "columns; CoNLL-U has 10")
        if "-" in cols[0] or "." in cols[0]:  # multiword tokens and empty nodes
            continue
        try:
            heads.append(int(cols[6]))
        except ValueError:
            raise JsonlError(f"{where}: conllu line {k}: HEAD {cols[6]!r} is not an "
                             "integer") from None
        tokens.append(cols[1])
        rels.append(cols[7])
    return tokens, heads, rels


def _check_heads(heads: Any, rels: Any, n: int, where: str) -> list[int]:
    """1-based CoNLL heads -> 0-based (root -1), checked to be one tree over n tokens."""
    if not isinstance(heads, list) or not set(map(type, heads)) <= {int}:
        raise JsonlError(f"{where}: 'heads' must be a list of integers (1-based, 0 = root)")
    if not isinstance(rels, list) or not set(map(type, rels)) <= {str} or not all(rels):
        raise JsonlError(f"{where}: 'heads' need 'deprels', a list of relation names")
    if not len(heads) == len(rels) == n:
        raise JsonlError(f"{where}: {n} tokens, {len(heads)} heads and {len(rels)} deprels; "
                         "one of each per token")
    if heads.count(0) != 1:
        raise JsonlError(f"{where}: {heads.count(0)} heads are 0; exactly one token is the "
                         "root")
    if min(heads) < 0 or max(heads) > n or any(map(int.__eq__, heads, range(1, n + 1))):
        bad = [i for i, h in enumerate(heads) if not 0 <= h <= n or h == i + 1]
        raise JsonlError(f"{where}: token {bad[0] + 1} has head {heads[bad[0]]}; heads are "
                         f"token numbers 1..{n} (not the token itself) or 0 for the root")
    out = [h - 1 for h in heads]
    for i in range(n):  # every token reaches the root in at most n steps
        j, steps = i, 0
        while out[j] >= 0 and steps <= n:
            j, steps = out[j], steps + 1
        if steps > n:
            raise JsonlError(f"{where}: the heads contain a cycle (through token {i + 1})")
    return out


def _sentence_object(obj: Any, where: str) -> dict:
    """A sentence as an object of known fields (a string is its ``text``)."""
    if isinstance(obj, str):
        obj = {"text": obj}
    if not isinstance(obj, dict):
        raise JsonlError(f"{where}: a sentence is a string or an object, got "
                         f"{type(obj).__name__}")
    unknown = sorted(set(obj) - _SENT_KEYS)
    if unknown:
        raise JsonlError(f"{where}: unknown field(s) {unknown}; a sentence has "
                         f"{sorted(_SENT_KEYS)} (put anything else under 'meta')")
    return obj


def _given_tokens(obj: dict, where: str) -> list[str] | None:
    if "tokens" not in obj:
        return None
    tokens = obj["tokens"]
    if not isinstance(tokens, list) or not set(map(type, tokens)) <= {str} \
            or not all(map(str.strip, tokens)):
        raise JsonlError(f"{where}: 'tokens' must be a list of non-empty strings")
    return tokens


def _conllu_tokens(obj: dict, tokens: list[str] | None,
                   where: str) -> tuple[list[str], list[int], list[str]]:
    """Tokens, heads and deprels of the sentence's ``conllu`` block."""
    if "heads" in obj or "deprels" in obj:
        raise JsonlError(f"{where}: give 'conllu' or 'heads'/'deprels', not both")
    ctoks, heads, rels = _conllu(obj["conllu"], where)
    if tokens is not None and ctoks != tokens:
        raise JsonlError(f"{where}: the CoNLL-U FORMs differ from 'tokens'")
    return ctoks, heads, rels


def _ptb_tokens(obj: dict, tokens: list[str] | None, where: str) -> tuple[list[str], list[int]]:
    """Words and parents of the sentence's ``ptb`` tree, checked against its tokens or
    text."""
    if not isinstance(obj["ptb"], str):
        raise JsonlError(f"{where}: 'ptb' must be a string (a bracketed tree)")
    ptoks, cparents = parse_bracketed(obj["ptb"], where=f"{where}: ptb")
    if tokens is not None and ptoks != tokens:
        raise JsonlError(f"{where}: the PTB tree's words {ptoks[:8]} differ from the "
                         f"tokens {tokens[:8]}")
    if isinstance(obj.get("text"), str) and tokens is None:
        odd = _same_words(obj["text"], ptoks)
        if odd is not None:
            raise JsonlError(f"{where}: the PTB tree's words differ from 'text' "
                             f"({odd!r} is not next in {obj['text'][:60]!r}); the tree "
                             "is the sentence's parse: fix one of the two, or drop "
                             "'text' (the tree's words are the sentence)")
    return ptoks, cparents


def _amr_entry(obj: dict, where: str) -> A.AmrEntry | None:
    if "amr" not in obj:
        return None
    if not isinstance(obj["amr"], str):
        raise JsonlError(f"{where}: 'amr' must be a string (a PENMAN graph)")
    graphs = A.parse_amr(obj["amr"], f"{where}: amr")
    if len(graphs) != 1:
        raise JsonlError(f"{where}: 'amr' holds {len(graphs)} graphs; exactly one")
    return graphs[0]


def _text_tokens(obj: dict, entry: A.AmrEntry | None, where: str,
                 tokenize: _Tokenizer) -> list[str] | None:
    """The tokens of the ``text`` field, else of the AMR's sentence (None without
    either)."""
    if "text" in obj:
        if not isinstance(obj["text"], str) or not obj["text"].strip():
            raise JsonlError(f"{where}: 'text' must be a non-empty string")
        return tokenize(obj["text"])
    if entry is not None and (entry.metadata.get("tok") or entry.sentence):
        return entry.tokens()
    return None


def _sentence(obj: Any, where: str, tokenize: _Tokenizer, amr_options: dict) -> Sentence:
    obj = _sentence_object(obj, where)
    tokens = _given_tokens(obj, where)
    heads, rels, cparents = obj.get("heads"), obj.get("deprels"), None
    if "conllu" in obj:
        tokens, heads, rels = _conllu_tokens(obj, tokens, where)
    if "ptb" in obj:
        tokens, cparents = _ptb_tokens(obj, tokens, where)
    entry = _amr_entry(obj, where)
    if tokens is None:
        tokens = _text_tokens(obj, entry, where, tokenize)
    if not tokens:
        raise JsonlError(f"{where}: no sentence; give 'text', 'tokens', 'ptb' or 'conllu'")
    if heads is not None or rels is not None:
        heads = _check_heads(heads, rels, len(tokens), where)
    sent = Sentence(list(tokens), where, cparents=cparents, heads=heads, deprels=rels)
    if entry is not None:
        entry.where = f"{where}: amr"
        sent.amr = A.amr_tree(entry, **amr_options)
        sent.amr_words = A.node_words(sent.amr, tokens, where=entry.where)
        sent.amr_id = entry.id
    return sent


def _target(row: dict, key: str, where: str) -> Any:
    v = row[key]
    if key == "label":
        if isinstance(v, bool) or not isinstance(v, (str, int)) or v == "":
            raise JsonlError(f"{where}: 'label' must be a class name or an integer, got {v!r}")
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise JsonlError(f"{where}: 'score' must be a finite number, got {v!r}")
    return float(v)


def _label_ids(rows: list[tuple[str, Any]], labels: Sequence[str] | None) -> list[str]:
    values = [v for _, v in rows]
    kinds = {type(v) for v in values}
    if len(kinds) > 1:
        where = next(w for w, v in rows if type(v) is not type(values[0]))
        raise JsonlError(f"{where}: labels mix class names and integers; use one kind")
    if labels is not None:
        names = [str(x) for x in labels]
        if len(set(names)) != len(names):
            raise JsonlError(f"--labels {' '.join(names)}: a class is listed twice")
        for w, v in rows:
            if str(v) not in names:
                raise JsonlError(f"{w}: label {v!r} is not one of --labels {' '.join(names)}")
    else:
        names = [str(v) for v in sorted(set(values))]
    if len(names) < 2:
        raise JsonlError(f"the data has {len(names)} class ({', '.join(names)}); "
                         "classification needs at least 2")
    return names


def _json_row(line: str, where: str) -> dict:
    """One line as a JSON object (nesting, syntax and characters checked)."""
    _check_nesting(line, where)
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise JsonlError(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(row, dict):
        raise JsonlError(f"{where}: a row is a JSON object, got "
                         f"{type(row).__name__}")
    _check_characters(row, line, where)
    return row


@dataclass
class _RowShape:
    """What every row must share with the first: pair or single sentence, and targets."""

    pair: bool | None = None
    first: tuple[str, set[str]] | None = None  # where the first row is, its targets

    def check(self, row: dict, where: str) -> bool:
        """Whether the row is a pair, after checking it has the shape of the rows before."""
        is_pair = "a" in row or "b" in row
        if is_pair and not ("a" in row and "b" in row):
            raise JsonlError(f"{where}: a pair needs both 'a' and 'b'")
        keys = {k for k in TARGETS if k in row}
        if not keys:
            raise JsonlError(f"{where}: no 'label' or 'score'; every row needs its "
                             "gold class ('label') or number ('score')")
        self.check_shape(is_pair, keys, where)
        return is_pair

    def merge(self, later: _RowShape) -> None:
        """Check the rows of ``later`` (the rows after these) have the same shape."""
        if later.first is not None and later.pair is not None:
            self.check_shape(later.pair, later.first[1], later.first[0])

    def check_shape(self, is_pair: bool, keys: set[str], where: str) -> None:
        """Check a row (at ``where``) that is a pair or not, with targets ``keys``."""
        if self.pair is not None and is_pair != self.pair:
            raise JsonlError(f"{where}: {'a pair' if is_pair else 'a single sentence'}"
                             f" but the rows before are "
                             f"{'pairs' if self.pair else 'single sentences'}")
        self.pair = is_pair
        if self.first is None:
            self.first = (where, keys)
        elif keys != self.first[1]:
            first_where, first_keys = self.first
            miss = sorted(first_keys - keys) or sorted(keys - first_keys)
            raise JsonlError(f"{where}: has {sorted(keys)} but the first row "
                             f"({first_where}) has {sorted(first_keys)}; every row needs "
                             f"the same targets ({miss[0]!r})")


def _row_sentences(row: dict, where: str, is_pair: bool, tokenize: _Tokenizer,
                   opts: dict) -> list[Sentence]:
    if not is_pair:
        return [_sentence({k: v for k, v in row.items() if k not in TARGETS},
                          where, tokenize, opts)]
    if set(row) - _ROW_KEYS - {"id", "meta"}:
        raise JsonlError(f"{where}: unknown field(s) "
                         f"{sorted(set(row) - _ROW_KEYS - {'id', 'meta'})} in a "
                         "pair row; sentence fields go under 'a' and 'b'")
    return [_sentence(row["a"], f"{where} (a)", tokenize, opts),
            _sentence(row["b"], f"{where} (b)", tokenize, opts)]


def jsonl_files(sources: Sequence[str | os.PathLike]) -> dict[str, list[Path]]:
    """``{split: files}`` of ``--src`` (:func:`gnn_treelstm.datasets.example.split_files`)."""
    return split_files(sources, (".jsonl", ".json", ".jsonl.gz"))


def iter_lines(files: dict[str, list[Path]]) -> Iterator[tuple[str, str, str]]:
    """``(split, where, line)`` of every non-blank line of the files, read lazily."""
    for split, paths in files.items():
        for path in paths:
            for lineno, line in numbered_lines(path):
                if line.strip():
                    yield split, f"{path}:{lineno}", line


class RowReader:
    """Rows to examples, one at a time (:meth:`example`): every row checked; its targets
    as written (a label's class name or integer, checked against ``labels`` when given;
    a score, checked against ``score_range`` when given), class ids being known only
    once every row was read (:func:`label_names`)."""

    def __init__(self, labels: Sequence[str] | None = None,
                 score_range: Sequence[float] | None = None,
                 amr_options: dict | None = None) -> None:
        self.tokenize, self.opts = _Tokenizer(), dict(amr_options or {})
        self.labels = None if labels is None else _given_labels(labels)
        self.score_range = None if score_range is None else _given_range(score_range)

    def example(self, split: str, index: int, where: str, line: str,
                shape: _RowShape) -> Example:
        """The example of row ``index`` of ``split`` (at ``where``), its shape checked
        against the rows before (``shape``). ``Example.text`` holds no targets."""
        row = _json_row(line, where)
        is_pair = shape.check(row, where)
        sents = _row_sentences(row, where, is_pair, self.tokenize, self.opts)
        tg: dict[str, Any] = {}
        for key in TARGETS:
            if key in row:
                tg[key] = _target(row, key, where)
        if self.labels is not None and "label" in tg and str(tg["label"]) not in self.labels:
            raise JsonlError(f"{where}: label {tg['label']!r} is not one of --labels "
                             f"{' '.join(self.labels)}")
        if self.score_range is not None and "score" in tg:
            lo, hi = self.score_range
            if not lo <= tg["score"] <= hi:
                raise JsonlError(f"{where}: score {tg['score']} is outside --score-range "
                                 f"{lo} {hi}")
        text: dict[str, Any] = {"id": row.get("id", f"{split}-{index + 1}")}
        if is_pair:
            text.update(a=sents[0].tokens, b=sents[1].tokens)
        else:
            text["tokens"] = sents[0].tokens
        return Example([s.tokens for s in sents], tg, text, sources=sents)


def _given_labels(labels: Sequence[str]) -> list[str]:
    names = [str(x) for x in labels]
    if len(set(names)) != len(names):
        raise JsonlError(f"--labels {' '.join(names)}: a class is listed twice")
    return names


def _given_range(given: Sequence[float]) -> tuple[float, float]:
    lo, hi = given
    if lo != int(lo) or hi != int(hi) or hi <= lo:
        raise JsonlError(f"--score-range {lo} {hi}: two integers LO < HI")
    return lo, hi


def class_names(values: Sequence[tuple[str, Any]], labels: Sequence[str] | None) -> list[str]:
    """The class names, in id order, of the distinct labels ``values`` (``(where,
    value)``, in the order first met): ``labels`` if given, else the values sorted.

    Raises:
        JsonlError: labels mixing names and integers (naming the first row that does),
            fewer than two classes.
    """
    return _label_ids(list(values), labels)


def score_bounds(lo: float, hi: float, given: Sequence[float] | None) -> list[int]:
    """The score range recorded: ``given``, else ``[floor(lo), ceil(hi)]`` (at least one
    wide) of the scores' smallest ``lo`` and largest ``hi``."""
    if given is not None:
        glo, ghi = _given_range(given)
        return [int(glo), int(ghi)]
    low = math.floor(lo)
    return [low, max(math.ceil(hi), low + 1)]


def read_jsonl(
    sources: Sequence[str | os.PathLike],
    *,
    labels: Sequence[str] | None = None,
    score_range: Sequence[float] | None = None,
    amr_options: dict | None = None,
) -> JsonlData:
    """Read a JSONL data set (the module docstring gives the format) into memory; the
    build reads it row by row instead (:class:`RowReader`).

    Raises:
        JsonlError: a bad row (not JSON, nested deeper than :data:`MAX_NESTING`, a lone
            surrogate, no sentence, no label or score, a label outside ``labels``, a bad
            tree, a tree whose words are not the text's); the message names the file and
            line.
    """
    files = jsonl_files(sources)
    shape, reader = _RowShape(), RowReader(labels, score_range, amr_options)
    out: dict[str, list[Example]] = {split: [] for split in files}
    wheres: dict[str, list[str]] = {split: [] for split in files}
    for split, where, line in iter_lines(files):
        out[split].append(reader.example(split, len(out[split]), where, line, shape))
        wheres[split].append(where)
    if shape.first is None:
        raise JsonlError(f"{', '.join(str(p) for ps in files.values() for p in ps)}: no rows")
    targets = [k for k in TARGETS if k in shape.first[1]]
    names = None
    if "label" in targets:
        seen = {}
        for split, exs in out.items():
            for w, ex in zip(wheres[split], exs):
                seen.setdefault(ex.targets["label"], w)
        names = class_names([(w, v) for v, w in seen.items()], labels)
    rng = None
    if "score" in targets:
        scores = [ex.targets["score"] for exs in out.values() for ex in exs]
        rng = score_bounds(min(scores), max(scores), score_range)
    for exs in out.values():
        for ex in exs:
            if names is not None:
                ex.targets["label"] = names.index(str(ex.targets["label"]))
            ex.text.update(ex.targets)
    return JsonlData(out, bool(shape.pair), targets, names, rng,
                     {s: [str(p) for p in ps] for s, ps in files.items()})
