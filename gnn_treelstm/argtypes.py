"""Value types of the command lines' numeric flags, for ``argparse``'s ``type=``.

A bad value makes ``argparse`` exit with status 2 and a message naming the flag and the
value, before the command loads anything::

    gnn-treelstm evaluate: error: argument --batch-size: expected a positive integer, got 0

Shared by :mod:`gnn_treelstm.commands` (``build`` and ``fetch`` among them)
command lines (library modules too, which may not import the commands package).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["int_at_least", "positive_int", "non_negative_int", "port", "positive_float",
           "finite_float"]


def _int(text: str, expected: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None


def _float(text: str, expected: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def int_at_least(low: int, expected: str | None = None) -> Callable[[str], int]:
    """A ``type=`` accepting integers ``>= low``; ``expected`` words the error message
    (default ``"an integer >= LOW"``)."""
    expected = expected or f"an integer >= {low}"

    def parse(text: str) -> int:
        value = _int(text, expected)
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
        return value

    parse.__name__ = f"int_at_least_{low}"
    return parse


#: an integer > 0 (sizes, counts, thread numbers)
positive_int = int_at_least(1, "a positive integer")
positive_int.__name__ = "positive_int"

#: an integer >= 0 (an index, a count where 0 means none)
non_negative_int = int_at_least(0, "an integer >= 0")
non_negative_int.__name__ = "non_negative_int"


def port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    value = _int(text, "a port number, 0 (any free port) to 65535")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"expected a port number, 0 (any free port) to 65535, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (seconds, rates)."""
    value = _float(text, "a positive number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value:g}")
    return value


def finite_float(text: str) -> float:
    """Any finite number (``nan`` and ``inf`` refused)."""
    return _float(text, "a finite number")
