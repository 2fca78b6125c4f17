"""Value types of the command lines' numeric flags, for ``argparse``'s ``type=``.

A bad value makes ``argparse`` exit with status 2 and a message naming the flag and the
value, before the command loads anything::

    gnn-treelstm evaluate: error: argument --batch-size: expected a positive integer, got 0

Beside them, what the machine has, which bounds the counts a user types
(:func:`usable_cpus`, :func:`machine_memory`).

Shared by :mod:`gnn_treelstm.commands` (``build`` and ``fetch`` among them)
command lines (library modules too, which may not import the commands package).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["LOG_LEVELS", "int_at_least", "positive_int", "non_negative_int", "port",
           "positive_float", "finite_float", "int_from_to", "usable_cpus",
           "worker_count", "machine_memory"]

#: the console log levels of the commands' ``--log-level``
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


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


def int_from_to(low: int, high: int, expected: str) -> Callable[[str], int]:
    """A ``type=`` accepting integers in ``[low, high]``; the error says ``expected`` and
    the limits."""
    def parse(text: str) -> int:
        value = _int(text, expected)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {expected}, from {low:,} to {high:,}, "
                                             f"got {text[:40]}")
        return value

    parse.__name__ = f"int_from_{low}_to_{high}"
    return parse


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def worker_count(text: str) -> int:
    """A number of worker processes: 1 to the CPUs this process may use
    (:func:`usable_cpus`); more would only fork processes that wait for a core."""
    return int_from_to(1, usable_cpus(), "a number of worker processes up to the CPUs "
                                         "this process may use")(text)


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


def machine_memory(device: str = "cpu") -> tuple[int, str]:
    """``(bytes, what)``: the memory a run on ``device`` can use: a CUDA device's, else the
    machine's physical memory (less where a cgroup limits the process)."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            index = int(device.split(":")[1]) if ":" in device else 0
            return torch.cuda.get_device_properties(index).total_memory, f"{device}"
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max",
                       "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            limit = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit():
            total = min(total, int(limit))
    return total, "this machine"
