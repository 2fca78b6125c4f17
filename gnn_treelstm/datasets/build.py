"""Build and cache the sentence graphs of a data set.

    gnn-treelstm build --dataset {sst,sick,trec,snli} --src RAW --out DIR
        [--force] [--check-counts] [--spacy-model NAME] [--trees T [T ...]]
    gnn-treelstm build --dataset amr --src FILE_OR_DIR [...] --out DIR [--amr-...]
    gnn-treelstm build --dataset jsonl --src FILE [FILE ...] --out DIR
        [--labels A B ...] [--score-range LO HI] [--name NAME]

``RAW`` is laid out like the data mirror (``sst/trees/``, ``sick/semeval2014/`` +
``sick/stanford_parsed/``, ``trec/``, ``snli/``), e.g. ``gnn_treelstm/sample_data``.
``--dataset amr`` reads PENMAN AMR banks (:mod:`gnn_treelstm.datasets.amr_data`: one ``amr`` tree
per graph, no targets); ``--dataset jsonl`` reads a data set of your own
(:mod:`gnn_treelstm.datasets.jsonl`: sentences or pairs with a label and/or a score, optional PTB,
CoNLL-U or AMR trees). Their ``--src`` files name their split (``train.jsonl``,
``...-dev.txt``) or are given as ``SPLIT=FILE``.
``DIR`` receives (see ``docs/design.md``)::

    meta.json                   counts, label names, relation counts, build seconds
    vocab.json                  all splits' tokens, as-is (id = index, 0 = <unk>)
    relations/<tree>.json       relation names of that tree kind
    <tree>/<split>.packed/      single-sentence data sets: packed trees
                                (gnn_treelstm.trees.packed), graph targets as target.*.npy
    <tree>/<split>.a.packed/, <split>.b.packed/  pair data sets (targets in the A side)
    text/<split>.jsonl          tokens and labels per example (evaluation, error analysis)

Sentences are parsed once (spaCy only where a tree kind needs it); a second run skips
every tree kind whose files exist unless ``--force``. Every file is written to a
temporary name and renamed, so nothing is left half written.

``--check-counts`` fails unless the known sizes hold (SST 8544/1101/2210 sentences, binary
6920/872/1821; SICK 4500/500/4927; TREC 4952/500/500 after the 500-question dev split).
The check applies to the full data only: a source whose root contains the marker file
``SAMPLE`` (the embedded sample) is recorded as ``"sample": true`` in ``meta.json`` and the
check is skipped with a warning.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import multiprocessing
import os
import platform
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dgl
import numpy as np
import torch

import gnn_treelstm
from gnn_treelstm.datasets import amr_data, dependency, jsonl
from gnn_treelstm.datasets.example import (
    FILE_DATASETS,
    Example,
    needs_spacy,
    sentence_graph,
    wants_parse,
)
from gnn_treelstm.datasets.sources import (  # noqa: F401  (re-exported: the build API names them)
    KNOWN_COUNTS,
    LABEL_NAMES,
    LOADERS,
    SAMPLE_MARKER,
    SICK_FILES,
    SPLITS,
    SST2_COUNTS,
    TREC_DEV_SEED,
    CountMismatchError,
    check_counts,
    is_sample,
    load_files,
    relations_for,
)
from gnn_treelstm.files import atomic_write
from gnn_treelstm.trees import manifest, packed
from gnn_treelstm.trees.data import split_paths
from gnn_treelstm.trees.vocab import Relations, Vocab

logger = logging.getLogger(__name__)

__all__ = [
    "DATASETS",
    "TREES",
    "SPLITS",
    "KNOWN_COUNTS",
    "SST2_COUNTS",
    "SAMPLE_MARKER",
    "CountMismatchError",
    "BuildOptions",
    "build",
    "shard_graphs",
]

DATASETS = ("sst", "sick", "trec", "snli", "amr", "jsonl")
TREES = {
    "sst": ["constituency", "dependency", "chain"],
    "sick": ["dependency", "constituency", "dependency-spacy", "constituency-spacy", "chain"],
    "trec": ["dependency", "constituency", "chain"],
    "snli": ["dependency", "constituency", "chain"],
    "amr": ["amr"],
    "jsonl": list(jsonl.TREE_KINDS),
}


def _targets(exs: list[Example]) -> dict[str, torch.Tensor] | None:
    if not exs[0].targets:
        return None  # an AMR bank: no targets
    out = {}
    for key in exs[0].targets:
        vals = [ex.targets[key] for ex in exs]
        dtype = torch.float32 if key == "score" else torch.int64
        out[key] = torch.tensor(vals, dtype=dtype)
    return out


def graph_files(out: Path, tree: str, split: str, pair: bool) -> list[Path]:
    """The packed directories of a split (:func:`gnn_treelstm.trees.data.split_paths`)."""
    return split_paths(out, tree, split, pair)


def _versions(nlp=None) -> dict:
    info = {"gnn_treelstm": gnn_treelstm.__version__, "dgl": dgl.__version__,
            "torch": torch.__version__, "python": platform.python_version()}
    if nlp is not None:
        info.update(dependency.pipeline_info(nlp))
    return info


@dataclass
class BuildOptions:
    """How :func:`build` builds (the command's flags)."""

    force: bool = False
    check: bool = False
    spacy_model: str | None = None
    trees: Sequence[str] | None = None
    batch_size: int = 512
    progress: bool | Callable = False
    workers: int = 1
    name: str | None = None
    labels: Sequence[str] | None = None
    score_range: Sequence[float] | None = None
    amr_options: dict | None = None


def build(dataset: str, src: str | os.PathLike | Sequence[str | os.PathLike],
          out: str | os.PathLike, options: BuildOptions | None = None, **flags: Any) -> dict:
    """Build (or complete) the cached graphs of ``dataset`` and return the meta dict.

    ``src``: the data mirror root, or for ``amr``/``jsonl`` the files (or directories)
    of the data set, one path or several. ``options`` (or the same names as keywords,
    ``flags``, which override them): :class:`BuildOptions`. ``jsonl`` only: ``name``
    (``meta.json``'s ``dataset``, default ``jsonl``; ``sick`` makes a SICK-like pair set
    usable by the ``sick-e``/``sick-r`` tasks), ``labels`` (class order), ``score_range``
    (``[LO, HI]``). ``amr_options``: :data:`gnn_treelstm.datasets.amr_data.AMR_OPTIONS` for AMR
    trees.

    ``workers``: spaCy parser processes, and processes building the trees in shards of
    :data:`PACK_SHARD` examples; the files are byte-identical for any number. spaCy's
    parses and the packed shards are kept (:func:`parse_sharded`, :data:`PACK_DIR`) until
    the build completes, so a killed build resumes without redoing the finished shards.

    A build that fails (bad input) into a directory it created removes that directory, so
    no half-built data set is left behind (an existing directory being completed keeps
    what it had); an interrupted one (Ctrl-C, a kill) keeps its shards for the rerun.

    Raises:
        ValueError: unknown data set or tree kind; malformed input (errors name file and
            line); :class:`CountMismatchError` when ``check`` and the counts differ.
    """
    opts = dataclasses.replace(options or BuildOptions(), **flags)
    out = Path(out)
    created = not out.exists()
    try:
        return _build(dataset, src, out, opts)
    except Exception:  # not on Ctrl-C / a kill: the finished shards are kept
        if created and out.exists():
            shutil.rmtree(out, ignore_errors=True)
            logger.info("removed the partly built %s", out)
        raise


#: where a build keeps its finished parse shards until it completes
SHARD_DIR = ".parse-shards"
#: sentences per parse shard: a killed build loses at most one shard of spaCy's work
SHARD_SIZE = 2000


def parse_sharded(nlp, sentences: Sequence[Sequence[str]], cache: Path, *,
                  batch_size: int = 512, progress: bool | Callable = False,
                  desc: str | None = None, workers: int = 1,
                  shard_size: int | None = None) -> list[dependency.DepParse]:
    """:func:`dependency.parse_tokenized` in shards of ``shard_size`` sentences, each
    written to ``cache`` (JSON, atomically) as it finishes; a rerun after a kill loads the
    finished shards instead of parsing them again. The shard names carry a hash of the
    pipeline and of all the sentences, so a shard is never reused for other input."""
    import hashlib
    from dataclasses import asdict

    key = hashlib.sha256(json.dumps([nlp.meta.get("name"), nlp.meta.get("version"),
                                     [list(s) for s in sentences]]).encode()).hexdigest()[:12]
    out: list[dependency.DepParse] = []
    shard_size = shard_size or SHARD_SIZE
    chunks = [sentences[i:i + shard_size] for i in range(0, len(sentences), shard_size)]
    for k, chunk in enumerate(chunks):
        path = cache / f"{key}-{k:04d}.json"
        if path.is_file():
            got = [dependency.DepParse(**d) for d in json.loads(path.read_text("utf-8"))]
            if [p.tokens for p in got] == [list(s) for s in chunk]:
                logger.info("parse shard %d/%d: reused %s", k + 1, len(chunks), path)
                out += got
                continue
        got = dependency.parse_tokenized(
            nlp, chunk, batch_size=batch_size, progress=progress, workers=workers,
            desc=f"{desc} {k + 1}/{len(chunks)}" if desc and len(chunks) > 1 else desc)
        atomic_write(path, json.dumps([asdict(p) for p in got]), fsync=False)
        out += got
    return out


def _read(dataset: str, src: str | os.PathLike | Sequence[str | os.PathLike],
          opts: BuildOptions) -> tuple[Path, dict, dict, float]:
    """The examples per split, the file data set's info and the reading seconds."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}")
    bad = [t for t in opts.trees or () if t not in TREES[dataset]]
    if bad:
        raise ValueError(f"{dataset} has no tree kind {bad}; choose from {TREES[dataset]}")
    srcs = [Path(p) for p in ([src] if isinstance(src, (str, os.PathLike)) else src)]
    if dataset not in FILE_DATASETS and len(srcs) != 1:
        raise ValueError(f"--dataset {dataset} reads one data root, got --src "
                         f"{' '.join(map(str, srcs))}")
    t0 = time.perf_counter()
    info: dict = {}
    if dataset in FILE_DATASETS:
        extra = {"name": opts.name, "labels": opts.labels, "score_range": opts.score_range,
                 "amr_options": opts.amr_options}
        data, info = load_files(dataset, srcs, extra)
    else:
        data = LOADERS[dataset](srcs[0])
    t_read = time.perf_counter() - t0
    logger.info("%s: read %s from %s in %.1fs", dataset, {s: len(v) for s, v in data.items()},
                srcs[0], t_read)
    if info.get("files"):  # meta.json names them resolved: the same files from any folder
        info["files"] = {s: [str(Path(p).resolve()) for p in ps]
                         for s, ps in info["files"].items()}
    sample = is_sample(srcs[0]) if dataset not in FILE_DATASETS else False
    if opts.check:
        if sample:
            logger.warning("%s is the embedded sample (it holds %s): skipping --check-counts",
                           srcs[0], SAMPLE_MARKER)
        else:
            check_counts(dataset, data)
    return srcs[0], data, {**info, "sample": sample}, t_read


def _old_meta(out: Path, force: bool) -> dict:
    if (out / "meta.json").exists() and not force:
        try:
            return json.loads((out / "meta.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return {}
    return {}


def _vocab_and_text(out: Path, data: dict, info: dict, old_meta: dict,
                    force: bool) -> tuple[Vocab, bool]:
    """The vocabulary (written when it changed) and whether everything built is stale;
    the text files written where missing or stale."""
    vocab = Vocab()
    for split in data:
        for ex in data[split]:
            for s in ex.words():
                vocab.update(s)
    vocab_path = out / "vocab.json"
    counts = {s: len(v) for s, v in data.items()}
    stale = force or not vocab_path.exists() or Vocab.load(vocab_path) != vocab \
        or old_meta.get("splits") != counts or old_meta.get("sample") != info["sample"]
    if stale and vocab_path.exists() and not force:
        logger.info("%s: the source changed since the last build; rebuilding everything", out)
    keys = ("label_names", "score_range", "amr_options")
    if "files" in info and old_meta and (
            {k: old_meta.get(k) for k in keys} != {k: info.get(k) for k in keys}
            or old_meta.get("src") != info["files"]):
        stale = True  # other classes, scores, AMR options or files: the old graphs differ
    if stale:
        vocab.save(vocab_path)
    for split in data:
        path = out / "text" / f"{split}.jsonl"
        if stale or not path.exists():
            atomic_write(path, "".join(json.dumps(ex.text, ensure_ascii=False) + "\n"
                                      for ex in data[split]))
    return vocab, stale


def _spacy_parses(dataset: str, data: dict, todo: list[str], out: Path,
                  opts: BuildOptions) -> tuple[Any, dict, float]:
    """spaCy's parse of every unique sentence a tree kind of ``todo`` needs (none if no
    kind needs one): the pipeline, the parses and the seconds."""
    if not any(needs_spacy(dataset, t, data) for t in todo):
        return None, {}, 0.0
    t0 = time.perf_counter()
    nlp = dependency.load_pipeline(opts.spacy_model)
    unique = list(dict.fromkeys(
        tuple(s) for split in data for ex in data[split] for side, s in
        enumerate(ex.sents) if not ex.sources or wants_parse(ex.sources[side], todo)))
    got = parse_sharded(nlp, unique, out / SHARD_DIR, batch_size=opts.batch_size,
                        progress=opts.progress, desc=f"spaCy {dataset}", workers=opts.workers)
    seconds = time.perf_counter() - t0
    logger.info("%s: parsed %d unique sentences with spaCy in %.1fs", dataset, len(unique),
                seconds)
    return nlp, dict(zip(unique, got)), seconds


def _build(dataset: str, src: str | os.PathLike | Sequence[str | os.PathLike], out: Path,
           opts: BuildOptions) -> dict:
    t_start = time.perf_counter()
    old_meta = _old_meta(out, opts.force)
    src, data, info, t_read = _read(dataset, src, opts)
    pair = info.get("pair", dataset in ("sick", "snli"))
    all_trees = TREES[dataset]
    trees = list(opts.trees) if opts.trees else list(info.get("default_trees", all_trees))
    splits = list(data)
    vocab, stale = _vocab_and_text(out, data, info, old_meta, opts.force)
    if stale:
        old_meta = {}

    def done(tree: str) -> bool:
        files = [f for s in splits for f in graph_files(out, tree, s, pair)]
        return (tree in old_meta.get("trees", [])
                and (out / "relations" / f"{tree}.json").exists()
                and all(packed.packed_exists(f) for f in files))

    todo = [t for t in trees if not done(t)]
    seconds = dict(old_meta.get("build_seconds", {}))
    seconds["read"] = round(t_read, 2)
    nlp, parses, t_parse = _spacy_parses(dataset, data, todo, out, opts)
    if nlp is not None:
        seconds["spacy_parse"] = round(t_parse, 2)
    num_relations = dict(old_meta.get("num_relations", {}))
    for tree in trees:
        if tree not in todo:
            logger.info("%s/%s: already built, skipping (use --force to rebuild)", out, tree)
            continue
        t0 = time.perf_counter()
        job = _TreeJob(tree, data, parses if needs_spacy(dataset, tree, data) else None,
                       relations_for(tree, dataset, src), vocab, pair)
        for split in splits:
            _build_split(out, job, split, opts)
        job.relations.save(out / "relations" / f"{tree}.json")
        num_relations[tree] = len(job.relations)
        seconds[tree] = round(time.perf_counter() - t0, 2)
        count = len(job.relations)
        logger.info("%s/%s: built in %.1fs (%d relation%s)", out, tree, seconds[tree],
                    count, "" if count == 1 else "s")
    built_trees = [t for t in all_trees if t in trees or t in old_meta.get("trees", [])]
    seconds["total_last_run"] = round(time.perf_counter() - t_start, 2)
    meta = _meta(dataset, data, info, built_trees, num_relations, opts)
    meta.update(vocab_size=len(vocab), src=str(Path(src).resolve()), build_seconds=seconds,
                counts_checked=bool(opts.check and not info["sample"])
                or old_meta.get("counts_checked", False),
                built_with=old_meta.get("built_with", {}) if nlp is None and old_meta
                else _versions(nlp))
    if info.get("files"):
        meta["src"] = info["files"]
    return _finish_build(out, meta)


def _finish_build(out: Path, meta: dict) -> dict:
    """The build's last step: write ``meta.json`` (atomically; its presence marks a
    complete build) and drop the kept parse and pack shards. Returns ``meta``."""
    atomic_write(out / "meta.json", json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    meta = manifest.seal(out, meta)  # build id, sizes and digests: checked on load
    shutil.rmtree(out / SHARD_DIR, ignore_errors=True)  # the build is complete
    shutil.rmtree(out / PACK_DIR, ignore_errors=True)
    return meta


def _meta(dataset: str, data: dict, info: dict, built_trees: list[str],
          num_relations: dict, opts: BuildOptions) -> dict:
    """``meta.json`` less the build's own record (vocabulary size, source, seconds)."""
    counts = {s: len(v) for s, v in data.items()}
    meta = {
        "dataset": info.get("name") or dataset,
        "pair": info.get("pair", dataset in ("sick", "snli")),
        "trees": built_trees,
        "splits": counts,
        "label_names": info["label_names"] if "files" in info else LABEL_NAMES[dataset],
        "targets": list(next(iter(data.values()))[0].targets),
        "num_relations": {t: num_relations[t] for t in built_trees if t in num_relations},
        "vocab_size": 0,
        "sample": info["sample"],
    }
    if dataset == "sst":
        meta["sst2_splits"] = {s: sum(ex.targets["label"] != 2 for ex in data[s])
                               for s in data}
    if dataset == "trec":
        meta["dev_split"] = {"from": "train_5500.label", "seed": TREC_DEV_SEED,
                             "size": counts["dev"]}
    if "files" in info:
        meta["source_format"] = dataset
        for key in ("score_range", "amr_options"):
            if key in info:
                meta[key] = info[key]
        if "amr_options" in info:
            meta["amr"] = amr_data.amr_stats(data)
    return meta


