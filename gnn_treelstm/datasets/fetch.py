"""Get the benchmark data: download the official archives, or copy a local mirror.

``gnn-treelstm fetch --dest data/``
    downloads each official file of :data:`RESOURCES` (SST, SICK, TREC, SNLI, the Little
    Prince AMR bank, GloVe 6B) and unpacks it into the layout of the project's data mirror
    (the one its ``README.md`` describes)::

        sst/trees/{train,dev,test}.txt
        sick/semeval2014/SICK_{train,trial,test_annotated}.txt
        sick/full/SICK.txt.gz
        trec/{train_5500,TREC_10}.label
        snli/snli_1.0_{train,dev,test}.jsonl        (the mirror has s1/s2/labels.*.gz instead)
        amr/little_prince/amr-bank-struct-v3.0.txt
        glove/glove.6B.50d.txt                      (full 400k words; the mirror has a filtered
                                                    glove.6B.50d.filtered.txt.gz)
        glove/glove.840B.300d.txt                   (only with --datasets glove840b: 2 GB)

    The Stanford-parser files of SICK (``sick/stanford_parsed``) have no official download
    (they are produced by the treelstm scripts with the Java parser); use ``--from``.

``gnn-treelstm fetch --from MIRROR --dest data/``
    copies every file of a local mirror laid out like that (``.gz`` files stay compressed),
    checks each one against the mirror's ``SHA256SUMS`` when it has one, and unpacks any
    official archive of :data:`RESOURCES` found in it (e.g. ``trainDevTestTrees_PTB.zip``).

Downloads stream to ``<name>.part`` with a progress bar and are renamed when complete (and
their SHA-256 matches, where :data:`RESOURCES` pins one); unpacked files are written to a
temporary name and renamed, so nothing is ever left half-written. A second run skips every
file that is already there unless ``--force``. ``--base-url`` replaces the host and folder
of every official URL (a private mirror, or a local test server).
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import shutil
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from gnn_treelstm.files import atomic_path, atomic_write

log = logging.getLogger(__name__)

__all__ = [
    "FetchError",
    "Resource",
    "RESOURCES",
    "GROUPS",
    "DEFAULT_GROUPS",
    "resolve_url",
    "download",
    "fetch",
    "copy_from_mirror",
]

_CHUNK = 1 << 20


class FetchError(RuntimeError):
    """A download or copy failed (HTTP error, unreachable host, checksum mismatch...)."""


@dataclass(frozen=True)
class Resource:
    """One official file and where its content goes under ``--dest``.

    ``members`` maps a file inside a zip archive (matched on its path or its path's tail,
    so a differing top folder does not matter) to its destination; for a plain file the
    key is ``""``. A destination ending in ``.gz`` is gzip-compressed on the way.
    """

    name: str
    group: str
    url: str
    members: dict[str, str]
    sha256: str | None = None  # of the downloaded file, when the official one is known
    archive: bool = False
    note: str = ""
    outputs: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "outputs", tuple(self.members.values()))

    @property
    def filename(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]


_SEMEVAL = "https://alt.qcri.org/semeval2014/task1/data/uploads"
_COGCOMP = "https://cogcomp.seas.upenn.edu/Data/QA/QC"

RESOURCES: tuple[Resource, ...] = (
    Resource("sst", "sst", "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip",
             {f"trees/{s}.txt": f"sst/trees/{s}.txt" for s in ("train", "dev", "test")},
             archive=True, note="Socher et al. 2013, SST PTB trees"),
    Resource("sick-train", "sick", f"{_SEMEVAL}/sick_train.zip",
             {"SICK_train.txt": "sick/semeval2014/SICK_train.txt"}, archive=True),
    Resource("sick-trial", "sick", f"{_SEMEVAL}/sick_trial.zip",
             {"SICK_trial.txt": "sick/semeval2014/SICK_trial.txt"}, archive=True),
    Resource("sick-test", "sick", f"{_SEMEVAL}/sick_test_annotated.zip",
             {"SICK_test_annotated.txt": "sick/semeval2014/SICK_test_annotated.txt"},
             archive=True),
    Resource("sick-full", "sick", "https://zenodo.org/record/2787612/files/SICK.zip",
             {"SICK.txt": "sick/full/SICK.txt.gz"}, archive=True,
             note="the full SICK release (9840 pairs)"),
    Resource("trec-train", "trec", f"{_COGCOMP}/train_5500.label",
             {"": "trec/train_5500.label"},
             sha256="9e4c8bdcaffb96ed61041bd64b564183d52793a8e91d84fc3a8646885f466ec3"),
    Resource("trec-test", "trec", f"{_COGCOMP}/TREC_10.label", {"": "trec/TREC_10.label"},
             sha256="033f22c028c2bbba9ca682f68ffe204dc1aa6e1cf35dd6207f2d4ca67f0d0e8e"),
    Resource("snli", "snli", "https://nlp.stanford.edu/projects/snli/snli_1.0.zip",
             {f"snli_1.0/snli_1.0_{s}.jsonl": f"snli/snli_1.0_{s}.jsonl"
              for s in ("train", "dev", "test")}, archive=True),
    Resource("amr", "amr", "https://amr.isi.edu/download/amr-bank-struct-v3.0.txt",
             {"": "amr/little_prince/amr-bank-struct-v3.0.txt"},
             note="The Little Prince AMR bank v3.0 (1562 graphs)"),
    Resource("glove6b", "glove", "https://nlp.stanford.edu/data/glove.6B.zip",
             {"glove.6B.50d.txt": "glove/glove.6B.50d.txt"}, archive=True,
             note="822 MB download"),
    Resource("glove840b", "glove840b", "https://nlp.stanford.edu/data/glove.840B.300d.zip",
             {"glove.840B.300d.txt": "glove/glove.840B.300d.txt"}, archive=True,
             note="2 GB download; only on request"),
)
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(r.group for r in RESOURCES))
DEFAULT_GROUPS: tuple[str, ...] = ("sst", "sick", "trec", "snli", "amr", "glove")


def resolve_url(resource: Resource, base_url: str | None = None) -> str:
    """The official URL, or ``base_url/<file name>`` when a base URL is given."""
    if base_url is None:
        return resource.url
    return f"{base_url.rstrip('/')}/{resource.filename}"


def _progress(total: int | None, desc: str, enabled: bool, *, files: bool = False):
    if not enabled:
        return None
    from tqdm import tqdm

    # disable=None: a bar on a terminal only, never frames in a log file
    if files:
        return tqdm(total=total, desc=desc, unit="file", leave=False, disable=None)
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                leave=False, disable=None)


def download(
    url: str,
    dest: str | os.PathLike,
    *,
    sha256: str | None = None,
    progress: bool = False,
    timeout: float = 60.0,
) -> Path:
    """Stream ``url`` to ``dest`` (via a temporary file beside it, renamed at the end).

    Raises:
        FetchError: HTTP error (with its status), unreachable host, a checksum mismatch
            (the partial file is removed), or a short read.
    """
    dest = Path(dest)
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, atomic_path(dest) as part:
            total = resp.headers.get("Content-Length")
            total = int(total) if total and total.isdigit() else None
            bar = _progress(total, dest.name, progress)
            got = 0
            try:
                with open(part, "wb") as out:
                    while chunk := resp.read(_CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
                        got += len(chunk)
                        if bar is not None:
                            bar.update(len(chunk))
            finally:
                if bar is not None:
                    bar.close()
            # raising here removes the partial file and leaves ``dest`` as it was
            if total is not None and got != total:
                raise FetchError(f"{url}: the connection closed after {got} of {total} bytes")
            if sha256 is not None and digest.hexdigest() != sha256.lower():
                raise FetchError(
                    f"{url}: checksum mismatch: expected sha256 {sha256}, got "
                    f"{digest.hexdigest()}; the file is damaged or not the official one (it "
                    "was not kept)"
                )
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        raise FetchError(
            f"{url}: cannot reach the server ({exc.reason}); when offline, copy a local "
            "mirror with --from DIR"
        ) from exc
    log.info("downloaded %s -> %s (sha256 %s)", url, dest, digest.hexdigest())
    return dest


def _write_atomic(dest: Path, src: IO[bytes], *, compress: bool = False) -> str:
    """Copy the stream ``src`` to ``dest`` via a temp file; gzip it when ``compress``.

    Returns the SHA-256 of the bytes written to ``dest``."""
    digest = hashlib.sha256()

    class _Hashing:
        def __init__(self, fh: IO[bytes]) -> None:
            self.fh = fh

        def write(self, b: bytes) -> int:
            digest.update(b)
            return self.fh.write(b)

        def flush(self) -> None:
            self.fh.flush()

    def write(raw: IO[bytes]) -> None:
        hashing = _Hashing(raw)
        if compress:
            # mtime=0 so that the same content always gives the same bytes
            with gzip.GzipFile(filename=dest.name[:-3], mode="wb", fileobj=hashing,
                               mtime=0) as gz:
                shutil.copyfileobj(src, gz, _CHUNK)
        else:
            shutil.copyfileobj(src, hashing, _CHUNK)

    atomic_write(dest, write, fsync=False)
    return digest.hexdigest()


def _find_member(names: Sequence[str], wanted: str) -> str | None:
    if wanted in names:
        return wanted
    tail = [n for n in names if n.endswith("/" + wanted) and "__MACOSX" not in n]
    return min(tail, key=len) if tail else None


def _unpack(resource: Resource, archive: Path, dest: Path) -> list[Path]:
    written = []
    if not resource.archive:
        (target,) = resource.members.values()
        out = dest / target
        with open(archive, "rb") as fh:
            _write_atomic(out, fh, compress=out.name.endswith(".gz"))
        return [out]
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as exc:
        raise FetchError(f"{archive}: not a zip archive ({exc})") from exc
    with zf:
        names = zf.namelist()
        for member, target in resource.members.items():
            name = _find_member(names, member)
            if name is None:
                raise FetchError(
                    f"{archive}: no member {member!r} (it has {', '.join(names[:10])}"
                    f"{' ...' if len(names) > 10 else ''}); the archive layout changed"
                )
            out = dest / target
            with zf.open(name) as fh:
                _write_atomic(out, fh, compress=out.name.endswith(".gz")
                              and not name.endswith(".gz"))
            log.info("unpacked %s:%s -> %s", archive.name, name, out)
            written.append(out)
    return written


def _select(groups: Iterable[str] | None, resources: Sequence[Resource]) -> list[Resource]:
    if groups is None:
        groups = DEFAULT_GROUPS
    groups = list(groups)
    known = {r.group for r in resources} | {r.name for r in resources}
    bad = [g for g in groups if g not in known]
    if bad:
        raise ValueError(f"unknown dataset(s) {bad} (--datasets); choose from {sorted(known)}")
    return [r for r in resources if r.group in groups or r.name in groups]


def fetch(
    dest: str | os.PathLike,
    datasets: Iterable[str] | None = None,
    *,
    base_url: str | None = None,
    force: bool = False,
    keep_archives: bool = False,
    progress: bool = False,
    resources: Sequence[Resource] = RESOURCES,
    timeout: float = 60.0,
) -> dict[str, str]:
    """Download and unpack ``datasets`` (groups or resource names of ``resources``).

    Returns ``{resource name: "fetched" | "present"}``. Archives are downloaded to
    ``dest/.downloads/`` and removed after unpacking unless ``keep_archives``.
    A resource whose outputs all exist is skipped unless ``force``.
    """
    dest = Path(dest)
    status: dict[str, str] = {}
    for res in _select(datasets, resources):
        if not force and all((dest / o).is_file() for o in res.outputs):
            log.info("%s: already present, skipped (use --force to fetch again)", res.name)
            status[res.name] = "present"
            continue
        url = resolve_url(res, base_url)
        archive = dest / ".downloads" / res.filename
        if force or not archive.is_file():
            download(url, archive, sha256=res.sha256, progress=progress, timeout=timeout)
        _unpack(res, archive, dest)
        if not keep_archives:
            archive.unlink(missing_ok=True)
        status[res.name] = "fetched"
    downloads = dest / ".downloads"
    if downloads.is_dir() and not any(downloads.iterdir()):
        downloads.rmdir()
    return status


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _read_sums(path: Path) -> dict[str, str]:
    sums: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or len(parts[0]) != 64:
            raise FetchError(f"{path}:{lineno}: not a 'sha256  path' line: {line!r}")
        sums[parts[1].strip().lstrip("*").removeprefix("./")] = parts[0].lower()
    return sums


def _mirror_files(src: Path, dest: Path, resources: Sequence[Resource],
                  archives: Mapping[str, Resource]) -> list[Path]:
    """The files of the mirror ``src``, after checking it looks like one."""
    if not src.is_dir():
        raise ValueError(f"--from {src}: " + ("not a folder" if src.exists() else
                                              "no such folder") + " (the data mirror to copy)")
    if src.resolve() == dest.resolve():
        raise ValueError(f"--from and --dest are the same folder: {src}")
    files = sorted(p for p in src.rglob("*") if p.is_file() and ".downloads" not in p.parts)
    folders = sorted({o.split("/", 1)[0] for r in resources for o in r.outputs})
    if not any(p.relative_to(src).parts[0] in folders or p.name in archives for p in files):
        examples = [o for r in resources for o in r.outputs][:3]
        raise ValueError(
            f"--from {src}: nothing of a data mirror there ({len(files)} files, none under "
            f"{', '.join(f'{f}/' for f in folders)}); expected a folder laid out like "
            f"{', '.join(examples)} ..., or the official archives "
            f"({', '.join(sorted(archives))})")
    return files


def _mirror_sums(src: Path, verify: bool) -> dict[str, str]:
    """``{relative path: sha256}`` of the mirror's ``SHA256SUMS`` (empty without one or
    without ``verify``), every listed file present."""
    sums_file = src / "SHA256SUMS"
    sums = _read_sums(sums_file) if verify and sums_file.is_file() else {}
    if verify and sums:
        missing = [p for p in sums if not (src / p).is_file()]
        if missing:
            raise FetchError(f"{src}: files listed in SHA256SUMS are missing: {missing[:5]}")
    return sums


def _unpack_if_needed(res: Resource, archive: Path, dest: Path, force: bool) -> str:
    if force or not all((dest / o).is_file() for o in res.outputs):
        _unpack(res, archive, dest)
        return "unpacked"
    return "present"


def copy_from_mirror(
    src: str | os.PathLike,
    dest: str | os.PathLike,
    *,
    force: bool = False,
    verify: bool = True,
    progress: bool = False,
    resources: Sequence[Resource] = RESOURCES,
) -> dict[str, str]:
    """Copy every file of a local mirror into ``dest`` (same layout, ``.gz`` kept as is).

    With ``verify`` and a ``SHA256SUMS`` in the mirror, each listed file is checked as it
    is copied (and a file already present is checked before it is skipped); a mismatch
    or a listed file missing from the mirror is a :class:`FetchError`, and the bad copy is
    not kept. A zip archive named like an official one of ``resources`` is unpacked
    instead of copied.

    Returns ``{relative path: "copied" | "present" | "unpacked"}``.

    Raises:
        ValueError: ``src`` is not a folder, is ``dest``, or holds nothing of a data mirror
            (no file under one of the mirror's folders, no official archive).
        FetchError: a checksum mismatch, or a file of ``SHA256SUMS`` missing.
    """
    src, dest = Path(src), Path(dest)
    archives = {r.filename: r for r in resources if r.archive}
    files = _mirror_files(src, dest, resources, archives)
    sums = _mirror_sums(src, verify)
    bar = _progress(len(files), "copy", progress, files=True)
    status: dict[str, str] = {}
    try:
        for path in files:
            rel = path.relative_to(src).as_posix()
            if path.name in archives:
                status[rel] = _unpack_if_needed(archives[path.name], path, dest, force)
            else:
                status[rel] = _copy_one(path, dest / rel, sums.get(rel), force)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    n_copied = sum(v == "copied" for v in status.values())
    log.info("mirror %s -> %s: %d copied, %d present, %d unpacked (%d checksums verified)",
             src, dest, n_copied, sum(v == "present" for v in status.values()),
             sum(v == "unpacked" for v in status.values()), len(sums))
    return status


def _copy_one(path: Path, out: Path, expected: str | None, force: bool) -> str:
    if not force and out.is_file() and out.stat().st_size == path.stat().st_size:
        if expected is None or _sha256_file(out) == expected:
            return "present"
        log.warning("%s differs from its SHA256SUMS entry; copying it again", out)
    digest = hashlib.sha256()

    def copy(dst: IO[bytes]) -> None:  # raising here leaves ``out`` as it was
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                digest.update(chunk)
                dst.write(chunk)
        if expected is not None and digest.hexdigest() != expected:
            raise FetchError(
                f"{path}: checksum mismatch with SHA256SUMS: expected {expected}, got "
                f"{digest.hexdigest()}; the mirror copy is damaged (not copied)"
            )

    atomic_write(out, copy, fsync=False, mode=0o644)
    shutil.copystat(path, out)
    return "copied"
