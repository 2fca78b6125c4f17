"""A run directory has one writer, never mixes two runs, and keeps nothing half-written.

:func:`claim` is the entry of every training run into ``<runs_dir>/<name>/``:

* **one writer**: an exclusive ``fcntl`` lock on ``.lock`` (holding the writer's pid) for
  the whole run, held by the writer's process alone (a loader process forked from it
  closes its copy at once, so a ``kill -9`` of the run frees the directory even while an
  orphaned loader lives on); a second writer fails at once with :class:`RunDirError`
  naming the pid; a run that ends (finished or failed) removes ``.lock``; the lock dies
  with its process, so a crash (``kill -9``) leaves the file but never a locked directory;
* **no mixing**: a directory that already holds a run is refused unless ``overwrite``
  (then the old run's files are removed first) — so a config, checkpoint and metrics
  found together always come from one run; every file the run writes carries the same
  ``run_id`` (:func:`new_run_id`), so a mix made by hand is detectable
  (:func:`check_same_run`);
* **a failed start blocks nothing**: a run that raises inside :func:`claim` records
  ``{"status": "failed", "error": ...}`` in ``status.json``; while no epoch of it finished
  (none of :data:`EPOCH_FILES` anywhere in the directory), the next run in that directory
  replaces its files without ``overwrite``; with a finished epoch it is a run like any
  other (refused unless ``overwrite``; ``--resume`` continues it);
* **no debris**: temporary files of writes a crash interrupted (``.NAME.*.tmp``, see
  :mod:`gnn_treelstm.files`) are removed.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gnn_treelstm.files import write_json

__all__ = ["RunDirError", "LOCK_NAME", "STATUS_NAME", "EPOCH_FILES", "claim", "check_free",
           "new_run_id", "check_same_run", "read_status", "record_failure", "unwritable", "held"]

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
#: how a run that raised ended: ``{"status": "failed", "error": "..."}``
STATUS_NAME = "status.json"
#: files a run writes once an epoch finished (or a state was saved inside one): where any
#: of them is, the directory holds a run worth keeping, whatever its status says
EPOCH_FILES = ("metrics.jsonl", "state.pt", "best.pt", "seed.json", "results.json")


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


#: the lock fds this process holds; a forked child (a loader process) closes its copies
#: at once (:func:`_drop_in_child`), so that the lock dies with the run's own process
_HELD: set[int] = set()


def _drop_in_child() -> None:
    """In a child forked while a run directory is held: close the inherited lock fds (an
    ``flock`` lives as long as any copy of its fd; closing a copy never unlocks the
    parent's)."""
    for fd in list(_HELD):
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_in_child)


def _try_lock(path: Path, resume: bool = False) -> int:
    """An fd holding an exclusive lock on ``path/.lock``; raises :class:`RunDirError`.

    A writer removes ``.lock`` when it is done (:func:`_release`), so the file locked may
    have been unlinked between its ``open`` here and the ``flock``: then the lock guards
    nothing and is taken again on the file now at that name."""
    lock = path / LOCK_NAME
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except PermissionError as exc:
            raise unwritable(path, exc, resume=resume) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise RunDirError(
                    f"{path} is being written by {_holder(lock)}; wait for that run to "
                    "finish or choose another --name") from None
            raise
        if _is_at(fd, lock):
            _HELD.add(fd)
            return fd
        os.close(fd)


def unwritable(path: Path, exc: OSError, *, resume: bool = False) -> RunDirError:
    """The error for a run directory this process may not write: the directory (and the
    file), the reason and the fix: for a resumed run, which writes where it is, the
    permission; for a new one, the permission or another place."""
    reason = exc.strerror or str(exc)
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
    fix = ("a resumed run writes where it is: give this user write permission on it "
           "(chmod u+w, chown) or resume it as the user who owns it" if resume else
           "make it writable for this user (chmod u+w, chown) or write the run elsewhere "
           "(--runs-dir, --name)")
    return RunDirError(f"cannot write the run directory {path}{where}: {reason}; {fix}")


def _is_at(fd: int, lock: Path) -> bool:
    """Whether the open file ``fd`` is still the one named ``lock``."""
    try:
        now = os.stat(lock)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def held(path: str | os.PathLike) -> bool:
    """Whether this process holds ``path`` as its writer (inside :func:`claim`)."""
    return any(_is_at(fd, Path(path) / LOCK_NAME) for fd in list(_HELD))


def _release(path: Path, fd: int) -> None:
    """Remove ``path/.lock`` (still held: no other writer can be using it) and unlock."""
    try:
        if _is_at(fd, path / LOCK_NAME):
            (path / LOCK_NAME).unlink()
    except OSError as exc:  # a read-only or vanished directory: the lock still goes
        log.debug("could not remove %s: %s", path / LOCK_NAME, exc)
    finally:
        _HELD.discard(fd)
        os.close(fd)


#: a log alone is what a run that failed before training leaves: not a run
LOG_NAME = "train.log"


def _contents(path: Path, keep: Sequence[str]) -> list[str]:
    names = sorted(p.name for p in path.iterdir()
                   if p.name != LOCK_NAME and p.name not in keep
                   and not (p.name.startswith(".") and p.name.endswith(".tmp")))
    return [] if names == [LOG_NAME] else names


