"""The build's one pass over a data set, in shards: examples to packed arrays, in bounded
memory, for any number of worker processes.

The examples of each split are cut into shards of ``shard_size`` (``PACK_SHARD``)
examples: rows of a JSONL file read lazily (:class:`gnn_treelstm.datasets.jsonl.RowReader`
in the worker), or slices of examples read into memory (the benchmarks, AMR banks). A
shard (:func:`shard_arrays`, run by ``workers`` forked processes, at most ``2 x workers``
shards in flight) becomes, per tree kind and side, the packed arrays of its trees built
straight from the parse (:class:`gnn_treelstm.datasets.arrays.Packer`), numbered with the
shard's own words and relation names in the order it met them; its targets; its lines of
``text/<split>.jsonl``. The main process takes the shards in order: it appends their new
words to the vocabulary and their new relation names to each tree kind's relations (so
every id is the one a single pass over the whole data set in order gives: first met,
first numbered, whatever the number of workers), keeps each shard on disk
(``.pack-shards/``, named by a digest of its input: a killed build reuses the shards it
finished) and the range of every field, and streams the text out. :meth:`Pass.write`
then writes each split packed, shard after shard, ids mapped through the final
vocabulary (:func:`gnn_treelstm.trees.packed.write_packed_parts`).
"""

from __future__ import annotations

import collections
import gc
import hashlib
import json
import multiprocessing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gnn_treelstm.datasets import amr_data, dependency, jsonl
from gnn_treelstm.datasets.arrays import DTYPES, Packer
from gnn_treelstm.datasets.example import Example, sentence_record, wants_parse
from gnn_treelstm.files import atomic_write
from gnn_treelstm.trees import packed
from gnn_treelstm.trees.vocab import Relations, Vocab

__all__ = ["Task", "Job", "Pass", "shard_arrays", "FORMAT"]

#: version of the shard files (a change makes old shards unused)
FORMAT = 2


@dataclass
class Task:
    """One shard: ``split``, its number ``k``, its first example's index ``start``, and
    its input: ``(lo, hi)`` of the examples in memory, or JSONL ``(where, line)`` rows."""

    split: str
    k: int
    start: int
    rows: Any


@dataclass
class Job:
    """What building a shard reads (forked workers inherit it)."""

    trees: list[str]
    data: dict[str, list[Example]] | None = None  # the examples read into memory
    parses: dict | None = None  # spaCy's parses of the examples in memory
    reader: jsonl.RowReader | None = None  # JSONL rows, read in the shard
    optional: tuple[str, ...] = ()  # kinds built only if every sentence has their tree
    spacy_model: str | None = None
    batch_size: int = 512
    make: Callable | None = None  # builds a shard (default: shard_arrays)


_JOB: Job | None = None  # the job of the worker processes (set before they fork)


def _examples(job: Job, task: Task) -> tuple[list[Example], list[str], dict]:
    """The examples of a shard, where each is, and the shard's row shape (JSONL)."""
    if job.reader is None:
        assert job.data is not None
        lo, hi = task.rows
        exs = job.data[task.split][lo:hi]
        return exs, [f"{task.split} example {lo + i + 1}" for i in range(len(exs))], {}
    shape = jsonl._RowShape()
    exs = [job.reader.example(task.split, task.start + i, where, line, shape)
           for i, (where, line) in enumerate(task.rows)]
    return exs, [w for w, _ in task.rows], {"pair": shape.pair, "first": shape.first[0],
                                             "keys": sorted(shape.first[1])}


def _shard_parses(job: Job, exs: list[Example]) -> dict | None:
    """spaCy's parses of the shard's sentences that have no parse of their own and need
    one for a tree kind (JSONL); None if none does."""
    unique = list(dict.fromkeys(tuple(s.tokens) for ex in exs for s in ex.sources
                                if wants_parse(s, job.trees)))
    if not unique:
        return None
    nlp = dependency.load_pipeline(job.spacy_model)
    got = dependency.parse_tokenized(nlp, unique, batch_size=job.batch_size)
    return dict(zip(unique, got))


