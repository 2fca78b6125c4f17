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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gnn_treelstm.datasets import amr as A
from gnn_treelstm.datasets.bracketed import parse_bracketed
from gnn_treelstm.datasets.example import Example, Sentence, split_files
from gnn_treelstm.datasets.readers import numbered_lines

log = logging.getLogger(__name__)

__all__ = ["JsonlData", "JsonlError", "read_jsonl", "TREE_KINDS", "DEFAULT_NAME"]

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
    allow but no UTF-8 file can hold."""
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
    if not isinstance(heads, list) or not all(type(h) is int for h in heads):
        raise JsonlError(f"{where}: 'heads' must be a list of integers (1-based, 0 = root)")
    if not isinstance(rels, list) or not all(isinstance(r, str) and r for r in rels):
        raise JsonlError(f"{where}: 'heads' need 'deprels', a list of relation names")
    if not len(heads) == len(rels) == n:
        raise JsonlError(f"{where}: {n} tokens, {len(heads)} heads and {len(rels)} deprels; "
                         "one of each per token")
    if heads.count(0) != 1:
        raise JsonlError(f"{where}: {heads.count(0)} heads are 0; exactly one token is the "
                         "root")
    bad = [i for i, h in enumerate(heads) if not 0 <= h <= n or h == i + 1]
    if bad:
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
    if not isinstance(tokens, list) or not all(isinstance(t, str) and t.strip()
                                               for t in tokens):
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
        if self.pair is not None and is_pair != self.pair:
            raise JsonlError(f"{where}: {'a pair' if is_pair else 'a single sentence'}"
                             f" but the rows before are "
                             f"{'pairs' if self.pair else 'single sentences'}")
        self.pair = is_pair
        keys = {k for k in TARGETS if k in row}
        if not keys:
            raise JsonlError(f"{where}: no 'label' or 'score'; every row needs its "
                             "gold class ('label') or number ('score')")
        if self.first is None:
            self.first = (where, keys)
        elif keys != self.first[1]:
            first_where, first_keys = self.first
            miss = sorted(first_keys - keys) or sorted(keys - first_keys)
            raise JsonlError(f"{where}: has {sorted(keys)} but the first row "
                             f"({first_where}) has {sorted(first_keys)}; every row needs "
                             f"the same targets ({miss[0]!r})")
        return is_pair


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


_Row = tuple[str, dict, list[Sentence]]  # where, the JSON object, its sentences


def _read_rows(files: dict[str, list], shape: _RowShape,
               amr_options: dict | None) -> dict[str, list[_Row]]:
    """``{split: rows}`` of the files, every row checked."""
    tokenize, opts = _Tokenizer(), dict(amr_options or {})
    raw: dict[str, list[_Row]] = {}
    for split, paths in files.items():
        rows = raw.setdefault(split, [])
        for path in paths:
            for lineno, line in numbered_lines(path):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                row = _json_row(line, where)
                is_pair = shape.check(row, where)
                rows.append((where, row, _row_sentences(row, where, is_pair, tokenize, opts)))
    return raw


def _example(row: dict, sents: list[Sentence], ident: Any, pair: bool,
             label_names: list[str] | None, rng: list[int] | None) -> Example:
    tg: dict[str, float | int] = {}
    if label_names is not None:
        tg["label"] = label_names.index(str(row["label"]))
    if rng is not None:
        tg["score"] = float(row["score"])
    text: dict[str, Any] = {"id": ident}
    if pair:
        text.update(a=sents[0].tokens, b=sents[1].tokens)
    else:
        text["tokens"] = sents[0].tokens
    text.update(tg)
    return Example([s.tokens for s in sents], tg, text, sources=sents)


def read_jsonl(
    sources: Sequence[str | os.PathLike],
    *,
    labels: Sequence[str] | None = None,
    score_range: Sequence[float] | None = None,
    amr_options: dict | None = None,
) -> JsonlData:
    """Read a JSONL data set (the module docstring gives the format).

    Raises:
        JsonlError: a bad row (not JSON, nested deeper than :data:`MAX_NESTING`, a lone
            surrogate, no sentence, no label or score, a label outside ``labels``, a bad
            tree, a tree whose words are not the text's); the message names the file and
            line.
    """
    files = split_files(sources, (".jsonl", ".json", ".jsonl.gz"))
    shape = _RowShape()
    raw = _read_rows(files, shape, amr_options)
    if shape.first is None:
        raise JsonlError(f"{', '.join(str(p) for ps in files.values() for p in ps)}: no rows")
    targets = [k for k in TARGETS if k in shape.first[1]]
    label_names = None
    if "label" in targets:
        label_names = _label_ids([(w, _target(r, "label", w)) for rs in raw.values()
                                  for w, r, _ in rs], labels)
    rng = None
    if "score" in targets:
        scores = [(w, _target(r, "score", w)) for rs in raw.values() for w, r, _ in rs]
        rng = _score_range(scores, score_range)
    pair = bool(shape.pair)
    out = {split: [_example(row, sents, row.get("id", f"{split}-{k + 1}"), pair, label_names,
                            rng) for k, (_where, row, sents) in enumerate(rows)]
           for split, rows in raw.items()}
    return JsonlData(out, pair, targets, label_names, rng,
                     {s: [str(p) for p in ps] for s, ps in files.items()})


def _score_range(scores: list[tuple[str, float]], given: Sequence[float] | None) -> list[int]:
    if given is not None:
        lo, hi = given
        if lo != int(lo) or hi != int(hi) or hi <= lo:
            raise JsonlError(f"--score-range {lo} {hi}: two integers LO < HI")
        for w, v in scores:
            if not lo <= v <= hi:
                raise JsonlError(f"{w}: score {v} is outside --score-range {lo} {hi}")
        return [int(lo), int(hi)]
    lo = math.floor(min(v for _, v in scores))
    hi = math.ceil(max(v for _, v in scores))
    return [lo, max(hi, lo + 1)]
