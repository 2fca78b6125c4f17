"""Pre-trained word vectors: text reader, binary cache and the unknown-word rule.

Formats read by :func:`read_vectors`
    * GloVe text: one ``word v1 v2 ... vD`` line per word, values separated by single
      ASCII spaces (GloVe 840B has a few "words" that contain spaces; the last ``D``
      fields are the values and everything before them is the word).
    * word2vec text: the same, preceded by an optional header line ``count dim``.
    * Either of them gzip-compressed (the name ends in ``.gz``).

A truncated file (a short last line, a cut gzip stream, fewer vectors than a word2vec
header promises), a line whose dimension differs from the file's, a non-numeric value or
a dimension other than the one asked for is a :class:`VectorsFormatError` (a
``ValueError``) naming the file and the line.

Unknown-word rule (Teng & Zhang 2017, §6 "Training")
    "if a word is not contained in the pretrained word embeddings, but its lowercased
    form exists in the embedding table, we use the lowercase as a replacement. Second,
    if both the original word and its lowercased form cannot be found, we treat the
    word as unk. The embedding vector of the UNK token is initialized as the average of
    all embedding vectors."

    :func:`build_embedding_matrix` applies it to a vocabulary (a list of words in id
    order, id 0 = ``"<unk>"``): row ``i`` is the vector of ``vocab[i]``, else of
    ``vocab[i].lower()``, else the mean of **all** vectors in the file; row 0 is always
    that mean.

Binary cache
    Parsing a large text file is slow, so :func:`load_vectors` stores the parsed words and
    matrix in one ``.npz`` file (written to a temporary name and renamed, so a crash never
    leaves half a cache) and reuses it while the source file's size and modification time
    are unchanged. The cache lives in ``cache_dir`` when given, else in
    ``$GNN_TREELSTM_CACHE/vectors`` (default ``~/.cache/gnn_treelstm/vectors``), never next
    to the data; its name carries a hash of the source's absolute path.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from gnn_treelstm.files import atomic_write, cache_dir, file_sha256

log = logging.getLogger(__name__)

__all__ = [
    "VectorsFormatError",
    "EmbeddingStats",
    "read_vectors",
    "load_vectors",
    "cache_path_for",
    "embedding_from_vectors",
    "build_embedding_matrix",
    "file_record",
]

UNK = "<unk>"
_CACHE_VERSION = 1
_CHUNK = 20000  # lines converted to float32 at once


class VectorsFormatError(ValueError):
    """A vectors file is truncated, inconsistent or not in the expected format."""


@dataclass
class EmbeddingStats:
    """What :func:`build_embedding_matrix` found for a vocabulary.

    ``exact + lower + unk == vocab_size - 1`` (row 0, ``<unk>``, is counted apart);
    ``coverage = (exact + lower) / (vocab_size - 1)``.
    """

    source: str
    dim: int
    vectors_in_file: int
    vocab_size: int
    exact: int
    lower: int
    unk: int
    coverage: float
    unk_examples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def _open_text(path: Path) -> io.TextIOBase:
    raw = gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8", errors="strict", newline="")


def _is_header(parts: list[str]) -> bool:
    return len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit()


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Numbered lines (1-based), with clear errors for cut gzip streams and binary input."""
    try:
        with _open_text(path) as fh:
            yield from enumerate(fh, 1)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise VectorsFormatError(
            f"{path}: the gzip stream is truncated or corrupt ({exc}); download the file again"
        ) from exc
    except UnicodeDecodeError as exc:
        raise VectorsFormatError(
            f"{path}: not UTF-8 text ({exc}); only the text formats of GloVe/word2vec are "
            "read (convert a binary word2vec file with gensim's save_word2vec_format "
            "binary=False)"
        ) from exc