# ----------------------------------------------------------------------------- trees
#: examples per packed shard: the unit of the parallel build and of resuming it
PACK_SHARD = 4096
#: where a build keeps its finished packed shards until it completes
PACK_DIR = ".pack-shards"


@dataclass
class _TreeJob:
    """What building the trees of one kind reads (forked workers inherit it)."""

    tree: str
    data: dict[str, list[Example]]
    parses: dict | None
    relations: Relations
    vocab: Vocab
    pair: bool


_JOB: _TreeJob | None = None  # the job of the worker processes (set before they fork)


def shard_graphs(job: _TreeJob, split: str, lo: int, hi: int,
                 relations: Relations) -> list[list[dgl.DGLGraph]]:
    """The graphs of examples ``lo:hi`` of ``split``, per side, relation ids from
    ``relations`` (grown with the names met)."""
    sides: list[list[dgl.DGLGraph]] = [[] for _ in range(2 if job.pair else 1)]
    for ex in job.data[split][lo:hi]:
        for side, sent in enumerate(ex.sents):
            parse = job.parses.get(tuple(sent)) if job.parses is not None else None
            sides[side].append(sentence_graph(job.tree, ex, side, job.vocab.lookup(sent),
                                              relations, parse, job.vocab))
    return sides


def _pack_shard(task: tuple[str, int, int]) -> dict[str, np.ndarray]:
    """One shard packed: its sides' arrays (``<side>:<key>``), their dtypes and the
    relation names it met, its relation ids numbered from the job's relations."""
    assert _JOB is not None
    split, lo, hi = task
    relations = Relations(list(_JOB.relations.names))
    out: dict[str, np.ndarray] = {}
    for side, graphs in enumerate(shard_graphs(_JOB, split, lo, hi, relations)):
        arrays, dtypes = packed.pack_graphs(graphs)
        out.update({f"{side}:{k}": v for k, v in arrays.items()})
        out[f"{side}:dtypes"] = np.array(json.dumps(dtypes))
    out["relations"] = np.array(json.dumps(relations.names))
    return out


