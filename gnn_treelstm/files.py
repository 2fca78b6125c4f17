"""Where the project keeps its caches, and the one way it writes a file: atomically.

* :func:`cache_dir`: ``$GNN_TREELSTM_CACHE``, else ``~/.cache/gnn_treelstm``; never next to
  the data or inside the installed package. Parsed word vectors (``vectors/``) and the
  native level loops (``level_loops-*.so``) live there.
* :func:`atomic_write` (content or a writer function) and :func:`atomic_path` (for
  writers that take a file name): the content goes to a temporary file in the target's
  directory, is flushed, and is renamed over the target (:func:`os.replace`), so a reader
  (or a crash) sees the old file or the new one, never half of one. The temporary file is
  removed if writing fails.
  A symbolic link is followed (its target is replaced, the link stays); a target that is
  not a regular file (a device such as ``/dev/null``, a FIFO) is never renamed over:
  :func:`atomic_write` writes into it, :func:`atomic_path` refuses it.
* :func:`check_writable`: whether a file can be written at a name, before the work whose
  results go there.
* :func:`atomic_dir`: the same for a directory of files (a packed split): written into a
  temporary directory beside the target and renamed into place whole.
* :func:`append_whole`: append text to a log-like file (``metrics.jsonl``) whole or not at
  all: a write that fails part-way (a full disk) is cut back to where it began.
* :func:`jsonable` and :func:`write_json`: standard JSON (NaN/inf as null, numpy scalars as
  numbers), written atomically.
* :class:`NoSpaceError`: what :func:`atomic_write` and :func:`atomic_path` raise when a
  write stops for want of space, whatever the writer raised: torch's zip writer turns the
  ``OSError`` (``ENOSPC``) of its file into a ``RuntimeError`` ("unexpected pos"), DGL's
  ``save_graphs`` raises a ``DGLError`` ("FileStream.Write incomplete") with no ``OSError``
  at all. A failed write is taken for a full disk when an ``OSError`` with ``ENOSPC`` or
  ``EDQUOT`` is in the exception's chain, or when, with the half-written temporary file
  still there, less than :data:`FULL_BELOW` bytes are free on its disk. The message names
  the file, the free space and the fix; the old file stays as it was.

Imports neither torch nor dgl.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["CACHE_ENV", "cache_dir", "atomic_path", "atomic_write", "atomic_dir", "append_whole",
           "jsonable", "write_json", "NoSpaceError", "FULL_BELOW", "free_space", "byte_size",
           "check_writable", "file_sha256"]

#: environment variable naming the cache root
CACHE_ENV = "GNN_TREELSTM_CACHE"
#: a write that failed with less free space than this (bytes) on its disk, its half-written
#: temporary file still there, failed for want of space (:class:`NoSpaceError`)
FULL_BELOW = 1 << 20
#: errno values of a write refused for want of space: a full disk, a quota
_NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def byte_size(n: float) -> str:
    """``n`` bytes for a reader: ``"0 B"``, ``"512 B"``, ``"12.5 MiB"``, ``"3.2 GiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _free_bytes(path: str | os.PathLike) -> int | None:
    """Free bytes (for an unprivileged user) on the disk of ``path`` (its nearest existing
    parent); ``None`` if they cannot be read."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def free_space(path: str | os.PathLike) -> str:
    """The free space of the disk holding ``path`` (its nearest existing parent), e.g.
    ``"0 B"``, ``"12.5 MiB"``; ``"unknown"`` if it cannot be read."""
    free = _free_bytes(path)
    return "unknown" if free is None else byte_size(free)


class NoSpaceError(OSError):
    """Writing ``path`` stopped for want of space (``errno`` ``ENOSPC``); the old file, if
    any, is as it was. ``str()`` names the file, the bytes written before the write
    stopped, the free space now and the fix; ``reported`` is the writer's own error when
    that was no ``OSError`` (torch's, DGL's)."""

    def __init__(self, path: str | os.PathLike, *, written: int | None = None,
                 reported: BaseException | None = None) -> None:
        super().__init__(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        self.path, self.written = Path(path), written
        self.free = free_space(self.path.parent)
        self.reported = reported

    def __str__(self) -> str:
        stopped = "" if self.written is None else \
            f"; the write stopped after {byte_size(self.written)}"
        said = ""
        if self.reported is not None:  # its first line: DGL's carries a C++ stack trace
            first = (str(self.reported).strip().splitlines() or [""])[0]
            said = f" (the writer said: {type(self.reported).__name__}: {first[:200]})"
        return (f"cannot write {self.path}: no space left on the disk that holds it "
                f"({self.free} free{stopped}){said}; the old file, if any, is unchanged. "
                "Free some space or write to another disk, then run the command again")


def _for_want_of_space(exc: BaseException, directory: Path) -> bool:
    """Whether the failed write that raised ``exc`` in ``directory`` (its temporary file
    still there) failed for want of space (see the module docstring)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in _NO_SPACE_ERRNOS:
            return True
        cause = cause.__cause__ or cause.__context__
    free = _free_bytes(directory)
    return free is not None and free < FULL_BELOW


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def cache_dir(*parts: str) -> Path:
    """The cache root (``$GNN_TREELSTM_CACHE`` or ``~/.cache/gnn_treelstm``) joined with
    ``parts``; not created here."""
    root = os.environ.get(CACHE_ENV)
    return Path(root).expanduser().joinpath(*parts) if root else \
        Path.home().joinpath(".cache", "gnn_treelstm", *parts)