class _VectorsText:
    """The parse of one GloVe / word2vec text file: words in file order and their values
    converted to float32 :data:`_CHUNK` lines at a time."""

    def __init__(self, path: Path, dim: int | None) -> None:
        self.path, self.dim = path, dim
        self.words: list[str] = []
        self.chunks: list[np.ndarray] = []
        self.buf: list[list[str]] = []  # values of the lines not converted yet
        self.buf_first_line = 0
        self.file_dim: int | None = None
        self.header_count: int | None = None  # the word2vec header's count
        self.last_line = ""
        self.last_lineno = 0

    def read(self) -> None:
        for lineno, line in _lines(self.path):
            self.last_line, self.last_lineno = line, lineno
            stripped = line.rstrip("\r\n")
            if not stripped.strip():
                continue  # blank line
            parts = stripped.rstrip(" ").split(" ")
            if lineno == 1 and _is_header(parts):
                self.header(parts)
                continue
            if self.file_dim is None:
                self.first_vector(parts, lineno, stripped)
            self.add(parts, lineno)
        self.flush()

    def header(self, parts: list[str]) -> None:
        self.header_count, self.file_dim = int(parts[0]), int(parts[1])
        if self.dim is not None and self.file_dim != self.dim:
            raise VectorsFormatError(
                f"{self.path}:1: the word2vec header says dimension {self.file_dim} but "
                f"{self.dim} was expected; pass the matching file or dim"
            )

    def first_vector(self, parts: list[str], lineno: int, stripped: str) -> None:
        """The file's dimension from its first vector (a file without a header)."""
        self.file_dim = len(parts) - 1
        if self.file_dim < 1:
            raise VectorsFormatError(f"{self.path}:{lineno}: a word without values: "
                                     f"{stripped!r}")
        if self.dim is not None and self.file_dim != self.dim:
            raise VectorsFormatError(
                f"{self.path}:{lineno}: vectors have dimension {self.file_dim} but "
                f"{self.dim} was expected; pass the matching file or dim"
            )

    def add(self, parts: list[str], lineno: int) -> None:
        """One ``word v1 ... vD`` line (a word may hold spaces: the last D fields are the
        values)."""
        file_dim = self.file_dim
        n_values = len(parts) - 1
        if n_values < file_dim or (n_values > file_dim and _looks_numeric(parts[1])
                                   and _all_numeric(parts[1:n_values - file_dim + 1])):
            what = "truncated line" if n_values < file_dim else "inconsistent dimension"
            raise VectorsFormatError(
                f"{self.path}:{lineno}: {what}: {n_values} values where the file has "
                f"dimension {file_dim} (word {parts[0]!r}); the file is cut short or mixes "
                "dimensions"
            )
        if not self.buf:
            self.buf_first_line = lineno
        self.words.append(" ".join(parts[:-file_dim]) if n_values > file_dim else parts[0])
        self.buf.append(parts[-file_dim:])
        if len(self.buf) >= _CHUNK:
            self.flush()

    def flush(self) -> None:
        """Convert the buffered values; a value that is not a number names its line."""
        if not self.buf:
            return
        try:
            self.chunks.append(np.array(self.buf, dtype=np.float32))
        except ValueError:
            for k, row in enumerate(self.buf):
                for v in row:
                    try:
                        float(v)
                    except ValueError:
                        raise VectorsFormatError(
                            f"{self.path}:{self.buf_first_line + k}: value {v!r} is not a "
                            "number"
                        ) from None
            raise
        self.buf = []

    def result(self) -> tuple[list[str], np.ndarray]:
        """The words and their matrix, after checking the file was read whole."""
        path, words = self.path, self.words
        if not words:
            raise VectorsFormatError(f"{path}: no vectors found (empty file?)")
        if self.header_count is not None and self.header_count != len(words):
            raise VectorsFormatError(
                f"{path}:{self.last_lineno}: the word2vec header promises {self.header_count} "
                f"vectors but the file has {len(words)}; the file is truncated or the header "
                "is wrong"
            )
        if self.last_line and not self.last_line.endswith("\n") and self.header_count is None:
            log.debug("%s: no newline after the last line", path)
        vectors = np.concatenate(self.chunks, axis=0)
        assert vectors.shape == (len(words), self.file_dim)
        return words, vectors


