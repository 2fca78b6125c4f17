"""Readers for the raw benchmark files (SICK, TREC, SNLI); SST trees are in :mod:`.ptb`.

Every reader raises :class:`DataFormatError` naming the file, the line and the problem
for a malformed row (a missing field, a bad score or label, an empty sentence).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DataFormatError",
    "SICK_LABELS",
    "TREC_COARSE",
    "SNLI_LABELS",
    "SickPair",
    "TrecQuestion",
    "SnliPair",
    "open_text",
    "read_sick_semeval",
    "read_sick_full",
    "read_trec",
    "trec_dev_split",
    "read_snli_text",
    "read_snli_jsonl",
    "find_file",
]

#: SICK entailment labels (label id = index).
SICK_LABELS = ["NEUTRAL", "ENTAILMENT", "CONTRADICTION"]
#: TREC coarse classes (label id = index).
TREC_COARSE = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
#: SNLI labels (label id = index).
SNLI_LABELS = ["entailment", "neutral", "contradiction"]


class DataFormatError(ValueError):
    """A malformed data file; the message names file, line and problem."""


@dataclass
class SickPair:
    pair_id: str
    a: str
    b: str
    score: float
    label: int  # index into SICK_LABELS
    semeval_set: str | None = None  # full release only: TRAIN / TRIAL / TEST


@dataclass
class TrecQuestion:
    tokens: list[str]
    coarse: int  # index into TREC_COARSE
    fine: str  # e.g. "DESC:manner"


@dataclass
class SnliPair:
    a: list[str]
    b: list[str]
    label: int  # index into SNLI_LABELS


def open_text(path: str | os.PathLike, encoding: str = "utf-8") -> io.TextIOBase:
    """Open a text file, transparently gunzipping ``.gz`` (newlines kept as in the file)."""
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding=encoding, newline="")
    return open(path, encoding=encoding, newline="")


def find_file(path: str | os.PathLike) -> Path:
    """``path`` or ``path.gz``, whichever exists (``FileNotFoundError`` naming both)."""
    p = Path(path)
    if p.exists():
        return p
    gz = p.with_name(p.name + ".gz")
    if gz.exists():
        return gz
    raise FileNotFoundError(f"neither {p} nor {gz} exists")


def numbered_lines(path: str | os.PathLike, encoding: str = "utf-8"
                   ) -> Iterator[tuple[int, str]]:
    """``(line number, line without its newline)`` of a text file (``.gz`` gunzipped),
    decoded line by line, so a bad byte or a cut gzip stream is reported with the file and
    the line instead of a bare ``UnicodeDecodeError`` / ``EOFError``.

    Raises:
        ValueError: a line that is not ``encoding`` text, or a truncated/corrupt gzip file.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    try:
        with opener(path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    line = raw.decode(encoding)
                except UnicodeDecodeError as exc:
                    raise ValueError(
                        f"{path}:{lineno}: not {encoding} text (byte 0x{raw[exc.start]:02x} "
                        f"at column {exc.start + 1}); convert the file to {encoding}"
                    ) from None
                yield lineno, line.rstrip("\r\n")
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path}: the gzip stream is truncated or corrupt after line "
                         f"{lineno} ({exc}); copy or download the file again") from None