def read_status(path: str | os.PathLike) -> dict | None:
    """The run's ``status.json`` (how it ended, if it raised), or ``None`` when there is no
    readable one."""
    try:
        status = json.loads((Path(path) / STATUS_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def _failed_start(path: Path) -> bool:
    """Whether ``path`` holds only what a run that failed before finishing an epoch left:
    its status says failed and none of :data:`EPOCH_FILES` is there (nor in a seed's
    folder)."""
    status = read_status(path)
    if status is None or status.get("status") != "failed":
        return False
    return not any(p.name in EPOCH_FILES for p in path.rglob("*"))


def _record_failure(path: Path, exc: BaseException, keep: Sequence[str]) -> None:
    """Write ``status.json`` for a run that raised ``exc``, where it wrote anything."""
    record_failure(path, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
                   keep)


def record_failure(path: str | os.PathLike, error: str, keep: Sequence[str] = ()) -> None:
    """Write ``{"status": "failed", "error": error}`` to ``path/status.json`` where the run
    wrote anything (``keep`` aside); a failed write is logged, not raised (the run's own
    error is the one to report). :func:`claim` calls it for a block that raises; a process
    stopped where no exception can be raised (a bus error) calls it itself."""
    path = Path(path)
    try:
        if not [n for n in _contents(path, keep) if n != STATUS_NAME]:
            return  # nothing of the run there: the directory is free as it is
    except OSError:
        return
    try:
        write_json(path / STATUS_NAME, {"status": "failed", "error": error})
    except OSError as write_exc:  # the run's own error is the one to report
        log.warning("could not record the failure in %s: %s", path / STATUS_NAME, write_exc)


def _refusal(path: Path, names: list[str]) -> RunDirError:
    shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    return RunDirError(f"{path} already holds a run ({shown}); replace it with --overwrite "
                       "(Python: overwrite=True), or name a new run directory with --name "
                       "NAME (RunConfig.name)")


def check_free(path: str | os.PathLike, *, overwrite: bool = False,
               keep: Sequence[str] = ()) -> None:
    """Fail now (:class:`RunDirError`) if :func:`claim` would: the directory is locked by
    another writer, or holds a run and ``overwrite`` is off (the files of a run that failed
    before finishing an epoch are no run). Changes nothing but a stale ``.lock``."""
    path = Path(path)
    if not path.is_dir():
        return
    fd = _try_lock(path)
    try:
        names = _contents(path, keep)
        if names and not overwrite and not _failed_start(path):
            raise _refusal(path, names)
    finally:
        _release(path, fd)


def _remove_debris(path: Path) -> None:
    for tmp in [*path.glob(".*.tmp"), *path.glob("seed-*/.*.tmp")]:
        log.info("removing %s, left by an interrupted write", tmp)
        tmp.unlink(missing_ok=True)


@contextmanager
def claim(path: str | os.PathLike, *, overwrite: bool = False,
          keep: Sequence[str] = (), resume: bool = False) -> Iterator[Path]:
    """Hold ``path`` (created if missing) as the only writer for the ``with`` block.

    The block's end removes ``.lock`` and unlocks. A block that raises records
    ``{"status": "failed", "error": ...}`` in ``status.json`` (where the run wrote
    anything); one that ends normally removes an earlier ``status.json`` (a resumed run
    that failed before).

    Args:
        overwrite: remove an earlier run's files instead of refusing the directory.
        keep: names that may already be there and stay (the CLI's ``train.log``, opened
            before the run starts).
        resume: the run in the directory continues: its files stay (``overwrite`` is
            ignored); the directory must exist.

    Raises:
        RunDirError: another process holds the directory, or it holds a run and
            ``overwrite`` is off. The files of a run that failed before finishing an
            epoch are no run: they are replaced.
    """
    path = Path(path)
    if resume and not path.is_dir():
        raise RunDirError(f"--resume {path}: no such run directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except PermissionError as exc:
        raise unwritable(path, exc, resume=resume) from None
    fd = _try_lock(path, resume)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        _remove_debris(path)
        if not resume:
            _clear(path, _contents(path, keep), overwrite=overwrite)
        try:
            yield path
        except GeneratorExit:  # the block was abandoned, not failed
            raise
        except BaseException as exc:  # an error, Ctrl-C: recorded, then raised on
            _record_failure(path, exc, keep)
            raise
        (path / STATUS_NAME).unlink(missing_ok=True)
    finally:
        _release(path, fd)


def _clear(path: Path, names: list[str], *, overwrite: bool) -> None:
    """Remove ``names`` (an earlier run's files) from ``path``: the leftovers of a failed
    start always, a run only with ``overwrite``; else raise :class:`RunDirError`."""
    if not names:
        return
    failed = _failed_start(path)
    if not failed and not overwrite:
        raise _refusal(path, names)
    for name in names:
        target = path / name
        if failed:
            log.info("removing %s, left by a run that failed before finishing an epoch "
                     "(%s)", target, path / STATUS_NAME)
        else:
            log.warning("overwriting the run in %s: removing %s of an earlier run", path,
                        target)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()


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
