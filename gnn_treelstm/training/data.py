"""The data a run reads: where the built data set is (:func:`resolve_data_dir`, building it
on demand from raw data or the embedded sample), its splits adapted to the task
(:func:`prepare_data` -> :class:`RunData`), whether a model can run on its trees
(:func:`check_compatibility`) and the pre-trained word vectors (:func:`load_embeddings`).
Missing or unusable data raises :class:`DataError`, naming the command that builds it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dgl
import numpy as np
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.models.treelstm import cell_accepts
from gnn_treelstm.tasks import Task
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.packed import TreeStore
from gnn_treelstm.trees.phrases import phrase_sequences

if TYPE_CHECKING:
    from gnn_treelstm.training.config import RunConfig

log = logging.getLogger(__name__)

__all__ = ["SAMPLE_SRC", "RAW_PROBES", "DEFAULT_VECTORS", "DataError", "RunData",
           "resolve_data_dir", "managed_data_dir", "prepare_data", "check_compatibility",
           "vectors_candidates", "default_vectors", "load_embeddings"]

SAMPLE_SRC = Path(__file__).resolve().parents[1] / "sample_data"
#: raw-data probes: a directory holding one of these for the data set is raw (unbuilt) data
RAW_PROBES = {"sst": "sst/trees", "sick": "sick/semeval2014", "trec": "trec/TREC_10.label",
              "snli": "snli", "jsonl": "train.jsonl"}
#: the data set of the tasks for users' own data (``classify``, ``pair-classify``,
#: ``pair-score``): they read a built data set of any name that has their targets
ANY_DATASET = "jsonl"
#: pre-trained vectors looked for in ``<raw source>/glove/`` (first found wins)
DEFAULT_VECTORS = {
    "sick": ("glove.840B.300d.sick-vocab.txt.gz", "glove.6B.50d.filtered.txt.gz"),
    "*": ("glove.840B.300d.txt.gz", "glove.840B.300d.txt", "glove.6B.300d.txt.gz",
          "glove.6B.50d.filtered.txt.gz", "glove.6B.50d.txt.gz", "glove.6B.50d.txt"),
}


class DataError(FileNotFoundError):
    """Missing or unusable data; the message names the command that builds it."""


def _dataset_hint(dataset: str, out: str | os.PathLike, tree: str | None = None) -> str:
    trees = f" --trees {tree}" if tree else ""
    src = "train.jsonl dev.jsonl test.jsonl" if dataset == ANY_DATASET else "RAW_DATA_DIR"
    return f"gnn-treelstm build --dataset {dataset} --src {src} --out {out}{trees}"


def _build(dataset: str, src: Path, out: Path, trees: Sequence[str]) -> None:
    from gnn_treelstm.datasets import build as B  # the data path's Python API

    log.info("building %s %s graphs from %s into %s", dataset, "/".join(trees), src, out)
    t0 = time.perf_counter()
    B.build(dataset, src, out, trees=list(trees))
    log.info("built %s in %.1fs", out, time.perf_counter() - t0)


def resolve_data_dir(data: str | os.PathLike | None, dataset: str, tree: str, *,
                     runs_dir: str | os.PathLike = "runs") -> Path:
    """The built data directory of ``dataset`` holding ``tree``.

    ``data`` (else ``$GNN_TREELSTM_DATA``) may be a built data directory (``meta.json``),
    a directory of built data sets (``DIR/<dataset>/meta.json``), or raw data laid out like
    the data mirror, which is built on the fly into ``<runs_dir>/_built/``. With neither,
    the embedded sample is built into ``<runs_dir>/_sample_data/<dataset>``. Missing tree
    kinds are built for the directories this function manages; for a directory the user
    built, the error names the command that completes it. For :data:`ANY_DATASET` (the
    tasks for users' own data) a built directory of any data set name is accepted, and raw
    data is a directory of ``train.jsonl`` / ``dev.jsonl`` / ``test.jsonl``.
    """
    runs = Path(runs_dir)
    if data is None:
        data = os.environ.get("GNN_TREELSTM_DATA") or None
    if data is None:
        if not (SAMPLE_SRC / RAW_PROBES.get(dataset, dataset)).exists():
            raise DataError(
                f"no --data given, $GNN_TREELSTM_DATA is unset, and the embedded sample "
                f"{SAMPLE_SRC} has no {dataset} data; build the data with "
                f"`{_dataset_hint(dataset, 'DIR')}` and pass --data DIR"
            )
        return managed_data_dir(SAMPLE_SRC, runs / "_sample_data" / dataset, dataset, tree)
    p = Path(data)
    if not p.exists():
        raise DataError(f"data directory {p} does not exist; build it with "
                        f"`{_dataset_hint(dataset, p)}`")
    if (p / "meta.json").exists():
        built = p
    elif (p / dataset / "meta.json").exists():
        built = p / dataset
    elif (p / RAW_PROBES.get(dataset, dataset)).exists():
        key = hashlib.sha1(str(p.resolve()).encode()).hexdigest()[:8]
        return managed_data_dir(p, runs / "_built" / f"{p.name}-{key}" / dataset, dataset, tree)
    else:
        raise DataError(
            f"{p} holds no built {dataset} data (no meta.json, no {dataset}/meta.json) and "
            f"no raw {dataset} data ({RAW_PROBES.get(dataset)}); build it outside the raw "
            f"data with `{_dataset_hint(dataset, Path('built') / dataset)}`"
        )
    meta = D.load_meta(built)
    if meta.get("dataset") != dataset and dataset != ANY_DATASET:
        raise DataError(
            f"{built} holds the {meta.get('dataset')!r} data set but the task needs "
            f"{dataset!r}; build it with `{_dataset_hint(dataset, p.parent / dataset)}`"
        )
    if tree not in meta.get("trees", []):
        source = meta.get("source_format", meta.get("dataset", dataset))
        _check_tree_kind(source, tree)
        raise DataError(
            f"{built} has no {tree!r} trees (built: {', '.join(meta.get('trees', []))}); "
            f"add them with `{_dataset_hint(source, built, tree)}`"
        )
    return built


def _check_tree_kind(dataset: str, tree: str) -> None:
    """Refuse a tree kind the data builder cannot make for ``dataset``."""
    from gnn_treelstm.datasets import build as B

    kinds = B.TREES.get(dataset, [])
    if tree not in kinds:
        raise ValueError(f"the {dataset} data has no {tree!r} trees; choose one of: "
                         f"{', '.join(kinds)}")


def managed_data_dir(src: Path, out: Path, dataset: str, tree: str) -> Path:
    """Build (or complete) a data directory this module manages."""
    have: list[str] = []
    if (out / "meta.json").exists():
        have = D.load_meta(out).get("trees", [])
    if tree not in have:
        _check_tree_kind(dataset, tree)
        _build(dataset, src, out, sorted(set(have) | {tree}))
    return out


@dataclass
class RunData:
    """Everything a run reads from the data directory."""

    data_dir: Path
    meta: dict
    vocab: Any
    relations: list[str]
    splits: dict[str, D.Split]
    dev_split: str
    label_names: list[str] | None

    def tokens(self, split: str) -> list[tuple[list[str], list[str] | None]] | None:
        """(A, B) tokens per example from ``text/<split>.jsonl`` (None if absent)."""
        path = self.data_dir / "text" / f"{split}.jsonl"
        if not path.exists():
            return None
        recs = D.load_text(self.data_dir, split)
        out = []
        for r in recs:
            if "a" in r:
                out.append((list(r["a"]), list(r["b"])))
            else:
                out.append((list(r.get("tokens", [])), None))
        return out


def prepare_data(cfg: RunConfig, task: Task) -> RunData:
    """Resolve the data directory, load the splits and adapt them to the task.

    A task whose head's size comes from the data (``head_kwargs_from_data``: the classes
    or score range of ``classify`` / ``pair-classify`` / ``pair-score``) gets those head
    options added to ``cfg.head_kwargs`` (options given on the command line win), so the
    model config and the recorded run config carry them. The data directory is absolute
    (what a run records, so that its checkpoints find the data from any directory)."""
    data_dir = Path(os.path.abspath(resolve_data_dir(cfg.data, task.dataset, cfg.tree,
                                                     runs_dir=cfg.runs_dir)))
    meta = D.load_meta(data_dir)
    if bool(meta.get("pair")) != task.pair:
        raise DataError(f"{data_dir}: pair={meta.get('pair')} but task {task.name} needs "
                        f"pair={task.pair}")
    available = list(meta.get("splits", {}))
    if "train" not in available:
        raise DataError(
            f"{data_dir} has no train split (splits: {', '.join(available)}); the "
            f"{task.dataset} source must include training data (e.g. SNLI's "
            "snli_1.0_train.jsonl)"
        )
    dev = "dev" if "dev" in available else None
    if dev is None:
        raise DataError(f"{data_dir} has no dev split for model selection "
                        f"(splits: {', '.join(available)})")
    phrases = task.supervision == "phrase-sequences"
    if phrases and cfg.tree != "chain":
        raise DataError(f"--supervision phrase-sequences runs a sequential model on each "
                        f"phrase as its own chain: pass --tree chain (got --tree {cfg.tree})")
    if phrases and "constituency" not in meta.get("trees", []):
        raise DataError(f"{data_dir}: --supervision phrase-sequences reads the phrases from "
                        "the constituency trees, which this data set lacks (built: "
                        f"{', '.join(meta.get('trees', []))})")
    splits = {}
    for name in available:
        sp = task.prepare_split(D.load_split(data_dir, name, cfg.tree))
        limit = cfg.max_train if name == "train" else cfg.max_eval
        sp = sp.head(limit)
        if phrases:  # every labelled phrase its own chain
            sp = as_phrase_sequences(task, data_dir, sp, limit)
        splits[name] = sp
    from_data = getattr(task, "head_kwargs_from_data", None)
    if from_data is not None:
        cfg.head_kwargs = {**from_data(meta, splits["train"]), **cfg.head_kwargs}
    vocab = D.load_vocab(data_dir)
    try:
        relations = D.load_relations(data_dir, cfg.tree).names
    except FileNotFoundError:
        relations = []
    return RunData(data_dir=data_dir, meta=meta, vocab=vocab, relations=relations,
                   splits=splits, dev_split=dev,
                   label_names=task.label_names(meta.get("label_names")))


def as_phrase_sequences(task: Task, data_dir: Path, chains: D.Split,
                        limit: int | None) -> D.Split:
    """``chains`` (a prepared split of ``chain`` trees, its first ``limit`` examples) as one
    chain per labelled phrase (:func:`gnn_treelstm.trees.phrases.phrase_sequences`), the
    phrases read from the same split's constituency trees, prepared alike."""
    t0 = time.perf_counter()
    cons = task.prepare_split(D.load_split(data_dir, chains.name, "constituency"))
    cons = cons.head(limit)
    out = phrase_sequences(chains, cons)
    log.info("%s: %d sentences -> %d phrase sequences (%.1f s)", chains.name, len(chains),
             len(out), time.perf_counter() - t0)
    return out


