"""The manifest of a built data directory: one build id and every file's size and sha256.

``gnn-treelstm build`` ends by sealing its output (:func:`seal`): ``meta.json`` gets a
``manifest`` entry ::

    "manifest": {"build_id": "3f2a...", "files": {"vocab.json": {"size": 21, "sha256": "..."},
                 "constituency/train.packed/n.word.npy": {...}, ...}}

covering every file of the build but ``meta.json`` itself (and the build's hidden work
folders). Loading checks it, so that a file of another build (a vocabulary replaced by a
build killed half-way, a split copied from another data set, two splits swapped) or a file
damaged after the build is refused before it is used, naming the file and the command that
rebuilds it:

* :func:`check_meta` (``load_meta``): every listed file is there with its size, and the
  shared files the splits are read with (``vocab.json``, ``relations/*.json``) have their
  digests;
* :func:`check_split` (``load_split``): every file of the split has its digest, and the
  number of trees its header holds is the split's count in ``meta.json``; in an unsealed
  directory, every array reads, the offsets run from 0 to the header's counts, word ids
  are within the vocabulary and node labels within the label names.

The digests read every file once per process (sha256 at about 780 MB/s of CPU time on a
2-core AMD EPYC: ``file_digest`` of a 200 MB file, ``time.thread_time``);
the packed arrays are then mapped as before, so the memory a run holds does not change.

A directory built before manifests loads as before, with one INFO line saying its files are
not checked. Digests are cached per file (path, inode, size, modification time), so a file
is read once per process.

A packed array stays mapped while a run trains on it, so a file changed after it was
checked would be read as it is now: rewritten in place, its new bytes; cut short, a bus
error (``SIGBUS``) that kills the process. :func:`watch` records each mapped file's
identity (device, inode, size, modification time) as it is mapped; :func:`check_unchanged`
raises :class:`DataChangedError` naming the files that differ from it (the trainer calls it
at each epoch's start and before it saves), and :func:`changed_mapped` lists them for a
process stopped by a bus error (the command line's handler, :mod:`gnn_treelstm.commands.sigbus`).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from gnn_treelstm.files import atomic_write, file_sha256

__all__ = ["DataMismatchError", "DataChangedError", "seal", "check_meta", "check_split",
           "file_digest", "watch", "changed", "check_unchanged", "changed_mapped",
           "changed_message", "mapped_files"]

log = logging.getLogger(__name__)

#: the key of ``meta.json`` that holds the manifest
KEY = "manifest"
_DIGESTS: dict[tuple, str] = {}
_UNSEALED: set[str] = set()
_SHARED = ("vocab.json", "relations/")


class DataMismatchError(ValueError):
    """A file of a built data directory is not the one its ``meta.json`` describes."""


class DataChangedError(DataMismatchError):
    """A file mapped into the process changed on disk while the process read it."""


def file_digest(path: Path) -> str:
    """The sha256 of a file (hex), cached by path, inode, size and modification time."""
    st = path.stat()
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = file_sha256(path)
    return _DIGESTS[key]


def _files(out: Path) -> list[str]:
    found = []
    for root, dirs, names in os.walk(out):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            rel = (Path(root) / name).relative_to(out).as_posix()
            if not name.startswith(".") and rel != "meta.json":
                found.append(rel)
    return found


def seal(out: str | os.PathLike, meta: dict) -> dict:
    """Write ``meta`` with a new build id and the size and digest of every file under
    ``out`` (``meta.json`` and hidden names aside) to ``out/meta.json``; return it."""
    out = Path(out)
    files = {rel: {"size": (out / rel).stat().st_size, "sha256": file_digest(out / rel)}
             for rel in _files(out)}
    meta = {**meta, KEY: {"build_id": uuid.uuid4().hex, "files": files}}
    atomic_write(out / "meta.json", json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    return meta


def rebuild_command(d: Path, meta: dict) -> str:
    """The command that rebuilds ``d`` from its source, as far as ``meta`` names it."""
    src = meta.get("src")
    if isinstance(src, list):
        src = " ".join(str(s) for s in src)
    dataset = meta.get("source_format") or meta.get("dataset") or "DATASET"
    return f"gnn-treelstm build --dataset {dataset} --src {src or 'RAW'} --out {d} --force"


def _fail(d: Path, meta: dict, rel: str, what: str) -> DataMismatchError:
    man = meta.get(KEY)
    build = man.get("build_id") if isinstance(man, dict) else None
    why = (f"it is not the file of build {build} that {d / 'meta.json'} describes (a build "
           "stopped half-way, a file copied in from elsewhere, or damage after the build)"
           if build else "the data directory is damaged")
    return DataMismatchError(f"{d / rel}: {what}; {why}: rebuild the data with "
                             f"`{rebuild_command(d, meta)}`")


def _check_file(d: Path, meta: dict, rel: str, entry: dict, digest: bool) -> None:
    path = d / rel
    if not path.is_file():
        raise _fail(d, meta, rel, "missing")
    size = path.stat().st_size
    if size != entry.get("size"):
        raise _fail(d, meta, rel, f"{size:,} bytes where the build wrote {entry.get('size'):,}")
    if digest and file_digest(path) != entry.get("sha256"):
        raise _fail(d, meta, rel, "its contents differ from the build's (sha256)")


def _manifest(d: Path, meta: dict) -> dict | None:
    man = meta.get(KEY)
    if man is None:
        if str(d) not in _UNSEALED:
            _UNSEALED.add(str(d))
            log.info("%s: built before build manifests (no %r in meta.json), so its files are "
                     "not checked against the build; rebuild it with `%s` to seal it",
                     d, KEY, rebuild_command(d, meta))
        return None
    if not (isinstance(man, dict) and isinstance(man.get("files"), dict)
            and all(isinstance(v, dict) for v in man["files"].values())):
        raise DataMismatchError(f"{d / 'meta.json'}: {KEY!r} is damaged (not a build id and "
                                f"a table of files); rebuild the data with "
                                f"`{rebuild_command(d, {})}`")
    return man


def check_meta(d: str | os.PathLike, meta: object) -> dict:
    """``meta`` (the parsed ``d/meta.json``) once the directory matches it: every file
    listed has its size, ``vocab.json`` and ``relations/*.json`` their digests.

    Raises:
        DataMismatchError: ``meta.json`` is not an object, or a file differs, naming it."""
    d = Path(d)
    if not isinstance(meta, dict):
        raise DataMismatchError(f"{d / 'meta.json'}: holds a {type(meta).__name__}, not the "
                                f"object a build writes; rebuild the data with "
                                f"`{rebuild_command(d, {})}`")
    man = _manifest(d, meta)
    if man is not None:
        for rel, entry in man["files"].items():
            _check_file(d, meta, rel, entry, rel.startswith(_SHARED))
    return meta


def _header(d: Path, meta: dict, path: Path) -> dict | None:
    """The packed directory's ``header.json`` once it has what a header holds (None where
    there is none: the packed loader names what is missing)."""
    rel = (path / "header.json").relative_to(d).as_posix()
    try:
        header = json.loads((path / "header.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except PermissionError:  # not damage: the caller names the file and the permission
        raise
    except (OSError, ValueError) as exc:
        raise _fail(d, meta, rel, f"unreadable ({exc})") from None
    counts = ("trees", "nodes", "edges")
    if not (isinstance(header, dict) and isinstance(header.get("files"), dict)
            and isinstance(header.get("dtypes"), dict)
            and all(isinstance(header.get(k), int) and header[k] >= 0 for k in counts)):
        raise _fail(d, meta, rel, "damaged (not an object with counts of trees, nodes and "
                                  "edges and tables of files and dtypes)")
    return header


def _array(d: Path, meta: dict, path: Path, name: str) -> np.ndarray | None:
    """The array ``path/name``, mapped (its header read), None where it is missing (the
    packed loader names it)."""
    try:
        return np.load(path / name, mmap_mode="r")
    except FileNotFoundError:
        return None
    except PermissionError:
        raise
    except Exception as exc:  # noqa: BLE001 - a 0-byte or cut file: EOFError, ValueError...
        raise _fail(d, meta, (path / name).relative_to(d).as_posix(),
                    f"damaged packed trees: not a readable array ({type(exc).__name__}: "
                    f"{exc})") from None


#: entries read at a time by :func:`_chunks` (a few hundred KiB, reused)
_CHUNK = 1 << 16


def _chunks(d: Path, meta: dict, path: Path) -> Iterator[np.ndarray]:
    """The entries of the ``.npy`` file ``path``, ``_CHUNK`` at a time, read with ``read``
    (so that no page of it stays mapped in the process, as a scan of a mapped array
    would leave it)."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read(f)
            count = int(np.prod(shape))
            while count > 0:
                part = np.fromfile(f, dtype=dtype, count=min(count, _CHUNK))
                if len(part) == 0:
                    raise ValueError(f"cut short: {count:,} entries missing")
                count -= len(part)
                yield part
    except PermissionError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise _fail(d, meta, path.relative_to(d).as_posix(),
                    f"damaged packed trees: not a readable array ({exc})") from None


def _offsets_ok(d: Path, meta: dict, path: Path, trees: int, total: int) -> bool:
    n, last = 0, 0
    for part in _chunks(d, meta, path):
        if (n == 0 and part[0] != 0) or part[0] < last or bool(np.any(np.diff(part) < 0)):
            return False
        n, last = n + len(part), int(part[-1])
    return n == trees + 1 and last == total


def _check_arrays(d: Path, meta: dict, path: Path, header: dict) -> None:
    """Every array of a packed directory reads, its offsets run from 0 to the header's
    counts without going back, its word ids are within the vocabulary and its labels
    within the label names (what the loader and the model would otherwise meet as an
    index error far from the file)."""
    files = header["files"]
    for name in files.values():
        _array(d, meta, path, name)
    for key, total in (("node_offsets", header["nodes"]), ("edge_offsets", header["edges"])):
        if key in files and (path / files[key]).is_file() and not _offsets_ok(
                d, meta, path / files[key], header["trees"], total):
            raise _fail(d, meta, (path / files[key]).relative_to(d).as_posix(),
                        f"offsets that do not run from 0 to the header's {total:,} in "
                        f"{header['trees']:,} steps")
    ranges = {"n.word": ("vocabulary", meta.get("vocab_size"))}
    names = meta.get("label_names")
    if isinstance(names, list):
        ranges["n.label"] = ("label names", len(names))
    for key, (what, size) in ranges.items():
        if key not in files or not isinstance(size, int) or not (path / files[key]).is_file():
            continue
        parts = [(int(p.min()), int(p.max())) for p in _chunks(d, meta, path / files[key])]
        lo, hi = min((a for a, _ in parts), default=0), max((b for _, b in parts), default=0)
        if lo < -1 or hi >= size:
            raise _fail(d, meta, (path / files[key]).relative_to(d).as_posix(),
                        f"values {lo} to {hi}, beyond the {size:,} entries of the {what}")


def check_split(d: str | os.PathLike, meta: dict, split: str,
                paths: list[Path]) -> None:
    """Check the files of one split (``paths``: its packed directories) against the
    manifest, and the number of trees in their headers against ``meta['splits']``.

    Raises:
        DataMismatchError: naming the first file that differs."""
    d = Path(d)
    want = meta.get("splits", {}).get(split)
    man = _manifest(d, meta)
    if man is not None:
        _check_listed(d, meta, man, paths)
    for p in paths:
        header = _header(d, meta, p)
        if header is None:
            continue
        if isinstance(want, int) and header["trees"] != want:
            raise _fail(d, meta, (p / "header.json").relative_to(d).as_posix(),
                        f"holds {header['trees']:,} trees where meta.json counts {want:,} for "
                        f"split {split!r}")
        if man is None:  # a sealed directory is as the build wrote it: its digests say so
            _check_arrays(d, meta, p, header)


def _check_listed(d: Path, meta: dict, man: dict, paths: list[Path]) -> None:
    """The files of the split's directories against the manifest: each with its digest,
    none besides them."""
    prefixes = [p.relative_to(d).as_posix() for p in paths]
    legacy = {p.with_suffix(".bin").relative_to(d).as_posix() for p in paths}
    mine = {rel: e for rel, e in man["files"].items()
            if rel in legacy or any(rel.startswith(f"{q}/") for q in prefixes)}
    if not mine:
        raise _fail(d, meta, prefixes[0], "not listed in the build's manifest")
    for rel, entry in mine.items():
        _check_file(d, meta, rel, entry, True)
    for p in paths:  # a file the build did not write, beside those it did
        for extra in sorted(p.glob("*")) if p.is_dir() else []:
            rel = extra.relative_to(d).as_posix()
            if rel not in mine and not extra.name.startswith("."):
                raise _fail(d, meta, rel, "not written by the build")


# ---------------------------------------------------------------------- mapped files
#: the attribute of a mapped array that holds its file's identity as it was mapped
_AS_MAPPED = "gnn_treelstm_mapped_as"
#: every array :func:`watch` saw, while it lives
_WATCHED: list[weakref.ref] = []


def _identity(path: str) -> tuple[int, int, int, int] | None:
    """A file's device, inode, size and modification time; None where it is gone or
    cannot be looked at."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def watch(arr: np.ndarray) -> np.ndarray:
    """Record the identity of the file ``arr`` (an ``np.memmap``) maps, as it is now;
    return ``arr``. Arrays in memory are returned as they are."""
    name = getattr(arr, "filename", None)
    if isinstance(arr, np.memmap) and name:
        setattr(arr, _AS_MAPPED, (str(name), _identity(str(name))))
        _WATCHED[:] = [r for r in _WATCHED if r() is not None]
        _WATCHED.append(weakref.ref(arr))
    return arr


def changed(arrays: Iterable[object]) -> list[str]:
    """The files of the mapped ``arrays`` (those :func:`watch` saw) that are no longer as
    they were mapped: removed, replaced, cut short or rewritten."""
    out = []
    for arr in arrays:
        mapped = getattr(arr, _AS_MAPPED, None)
        if mapped is not None and _identity(mapped[0]) != mapped[1] and mapped[0] not in out:
            out.append(mapped[0])
    return out


def mapped_files() -> list[str]:
    """The files mapped by the arrays :func:`watch` saw that are still alive."""
    return sorted({getattr(a, _AS_MAPPED)[0] for a in (r() for r in _WATCHED)
                   if a is not None})


def changed_mapped() -> list[str]:
    """:func:`changed` over every live array :func:`watch` saw (what a bus error names)."""
    return changed(a for a in (r() for r in list(_WATCHED)) if a is not None)


def changed_message(files: Sequence[str]) -> str:
    """What to say of ``files``, mapped data files changed on disk while a process read
    them."""
    shown = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
    return (f"{shown}: changed on disk while this process was reading it (cut short, "
            "rewritten or replaced after it was mapped), so what it reads now is not the data "
            "the run started with; put the file back as the build wrote it (a copy of the "
            "data directory, or the same build again: loading checks it against meta.json's "
            "manifest)")


def check_unchanged(arrays: Iterable[object]) -> None:
    """Raise :class:`DataChangedError` naming the files of the mapped ``arrays`` that
    changed on disk since they were mapped (:func:`changed`)."""
    files = changed(arrays)
    if files:
        raise DataChangedError(changed_message(files))