def _shard_key(job: _TreeJob, split: str) -> str:
    """A name for the shards of ``split`` that changes with its input."""
    digest = hashlib.sha256(json.dumps([job.tree, split, PACK_SHARD, job.relations.names,
                                        list(job.vocab.itos)]).encode())
    for ex in job.data[split]:
        digest.update(json.dumps(ex.text, ensure_ascii=False, sort_keys=True).encode())
    return f"{job.tree}-{split}-{digest.hexdigest()[:12]}"


def _shards(out: Path, job: _TreeJob, split: str, opts: BuildOptions
            ) -> Iterator[dict[str, np.ndarray]]:
    """The packed shards of ``split`` in order: reused from an interrupted build, else
    built (by ``opts.workers`` processes) and kept until the build completes."""
    global _JOB
    n = len(job.data[split])
    tasks = [(split, lo, min(lo + PACK_SHARD, n)) for lo in range(0, n, PACK_SHARD)]
    cache = out / PACK_DIR / _shard_key(job, split)
    paths = [cache / f"{k:05d}.npz" for k in range(len(tasks))]
    todo = [t for t, p in zip(tasks, paths) if not p.is_file()]
    _JOB = job
    pool = None
    if opts.workers > 1 and len(todo) > 1:
        pool = multiprocessing.get_context("fork").Pool(opts.workers)
    try:
        made = pool.imap(_pack_shard, todo) if pool else map(_pack_shard, todo)
        bar = _progress(range(len(tasks)), opts.progress, f"{job.tree} {split}")
        for _, path in zip(bar, paths):
            if path.is_file():
                with np.load(path) as z:
                    yield dict(z)
                continue
            shard = next(made)
            atomic_write(path, lambda f, s=shard: np.savez(f, **s), fsync=False)
            yield shard
    finally:
        _JOB = None
        if pool is not None:
            pool.terminate()