def _graph_max(splits: Iterable[D.Split], stat: Callable[[dgl.DGLGraph], int],
               start: int = 0, *, packed: Callable[[TreeStore], tuple[int, int]] | None = None
               ) -> tuple[int, str]:
    """The largest ``stat(graph)`` over the graphs with edges of ``splits`` (``start`` if
    none is larger) and where it first occurs (``"train example 12 (sentence B)"``);
    ``packed`` computes the same from the arrays of packed trees (largest, first tree)."""
    best, where = start, ""
    for sp in splits:
        for side, graphs in (("", sp.graphs), (" (sentence B)", sp.graphs_b or [])):
            if isinstance(graphs, TreeStore) and packed is not None:
                v, i = packed(graphs)
                if i >= 0 and v > best:
                    best, where = v, f"{sp.name} example {i}{side}"
                continue
            for i, g in enumerate(graphs):
                if g.num_edges():
                    v = stat(g)
                    if v > best:
                        best, where = v, f"{sp.name} example {i}{side}"
    return best, where


def _packed_max_rel(trees: TreeStore) -> tuple[int, int]:
    if "e." + G.REL not in trees.dtypes:
        return -1, -1
    rel = trees.field_values("e." + G.REL)
    if not len(rel):
        return -1, -1
    top = int(rel.max())
    ne = trees.sizes()[1]
    first = int(np.searchsorted(np.cumsum(ne), int(np.argmax(rel == top)), side="right"))
    return top, first


