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

The build is one pass over the examples in shards (:mod:`gnn_treelstm.datasets.shards`):
each tree goes straight from its parse to the packed arrays (parent vector, child
positions, relation ids, node fields: :mod:`gnn_treelstm.datasets.arrays`, no
``DGLGraph``), JSONL rows are read one shard at a time, and each split is written to disk
shard after shard, so the memory a build takes does not grow with the corpus (the
benchmarks and AMR banks are read into memory first: they are small). Word and relation
ids are numbered as first met over the splits in order. Sentences are parsed once (spaCy
only where a tree kind needs it); a second run skips every tree kind whose files exist
unless ``--force``. Every file is written to a temporary name and renamed, so nothing is
left half written.

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
from gnn_treelstm.datasets import amr_data, dependency, jsonl, shards
from gnn_treelstm.datasets.example import FILE_DATASETS, Example, needs_spacy, wants_parse
from gnn_treelstm.datasets.shards import shard_arrays
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
from gnn_treelstm.trees.vocab import Vocab

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
    "shard_arrays",
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

    ``workers``: spaCy parser processes, and processes building the trees (every kind at
    once, JSONL rows read and checked there too) in shards of :data:`PACK_SHARD` examples;
    the files are byte-identical for any number. spaCy's parses and the packed shards are
    kept (:func:`parse_sharded`, :data:`PACK_DIR`) until the build completes, so a killed
    build resumes without redoing the finished shards.

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


@dataclass
class _Source:
    """A data set to build: its splits, what ``meta.json`` records of it, and where its
    examples come from (read into memory, or JSONL files read row by row)."""

    root: Path
    splits: list[str]
    info: dict
    data: dict[str, list[Example]] | None = None
    files: dict[str, list[Path]] | None = None


def _source(dataset: str, src: str | os.PathLike | Sequence[str | os.PathLike],
            opts: BuildOptions) -> tuple[_Source, float]:
    """The data set to build (the benchmarks and AMR banks read into memory, JSONL
    files only named) and the reading seconds."""
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
    if dataset == "jsonl":
        files = jsonl.jsonl_files(srcs)
        jsonl.RowReader(opts.labels, opts.score_range)  # the options checked up front
        if opts.check:
            logger.warning("no known counts for %s; --check-counts checks nothing", dataset)
        info = {"files": {s: [str(Path(p).resolve()) for p in ps] for s, ps in files.items()},
                "name": opts.name, "sample": False}
        return _Source(srcs[0], list(files), info, files=files), 0.0
    info: dict = {}
    if dataset in FILE_DATASETS:
        extra = {"amr_options": opts.amr_options}
        data, info = load_files(dataset, srcs, extra)
        info["files"] = {s: [str(Path(p).resolve()) for p in ps]
                         for s, ps in info["files"].items()}
    else:
        data = LOADERS[dataset](srcs[0])
        info["pair"] = dataset in ("sick", "snli")
    t_read = time.perf_counter() - t0
    logger.info("%s: read %s from %s in %.1fs", dataset, {s: len(v) for s, v in data.items()},
                srcs[0], t_read)
    sample = is_sample(srcs[0]) if dataset not in FILE_DATASETS else False
    if opts.check:
        if sample:
            logger.warning("%s is the embedded sample (it holds %s): skipping --check-counts",
                           srcs[0], SAMPLE_MARKER)
        else:
            check_counts(dataset, data)
    return _Source(srcs[0], list(data), {**info, "sample": sample}, data=data), t_read