def _lines(path: Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    yield from numbered_lines(path, encoding)


def _tsv_rows(path: Path, required: list[str]) -> Iterator[tuple[int, dict[str, str]]]:
    it = _lines(path)
    try:
        _, header_line = next(it)
    except StopIteration:
        raise DataFormatError(f"{path}:1: empty file; expected a header line") from None
    header = header_line.split("\t")
    missing = [c for c in required if c not in header]
    if missing:
        raise DataFormatError(f"{path}:1: header lacks column(s) {missing}; got {header}")
    for lineno, line in it:
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < len(header):
            raise DataFormatError(
                f"{path}:{lineno}: missing field(s): {len(fields)} of {len(header)} "
                f"tab-separated columns ({', '.join(header[len(fields):])} missing)")
        row = dict(zip(header, fields))
        for c in required:
            if row[c].strip() == "":
                raise DataFormatError(f"{path}:{lineno}: empty field {c!r}")
        yield lineno, row


def _sick_pair(path: Path, lineno: int, row: dict[str, str], label_col: str,
               score_col: str) -> SickPair:
    try:
        score = float(row[score_col])
    except ValueError:
        raise DataFormatError(f"{path}:{lineno}: relatedness {row[score_col]!r} "
                              "is not a number") from None
    if not 1.0 <= score <= 5.0:
        raise DataFormatError(f"{path}:{lineno}: relatedness {score} outside [1, 5]")
    lab = row[label_col].strip().upper()
    if lab not in SICK_LABELS:
        raise DataFormatError(f"{path}:{lineno}: entailment label {row[label_col]!r} not in "
                              f"{SICK_LABELS}")
    return SickPair(row["pair_ID"].strip(), row["sentence_A"].strip(),
                    row["sentence_B"].strip(), score, SICK_LABELS.index(lab),
                    row.get("SemEval_set"))


def read_sick_semeval(path: str | os.PathLike) -> list[SickPair]:
    """A SemEval-2014 SICK file (``SICK_train.txt`` etc.): header ``pair_ID sentence_A
    sentence_B relatedness_score entailment_judgment``, tab-separated."""
    path = Path(path)
    cols = ["pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment"]
    return [_sick_pair(path, ln, row, "entailment_judgment", "relatedness_score")
            for ln, row in _tsv_rows(path, cols)]


def read_sick_full(path: str | os.PathLike) -> list[SickPair]:
    """The full SICK release ``SICK.txt`` (or ``.gz``): CRLF, label column before the
    score column, and a ``SemEval_set`` column (TRAIN / TRIAL / TEST)."""
    path = Path(path)
    cols = ["pair_ID", "sentence_A", "sentence_B", "entailment_label", "relatedness_score",
            "SemEval_set"]
    return [_sick_pair(path, ln, row, "entailment_label", "relatedness_score")
            for ln, row in _tsv_rows(path, cols)]


def read_trec(path: str | os.PathLike) -> list[TrecQuestion]:
    """A TREC question file (``COARSE:fine question tokens``), read as Latin-1 (the
    official train file has one non-UTF-8 byte)."""
    path = Path(path)
    out = []
    for lineno, line in _lines(path, encoding="latin-1"):
        if not line.strip():
            continue
        label, _, text = line.partition(" ")
        coarse, colon, fine = label.partition(":")
        if not colon or coarse not in TREC_COARSE or not fine:
            raise DataFormatError(f"{path}:{lineno}: label {label!r} is not COARSE:fine with "
                                  f"COARSE in {TREC_COARSE}")
        tokens = [t for t in text.split(" ") if t]
        if not tokens:
            raise DataFormatError(f"{path}:{lineno}: empty question")
        out.append(TrecQuestion(tokens, TREC_COARSE.index(coarse), label))
    return out


def trec_dev_split(n: int, dev_size: int | None = None, seed: int = 1234) -> tuple[
        list[int], list[int]]:
    """Fixed seeded dev split of the TREC train file: ``(train_indices, dev_indices)``.

    ``dev_size`` defaults to ``min(500, n // 10)`` (500 on the full 5452 questions). Both
    index lists are sorted (file order).
    """
    if dev_size is None:
        dev_size = min(500, n // 10)
    if not 0 <= dev_size < n:
        raise ValueError(f"trec_dev_split: dev_size {dev_size} must be in [0, {n})")
    dev = sorted(random.Random(seed).sample(range(n), dev_size))
    dev_set = set(dev)
    return [i for i in range(n) if i not in dev_set], dev


def _snli_label(path: Path, lineno: int, lab: str) -> int:
    lab = lab.strip().lower()
    if lab not in SNLI_LABELS:
        raise DataFormatError(f"{path}:{lineno}: label {lab!r} not in {SNLI_LABELS}")
    return SNLI_LABELS.index(lab)


def read_snli_text(directory: str | os.PathLike, split: str) -> list[SnliPair]:
    """SentEval-style SNLI: ``s1.<split>``, ``s2.<split>``, ``labels.<split>`` (each plain
    or ``.gz``), one pair per line, tokens separated by spaces."""
    d = Path(directory)
    files = [find_file(d / f"{name}.{split}") for name in ("s1", "s2", "labels")]
    cols = [list(_lines(p)) for p in files]
    if not len(cols[0]) == len(cols[1]) == len(cols[2]):
        counts = {str(p): len(c) for p, c in zip(files, cols)}
        raise DataFormatError(f"{d}: SNLI files of split {split!r} differ in length: {counts}")
    out = []
    for (ln, s1), (_, s2), (_, lab) in zip(*cols):
        a = [t for t in s1.split(" ") if t]
        b = [t for t in s2.split(" ") if t]
        for p, toks in ((files[0], a), (files[1], b)):
            if not toks:
                raise DataFormatError(f"{p}:{ln}: empty sentence")
        out.append(SnliPair(a, b, _snli_label(files[2], ln, lab)))
    return out


def _binary_parse_tokens(parse: str) -> list[str]:
    return [t for t in parse.split(" ") if t and t not in ("(", ")")]


def read_snli_jsonl(path: str | os.PathLike) -> list[SnliPair]:
    """The official SNLI jsonl (``snli_1.0_<split>.jsonl``, plain or gzip). Pairs with
    ``gold_label == "-"`` (no consensus) are skipped. Tokens come from
    ``sentence{1,2}_binary_parse`` when present, else the sentence split on spaces."""
    path = Path(path)
    out = []
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataFormatError(f"{path}:{lineno}: not valid JSON ({e})") from None
        if "gold_label" not in row:
            raise DataFormatError(f"{path}:{lineno}: missing field 'gold_label'")
        if row["gold_label"] == "-":
            continue
        sents = []
        for k in (1, 2):
            bp, raw = row.get(f"sentence{k}_binary_parse"), row.get(f"sentence{k}")
            if bp:
                toks = _binary_parse_tokens(bp)
            elif raw:
                toks = [t for t in raw.split(" ") if t]
            else:
                raise DataFormatError(f"{path}:{lineno}: missing field 'sentence{k}'")
            if not toks:
                raise DataFormatError(f"{path}:{lineno}: empty sentence{k}")
            sents.append(toks)
        out.append(SnliPair(sents[0], sents[1], _snli_label(path, lineno, row["gold_label"])))
    return out