def _max_children(splits: Iterable[D.Split]) -> tuple[int, str]:
    return _graph_max(splits, lambda g: int(g.in_degrees().max()),
                      packed=lambda trees: trees.max_children())


def check_compatibility(cfg: RunConfig, rd: RunData, num_relations: int) -> None:
    """Refuse a model/tree combination that cannot work on this data (``ValueError``), and
    data whose relation ids do not fit its own relation vocabulary."""
    rel_file = Path(rd.data_dir) / "relations" / f"{cfg.tree}.json"
    rebuild = _dataset_hint(rd.meta.get("dataset", "..."), rd.data_dir)
    if rd.relations and len(rd.relations) != num_relations:
        raise DataError(f"{rel_file} lists {len(rd.relations)} relations but "
                        f"{Path(rd.data_dir) / 'meta.json'} says {num_relations}; the data "
                        f"directory is damaged: {rebuild}")
    top, where = _graph_max(
        rd.splits.values(),
        lambda g: int(g.edata[G.REL].max()) if G.REL in g.edata else -1, start=-1,
        packed=_packed_max_rel)
    if top >= max(num_relations, 1):
        raise DataError(f"the {cfg.tree} graphs of {rd.data_dir} use relation id {top} (first "
                        f"in {where}) but the relation vocabulary ({rel_file}) has "
                        f"{num_relations}; the data directory is damaged: {rebuild}")
    kw = dict(cfg.cell_kwargs)
    if cell_accepts(cfg.model, "num_relations"):
        kw.setdefault("num_relations", max(num_relations, 1))
    cell = build_cell(cfg.model, 2, 2, engine="dgl", **kw)
    if cell.uses_relations and num_relations <= 1:
        names = ", ".join(rd.relations) or "none"
        raise ValueError(
            f"model {cfg.model!r} reads edge relations, but the {cfg.tree} graphs of "
            f"{rd.data_dir} carry {num_relations} relation ({names}), so the relation "
            "matrices would all be the same; use --tree dependency (or amr) for this model, "
            "or a model without relations (childsum, nary, lstm)"
        )
    if cell.max_children is not None:
        deg, where = _max_children(rd.splits.values())
        if deg > cell.max_children:
            if cell.max_children == 1:
                fix = "sequential LSTMs run on chains: use --tree chain"
            else:
                fix = ("use --tree constituency (binarized) or a model for any number of "
                       "children (childsum, mtree)")
            raise ValueError(
                f"model {cfg.model!r} takes at most {cell.max_children} "
                f"child{'ren' if cell.max_children > 1 else ''} per node, but the {cfg.tree} "
                f"trees of {rd.data_dir} have nodes with up to {deg} children (first in "
                f"{where}); {fix}"
            )
    kinds = getattr(cell, "tree_kinds", ())
    base_tree = cfg.tree.replace("-spacy", "")
    if kinds and base_tree not in kinds:
        log.warning("model %r is meant for %s trees; running it on %s trees", cfg.model,
                    "/".join(kinds), cfg.tree)