def shard_arrays(job: Job, task: Task) -> dict[str, np.ndarray]:
    """One shard built (see the module): ``<tree>|<side>|<key>`` packed arrays (local word
    and relation ids, each in the smallest type that holds it), ``target.<key>``,
    ``text`` (UTF-8 lines) and ``info`` (JSON: the words and relation names met, labels,
    the row shape, AMR tallies, tree kinds left out)."""
    exs, wheres, shape = _examples(job, task)
    vocab = Vocab()
    stoi = vocab.stoi  # the shard's words, numbered as met (Vocab.update, unchecked)
    ids = [[[stoi.setdefault(t, len(stoi)) for t in s] for s in ex.words()][:len(ex.sents)]
           for ex in exs]
    vocab.itos = list(stoi)
    parses = job.parses if job.reader is None else _shard_parses(job, exs)
    info: dict[str, Any] = {"words": vocab.itos, "relations": {}, "count": len(exs),
                            "shape": shape, "spacy": job.reader is not None and bool(parses),
                            "left_out": [], "amr": amr_data.amr_tally(exs)}
    out: dict[str, np.ndarray] = {}
    for tree in job.trees:
        if tree in job.optional and any(s.amr is None for ex in exs for s in ex.sources):
            info["left_out"].append(tree)
            continue
        rels = Relations()
        sides = [Packer() for _ in exs[0].sents]
        for ex, where, ex_ids in zip(exs, wheres, ids):
            for side, sent in enumerate(ex.sents):
                parse = parses.get(tuple(sent)) if parses is not None else None
                sides[side].add(sentence_record(tree, ex, side, ex_ids[side], rels, parse,
                                                vocab), where)
        for side, packer in enumerate(sides):
            for key, arr in packer.arrays().items():
                out[f"{tree}|{side}|{key}"] = packed._small(arr)
        info["relations"][tree] = rels.names
    _targets_and_text(job, exs, wheres, info, out)
    out["info"] = np.frombuffer(json.dumps(info).encode("utf-8"), dtype=np.uint8)
    return out


def _targets_and_text(job: Job, exs: list[Example], wheres: list[str], info: dict,
                      out: dict[str, np.ndarray]) -> None:
    """A shard's targets (JSONL labels: indices into ``info["labels"]``, the distinct
    labels as written with the row of each first) and text lines (JSONL: without the
    targets, which follow once the class ids are known)."""
    keys = list(exs[0].targets) if exs else []
    info["targets"] = keys
    for key in keys:
        vals = [ex.targets[key] for ex in exs]
        if key == "label" and job.reader is not None:
            first: dict[Any, int] = {}
            rows = []
            for v, w in zip(vals, wheres):
                if (type(v).__name__, v) not in first:
                    first[(type(v).__name__, v)] = len(first)
                    rows.append(w)
            info["labels"] = [[t, v] for t, v in first]
            info["label_rows"] = rows
            vals = [first[(type(v).__name__, v)] for v in vals]
        out[f"target.{key}"] = np.asarray(vals, dtype=np.float64 if key == "score"
                                          else np.int64)
    text = "".join((json.dumps(ex.text, ensure_ascii=False)[:-1] if job.reader is not None
                    else json.dumps(ex.text, ensure_ascii=False)) + "\n" for ex in exs)
    out["text"] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def _run(task: Task) -> dict[str, np.ndarray]:
    """A shard built, the cycle collector paused (a shard's objects hold no cycles; its
    sweeps over them cost a sixth of the time)."""
    assert _JOB is not None
    paused = gc.isenabled()
    gc.disable()
    try:
        return (_JOB.make or shard_arrays)(_JOB, task)
    finally:
        if paused:
            gc.enable()


def _info(shard: dict[str, np.ndarray]) -> dict:
    return json.loads(np.asarray(shard["info"]).tobytes().decode("utf-8"))


