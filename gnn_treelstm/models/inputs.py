"""The inputs of a prediction: lines of text (one sentence, or a pair written
``A ||| B`` or ``A<TAB>B``) read into :class:`Input` records (:func:`read_lines`), and the
texts, tuples or inputs a caller hands :class:`~gnn_treelstm.models.predictor.Predictor`
(:func:`read_inputs`), with errors naming the line and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Input", "read_lines", "read_inputs", "PAIR_SEPARATORS"]

#: what separates the two sentences of a pair on one line
PAIR_SEPARATORS = ("\t", "|||")


@dataclass(frozen=True)
class Input:
    """One input line: its number in the source, the sentence and, for pairs, the second."""

    line: int
    a: str
    b: str | None = None


def read_lines(lines: Iterable[str], *, pair: bool, source: str = "input") -> list[Input]:
    """Inputs from lines of text, one per non-blank line (pairs: ``A ||| B`` or
    ``A<TAB>B``).

    Raises:
        ValueError: a pair model's line without a separator, or a single-sentence model's
            line with one, naming ``source`` and the line.
    """
    out = []
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        sep = next((s for s in PAIR_SEPARATORS if s in line), None)
        if pair:
            if sep is None:
                raise ValueError(
                    f"{source}:{n}: this model reads sentence pairs; write them as "
                    "'sentence A ||| sentence B' or 'sentence A<TAB>sentence B'")
            a, b = (x.strip() for x in line.split(sep, 1))
            if not a or not b:
                raise ValueError(f"{source}:{n}: one side of the pair is empty: {line!r}")
            out.append(Input(n, a, b))
        else:
            if sep is not None:
                raise ValueError(
                    f"{source}:{n}: the line holds a pair separator ({sep!r}) but this model "
                    "reads one sentence per line; give the sentences on separate lines")
            out.append(Input(n, line))
    return out


def read_inputs(texts: str | Sequence[str | tuple[str, str] | Input], *, pair: bool
                ) -> list[Input]:
    """:class:`Input` objects from a text, a list of texts (``pair``: ``"A ||| B"``,
    ``"A<TAB>B"`` or a tuple ``(A, B)``) or inputs.

    Raises:
        ValueError: an empty text, a pair where one sentence is read or the reverse.
        TypeError: an input that is no text, tuple or :class:`Input`.
    """
    if isinstance(texts, str):
        texts = [texts]
    out: list[Input] = []
    for n, x in enumerate(texts, 1):
        if isinstance(x, Input):
            out.append(x)
        elif isinstance(x, tuple):
            if not pair or len(x) != 2:
                raise ValueError(f"input {n}: a tuple {x!r} is a sentence pair; this "
                                 f"model reads {'pairs' if pair else 'one sentence'}")
            out.extend(read_lines([f"{x[0]} ||| {x[1]}"], pair=True, source=f"input {n}"))
        elif isinstance(x, str):
            got = read_lines([x], pair=pair, source=f"input {n}")
            if not got:
                raise ValueError(f"input {n}: empty text")
            out.append(Input(n, got[0].a, got[0].b))
        else:
            raise TypeError(f"input {n}: expected a string, a (A, B) tuple or an Input, "
                            f"got {type(x).__name__}")
    return out