def vectors_candidates(rd: RunData) -> list[Path]:
    """The files :func:`default_vectors` looks for, in order: the known GloVe files in the
    ``glove/`` directory of the raw data the data set was built from (none for a data set
    built from your own files). ``meta.json`` names that directory by its absolute path; a
    relative one (data built by an older version) is refused (:class:`DataError`), as it
    would name another directory from every working directory."""
    src = rd.meta.get("src")
    if not src or not isinstance(src, str):
        return []
    if not Path(src).is_absolute():
        raise DataError(
            f"{Path(rd.data_dir) / 'meta.json'} names the raw data it was built from by the "
            f"relative path {src!r}, which is another directory from every working "
            f"directory, so its default word vectors are unknown; rebuild it "
            f"(`{_dataset_hint(rd.meta.get('dataset', '...'), rd.data_dir)} --force` records "
            "the absolute path), or pass --embeddings FILE (or --embeddings-mode random)")
    glove = Path(src) / "glove"
    names = DEFAULT_VECTORS.get(rd.meta.get("dataset"), ()) + DEFAULT_VECTORS["*"]
    return [glove / name for name in dict.fromkeys(names)]


def default_vectors(rd: RunData) -> Path | None:
    """The first of :func:`vectors_candidates` that exists (None if none does)."""
    return next((p for p in vectors_candidates(rd) if p.is_file()), None)