def _remap(arr: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``table[v]`` for every ``v >= 0`` of ``arr`` (-1 stays)."""
    arr = np.asarray(arr, dtype=np.int64)
    if not len(table):
        return arr
    return np.where(arr >= 0, table[np.maximum(arr, 0)], arr)


@dataclass
class Pass:
    """One pass over a data set (see the module); :meth:`run` takes the tasks, then
    :meth:`write` writes the splits of the tree kinds built."""

    job: Job
    cache: Path
    key: str  # what the shards depend on besides their input
    relations: dict[str, Relations]
    workers: int = 1
    progress: Callable[[Iterable, str], Iterable] | None = None
    vocab: Vocab = field(default_factory=Vocab)
    counts: dict[str, int] = field(default_factory=dict)
    paths: dict[str, list[Path]] = field(default_factory=dict)
    ranges: dict[tuple, list[int]] = field(default_factory=dict)
    targets: dict[str, dict[str, list[np.ndarray]]] = field(default_factory=dict)
    target_keys: list[str] | None = None
    labels: dict[tuple, int] = field(default_factory=dict)  # (type, value) -> first-met id
    label_rows: list[str] = field(default_factory=list)
    shape: jsonl._RowShape = field(default_factory=jsonl._RowShape)
    amr: dict[str, dict] = field(default_factory=dict)
    left_out: set[str] = field(default_factory=set)
    spacy: bool = False
    texts: dict[str, Any] = field(default_factory=dict)
    nlp: Any = None  # the spaCy pipeline the trees were parsed with
    label_ids: np.ndarray | None = None  # JSONL: class id of each label, in order met

    # ------------------------------------------------------------------ the pass
    def run(self, tasks: Iterable[tuple[Task, str]]) -> None:
        """Build (or reuse) every shard of ``tasks`` (a task and the digest of its input)
        and merge it, in order; the text of each split goes to ``cache/text-<split>``."""
        global _JOB
        self.cache.mkdir(parents=True, exist_ok=True)
        _JOB = self.job
        try:
            for task, path, shard in self._shards(tasks):
                self._merge(task, path, shard)
        finally:
            _JOB = None
            for fh in self.texts.values():
                fh.close()

    def _shards(self, tasks: Iterable[tuple[Task, str]]
                ) -> Iterator[tuple[Task, Path, dict[str, np.ndarray]]]:
        """Each shard, in order: loaded where an earlier run kept it, else built (by the
        worker processes, a bounded number ahead) and kept."""
        pool = None
        if self.workers > 1:
            pool = multiprocessing.get_context("fork").Pool(self.workers)
        pending: collections.deque = collections.deque()
        try:
            for task, digest in tasks:
                path = self.cache / f"{task.split}-{task.k:05d}-{self._digest(digest)}.npz"
                made = None
                if not path.is_file():
                    made = pool.apply_async(_run, (task,)) if pool else None
                pending.append((task, path, made))
                while len(pending) > (2 * self.workers if pool else 0):
                    yield self._take(*pending.popleft())
            while pending:
                yield self._take(*pending.popleft())
        finally:
            if pool is not None:
                pool.terminate()

    def _digest(self, digest: str) -> str:
        return hashlib.sha256(f"{FORMAT}\n{self.key}\n{digest}".encode()).hexdigest()[:16]

    def _take(self, task: Task, path: Path, made) -> tuple[Task, Path, dict[str, np.ndarray]]:
        if path.is_file():
            with np.load(path) as z:
                return task, path, dict(z)
        shard = made.get() if made is not None else _run(task)
        atomic_write(path, lambda f: np.savez(f, **shard), fsync=False)
        return task, path, shard

    def _merge(self, task: Task, path: Path, shard: dict[str, np.ndarray]) -> None:
        """Number a shard's words and relations into the pass's, and record it."""
        info = _info(shard)
        self._check_shape(info)
        words = np.asarray([self.vocab.add(w) for w in info["words"]], dtype=np.int64)
        rels = {t: np.asarray([self.relations[t].id(r) for r in names], dtype=np.int64)
                for t, names in info["relations"].items()}
        for name, arr in shard.items():
            if "|" not in name:
                continue
            tree, side, key = name.split("|")
            arr = self._mapped(key, arr, words, rels.get(tree))
            if arr.size:
                lo, hi = int(arr.min()), int(arr.max())
                have = self.ranges.setdefault((tree, task.split, side, key), [lo, hi])
                have[0], have[1] = min(have[0], lo), max(have[1], hi)
        self.counts[task.split] = self.counts.get(task.split, 0) + info["count"]
        self.paths.setdefault(task.split, []).append(path)
        self.left_out.update(info["left_out"])
        self.spacy = self.spacy or info["spacy"]
        tally = self.amr.get(task.split)
        self.amr[task.split] = info["amr"] if tally is None else \
            amr_data.merge_tallies(tally, info["amr"])
        self._merge_targets(task.split, info, shard)
        fh = self.texts.get(task.split)
        if fh is None:
            fh = self.texts[task.split] = open(self.cache / f"text-{task.split}", "wb")
        fh.write(np.asarray(shard["text"]).tobytes())

    @staticmethod
    def _mapped(key: str, arr: np.ndarray, words: np.ndarray,
                rels: np.ndarray | None) -> np.ndarray:
        if key == "n.word":
            return _remap(arr, words)
        if key == "e.rel" and rels is not None and len(rels):
            return _remap(arr, rels)
        return np.asarray(arr)

    def _check_shape(self, info: dict) -> None:
        shape = info["shape"]
        if not shape:
            return
        later = jsonl._RowShape(shape["pair"], (shape["first"], set(shape["keys"])))
        self.shape.merge(later)
        if self.shape.first is None:
            self.shape = later

    def _merge_targets(self, split: str, info: dict, shard: dict[str, np.ndarray]) -> None:
        if self.target_keys is None:
            self.target_keys = info["targets"]
        got = self.targets.setdefault(split, {})
        for key in info["targets"]:
            vals = np.asarray(shard[f"target.{key}"])
            if key == "label" and "labels" in info:
                table = []
                for (kind, value), where in zip(info["labels"], info["label_rows"]):
                    ident = self.labels.setdefault((kind, value), len(self.labels))
                    if ident == len(self.label_rows):
                        self.label_rows.append(where)
                    table.append(ident)
                vals = np.asarray(table, dtype=np.int64)[vals]
            got.setdefault(key, []).append(vals)

    # ------------------------------------------------------------------ the output
    def label_values(self) -> list[tuple[str, Any]]:
        """The distinct labels as written, in the order first met, each with its row."""
        return [(w, v) for (_, v), w in zip(self.labels, self.label_rows)]

    def split_targets(self, split: str, label_ids: np.ndarray | None = None
                      ) -> dict[str, np.ndarray]:
        """The graph-level targets of ``split`` as the packed files store them (JSONL
        labels mapped through ``label_ids``: first-met id -> class id)."""
        out = {}
        for key in self.target_keys or []:
            vals = np.concatenate(self.targets[split][key])
            if key == "label" and label_ids is not None:
                vals = label_ids[vals]
            out[key] = vals.astype(np.float32) if key == "score" else vals.astype(np.int64)
        return out

    def write(self, tree: str, split: str, paths: list[Path],
              targets: dict[str, np.ndarray] | None) -> None:
        """Write the packed sides of ``split`` of ``tree`` (targets in the first)."""
        for side, out in enumerate(paths):
            ranges = {k: tuple(v) for (t, s, sd, k), v in self.ranges.items()
                      if (t, s, sd) == (tree, split, str(side))}
            packed.write_packed_parts(out, self._parts(tree, split, side), dict(DTYPES),
                                      ranges, targets if side == 0 else None)

    def _parts(self, tree: str, split: str, side: int) -> Iterator[dict[str, np.ndarray]]:
        relations = self.relations[tree]
        for path in self.paths[split]:
            with np.load(path) as z:
                info = _info(z)
                words = np.asarray([self.vocab.stoi[w] for w in info["words"]],
                                   dtype=np.int64)
                rels = np.asarray([relations.ids[r] for r in info["relations"][tree]],
                                  dtype=np.int64)
                prefix = f"{tree}|{side}|"
                yield {name[len(prefix):]: self._mapped(name[len(prefix):], z[name], words,
                                                        rels)
                       for name in z.files if name.startswith(prefix)}