def read_vectors(
    path: str | os.PathLike, *, dim: int | None = None
) -> tuple[list[str], np.ndarray]:
    """Parse a GloVe / word2vec text file (plain or ``.gz``), without any cache.

    Args:
        path: the vectors file.
        dim: the dimension the caller expects; ``None`` accepts the file's own.

    Returns:
        ``(words, vectors)``: the words in file order and a ``(len(words), D)`` float32
        matrix. Duplicate words are kept (lookups use the first occurrence).

    Raises:
        FileNotFoundError: no such file.
        VectorsFormatError: truncated file, inconsistent or unexpected dimension,
            non-numeric value, empty file; the message names the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"vectors file not found: {path}")
    text = _VectorsText(path, dim)
    text.read()
    words, vectors = text.result()
    log.info("read %d vectors of dimension %d from %s", len(words), vectors.shape[1], path)
    return words, vectors


def _looks_numeric(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _all_numeric(parts: Sequence[str]) -> bool:
    return all(_looks_numeric(p) for p in parts)


# ----------------------------------------------------------------------------- cache


def _default_cache_dir(source: Path) -> Path:
    return cache_dir("vectors")


def cache_path_for(path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where :func:`load_vectors` keeps the binary cache of ``path``."""
    source = Path(path).resolve()
    folder = Path(cache_dir) if cache_dir is not None else _default_cache_dir(source)
    key = hashlib.sha1(str(source).encode("utf-8")).hexdigest()[:10]
    return folder / f"{source.name}.{key}.vectors.npz"


def _source_meta(source: Path) -> dict:
    st = source.stat()
    return {"version": _CACHE_VERSION, "source": str(source), "size": st.st_size,
            "mtime_ns": st.st_mtime_ns}


def _write_cache(cache: Path, meta: dict, words: list[str], vectors: np.ndarray) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    blob = np.frombuffer("\n".join(words).encode("utf-8"), dtype=np.uint8)
    meta_arr = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    atomic_write(cache, lambda fh: np.savez(fh, vectors=vectors, words=blob, meta=meta_arr),
                 fsync=False)
    log.info("cached %d vectors in %s", len(words), cache)


def _read_cache(cache: Path, meta: dict) -> tuple[list[str], np.ndarray] | None:
    try:
        with np.load(cache, allow_pickle=False) as z:
            stored = json.loads(z["meta"].tobytes().decode("utf-8"))
            if stored != meta:
                log.info("vectors cache %s is stale (source changed); rebuilding", cache)
                return None
            vectors = z["vectors"]
            words = z["words"].tobytes().decode("utf-8").split("\n")
    except FileNotFoundError:
        return None
    except Exception as exc:  # a damaged cache is rebuilt, never trusted
        log.warning("ignoring unreadable vectors cache %s (%s)", cache, exc)
        return None
    if len(words) != len(vectors):
        log.warning("ignoring inconsistent vectors cache %s", cache)
        return None
    return words, vectors


def load_vectors(
    path: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    dim: int | None = None,
    use_cache: bool = True,
) -> tuple[list[str], np.ndarray]:
    """:func:`read_vectors` with the binary cache (see the module docstring).

    The cache is reused when the source's resolved path, size and mtime match what was
    recorded; otherwise the text is parsed again and the cache rewritten atomically.
    """
    source = Path(path).resolve()
    if not source.is_file():
        raise FileNotFoundError(f"vectors file not found: {path}")
    if not use_cache:
        return read_vectors(source, dim=dim)
    cache = cache_path_for(source, cache_dir)
    meta = _source_meta(source)
    hit = _read_cache(cache, meta)
    if hit is not None:
        words, vectors = hit
        if dim is not None and vectors.shape[1] != dim:
            raise VectorsFormatError(
                f"{source}: vectors have dimension {vectors.shape[1]} but {dim} was expected"
            )
        log.info("loaded %d vectors from cache %s", len(words), cache)
        return words, vectors
    words, vectors = read_vectors(source, dim=dim)
    try:
        _write_cache(cache, meta, words, vectors)
    except OSError as exc:
        log.warning("could not write vectors cache %s (%s); continuing without", cache, exc)
    return words, vectors


def file_record(path: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None
                ) -> dict:
    """What names a vectors file for good: its resolved path, its size in bytes and its
    SHA-256 (hex). The digest is kept beside the binary cache (keyed, like it, by the
    resolved path, size and modification time), so a large file is hashed once.

    Raises:
        FileNotFoundError: no such file.
    """
    source = Path(path).expanduser().resolve()
    if not source.is_file():
        raise FileNotFoundError(f"vectors file not found: {path}")
    meta = _source_meta(source)
    memo = cache_path_for(source, cache_dir).with_suffix(".sha256.json")
    try:
        stored = json.loads(memo.read_text(encoding="utf-8"))
        if stored.get("meta") == meta and isinstance(stored.get("sha256"), str):
            return {"path": str(source), "size": meta["size"], "sha256": stored["sha256"]}
    except (OSError, ValueError):
        pass
    sha = file_sha256(source)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(memo, json.dumps({"meta": meta, "sha256": sha}), fsync=False)
    except OSError as exc:
        log.warning("could not keep the digest of %s in %s (%s)", source, memo, exc)
    return {"path": str(source), "size": meta["size"], "sha256": sha}