def _no_vectors(cfg: RunConfig, rd: RunData) -> DataError:
    """The error of a run that asked for pre-trained vectors and has none."""
    looked = vectors_candidates(rd)
    where = (f"none of {', '.join(str(p) for p in looked)} exists" if looked else
             f"{Path(rd.data_dir) / 'meta.json'} names no raw data directory (the data set "
             "was built from your own files), so there is no default vectors file")
    return DataError(
        f"--embeddings-mode {cfg.embeddings_mode} reads pre-trained word vectors, and no "
        f"--embeddings FILE was given: {where}; pass --embeddings FILE (GloVe text, plain "
        "or .gz), or --embeddings-mode random for random word vectors")


def load_embeddings(cfg: RunConfig, rd: RunData) -> tuple[torch.Tensor | None, dict]:
    """The embedding matrix for the vocabulary (None for random) and its record.

    Random vectors only with ``--embeddings-mode random``; any other mode reads
    ``cfg.embeddings``, else :func:`default_vectors`, and none found is a
    :class:`DataError` naming what was looked for. The record (``config.json``'s
    ``embeddings``, the checkpoint's ``vectors``) holds the mode, the file's resolved
    ``path``, ``size`` and ``sha256`` (:func:`gnn_treelstm.trees.vectors.file_record`), the
    ``words_found`` of ``vocab_words`` and the coverage counts; a ``cfg.embeddings_sha256``
    that differs from the file's is a ``ValueError``.
    """
    if cfg.embeddings_mode == "random":
        return None, {"mode": "random", "path": None}
    from gnn_treelstm.trees.vectors import build_embedding_matrix, file_record

    path = Path(cfg.embeddings) if cfg.embeddings else default_vectors(rd)
    if path is None:
        raise _no_vectors(cfg, rd)
    record = file_record(path)
    if cfg.embeddings_sha256 is not None and record["sha256"] != cfg.embeddings_sha256:
        raise ValueError(
            f"the vectors file {record['path']} has SHA-256 {record['sha256']}, not the "
            f"{cfg.embeddings_sha256} the run asks for (--embeddings-sha256, as a run's "
            "config.yaml records it): it is another file; pass the run's vectors file, or "
            "drop --embeddings-sha256 to train with this one")
    weights, stats = build_embedding_matrix(list(rd.vocab.itos), record["path"])
    info = {"mode": cfg.embeddings_mode, **record,
            "words_found": stats.exact + stats.lower, "vocab_words": stats.vocab_size - 1}
    info.update({k: v for k, v in dataclasses.asdict(stats).items()
                 if k not in ("source", "unk_examples")})
    return weights, info
