"""``gnn-treelstm predict``: label raw sentences with a trained checkpoint.

    gnn-treelstm predict runs/NAME "a gorgeous, witty film" "a dull one"
    gnn-treelstm predict runs/NAME --file sentences.txt --json > predictions.jsonl
    gnn-treelstm predict runs/NAME --json --nodes < sentences.txt
    gnn-treelstm predict runs/SICK "A man is playing ||| Nobody is playing"

Input: the texts given as arguments, else ``--file PATH`` (``-`` = standard input), else
standard input. **One input per line**: a line is parsed as one sentence (one tree) and is
never joined with the next; a line that looks like several sentences is still one tree and
gets a warning naming it. Sentence-pair models (``sick-r``, ``sick-e``, ``snli``) read
``A ||| B`` or ``A<TAB>B``. Blank lines are skipped (line numbers still count them). An
argument holding a line break is refused (exit 2, naming the argument): each argument is
one input, so a text with several lines is given as several arguments or with ``--file``;
a text output row therefore never holds a raw line break. A sentence longer than
``--max-chars`` (:data:`MAX_CHARS`, 10,000 characters) is refused naming its line: the
time and memory of a tree grow with its length (a 100,000-character line takes seconds
with the level engine and minutes with the dgl engine).

Standard input is read as it comes, ``--batch-size`` lines at a time: each batch is
predicted and written (and flushed) before the next is read, so ``yes "a good film" |
gnn-treelstm predict RUN`` runs in bounded memory with output as it goes; a line of
standard input longer than twice ``--max-chars`` is refused as it is read, without
holding it whole.

Engine: the level engine (:data:`gnn_treelstm.models.checkpoint.FASTEST_ENGINE`) where the
model's cell runs on it, else the checkpoint's, unless ``--engine`` names one; both engines
compute the same (``tests/cells/test_registry.py`` holds them equal), the level engine in
far fewer steps on long sentences.

Sentences are parsed with spaCy (``--spacy-model``, any installed English pipeline) into
the checkpoint's tree kind, through the same functions as ``gnn_treelstm.datasets.build``:
dependency trees, binarized for constituency models, chains for the sequential LSTMs.

Output, one line per input: text (``label<TAB>p<TAB>sentence``) or, with ``--json``, one
JSON object per line::

    {"line": 3, "text": "...", "tokens": [...], "unknown_words": [...],
     "label": "positive", "probabilities": {"very negative": 0.01, ...},   # classification
     "score": 4.2,                                       # relatedness (1-5), with its
                                                         # "probabilities" over 1..5
     "text_b": "...", "tokens_b": [...],                 # sentence pairs
     "nodes": [{"id": 0, "parent": 5, "span": [0, 1], "words": "a", "label": "neutral",
                "probabilities": {...}}, ...]}           # --nodes (per-node models)

``--nodes`` needs a model that labels every node (SST with phrase-level training).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import re
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gnn_treelstm.argtypes import LOG_LEVELS, positive_int
from gnn_treelstm.commands.cli import description, progress_bar, set_openmp_wait_policy

__all__ = ["build_parser", "main", "MAX_CHARS"]

log = logging.getLogger(__name__)

#: the longest sentence ``predict`` reads, in characters (``--max-chars``)
MAX_CHARS = 10_000
#: the characters ``str.splitlines`` ends a line at
_LINE_BREAKS = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


# ---------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    """The command's flags (parsed with ``parse_intermixed_args``: the texts may come
    before or after the options)."""
    from gnn_treelstm.cells.registry import CELL_MODULE_HELP
    from gnn_treelstm.engine.propagator import ENGINES
    from gnn_treelstm.models.checkpoint import FASTEST, FASTEST_ENGINE

    ap = argparse.ArgumentParser(prog="gnn-treelstm predict",
                                 description=description(__doc__))
    ap.add_argument("run", help="run directory, checkpoint (best.pt) or saved model directory")
    ap.add_argument("texts", nargs="*", help="sentences (default: --file, else stdin)")
    ap.add_argument("--file", default=None, metavar="PATH",
                    help="one input per line ('-' = standard input)")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    ap.add_argument("--nodes", action="store_true",
                    help="with --json: every node's label, span and words")
    ap.add_argument("--spacy-model", default=None,
                    help="spaCy pipeline (default: the first installed English one)")
    ap.add_argument("--engine", default=FASTEST, choices=ENGINES,
                    help=f"propagation engine (default: {FASTEST_ENGINE}, the fastest, where "
                    "the model's cell runs on it; both compute the same)")
    ap.add_argument("--max-chars", type=positive_int, default=MAX_CHARS,
                    help=f"longest sentence accepted, in characters (default {MAX_CHARS})")
    ap.add_argument("--batch-size", type=positive_int, default=64)
    ap.add_argument("--cell-module", action="append", default=[], metavar="MODULE",
                    help=CELL_MODULE_HELP)
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--log-level", default="WARNING",
                    choices=LOG_LEVELS)
    ap.add_argument("-v", "--verbose", dest="log_level", action="store_const", const="INFO",
                    help="= --log-level INFO")
    return ap


def _lines(a: argparse.Namespace) -> tuple[list[str] | Iterator[str], str]:
    """The input lines (a list; standard input: an iterator reading it as it goes) and
    their source's name."""
    if a.texts:
        if a.file is not None:
            raise ValueError("give the texts as arguments or --file, not both")
        for n, text in enumerate(a.texts, 1):
            brk = _LINE_BREAKS.search(text)
            if brk:
                raise ValueError(
                    f"argument {n} ({text[:40]!r}...) holds a line break ({brk.group()!r} at "
                    f"character {brk.start() + 1}); each argument is one sentence: give the "
                    "lines as separate arguments, or put them in a file for --file")
        return list(a.texts), "argument"
    if a.file not in (None, "-"):
        path = Path(a.file)
        if not path.is_file():
            raise FileNotFoundError(f"--file {a.file}: no such file")
        try:
            return path.read_text(encoding="utf-8").splitlines(), str(path)
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 text ({exc})") from exc
    if a.file is None and sys.stdin.isatty():
        raise ValueError("no input: give sentences as arguments, --file PATH, or pipe them "
                         "into standard input")
    return _stdin_lines(2 * a.max_chars + 8), "stdin"