# ----------------------------------------------------------------------------- embedding


def embedding_from_vectors(
    vocab_words: Sequence[str],
    words: Sequence[str],
    vectors: np.ndarray,
    *,
    source: str = "<memory>",
    max_examples: int = 20,
) -> tuple[torch.Tensor, EmbeddingStats]:
    """Teng & Zhang's rule on vectors already in memory (see the module docstring).

    Args:
        vocab_words: the vocabulary in id order; ``vocab_words[0]`` must be ``"<unk>"``
            (a list, or an object with ``itos`` such as :class:`gnn_treelstm.trees.vocab.Vocab`).
        words: the file's words, as returned by :func:`read_vectors`.
        vectors: their vectors, ``(len(words), D)``, as returned by :func:`read_vectors`.

    Returns:
        ``(matrix, stats)``: a ``(len(vocab_words), D)`` float32 tensor and the coverage.
    """
    if hasattr(vocab_words, "itos"):
        vocab_words = vocab_words.itos
    if len(vocab_words) == 0 or vocab_words[0] != UNK:
        first = vocab_words[0] if len(vocab_words) else None
        raise ValueError(
            f"vocabulary must start with {UNK!r} at index 0 (got {first!r}); build it with "
            "the project's Vocab so that id 0 is the unknown word"
        )
    if len(words) != len(vectors) or len(words) == 0:
        raise ValueError(f"{len(words)} words but {len(vectors)} vectors")
    index: dict[str, int] = {}
    for i, w in enumerate(words):
        index.setdefault(w, i)
    mean = vectors.mean(axis=0, dtype=np.float64).astype(np.float32)  # UNK = average of all
    rows = np.empty(len(vocab_words), dtype=np.int64)
    rows[0] = -1
    exact = lower = 0
    unk_examples: list[str] = []
    for i, w in enumerate(vocab_words[1:], 1):
        j = index.get(w)
        if j is not None:
            exact += 1
        else:
            j = index.get(w.lower())
            if j is not None:
                lower += 1
            else:
                j = -1
                if len(unk_examples) < max_examples:
                    unk_examples.append(w)
        rows[i] = j
    out = np.where((rows >= 0)[:, None], vectors[np.maximum(rows, 0)], mean[None, :])
    n = len(vocab_words) - 1
    stats = EmbeddingStats(
        source=source, dim=int(vectors.shape[1]), vectors_in_file=len(words),
        vocab_size=len(vocab_words), exact=exact, lower=lower, unk=n - exact - lower,
        coverage=(exact + lower) / n if n else 1.0, unk_examples=unk_examples,
    )
    log.info("embeddings from %s: %d exact, %d lowercased, %d unknown of %d words (%.1f%%)",
             source, exact, lower, stats.unk, n, 100 * stats.coverage)
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32)), stats


def build_embedding_matrix(
    vocab_words: Sequence[str],
    path: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    dim: int | None = None,
    use_cache: bool = True,
) -> tuple[torch.Tensor, EmbeddingStats]:
    """Embedding matrix for a vocabulary from a vectors file (Teng & Zhang §6 rule).

    Args:
        vocab_words: words in id order, ``vocab_words[0] == "<unk>"`` (or a ``Vocab``).
        path: GloVe / word2vec text file (plain or ``.gz``).
        cache_dir: where to keep the binary cache (see :func:`load_vectors`).
        dim: expected dimension (``None``: the file's).

    Returns:
        ``(weights, stats)``; ``weights`` is ``(len(vocab_words), D)`` float32, ready for
        ``nn.Embedding.from_pretrained`` / ``embedding.weight.data.copy_``.
    """
    words, vectors = load_vectors(path, cache_dir=cache_dir, dim=dim, use_cache=use_cache)
    return embedding_from_vectors(vocab_words, words, vectors, source=str(path))
