"""Build and cache the sentence graphs of a data set.

    python -m data_prep.build --dataset {sst,sick,trec,snli} --src RAW --out DIR
        [--force] [--check-counts] [--spacy-model NAME] [--trees T [T ...]]
    python -m data_prep.build --dataset amr --src FILE_OR_DIR [...] --out DIR [--amr-...]
    python -m data_prep.build --dataset jsonl --src FILE [FILE ...] --out DIR
        [--labels A B ...] [--score-range LO HI] [--name NAME]

``RAW`` is laid out like the data mirror (``sst/trees/``, ``sick/semeval2014/`` +
``sick/stanford_parsed/``, ``trec/``, ``snli/``), e.g. ``gnn_treelstm/sample_data``.
``--dataset amr`` reads PENMAN AMR banks (:mod:`data_prep.amr_data`: one ``amr`` tree per
graph, no targets); ``--dataset jsonl`` reads a data set of your own
(:mod:`data_prep.jsonl`: sentences or pairs with a label and/or a score, optional PTB,
CoNLL-U or AMR trees). Their ``--src`` files name their split (``train.jsonl``,
``...-dev.txt``) or are given as ``SPLIT=FILE``.
``DIR`` receives (see ``docs/design.md``)::

    meta.json                   counts, label names, relation counts, build seconds
    vocab.json                  all splits' tokens, as-is (id = index, 0 = <unk>)
    relations/<tree>.json       relation names of that tree kind
    <tree>/<split>.bin          single-sentence data sets (graph targets in the labels)
    <tree>/<split>.a.bin, .b.bin  pair data sets (targets in the .a.bin labels)
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

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import dgl
import torch

import gnn_treelstm
from data_prep import amr_data, dependency, jsonl
from data_prep.example import FILE_DATASETS, Example, needs_spacy, sentence_graph, wants_parse
from data_prep.sources import (  # noqa: F401  (re-exported: the build API names them)
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
from gnn_treelstm.argtypes import finite_float, positive_int
from gnn_treelstm.files import atomic_write
from gnn_treelstm.trees import packed
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
    "build",
    "build_parser",
    "main",
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

# ----------------------------------------------------------------------------- writing
def _write_text(path: Path, text: str) -> None:
    atomic_write(path, text)


def _save_graphs(path: Path, graphs: list[dgl.DGLGraph],
                 labels: dict[str, torch.Tensor] | None) -> None:
    arrays, dtypes = packed.pack_graphs(graphs)
    packed.write_packed(path, arrays, dtypes, labels)


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


def build(
    dataset: str,
    src: str | os.PathLike | Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    force: bool = False,
    check: bool = False,
    spacy_model: str | None = None,
    trees: Sequence[str] | None = None,
    batch_size: int = 512,
    progress: bool | Callable = False,
    workers: int = 1,
    name: str | None = None,
    labels: Sequence[str] | None = None,
    score_range: Sequence[float] | None = None,
    amr_options: dict | None = None,
) -> dict:
    """Build (or complete) the cached graphs of ``dataset`` and return the meta dict.

    ``src``: the data mirror root, or for ``amr``/``jsonl`` the files (or directories)
    of the data set, one path or several. ``jsonl`` only: ``name`` (``meta.json``'s
    ``dataset``, default ``jsonl``; ``sick`` makes a SICK-like pair set usable by the
    ``sick-e``/``sick-r`` tasks), ``labels`` (class order), ``score_range``
    (``[LO, HI]``). ``amr_options``: :data:`data_prep.amr_data.AMR_OPTIONS` for AMR trees.

    ``workers``: spaCy parser processes; the graphs are byte-identical for any number.
    spaCy's parses are kept in shards (:func:`parse_sharded`) until the build completes,
    so a killed build resumes without parsing the finished shards again.

    A build that fails (bad input) into a directory it created removes that directory, so
    no half-built data set is left behind (an existing directory being completed keeps
    what it had); an interrupted one (Ctrl-C, a kill) keeps its parse shards for the rerun.

    Raises:
        ValueError: unknown data set or tree kind; malformed input (errors name file and
            line); :class:`CountMismatchError` when ``check`` and the counts differ.
    """
    out = Path(out)
    created = not out.exists()
    try:
        return _build(dataset, src, out, force=force, check=check, spacy_model=spacy_model,
                      trees=trees, batch_size=batch_size, progress=progress, workers=workers,
                      extra={"name": name, "labels": labels, "score_range": score_range,
                             "amr_options": amr_options})
    except Exception:  # not on Ctrl-C / a kill: the finished parse shards are kept
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


def _build(dataset: str, src: str | os.PathLike | Sequence[str | os.PathLike], out: Path, *,
           force: bool, check: bool, spacy_model: str | None, trees: Sequence[str] | None,
           batch_size: int, progress: bool | Callable, workers: int = 1,
           extra: dict | None = None) -> dict:
    t_start = time.perf_counter()
    extra = extra or {}
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}")
    all_trees = TREES[dataset]
    bad = [t for t in trees or () if t not in all_trees]
    if bad:
        raise ValueError(f"{dataset} has no tree kind {bad}; choose from {all_trees}")
    srcs = [Path(p) for p in ([src] if isinstance(src, (str, os.PathLike)) else src)]
    if dataset not in FILE_DATASETS and len(srcs) != 1:
        raise ValueError(f"--dataset {dataset} reads one data root, got --src "
                         f"{' '.join(map(str, srcs))}")
    src, out = srcs[0], Path(out)
    sample = is_sample(src) if dataset not in FILE_DATASETS else False
    info: dict = {}
    old_meta: dict = {}
    if (out / "meta.json").exists() and not force:
        try:
            old_meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            old_meta = {}

    t0 = time.perf_counter()
    if dataset in FILE_DATASETS:
        data, info = load_files(dataset, srcs, extra)
    else:
        data = LOADERS[dataset](src)
    t_read = time.perf_counter() - t0
    pair = info.get("pair", dataset in ("sick", "snli"))
    trees = list(trees) if trees else list(info.get("default_trees", all_trees))
    counts = {s: len(v) for s, v in data.items()}
    logger.info("%s: read %s from %s in %.1fs", dataset, counts, src, t_read)
    if check:
        if sample:
            logger.warning("%s is the embedded sample (it holds %s): skipping --check-counts",
                           src, SAMPLE_MARKER)
        else:
            check_counts(dataset, data)
    splits = list(data)

    vocab = Vocab()
    for split in splits:
        for ex in data[split]:
            for s in ex.words():
                vocab.update(s)
    vocab_path = out / "vocab.json"
    stale = force or not vocab_path.exists() or Vocab.load(vocab_path) != vocab \
        or old_meta.get("splits") != counts or old_meta.get("sample") != sample
    if stale and vocab_path.exists() and not force:
        logger.info("%s: the source changed since the last build; rebuilding everything", out)
    keys = ("label_names", "score_range", "amr_options")
    if info and old_meta and ({k: old_meta.get(k) for k in keys} != {k: info.get(k) for k in keys}
                              or old_meta.get("src") != info["files"]):
        stale = True  # other classes, scores, AMR options or files: the old graphs differ
    if stale:
        vocab.save(vocab_path)
        old_meta = {}
    for split in splits:
        path = out / "text" / f"{split}.jsonl"
        if stale or not path.exists():
            _write_text(path, "".join(json.dumps(ex.text, ensure_ascii=False) + "\n"
                                      for ex in data[split]))

    def done(tree: str) -> bool:
        files = [f for s in splits for f in graph_files(out, tree, s, pair)]
        return (not stale and tree in old_meta.get("trees", [])
                and (out / "relations" / f"{tree}.json").exists()
                and all(f.exists() for f in files))

    todo = [t for t in trees if not done(t)]
    seconds = dict(old_meta.get("build_seconds", {})) if not stale else {}
    seconds["read"] = round(t_read, 2)
    nlp, parses = None, {}
    if any(needs_spacy(dataset, t, data) for t in todo):
        t0 = time.perf_counter()
        nlp = dependency.load_pipeline(spacy_model)
        unique = list(dict.fromkeys(
            tuple(s) for split in splits for ex in data[split] for side, s in
            enumerate(ex.sents) if not ex.sources or wants_parse(ex.sources[side], todo)))
        got = parse_sharded(nlp, unique, out / SHARD_DIR, batch_size=batch_size,
                            progress=progress, desc=f"spaCy {dataset}", workers=workers)
        parses = dict(zip(unique, got))
        seconds["spacy_parse"] = round(time.perf_counter() - t0, 2)
        logger.info("%s: parsed %d unique sentences with spaCy in %.1fs", dataset,
                    len(unique), seconds["spacy_parse"])
    num_relations = dict(old_meta.get("num_relations", {}))
    for tree in trees:
        if tree not in todo:
            logger.info("%s/%s: already built, skipping (use --force to rebuild)", out, tree)
            continue
        t0 = time.perf_counter()
        relations = relations_for(tree, dataset, src)
        use_spacy = needs_spacy(dataset, tree, data)
        for split in splits:
            exs = data[split]
            sides: list[list[dgl.DGLGraph]] = [[] for _ in range(2 if pair else 1)]
            for ex in exs:
                for side, sent in enumerate(ex.sents):
                    parse = parses.get(tuple(sent)) if use_spacy else None
                    sides[side].append(sentence_graph(tree, ex, side, vocab.lookup(sent),
                                                   relations, parse, vocab))
            files = graph_files(out, tree, split, pair)
            _save_graphs(files[0], sides[0], _targets(exs))
            if pair:
                _save_graphs(files[1], sides[1], None)
        relations.save(out / "relations" / f"{tree}.json")
        num_relations[tree] = len(relations)
        seconds[tree] = round(time.perf_counter() - t0, 2)
        logger.info("%s/%s: built in %.1fs (%d relations)", out, tree, seconds[tree],
                    len(relations))
    built_trees = [t for t in all_trees if t in trees or t in old_meta.get("trees", [])]
    seconds["total_last_run"] = round(time.perf_counter() - t_start, 2)
    meta = {
        "dataset": info.get("name") or dataset,
        "pair": pair,
        "trees": built_trees,
        "splits": counts,
        "label_names": info["label_names"] if info else LABEL_NAMES[dataset],
        "targets": list(next(iter(data.values()))[0].targets),
        "num_relations": {t: num_relations[t] for t in built_trees if t in num_relations},
        "vocab_size": len(vocab),
        "sample": sample,
        "counts_checked": bool(check and not sample) or old_meta.get("counts_checked", False),
        "src": str(src),
        "build_seconds": seconds,
        "built_with": old_meta.get("built_with", {}) if nlp is None and old_meta
        else _versions(nlp),
    }
    if dataset == "sst":
        meta["sst2_splits"] = {s: sum(ex.targets["label"] != 2 for ex in data[s])
                               for s in splits}
    if dataset == "trec":
        meta["dev_split"] = {"from": "train_5500.label", "seed": TREC_DEV_SEED,
                             "size": counts["dev"]}
    if info:
        meta["source_format"] = dataset
        meta["src"] = info["files"]
        for key in ("score_range", "amr_options"):
            if key in info:
                meta[key] = info[key]
        if "amr_options" in info:
            meta["amr"] = amr_data.amr_stats(data)
    _write_text(out / "meta.json", json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    shutil.rmtree(out / SHARD_DIR, ignore_errors=True)  # the build is complete
    return meta


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    ap = argparse.ArgumentParser(prog="gnn-treelstm build", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, choices=DATASETS)
    ap.add_argument("--src", required=True, type=Path, nargs="+",
                    help="raw data root laid out like the data mirror; for amr/jsonl the "
                    "files or directories (names say the split, or SPLIT=FILE)")
    ap.add_argument("--out", required=True, type=Path, help="output directory")
    ap.add_argument("--force", action="store_true", help="rebuild even what exists")
    ap.add_argument("--check-counts", action="store_true",
                    help="fail unless the published counts hold (full data only)")
    ap.add_argument("--spacy-model", default=None,
                    help="installed spaCy pipeline (default: "
                    f"{' then '.join(dependency.DEFAULT_PIPELINES)})")
    ap.add_argument("--trees", nargs="+", default=None,
                    help="tree kinds to build (default: all of the data set's)")
    ap.add_argument("--batch-size", type=positive_int, default=512,
                    help="spaCy nlp.pipe batch size")
    ap.add_argument("--workers", type=positive_int, default=1,
                    help="spaCy parser processes (the graphs are the same for any number)")
    ap.add_argument("--labels", nargs="+", default=None,
                    help="jsonl: the class names in id order (default: sorted)")
    ap.add_argument("--score-range", nargs=2, type=finite_float, default=None,
                    metavar=("LO", "HI"),
                    help="jsonl: integer range of the scores (default: floor(min) ceil(max))")
    ap.add_argument("--name", default=None,
                    help="jsonl: the data set name in meta.json (default jsonl; 'sick' for "
                    "SICK-like pairs trained with --task sick-e/sick-r)")
    ap.add_argument("--amr-reentrancy", choices=("copy", "drop"), default="copy",
                    help="AMR re-entrancies: a leaf copy of the concept (Takase et al. "
                    "2016) or removed")
    ap.add_argument("--amr-normalize-inverse", action="store_true",
                    help="AMR: :ARG0-of -> :ARG0 (default: inverse roles are relations)")
    ap.add_argument("--amr-merge-ops", action="store_true",
                    help="AMR: :op1, :op2 ... -> :opN and :snt1 ... -> :sntN")
    ap.add_argument("--amr-keep-senses", action="store_true",
                    help="AMR: keep the sense suffix of concepts (see-01; default: see)")
    ap.add_argument("--amr-cycles", choices=("split", "error"), default="split",
                    help="AMR graphs with a cycle: broken by the re-entrancy split, or an "
                    "error")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("-q", "--quiet", action="store_true")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.dataset not in FILE_DATASETS:
            for flag in ("labels", "score_range", "name"):
                if getattr(args, flag) is not None:
                    raise ValueError(f"--{flag.replace('_', '-')} is for --dataset jsonl")
        amr_options = {"reentrancy": args.amr_reentrancy,
                       "normalize_inverse": args.amr_normalize_inverse,
                       "merge_ops": args.amr_merge_ops, "strip_senses": not args.amr_keep_senses,
                       "cycles": args.amr_cycles}
        src = args.src[0] if len(args.src) == 1 and args.dataset not in FILE_DATASETS \
            else args.src
        meta = build(args.dataset, src, args.out, force=args.force,
                     check=args.check_counts, spacy_model=args.spacy_model, trees=args.trees,
                     batch_size=args.batch_size, workers=args.workers,
                     progress=not (args.no_progress or args.quiet), name=args.name,
                     labels=args.labels, score_range=args.score_range,
                     amr_options=amr_options)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"{args.dataset}: {meta['splits']} -> {args.out} "
              f"({meta['build_seconds']['total_last_run']}s; trees {', '.join(meta['trees'])})")
        for split, st in meta.get("amr", {}).items():
            print(f"  amr {split}: {st['graphs']} graphs, {st['nodes']} nodes, "
                  f"{st['reentrancies']} re-entrancies, {st['relations']} relations, "
                  f"{len(st['cycles'])} with a cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
