"""A bus error (``SIGBUS``) under ``gnn-treelstm train``: one clear message and exit
status 3 (:data:`DATA_CHANGED`), not a silent death.

The packed trees a run trains on are memory-mapped (:mod:`gnn_treelstm.trees.packed`).
When such a file is cut short while the run reads it, the next read of a page past its new
end is a bus error: the kernel sends ``SIGBUS`` to the thread that read it. Python cannot
go on from there (its own signal handlers run between bytecodes, and the faulting read
would fault again), so the process used to die with status 135 and no word. The run's
files are safe (every checkpoint and ``state.pt`` is written whole or not at all), but
the user was not told what happened nor how to go on.

:func:`installed` puts a handler in place for the run's duration (and the previous one back
afterwards): a C-level handler (``sigaction`` through ``ctypes``), which runs at the
fault itself, writes the message its caller composes (the mapped files that changed,
:func:`gnn_treelstm.trees.manifest.changed_mapped`; how to put them back; the command that
continues the run), lets the caller record it (``status.json``) and ends the process with
``os._exit(DATA_CHANGED)``. The same status ends a run that found a changed file before
reading it (:class:`gnn_treelstm.trees.manifest.DataChangedError`, checked at each epoch's
start and before each save). Where ``ctypes`` cannot reach ``sigaction`` (not Linux or
macOS), :func:`installed` changes nothing and says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Callable, Iterator

__all__ = ["DATA_CHANGED", "installed"]

#: the exit status of a run stopped because its data changed under it
DATA_CHANGED = 3
_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)
#: bytes of a ``struct sigaction`` at most (152 on Linux x86-64, 32 on macOS)
_SIGACTION_SIZE = 512
_FALLBACK = ("error: a bus error (SIGBUS): a memory-mapped file could not be read, most "
             "likely a data file cut short while the run read it; the run stopped")


def _sigaction() -> Callable | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.sigaction
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def _action(handler: _HANDLER) -> ctypes.Array:
    """A ``struct sigaction`` for ``handler``: no flags, no signal blocked besides
    ``SIGBUS`` itself (the handler field comes first on Linux and macOS)."""
    buf = ctypes.create_string_buffer(_SIGACTION_SIZE)
    ctypes.c_void_p.from_buffer(buf).value = ctypes.cast(handler, ctypes.c_void_p).value
    return buf


@contextlib.contextmanager
def installed(message: Callable[[], str],
              record: Callable[[str], None] | None = None) -> Iterator[bool]:
    """Within the block, a bus error writes ``message()`` (a fixed line if it raises) to
    standard error, calls ``record(text)`` (errors ignored) and exits with
    :data:`DATA_CHANGED`. Yields whether the handler is in place."""
    sigbus = getattr(signal, "SIGBUS", None)
    sigaction = _sigaction() if sigbus is not None else None
    old = ctypes.create_string_buffer(_SIGACTION_SIZE)
    if sigaction is None or sigaction(sigbus, None, old) != 0:
        yield False
        return

    def on_sigbus(signum: int) -> None:  # pragma: no cover - runs in the dying process
        try:
            text = message()
        except BaseException:  # noqa: BLE001 - the fixed line instead
            text = _FALLBACK
        try:
            os.write(2, f"\n{text}\n".encode("utf-8", "replace"))
            if record is not None:
                record(text)
        except BaseException:  # noqa: BLE001, S110 - the exit status still says it
            pass
        os._exit(DATA_CHANGED)

    handler = _HANDLER(on_sigbus)  # kept alive by this frame for the block's duration
    new = _action(handler)
    if sigaction(sigbus, ctypes.addressof(new), None) != 0:
        yield False
        return
    try:
        yield True
    finally:
        sigaction(sigbus, ctypes.addressof(old), None)
