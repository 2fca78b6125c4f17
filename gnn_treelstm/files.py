"""Where the project keeps its caches, and the one way it writes a file: atomically.

* :func:`cache_dir`: ``$GNN_TREELSTM_CACHE``, else ``~/.cache/gnn_treelstm``; never next to
  the data or inside the installed package. Parsed word vectors (``vectors/``) and the
  native level loops (``level_loops-*.so``) live there.
* :func:`atomic_write` (content or a writer function) and :func:`atomic_path` (for
  writers that take a file name): the content goes to a temporary file in the target's
  directory, is flushed, and is renamed over the target (:func:`os.replace`), so a reader
  (or a crash) sees the old file or the new one, never half of one. The temporary file is
  removed if writing fails.
* :func:`append_whole`: append text to a log-like file (``metrics.jsonl``) whole or not at
  all: a write that fails part-way (a full disk) is cut back to where it began.
* :func:`jsonable` and :func:`write_json`: standard JSON (NaN/inf as null, numpy scalars as
  numbers), written atomically.

Imports neither torch nor dgl.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["CACHE_ENV", "cache_dir", "atomic_path", "atomic_write", "append_whole", "jsonable",
           "write_json"]

#: environment variable naming the cache root
CACHE_ENV = "GNN_TREELSTM_CACHE"


def cache_dir(*parts: str) -> Path:
    """The cache root (``$GNN_TREELSTM_CACHE`` or ``~/.cache/gnn_treelstm``) joined with
    ``parts``; not created here."""
    root = os.environ.get(CACHE_ENV)
    return Path(root).expanduser().joinpath(*parts) if root else \
        Path.home().joinpath(".cache", "gnn_treelstm", *parts)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike, *, mode: int | None = None) -> Iterator[Path]:
    """A temporary file name beside ``path``, for writers that take a name (a compiler,
    ``dgl.save_graphs``): renamed over ``path`` when the block ends normally, removed when
    it raises. ``mode``: permission bits of the result (default ``0o666`` less the umask)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, (0o666 & ~_umask()) if mode is None else mode)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(
    path: str | os.PathLike, content: bytes | str | Callable[[BinaryIO], None], *,
    encoding: str = "utf-8", fsync: bool = True, mode: int | None = None,
) -> Path:
    """Write ``content`` to ``path`` atomically; returns the path.

    Args:
        path: the target; its directory is created if missing.
        content: bytes, text (encoded with ``encoding``), or a function that writes to the
            open binary file (e.g. ``lambda f: torch.save(obj, f)``); if it raises, the
            target is left as it was.
        fsync: flush the file to disk before the rename (off for caches a crash may lose).
        mode: permission bits of the new file (default: ``0o666`` less the umask, as
            ``open`` gives).
    """
    path = Path(path)
    with atomic_path(path, mode=mode) as tmp, open(tmp, "wb") as f:
        if callable(content):
            content(f)
        else:
            f.write(content.encode(encoding) if isinstance(content, str) else content)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    return path


def append_whole(path: str | os.PathLike, text: str, *, encoding: str = "utf-8") -> None:
    """Append ``text`` to ``path`` (created if missing) whole or not at all.

    One unbuffered write (repeated if the system writes part of it); if one fails (a full
    disk: ``ENOSPC``), the file is cut back to its length before the call and the error is
    raised, so a reader never sees half a line."""
    data = memoryview(text.encode(encoding))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        start = os.fstat(fd).st_size
        try:
            while data:
                data = data[os.write(fd, data):]
        except OSError:
            os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


def jsonable(x: Any) -> Any:
    """``x`` with NaN/inf floats as ``None`` and numpy scalars as Python numbers (nested
    dicts, lists and tuples too), so that ``json.dumps`` writes standard JSON."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item") and type(x).__module__ == "numpy":  # numpy scalars
        return jsonable(x.item())
    return x


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` (made :func:`jsonable`) to ``path`` atomically, indented."""
    atomic_write(path, json.dumps(jsonable(obj), indent=2) + "\n")
