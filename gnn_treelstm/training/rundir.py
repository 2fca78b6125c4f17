"""A run directory has one writer, never mixes two runs, and keeps nothing half-written.

:func:`claim` is the entry of every training run into ``<runs_dir>/<name>/``:

* **one writer**: an exclusive ``fcntl`` lock on ``.lock`` (holding the writer's pid) for
  the whole run; a second writer fails at once with :class:`RunDirError` naming the pid;
  the lock dies with its process, so a crash never leaves the directory locked;
* **no mixing**: a directory that already holds a run is refused unless ``overwrite``
  (then the old run's files are removed first) — so a config, checkpoint and metrics
  found together always come from one run; every file the run writes carries the same
  ``run_id`` (:func:`new_run_id`), so a mix made by hand is detectable
  (:func:`check_same_run`);
* **no debris**: temporary files of writes a crash interrupted (``.NAME.*.tmp``, see
  :mod:`gnn_treelstm.files`) are removed.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["RunDirError", "LOCK_NAME", "claim", "check_free", "new_run_id",
           "check_same_run"]

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"


class RunDirError(ValueError):
    """The run directory is in use, already holds a run, or mixes runs."""


def new_run_id() -> str:
    """A fresh id (12 hex digits) that every file of one run records."""
    return uuid.uuid4().hex[:12]


def _holder(lock: Path) -> str:
    try:
        pid = lock.read_text(encoding="utf-8").strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid else "another process"


def _try_lock(path: Path) -> int:
    """An fd holding an exclusive lock on ``path/.lock``; raises :class:`RunDirError`."""
    lock = path / LOCK_NAME
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise RunDirError(
                f"{path} is being written by {_holder(lock)}; wait for that run to finish "
                "or choose another --name") from None
        raise
    return fd


#: a log alone is what a run that failed before training leaves: not a run
LOG_NAME = "train.log"


def _contents(path: Path, keep: Sequence[str]) -> list[str]:
    names = sorted(p.name for p in path.iterdir()
                   if p.name != LOCK_NAME and p.name not in keep
                   and not (p.name.startswith(".") and p.name.endswith(".tmp")))
    return [] if names == [LOG_NAME] else names


def _refusal(path: Path, names: list[str]) -> RunDirError:
    shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    return RunDirError(f"{path} already holds a run ({shown}); pass --overwrite to replace "
                       "it, or --name NAME for a new run directory")


def check_free(path: str | os.PathLike, *, overwrite: bool = False,
               keep: Sequence[str] = ()) -> None:
    """Fail now (:class:`RunDirError`) if :func:`claim` would: the directory is locked by
    another writer, or holds a run and ``overwrite`` is off. Creates nothing."""
    path = Path(path)
    if not path.is_dir():
        return
    fd = _try_lock(path)
    try:
        names = _contents(path, keep)
        if names and not overwrite:
            raise _refusal(path, names)
    finally:
        os.close(fd)


def _remove_debris(path: Path) -> None:
    for tmp in [*path.glob(".*.tmp"), *path.glob("seed-*/.*.tmp")]:
        log.info("removing %s, left by an interrupted write", tmp)
        tmp.unlink(missing_ok=True)


@contextmanager
def claim(path: str | os.PathLike, *, overwrite: bool = False,
          keep: Sequence[str] = (), resume: bool = False) -> Iterator[Path]:
    """Hold ``path`` (created if missing) as the only writer for the ``with`` block.

    Args:
        overwrite: remove an earlier run's files instead of refusing the directory.
        keep: names that may already be there and stay (the CLI's ``train.log``, opened
            before the run starts).
        resume: the run in the directory continues: its files stay (``overwrite`` is
            ignored); the directory must exist.

    Raises:
        RunDirError: another process holds the directory, or it holds a run and
            ``overwrite`` is off.
    """
    path = Path(path)
    if resume and not path.is_dir():
        raise RunDirError(f"--resume {path}: no such run directory")
    path.mkdir(parents=True, exist_ok=True)
    fd = _try_lock(path)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        _remove_debris(path)
        if resume:
            yield path
            return
        names = _contents(path, keep)
        if names and not overwrite:
            raise _refusal(path, names)
        for name in names:
            target = path / name
            log.warning("--overwrite: removing %s of an earlier run", target)
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()
        yield path
    finally:
        os.close(fd)  # releases the lock


def check_same_run(path: str | os.PathLike, records: dict[str, dict]) -> str | None:
    """The run id shared by ``records`` (file name -> parsed content), or ``None`` when none
    records one (runs from before run ids). Raises :class:`RunDirError` if they differ."""
    ids = {name: rec.get("run_id") for name, rec in records.items()
           if isinstance(rec, dict) and rec.get("run_id")}
    if len(set(ids.values())) > 1:
        shown = ", ".join(f"{n}: {i}" for n, i in sorted(ids.items()))
        raise RunDirError(f"{path} mixes files of different runs ({shown}); train it again "
                          "with --overwrite")
    return next(iter(ids.values()), None)