def _target(path: str | os.PathLike) -> Path:
    """The file a write to ``path`` is for: a symbolic link's target (the link stays a
    link: renaming over it would replace the link, not the file it names)."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _special(path: Path) -> str:
    """What ``path`` is where it is neither missing, a regular file nor a directory (a
    character or block device, a FIFO, a socket), else ``""``."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return ""
    for test, kind in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return ""


def check_writable(path: str | os.PathLike) -> None:
    """Raise ``OSError`` unless a file can be written at ``path`` (a temporary file is made
    and removed in its directory, created if missing): for results written after a long
    run, checked before it starts. A device or FIFO passes (written into)."""
    target = _target(path)
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, "a directory, not a file", str(path))
    if _special(target):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    os.unlink(name)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike, *, mode: int | None = None) -> Iterator[Path]:
    """A temporary file name beside ``path``, for writers that take a name (a compiler,
    ``dgl.save_graphs``): renamed over ``path`` when the block ends normally, removed when
    it raises. ``mode``: permission bits of the result (default ``0o666`` less the umask).

    Raises:
        NoSpaceError: the block (or making the temporary file) failed for want of space,
            whatever it raised (see the module docstring)."""
    path = _target(path)
    if _special(path):
        raise OSError(errno.EINVAL, f"not a regular file ({_special(path)}); give the name of "
                      "a file to write", str(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        if exc.errno in _NO_SPACE_ERRNOS:
            raise NoSpaceError(path, written=0) from exc
        raise
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, (0o666 & ~_umask()) if mode is None else mode)
        os.replace(tmp, path)
    except Exception as exc:  # not on Ctrl-C: then the error is no write's
        if isinstance(exc, NoSpaceError) or not _for_want_of_space(exc, path.parent):
            raise
        written = _size(tmp)
        tmp.unlink(missing_ok=True)  # before the free space is read for the message
        reported = None if isinstance(exc, OSError) and exc.errno in _NO_SPACE_ERRNOS \
            else exc
        raise NoSpaceError(path, written=written, reported=reported) from exc
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

    Raises:
        NoSpaceError: the write stopped for want of space (the old file is unchanged).
    """
    path = _target(path)
    if _special(path):  # a device, a FIFO, a socket: written into, never renamed over
        with open(path, "wb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content.encode(encoding) if isinstance(content, str) else content)
        return path
    with atomic_path(path, mode=mode) as tmp, open(tmp, "wb") as f:
        if callable(content):
            content(f)
        else:
            f.write(content.encode(encoding) if isinstance(content, str) else content)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    return path


def _tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary directory beside ``path`` to write a directory's files into: it replaces
    ``path`` (an old directory there is removed) when the block ends normally, and is
    removed when the block raises, so a reader sees the old directory or the whole new one.

    Raises:
        NoSpaceError: the block failed for want of space, whatever its writer raised (see
            the module docstring); it names ``path`` and the bytes written before the stop.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    except OSError as exc:
        if exc.errno in _NO_SPACE_ERRNOS:
            raise NoSpaceError(path, written=0) from exc
        raise
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except Exception as exc:  # not on Ctrl-C: then the error is no write's
        if isinstance(exc, NoSpaceError) or not _for_want_of_space(exc, path.parent):
            raise
        written = _tree_size(tmp)
        shutil.rmtree(tmp, ignore_errors=True)  # before the free space is read
        reported = None if isinstance(exc, OSError) and exc.errno in _NO_SPACE_ERRNOS \
            else exc
        raise NoSpaceError(path, written=written, reported=reported) from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


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


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes (hex), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
