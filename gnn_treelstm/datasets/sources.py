"""Reading the data sets ``gnn_treelstm.datasets.build`` knows: the benchmarks from a directory
laid out like the data mirror (SST, SICK, TREC, SNLI), and the file-based data sets (``amr``:
:mod:`gnn_treelstm.datasets.amr_data`; ``jsonl``: :mod:`gnn_treelstm.datasets.jsonl`), as lists of
:class:`gnn_treelstm.datasets.example.Example` per split; the published counts ``--check-counts``
compares against; the relation vocabulary each tree kind starts from; SST's and SICK's trees
read straight into graphs, for measurements and tests (:func:`sst_graphs`, :func:`sick_graphs`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import dgl

from gnn_treelstm.datasets import amr_data, chain, jsonl, preparsed, ptb, readers
from gnn_treelstm.datasets.example import Example
from gnn_treelstm.trees.vocab import Relations

logger = logging.getLogger("gnn_treelstm.datasets.build")

__all__ = ["KNOWN_COUNTS", "SST2_COUNTS", "SAMPLE_MARKER", "TREC_DEV_SEED", "SICK_FILES", "SPLITS",
           "LOADERS", "LABEL_NAMES", "CountMismatchError", "is_sample", "check_counts",
           "load_files", "relations_for", "sst_graphs", "sick_graphs"]

SPLITS = {
    "sst": ["train", "dev", "test"],
    "sick": ["train", "dev", "test"],
    "trec": ["train", "dev", "test"],
    "snli": ["train", "dev", "test"],  # SNLI: whichever splits exist in the source
}
KNOWN_COUNTS = {
    "sst": {"train": 8544, "dev": 1101, "test": 2210},
    "sick": {"train": 4500, "dev": 500, "test": 4927},
    "trec": {"train": 4952, "dev": 500, "test": 500},
}
#: SST sentences whose root is not neutral (the binary task).
SST2_COUNTS = {"train": 6920, "dev": 872, "test": 1821}
SAMPLE_MARKER = "SAMPLE"
TREC_DEV_SEED = 1234


class CountMismatchError(ValueError):
    """``--check-counts`` found sizes different from the published ones."""


def _dataset_dir(src: Path, name: str, probe: str) -> Path:
    """``src/<name>`` if it exists, else ``src`` itself if it holds ``probe``."""
    if (src / name / probe).exists():
        return src / name
    if (src / probe).exists():
        return src
    raise FileNotFoundError(f"{src}: no {name}/{probe} (expected a directory laid out like "
                            "the data mirror, e.g. gnn_treelstm/sample_data)")


def _load_sst(src: Path) -> dict[str, list[Example]]:
    d = _dataset_dir(src, "sst", "trees")
    out = {}
    for split in SPLITS["sst"]:
        trees = ptb.read_ptb_file(d / "trees" / f"{split}.txt")
        out[split] = [Example([t.tokens], {"label": t.label},
                              {"tokens": t.tokens, "label": t.label}, ptb=t) for t in trees]
    return out


SICK_FILES = {"train": "SICK_train.txt", "dev": "SICK_trial.txt",
              "test": "SICK_test_annotated.txt"}


def _load_sick(src: Path) -> dict[str, list[Example]]:
    d = _dataset_dir(src, "sick", "semeval2014")
    out = {}
    for split in SPLITS["sick"]:
        path = d / "semeval2014" / SICK_FILES[split]
        pairs = readers.read_sick_semeval(path)
        pdir = d / "stanford_parsed" / split
        a, b = preparsed.read_preparsed(pdir, "a"), preparsed.read_preparsed(pdir, "b")
        ids = [x.strip() for x in (pdir / "id.txt").read_text(encoding="utf-8").splitlines()]
        if len(a) != len(pairs) or ids != [p.pair_id for p in pairs]:
            raise readers.DataFormatError(
                f"{pdir}: the Stanford parses ({len(a)} lines, id.txt) do not line up with "
                f"{path} ({len(pairs)} pairs); both must list the same pairs in order")
        exs = []
        for p, sa, sb in zip(pairs, a, b):
            exs.append(Example(
                [sa.tokens, sb.tokens], {"score": p.score, "label": p.label},
                {"id": p.pair_id, "a": sa.tokens, "b": sb.tokens, "score": p.score,
                 "label": p.label}, stanford=[sa, sb]))
        out[split] = exs
    return out


def _load_trec(src: Path) -> dict[str, list[Example]]:
    d = _dataset_dir(src, "trec", "TREC_10.label")
    train = readers.read_trec(d / "train_5500.label")
    test = readers.read_trec(d / "TREC_10.label")
    tr_idx, dev_idx = readers.trec_dev_split(len(train), seed=TREC_DEV_SEED)

    def ex(q: readers.TrecQuestion) -> Example:
        return Example([q.tokens], {"label": q.coarse},
                       {"tokens": q.tokens, "label": q.coarse, "fine": q.fine})

    return {"train": [ex(train[i]) for i in tr_idx], "dev": [ex(train[i]) for i in dev_idx],
            "test": [ex(q) for q in test]}


def _load_snli(src: Path) -> dict[str, list[Example]]:
    d = src / "snli" if (src / "snli").is_dir() else src
    out = {}
    for split in SPLITS["snli"]:
        jsonl = [d / f"snli_1.0_{split}.jsonl", d / f"snli_1.0_{split}.jsonl.gz"]
        if any(p.exists() for p in jsonl):
            pairs = readers.read_snli_jsonl(next(p for p in jsonl if p.exists()))
        else:
            try:
                readers.find_file(d / f"labels.{split}")
            except FileNotFoundError:
                continue
            pairs = readers.read_snli_text(d, split)
        out[split] = [Example([p.a, p.b], {"label": p.label},
                              {"a": p.a, "b": p.b, "label": p.label}) for p in pairs]
    if not out:
        raise FileNotFoundError(f"{d}: no SNLI split found (s1/s2/labels.<split>[.gz] or "
                                "snli_1.0_<split>.jsonl)")
    return out


LOADERS: dict[str, Callable[[Path], dict[str, list[Example]]]] = {
    "sst": _load_sst, "sick": _load_sick, "trec": _load_trec, "snli": _load_snli}
LABEL_NAMES = {
    "sst": ["very negative", "negative", "neutral", "positive", "very positive"],
    "sick": readers.SICK_LABELS,
    "trec": readers.TREC_COARSE,
    "snli": readers.SNLI_LABELS,
}


def sst_graphs(src: str | os.PathLike, split: str = "train", limit: int | None = None
               ) -> list[dgl.DGLGraph]:
    """The first ``limit`` (all: None) SST trees of ``split`` under ``src`` (laid out like
    the data mirror) as graphs, words numbered in order of first appearance: the trees a
    measurement or a test reads without a build."""
    d = _dataset_dir(Path(src), "sst", "trees")
    vocab: dict[str, int] = {}
    return [ptb.tree_to_graph(t, lambda w: vocab.setdefault(w, len(vocab)))
            for t in ptb.read_ptb_file(d / "trees" / f"{split}.txt")[:limit]]


def sick_graphs(src: str | os.PathLike, split: str = "train", sides: tuple[str, ...] = ("a", "b"),
                limit: int | None = None) -> tuple[list[dgl.DGLGraph], int]:
    """SICK's Stanford dependency trees of ``split`` under ``src`` as graphs: each side of
    ``sides`` in turn, its first ``limit`` (all: None), words numbered in order of first
    appearance over them; and the number of relations (``rels_set.txt``)."""
    base = _dataset_dir(Path(src), "sick", "stanford_parsed") / "stanford_parsed"
    rels = preparsed.read_relation_set(base / "rels_set.txt")
    vocab: dict[str, int] = {}
    return [preparsed.preparsed_dependency_graph(
        s, [vocab.setdefault(t, len(vocab)) for t in s.tokens], rels)
        for side in sides for s in preparsed.read_preparsed(base / split, side)[:limit]
    ], len(rels)


def is_sample(src: str | os.PathLike) -> bool:
    """Whether ``src`` is the embedded sample (it holds the :data:`SAMPLE_MARKER` file)."""
    return (Path(src) / SAMPLE_MARKER).exists()


def check_counts(dataset: str, data: dict[str, list[Example]]) -> None:
    """Raise :class:`CountMismatchError` unless the published sizes hold."""
    known = KNOWN_COUNTS.get(dataset)
    if known is None:
        logger.warning("no known counts for %s; --check-counts checks nothing", dataset)
        return
    got = {s: len(v) for s, v in data.items()}
    problems = [f"{s}: expected {n}, got {got.get(s)}" for s, n in known.items()
                if got.get(s) != n]
    if dataset == "sst":
        binary = {s: sum(ex.targets["label"] != 2 for ex in data[s]) for s in data}
        problems += [f"{s} (binary roots): expected {n}, got {binary.get(s)}"
                     for s, n in SST2_COUNTS.items() if binary.get(s) != n]
    if problems:
        raise CountMismatchError(f"{dataset}: counts differ from the published ones: "
                                 + "; ".join(problems))
    logger.info("%s: counts match the published ones (%s)", dataset, got)


def load_files(dataset: str, srcs: list[Path], extra: dict) -> tuple[dict, dict]:
    """The examples of a file-based data set and what its ``meta.json`` records."""
    opts = amr_data.amr_options(extra.get("amr_options"))
    if dataset == "amr":
        data, files = amr_data.load_amr_bank(srcs, opts)
        return data, {"pair": False, "label_names": None, "files": files,
                      "default_trees": ["amr"], "amr_options": opts}
    jd = jsonl.read_jsonl(srcs, labels=extra.get("labels"),
                          score_range=extra.get("score_range"), amr_options=opts)
    info = {"pair": jd.pair, "label_names": jd.label_names, "files": jd.files,
            "default_trees": jd.default_trees(), "name": extra.get("name")}
    if jd.score_range is not None:
        info["score_range"] = jd.score_range
    if any(s.amr is not None for s in jd.sentences()):
        info["amr_options"] = opts
    return jd.splits, info


def relations_for(tree: str, dataset: str, src: Path) -> Relations:
    """The relation vocabulary ``tree`` graphs start from (grown while building for
    dependency and AMR trees)."""
    if tree.startswith("constituency"):
        return Relations(ptb.CONSTITUENCY_RELATIONS)
    if tree == "chain":
        return Relations(chain.CHAIN_RELATIONS)
    if tree == "dependency" and dataset == "sick":
        rs = _dataset_dir(src, "sick", "semeval2014") / "stanford_parsed" / "rels_set.txt"
        return preparsed.read_relation_set(rs) if rs.exists() else Relations()
    return Relations()