def _progress(it: Sequence, progress: bool | Callable, desc: str) -> Iterable:
    if callable(progress):
        return progress(it, total=len(it), desc=desc)
    if progress:
        from tqdm import tqdm

        return tqdm(it, desc=desc, unit="shard")
    return it


def _build_split(out: Path, job: _TreeJob, split: str, opts: BuildOptions) -> None:
    """Pack the trees of one split shard by shard and write them (the relation ids of
    every shard renumbered into ``job.relations`` in shard order, so any number of
    workers writes the same files as one)."""
    parts: list[list[tuple[dict, dict]]] = [[] for _ in range(2 if job.pair else 1)]
    for shard in _shards(out, job, split, opts):
        names = json.loads(str(shard["relations"]))
        table = np.array([job.relations.id(r) for r in names], dtype=np.int64)
        for side, side_parts in enumerate(parts):
            arrays = {k.split(":", 1)[1]: v for k, v in shard.items()
                      if k.startswith(f"{side}:") and not k.endswith(":dtypes")}
            if "e.rel" in arrays and len(arrays["e.rel"]):
                arrays["e.rel"] = table[arrays["e.rel"]]
            side_parts.append((arrays, json.loads(str(shard[f"{side}:dtypes"]))))
    files = graph_files(out, job.tree, split, job.pair)
    for side, side_parts in enumerate(parts):
        arrays, dtypes = packed.concat_packed(side_parts)
        targets = _targets(job.data[split]) if side == 0 else None
        packed.write_packed(files[side], arrays, dtypes, targets)