def _old_meta(out: Path, force: bool) -> dict:
    if (out / "meta.json").exists() and not force:
        try:
            return json.loads((out / "meta.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return {}
    return {}


def _stale(out: Path, vocab: Vocab, counts: dict, info: dict, old_meta: dict,
           force: bool) -> bool:
    """Whether everything built before is stale (another vocabulary, counts, classes,
    scores, AMR options or files); the vocabulary written when it is."""
    vocab_path = out / "vocab.json"
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
    return stale


def _spacy_parses(dataset: str, data: dict | None, todo: list[str], out: Path,
                  opts: BuildOptions) -> tuple[Any, dict | None, float]:
    """spaCy's parse of every unique sentence a tree kind of ``todo`` needs, for data read
    into memory (JSONL rows are parsed in their shards): the pipeline, the parses (None
    if no kind needs one) and the seconds."""
    if data is None or not any(needs_spacy(dataset, t, data) for t in todo):
        return None, None, 0.0
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


def _trees(dataset: str, source: _Source, opts: BuildOptions) -> tuple[list[str], tuple]:
    """The tree kinds to build, and those built only where every sentence has one (a
    JSONL data set's AMR trees when no kinds are named)."""
    if opts.trees:
        return list(opts.trees), ()
    if dataset == "jsonl":
        return list(jsonl.TREE_KINDS), ("amr",)
    return list(source.info.get("default_trees", TREES[dataset])), ()


def _build(dataset: str, src: str | os.PathLike | Sequence[str | os.PathLike], out: Path,
           opts: BuildOptions) -> dict:
    t_start = time.perf_counter()
    old_meta = _old_meta(out, opts.force)
    source, t_read = _source(dataset, src, opts)
    trees, optional = _trees(dataset, source, opts)
    pair = source.info.get("pair", old_meta.get("pair", dataset in ("sick", "snli")))

    def done(tree: str) -> bool:
        files = [f for s in source.splits for f in graph_files(out, tree, s, pair)]
        return (tree in old_meta.get("trees", [])
                and (out / "relations" / f"{tree}.json").exists()
                and all(packed.packed_exists(f) for f in files))

    todo = [t for t in trees if not done(t)]
    seconds = {**old_meta.get("build_seconds", {}), "read": round(t_read, 2)}
    passes = [_run_pass(dataset, source, todo, optional, out, opts, seconds)]
    run = passes[0]
    info = _file_info(dataset, source, run, opts)
    stale = _stale(out, run.vocab, run.counts, info, old_meta, opts.force)
    redo = [t for t in trees if t not in todo]
    if stale and old_meta:
        if redo:  # built from another source: build them again
            passes.append(_run_pass(dataset, source, redo, optional, out, opts, seconds))
        old_meta = {}
    else:
        for tree in redo:
            logger.info("%s/%s: already built, skipping (use --force to rebuild)", out, tree)
    _write_text(out, run, info, stale)
    built = [t for t in trees if t not in run.left_out]
    num_relations = dict(old_meta.get("num_relations", {}))
    for p in passes:
        num_relations.update(_write_trees(out, p, info, seconds))
    all_trees = TREES[dataset]
    built_trees = [t for t in all_trees if t in built or t in old_meta.get("trees", [])]
    seconds["total_last_run"] = round(time.perf_counter() - t_start, 2)
    meta = _meta(dataset, run, info, built_trees, num_relations)
    nlp = next((p.nlp for p in passes if p.nlp is not None), None)
    meta.update(vocab_size=len(run.vocab), src=str(Path(source.root).resolve()),
                build_seconds=seconds,
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


def _meta(dataset: str, run: shards.Pass, info: dict, built_trees: list[str],
          num_relations: dict) -> dict:
    """``meta.json`` less the build's own record (vocabulary size, source, seconds)."""
    counts = dict(run.counts)
    meta = {
        "dataset": info.get("name") or dataset,
        "pair": info.get("pair", dataset in ("sick", "snli")),
        "trees": built_trees,
        "splits": counts,
        "label_names": info["label_names"] if "files" in info else LABEL_NAMES[dataset],
        "targets": list(run.target_keys or []),
        "num_relations": {t: num_relations[t] for t in built_trees if t in num_relations},
        "vocab_size": 0,
        "sample": info["sample"],
    }
    if dataset == "sst":
        meta["sst2_splits"] = {s: int((run.split_targets(s)["label"] != 2).sum())
                               for s in counts}
    if dataset == "trec":
        meta["dev_split"] = {"from": "train_5500.label", "seed": TREC_DEV_SEED,
                             "size": counts["dev"]}
    if "files" in info:
        meta["source_format"] = dataset
        for key in ("score_range", "amr_options"):
            if key in info:
                meta[key] = info[key]
        if "amr_options" in info:
            meta["amr"] = {s: amr_data.tally_stats(run.amr[s]) for s in counts}
    return meta


# ----------------------------------------------------------------------------- trees
#: examples per packed shard: the unit of the parallel build and of resuming it
PACK_SHARD = 4096
#: where a build keeps its finished packed shards until it completes
PACK_DIR = ".pack-shards"


def _tasks(source: _Source) -> Iterator[tuple[shards.Task, str]]:
    """The shards of every split in order, each with a digest of its input."""
    size = PACK_SHARD
    if source.data is not None:
        for split, exs in source.data.items():
            for k, lo in enumerate(range(0, len(exs), size)):
                hi = min(lo + size, len(exs))
                text = json.dumps([[ex.text, _parse_of(ex)] for ex in exs[lo:hi]],
                                  ensure_ascii=False, sort_keys=True)
                yield shards.Task(split, k, lo, (lo, hi)), _digest(split, lo, text)
        return
    assert source.files is not None
    rows: list[tuple[str, str]] = []
    split, k, start = None, 0, 0
    for row_split, where, line in jsonl.iter_lines(source.files):
        if rows and (row_split != split or len(rows) == size):
            yield shards.Task(split, k, start, rows), _digest(split, start, rows)
            k, start = (k + 1, start + len(rows)) if row_split == split else (0, 0)
            rows = []
        split = row_split
        rows.append((where, line))
    if rows:
        yield shards.Task(split, k, start, rows), _digest(split, start, rows)


def _parse_of(ex: Example) -> list:
    """The trees an example read into memory came with (a shard's digest holds them)."""
    out: list = [[ex.ptb.parents, ex.ptb.labels] if ex.ptb is not None else None]
    out += [[s.heads, s.rels, s.cparents] for s in ex.stanford]
    out += [[s.amr.parents, s.amr.roles, s.amr_words] for s in ex.sources if s.amr is not None]
    return out


def _digest(split: str | None, start: int, content: Any) -> str:
    lines = content if isinstance(content, str) else "\n".join(line for _, line in content)
    return hashlib.sha256(f"{split}\n{start}\n{lines}".encode("utf-8", "surrogatepass")
                          ).hexdigest()


def _run_pass(dataset: str, source: _Source, trees: list[str], optional: tuple, out: Path,
              opts: BuildOptions, seconds: dict) -> shards.Pass:
    """One pass over the data set building ``trees`` (see :mod:`.shards`)."""
    nlp, parses, t_parse = _spacy_parses(dataset, source.data, trees, out, opts)
    if nlp is not None:
        seconds["spacy_parse"] = round(t_parse, 2)
    reader = None
    if source.files is not None:
        reader = jsonl.RowReader(opts.labels, opts.score_range,
                                 amr_data.amr_options(opts.amr_options))
    job = shards.Job(trees, data=source.data, parses=parses, reader=reader,
                     optional=tuple(t for t in optional if t in trees),
                     spacy_model=opts.spacy_model, batch_size=opts.batch_size,
                     make=shard_arrays)
    key = json.dumps([dataset, trees, job.optional, opts.labels, opts.score_range,
                      opts.amr_options, opts.spacy_model], default=list)
    relations = {t: relations_for(t, dataset, source.root) for t in trees}
    run = shards.Pass(job, out / PACK_DIR, key, relations, workers=opts.workers)
    t0 = time.perf_counter()
    run.run(_progress(_tasks(source), opts.progress, f"{dataset} shards"))
    seconds["shards"] = round(time.perf_counter() - t0, 2)
    empty = [s for s in source.splits if not run.counts.get(s)]
    if empty:
        where = source.files or {}
        raise ValueError(f"split {empty[0]!r} has no examples "
                         f"({' '.join(map(str, where.get(empty[0], [])))}); give it rows "
                         "or leave its files out")
    if nlp is None and run.spacy:  # JSONL rows parsed in their shards
        nlp = dependency.load_pipeline(opts.spacy_model)
    run.nlp = nlp
    return run


def _progress(it: Iterable, progress: bool | Callable, desc: str) -> Iterable:
    if callable(progress):
        return progress(it, total=None, desc=desc)
    if progress:
        from tqdm import tqdm

        return tqdm(it, desc=desc, unit="shard")
    return it


def _file_info(dataset: str, source: _Source, run: shards.Pass, opts: BuildOptions) -> dict:
    """What ``meta.json`` records of a JSONL data set once its rows were read (the shape
    of its rows, class names, score range, AMR options); the class id of each label
    set in ``run.label_ids``. Other data sets: their info as read."""
    info = dict(source.info)
    if dataset != "jsonl":
        return info
    keys = run.target_keys or []
    info["pair"] = bool(run.shape.pair)
    info["label_names"] = None
    if "label" in keys:
        values = run.label_values()
        names = jsonl.class_names(values, opts.labels)
        info["label_names"] = names
        run.label_ids = np.asarray([names.index(str(v)) for _, v in values], dtype=np.int64)
    if "score" in keys:
        scores = np.concatenate([np.concatenate(t["score"]) for t in run.targets.values()])
        info["score_range"] = jsonl.score_bounds(float(scores.min()), float(scores.max()),
                                                 opts.score_range)
    if any(t["counts"].get("graphs") for t in run.amr.values()):
        info["amr_options"] = amr_data.amr_options(opts.amr_options)
    return info


def _write_text(out: Path, run: shards.Pass, info: dict, stale: bool) -> None:
    """``text/<split>.jsonl`` where stale or missing: the shards' lines (JSONL: each
    completed with its targets)."""
    for split in run.counts:
        path = out / "text" / f"{split}.jsonl"
        if not (stale or not path.exists()):
            continue
        spill = run.cache / f"text-{split}"
        if run.job.reader is None:
            atomic_write(path, lambda f, src=spill: shutil.copyfileobj(open(src, "rb"), f))
            continue
        targets = run.split_targets(split, run.label_ids)
        raw = {k: np.concatenate(run.targets[split][k]) for k in targets}

        def write(f, spill=spill, targets=targets, raw=raw) -> None:
            with open(spill, encoding="utf-8") as lines:
                for i, head in enumerate(lines):
                    tail = "".join(
                        f', "{k}": ' + json.dumps(float(raw[k][i]) if k == "score"
                                                  else int(v[i]))
                        for k, v in targets.items())
                    f.write((head[:-1] + tail + "}\n").encode("utf-8"))

        atomic_write(path, write)


def _write_trees(out: Path, run: shards.Pass, info: dict, seconds: dict) -> dict[str, int]:
    """Write every split of every tree kind ``run`` built, and its relations; the
    relation count of each."""
    counts = {}
    pair = info.get("pair", False)
    for tree in run.job.trees:
        if tree in run.left_out:
            continue
        t0 = time.perf_counter()
        for split in run.counts:
            targets = run.split_targets(split, run.label_ids)
            run.write(tree, split, graph_files(out, tree, split, pair), targets or None)
        run.relations[tree].save(out / "relations" / f"{tree}.json")
        counts[tree] = len(run.relations[tree])
        seconds[tree] = round(time.perf_counter() - t0, 2)
        logger.info("%s/%s: built in %.1fs (%d relation%s)", out, tree, seconds[tree],
                    counts[tree], "" if counts[tree] == 1 else "s")
    return counts