def _stdin_lines(limit: int) -> Iterator[str]:
    """The lines of standard input as they come (split as ``str.splitlines`` does); a line
    longer than ``limit`` characters is refused as it is read."""
    n = 0
    while True:
        raw = sys.stdin.readline(limit + 1)
        if not raw:
            return
        if len(raw) > limit and not raw.endswith("\n"):
            raise ValueError(f"stdin:{n + 1}: the line is longer than {limit:,} characters; "
                             "the limit of a sentence is --max-chars: split it into "
                             "sentences, one per line, or raise --max-chars")
        parts = raw.splitlines() or [""]
        n += len(parts)
        yield from parts


def _batches(lines: list[str] | Iterator[str], size: int
             ) -> Iterator[tuple[int, list[str]]]:
    """``(lines before it, lines)``: a list whole, an iterator ``size`` lines at a time."""
    if isinstance(lines, list):
        yield 0, lines
        return
    done = 0
    while batch := list(itertools.islice(lines, size)):
        yield done, batch
        done += len(batch)


def _check_lengths(inputs: list, source: str, limit: int) -> None:
    """Refuse a sentence longer than ``limit`` characters, naming its line."""
    for inp in inputs:
        for text in (inp.a, inp.b):
            if text is not None and len(text) > limit:
                raise ValueError(
                    f"{source}:{inp.line}: the sentence is {len(text):,} characters long; the "
                    f"limit is {limit:,} (--max-chars): split it into sentences, one per "
                    "line, or raise --max-chars")


def _predict_batch(a: argparse.Namespace, predictor: Any, lines: list[str], before: int,
                   source: str) -> int:
    """Predict and write the inputs of ``lines`` (numbered after the ``before`` lines read
    before them), flushed; returns how many there were."""
    from gnn_treelstm.models.inputs import read_lines

    inputs = [dataclasses.replace(inp, line=inp.line + before)
              for inp in read_lines(lines, pair=predictor.task.pair, source=source)]
    if not inputs:
        return 0
    _check_lengths(inputs, source, a.max_chars)
    bar = progress_bar(a.quiet or before > 0 or len(inputs) <= a.batch_size
                       or source == "stdin")
    progress = None if bar is None else (lambda it, total: bar(it, total, "predict"))
    for rec in predictor.iter_predict(inputs, nodes=a.nodes, batch_size=a.batch_size,
                                      progress=progress):
        print(json.dumps(rec, ensure_ascii=False) if a.json else predictor.format_text(rec),
              flush=False)
    sys.stdout.flush()
    return len(inputs)


def main(argv: Sequence[str] | None = None) -> int:
    set_openmp_wait_policy()  # read by libgomp when torch loads: before any torch import
    from gnn_treelstm.cells.registry import import_cell_modules
    from gnn_treelstm.models.predictor import Predictor

    a = build_parser().parse_intermixed_args(argv)
    logging.basicConfig(level=a.log_level, format="%(levelname)s %(name)s: %(message)s")
    try:
        if a.nodes and not a.json:
            raise ValueError("--nodes needs --json (per-node output is JSON only)")
        import_cell_modules(a.cell_module)
        predictor = Predictor.from_pretrained(a.run, engine=a.engine,
                                              spacy_model=a.spacy_model)
        lines, source = _lines(a)
        predictor.nlp  # noqa: B018  (load the parser before the clock starts)
        t0, count = time.perf_counter(), 0
        for before, batch in _batches(lines, a.batch_size):
            count += _predict_batch(a, predictor, batch, before, source)
        if not count:
            raise ValueError(f"{source}: no text to predict (only blank lines)")
        seconds = time.perf_counter() - t0
        log.info("predicted %d inputs in %.2f s (%.0f inputs/s, spaCy parse included)",
                 count, seconds, count / max(seconds, 1e-9))
        return 0
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
