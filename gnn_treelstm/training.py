"""The training loop as library code (``train.py`` is its command line).

Defaults follow the papers (Tai et al. 2015 §5.3; Tran & Cheng 2018 §6.1):

* AdaGrad, learning rate 0.05, word embeddings at learning rate 0.1 (a separate parameter
  group, as in DGL's Tree-LSTM example); or Adam, lr 0.001 (the default for Teng & Zhang's
  cells, Teng §6, and for inference, Tran §6.1). See :meth:`RunConfig.resolved`.
* Per-minibatch L2 regularization of strength λ = 1e-4 on every parameter except the
  word embeddings: the minibatch objective is ``mean loss + λ/2 ‖θ‖²``, i.e. ``λθ`` is
  added to the gradient at every optimizer step (``weight_decay`` of both optimizers is
  exactly this coupled L2 term), as in Tai's released code.
* Dropout 0.5 on the classifier input for sentiment and inference (none for relatedness),
  minibatches of 25, model selection on the dev set after every epoch, test metrics of the
  selected checkpoint; ``seeds`` runs with consecutive seeds, reported as mean (std).

A run writes ``<runs_dir>/<name>/``::

    config.json      the resolved RunConfig, ModelConfig and data description
    config.yaml      the resolved RunConfig alone, for ``gnn-treelstm train --config``
    metrics.csv      the same per-epoch numbers as metrics.jsonl, one row per epoch
    metrics.jsonl    one JSON object per epoch (seed, train loss, dev metrics, speed:
                     train_seconds = data loading + forward + backward + optimizer of
                     the training epoch, eval_seconds = the dev evaluation, apart;
                     memory: peak_rss_mb of the training epoch, eval_peak_rss_mb,
                     rss_mb at the epoch's end, cuda_* on CUDA)
    best.pt          the selected checkpoint (several seeds: seed-<s>/best.pt each, and
                     best.pt = the seed with the best dev score)
    results.json     dev/test metrics per seed, their mean and std, seconds per epoch

Nothing here prints; progress goes to ``logging`` and to the optional ``progress`` /
``on_epoch`` callbacks (``train.py`` plugs tqdm and a one-line summary into them).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import random
import resource
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dgl
import numpy as np
import torch
from torch.utils.data import DataLoader

from . import data as D
from . import distributed as DIST
from . import graph as G
from . import metrics as M
from . import resume as R
from . import rundir
from .cells import build_cell, cells
from .checkpoint import save_checkpoint
from .files import atomic_write
from .model import (
    EMBEDDING_MODES,
    SENTENCE_STATES,
    TENG_CELLS,
    ModelConfig,
    TreeLSTMModel,
    cell_accepts,
)
from .tasks import Task, build_task, gather_batches, tasks

log = logging.getLogger(__name__)

__all__ = [
    "RunConfig",
    "RunData",
    "TREE_KINDS",
    "OPTIMIZERS",
    "SAMPLE_SRC",
    "DataError",
    "resolve_data_dir",
    "managed_data_dir",
    "prepare_data",
    "check_compatibility",
    "build_optimizer",
    "make_loader",
    "evaluate",
    "memory_stats",
    "reset_peak_memory",
    "keep_heap_pages",
    "train_model",
    "run",
]

TREE_KINDS = ("constituency", "dependency", "chain", "amr", "dependency-spacy",
              "constituency-spacy")
OPTIMIZERS = ("adagrad", "adam")
#: ``mean``: the batch's mean loss (Tai's code); ``sum``: the summed loss, i.e. one
#: backward per example accumulated over the batch (Tran & Cheng's code)
LOSS_REDUCTIONS = ("mean", "sum")
DEVICES = ("cpu", "cuda")
SAMPLE_SRC = Path(__file__).resolve().parent / "sample_data"
#: raw-data probes: a directory holding one of these for the data set is raw (unbuilt) data
RAW_PROBES = {"sst": "sst/trees", "sick": "sick/semeval2014", "trec": "trec/TREC_10.label",
              "snli": "snli"}
#: pre-trained vectors looked for in ``<raw source>/glove/`` (first found wins)
DEFAULT_VECTORS = {
    "sick": ("glove.840B.300d.sick-vocab.txt.gz", "glove.6B.50d.filtered.txt.gz"),
    "*": ("glove.840B.300d.txt.gz", "glove.840B.300d.txt", "glove.6B.300d.txt.gz",
          "glove.6B.50d.filtered.txt.gz", "glove.6B.50d.txt.gz", "glove.6B.50d.txt"),
}


class DataError(FileNotFoundError):
    """Missing or unusable data; the message names the command that builds it."""


class NonFiniteError(RuntimeError):
    """The loss or a gradient became NaN or infinite; the message names the epoch, the
    step and the batch's example ids, and what the run directory still holds."""


#: largest learning rate accepted: beyond it a run only diverges (AdaGrad's papers: 0.05)
MAX_LR = 10.0


@dataclass
class RunConfig:
    """A training run. ``None`` fields take the task's / optimizer's paper default."""

    task: str = "sst-5"
    model: str = "nary"
    tree: str = "constituency"
    data: str | None = None
    embeddings: str | None = None
    embeddings_mode: str | None = None
    emb_dim: int | None = None
    hidden: int = 150
    head_hidden: int | None = None
    optimizer: str | None = None
    lr: float | None = None
    emb_lr: float | None = None
    l2: float = 1e-4
    dropout: float | None = None
    emb_dropout: float | None = None
    supervision: str | None = None
    batch_size: int = 25
    eval_batch_size: int = 256
    epochs: int = 10
    seed: int = 1
    seeds: int = 1
    device: str = "cpu"
    engine: str = "dgl"
    cell_kwargs: dict[str, Any] = field(default_factory=dict)
    sentence_state: str | None = None
    head_kwargs: dict[str, Any] = field(default_factory=dict)
    loss_reduction: str | None = None
    emb_l2: float | None = None
    rel_lr: float | None = None
    runs_dir: str = "runs"
    name: str | None = None
    max_train: int | None = None
    max_eval: int | None = None
    test: bool = True
    skip_nonfinite: bool = False
    checkpoint_every: int = 0
    distributed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def resolved(self) -> RunConfig:
        """A copy with every paper default filled in (what ``config.json`` records).

        * optimizer: Adam for Teng & Zhang's cells (Teng §6) and for inference (Tran
          §6.1), AdaGrad otherwise (Tai §5.3, Tran §6.1);
        * lr: AdaGrad 0.05, Adam 0.001; embedding lr: AdaGrad 0.1, Adam = lr;
        * dropout on the head input: the task's (0.5; relatedness 0);
        * dropout on the word vectors: 0.5 for Teng & Zhang's cells (Teng §6), else 0;
        * supervision: the task's (SST: phrase);
        * word vectors: fixed for relatedness (Tai §5.3), tuned otherwise.
        """
        task = build_task(self.task, supervision=self.supervision)
        teng = self.model in TENG_CELLS
        opt = self.optimizer or ("adam" if teng or task.name in ("sick-e", "snli")
                                 else "adagrad")
        lr = self.lr if self.lr is not None else (0.05 if opt == "adagrad" else 1e-3)
        emb_lr = self.emb_lr if self.emb_lr is not None else (0.1 if opt == "adagrad" else lr)
        return dataclasses.replace(
            self, optimizer=opt, lr=lr, emb_lr=emb_lr,
            sentence_state=self.sentence_state or task.default_sentence_state,
            head_kwargs={**task.default_head_kwargs, **self.head_kwargs},
            loss_reduction=self.loss_reduction or task.default_loss_reduction,
            emb_l2=self.emb_l2 if self.emb_l2 is not None else task.default_emb_l2,
            dropout=task.default_dropout if self.dropout is None else self.dropout,
            emb_dropout=(0.5 if teng else 0.0) if self.emb_dropout is None
            else self.emb_dropout,
            supervision=task.supervision, cell_kwargs=dict(self.cell_kwargs),
            embeddings_mode=self.embeddings_mode or ("fixed" if task.name == "sick-r"
                                                     else "tuned"))

    def check(self) -> None:
        """Refuse bad names and values before anything is loaded (``ValueError``)."""
        tasks.get(self.task)                      # UnknownNameError lists the choices
        cells.get(self.model)
        if self.tree not in TREE_KINDS:
            raise ValueError(f"unknown tree {self.tree!r}; choose one of: "
                             f"{', '.join(TREE_KINDS)}")
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; choose one of: "
                             f"{', '.join(OPTIMIZERS)}")
        if self.embeddings_mode is not None and self.embeddings_mode not in EMBEDDING_MODES:
            raise ValueError(f"unknown embeddings mode {self.embeddings_mode!r}; choose one "
                             f"of: {', '.join(EMBEDDING_MODES)}")
        if self.device.split(":")[0] not in DEVICES:
            raise ValueError(f"unknown device {self.device!r}; choose one of: "
                             f"{', '.join(DEVICES)}")
        build_task(self.task, supervision=self.supervision)  # valid supervision
        if self.checkpoint_every < 0:
            raise ValueError(f"--checkpoint-every {self.checkpoint_every}: must be >= 0 "
                             "(0: at the end of every epoch only)")
        for name in ("batch_size", "eval_batch_size", "epochs", "seeds", "hidden"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("lr", "emb_lr", "rel_lr"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and 0 < v <= MAX_LR):
                raise ValueError(f"--{name.replace('_', '-')} {v}: a learning rate must be in "
                                 f"(0, {MAX_LR:g}] (the papers use 0.05-0.1 with AdaGrad, "
                                 "0.001 with Adam)")
        for name in ("l2", "emb_l2"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise ValueError(f"--{name.replace('_', '-')} {v}: must be a finite number "
                                 ">= 0 (the papers use 1e-4)")
        for name in ("dropout", "emb_dropout"):
            v = getattr(self, name)
            if v is not None and not 0 <= v < 1:
                raise ValueError(f"--{name.replace('_', '-')} {v}: must be in [0, 1)")
        for name in ("max_train", "max_eval", "emb_dim", "head_hidden"):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise ValueError(f"--{name.replace('_', '-')} {v}: must be a positive integer "
                                 "(leave it out for the default)")
        if self.loss_reduction not in (None, *LOSS_REDUCTIONS):
            raise ValueError(f"unknown loss reduction {self.loss_reduction!r}; choose one of: "
                             f"{', '.join(LOSS_REDUCTIONS)}")
        if self.sentence_state not in (None, *SENTENCE_STATES):
            raise ValueError(f"unknown sentence state {self.sentence_state!r}; choose one of: "
                             f"{', '.join(SENTENCE_STATES)}")
        if self.embeddings is not None and not Path(self.embeddings).is_file():
            raise ValueError(f"--embeddings {self.embeddings}: no such file")


# ============================================================================ data
def _dataset_hint(dataset: str, out: str | os.PathLike, tree: str | None = None) -> str:
    trees = f" --trees {tree}" if tree else ""
    return (f"python -m data_prep.build --dataset {dataset} --src RAW_DATA_DIR "
            f"--out {out}{trees}")


def _build(dataset: str, src: Path, out: Path, trees: Sequence[str]) -> None:
    from data_prep import build as B  # the data path's Python API

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
    built, the error names the command that completes it.
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
            f"no raw {dataset} data ({RAW_PROBES.get(dataset)}); build it with "
            f"`{_dataset_hint(dataset, p / dataset)}`"
        )
    meta = D.load_meta(built)
    if meta.get("dataset") != dataset:
        raise DataError(
            f"{built} holds the {meta.get('dataset')!r} data set but the task needs "
            f"{dataset!r}; build it with `{_dataset_hint(dataset, p.parent / dataset)}`"
        )
    if tree not in meta.get("trees", []):
        _check_tree_kind(dataset, tree)
        raise DataError(
            f"{built} has no {tree!r} trees (built: {', '.join(meta.get('trees', []))}); "
            f"add them with `{_dataset_hint(dataset, built, tree)}`"
        )
    return built


def _check_tree_kind(dataset: str, tree: str) -> None:
    """Refuse a tree kind the data builder cannot make for ``dataset``."""
    from data_prep import build as B

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
    """Resolve the data directory, load the splits and adapt them to the task."""
    data_dir = resolve_data_dir(cfg.data, task.dataset, cfg.tree, runs_dir=cfg.runs_dir)
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
    splits = {}
    for name in available:
        sp = task.prepare_split(D.load_split(data_dir, name, cfg.tree))
        limit = cfg.max_train if name == "train" else cfg.max_eval
        if limit is not None and len(sp) > limit:
            sp = sp.subset(list(range(limit)))
        splits[name] = sp
    vocab = D.load_vocab(data_dir)
    try:
        relations = D.load_relations(data_dir, cfg.tree).names
    except FileNotFoundError:
        relations = []
    return RunData(data_dir=data_dir, meta=meta, vocab=vocab, relations=relations,
                   splits=splits, dev_split=dev,
                   label_names=task.label_names(meta.get("label_names")))


def _graph_max(splits: Iterable[D.Split], stat: Callable[[dgl.DGLGraph], int],
               start: int = 0) -> tuple[int, str]:
    """The largest ``stat(graph)`` over the graphs with edges of ``splits`` (``start`` if
    none is larger) and where it first occurs (``"train example 12 (sentence B)"``)."""
    best, where = start, ""
    for sp in splits:
        for side, graphs in (("", sp.graphs), (" (sentence B)", sp.graphs_b or [])):
            for i, g in enumerate(graphs):
                if g.num_edges():
                    v = stat(g)
                    if v > best:
                        best, where = v, f"{sp.name} example {i}{side}"
    return best, where


def _max_children(splits: Iterable[D.Split]) -> tuple[int, str]:
    return _graph_max(splits, lambda g: int(g.in_degrees().max()))


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
        lambda g: int(g.edata[G.REL].max()) if G.REL in g.edata else -1, start=-1)
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


# ============================================================================ model pieces
def _dgl_cuda_ok() -> bool:
    try:
        dgl.graph(([0], [1])).to("cuda")
        return True
    except Exception:
        return False


def resolve_device(cfg: RunConfig) -> tuple[torch.device, bool]:
    """``(device, graphs_on_device)``; refuses CUDA when unavailable."""
    if cfg.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device is available to torch here; "
                             "use --device cpu")
        on_device = _dgl_cuda_ok()
        if not on_device and cfg.engine == "dgl":
            raise ValueError(
                "--device cuda with --engine dgl: this DGL build is CPU-only, so "
                "prop_nodes_topo cannot run on the GPU; use --engine level (graphs stay on "
                "the CPU, features and index tensors move) or --device cpu"
            )
        return torch.device(cfg.device), on_device
    return torch.device("cpu"), True


def default_vectors(rd: RunData) -> Path | None:
    """A pre-trained vectors file next to the raw data the directory was built from."""
    src = rd.meta.get("src")
    if not src:
        return None
    glove = Path(src) / "glove"
    for name in DEFAULT_VECTORS.get(rd.meta.get("dataset"), ()) + DEFAULT_VECTORS["*"]:
        if (glove / name).is_file():
            return glove / name
    return None


def load_embeddings(cfg: RunConfig, rd: RunData, *,
                    explicit: bool = True) -> tuple[torch.Tensor | None, dict]:
    """The embedding matrix for the vocabulary (None for random) and a description.

    Without a vectors file, ``fixed`` is an error when the user asked for it
    (``explicit``); a defaulted mode falls back to random vectors with a warning.
    """
    if cfg.embeddings_mode == "random":
        return None, {"mode": "random", "path": None}
    path = Path(cfg.embeddings) if cfg.embeddings else default_vectors(rd)
    if path is None:
        if cfg.embeddings_mode == "fixed" and explicit:
            raise ValueError("--embeddings-mode fixed needs pre-trained vectors: pass "
                             "--embeddings PATH (GloVe text, plain or .gz)")
        log.warning("no pre-trained vectors found (pass --embeddings PATH); using random "
                    "word vectors")
        return None, {"mode": "random", "path": None, "requested": cfg.embeddings_mode}
    from data_prep.vectors import build_embedding_matrix

    weights, stats = build_embedding_matrix(list(rd.vocab.itos), path)
    info = {"mode": cfg.embeddings_mode, "path": str(path)}
    info.update(dataclasses.asdict(stats) if dataclasses.is_dataclass(stats) else {})
    info.pop("unk_examples", None)
    return weights, info


def _fused_ok(params: Sequence[torch.Tensor]) -> bool:
    """Can ``fused=True`` optimizers update these parameters (floating point, CPU or CUDA)?"""
    return bool(params) and all(p.dtype in (torch.float32, torch.float64, torch.float16,
                                            torch.bfloat16)
                                and p.device.type in ("cpu", "cuda") for p in params)


def build_optimizer(model: TreeLSTMModel, cfg: RunConfig) -> torch.optim.Optimizer:
    """AdaGrad/Adam; word embeddings in their own group (own lr, L2 ``emb_l2``, default 0),
    L2 ``l2`` on the rest; with ``rel_lr``, the cell's relation embeddings in a third group
    (that lr, no L2).

    Speed without changing the update (issue 5):

    * **AdaGrad**: the word embedding gets *sparse* gradients
      (``model.sparse_embedding_grad = True``: ``nn.Embedding(sparse=True)``), and AdaGrad's
      sparse path updates only the rows of the batch's words. For every other row the
      dense update is exactly a no-op (zero gradient: the accumulator and the row stay
      the same), so this is the same algorithm; it saves the dense ``(vocab, dim)``
      gradient, accumulator and square-root passes of every step (most of an SST epoch's
      optimizer time with 300-d vectors). The sparse path takes no weight decay, so
      ``emb_l2 > 0`` turns it off (dense gradients, same update).
    * **Adam**: dense embedding gradients. ``torch.optim.SparseAdam`` is *lazy* Adam (only
      the moments of the rows in the batch decay and update), a different algorithm, so
      it is not used; Adam's dense update is cheap anyway with the fused kernel.
    * The dense groups use the fused (single kernel, CPU or CUDA) implementation of the
      same update (``fused=True``) when the parameters allow it.
    """
    cfg = cfg.resolved()
    emb, rest = model.parameter_groups()
    rel = [p for p in model.cell.embedding_parameters() if p.requires_grad] \
        if cfg.rel_lr is not None else []
    if cfg.rel_lr is not None and not rel:
        raise ValueError(f"--rel-lr: cell {cfg.model!r} has no relation embeddings "
                         "(mtree and mtree-add have)")
    if cfg.emb_l2 and not emb:
        raise ValueError("--emb-l2: the word embeddings are fixed (not trained), so there is "
                         "nothing to regularize; use --embeddings-mode tuned or drop --emb-l2")
    rest = [p for p in rest if all(p is not q for q in rel)]
    # dense under DDP (it reduces dense tensors on every backend; same update, see above)
    sparse = cfg.optimizer == "adagrad" and bool(emb) and not cfg.emb_l2 \
        and not cfg.distributed
    model.sparse_embedding_grad = sparse
    if sparse:
        # torch's default (no invariant checks on sparse tensors), chosen explicitly: torch
        # otherwise warns when AdaGrad builds its sparse update
        torch.sparse.check_sparse_tensor_invariants.disable()
    groups: list[dict] = [{"params": rest, "lr": cfg.lr, "weight_decay": cfg.l2,
                           "fused": _fused_ok(rest)}]
    if emb:
        groups.append({"params": emb, "lr": cfg.emb_lr, "weight_decay": cfg.emb_l2,
                       "fused": not sparse and _fused_ok(emb)})
    if rel:  # relation embeddings at their own rate, no L2 (Tran §6.1: lr 0.1)
        groups.append({"params": rel, "lr": cfg.rel_lr, "weight_decay": 0.0,
                       "fused": _fused_ok(rel)})
    if cfg.optimizer == "adagrad":
        return torch.optim.Adagrad(groups)
    return torch.optim.Adam(groups)


def make_loader(split: D.Split, batch_size: int, *, shuffle: bool, seed: int = 0,
                schedule: bool = False, shard: tuple[int, int] | None = None) -> DataLoader:
    """Minibatches of ``split``; ``schedule``: build each batch's level schedule in the
    collate function (for ``engine="level"``; see :func:`gnn_treelstm.data.collate`).
    ``shard=(rank, world)``: this process's share of the same batches under data
    parallelism, ``batch_size`` being the global batch (:class:`ShardedBatches`)."""
    collate = functools.partial(D.collate, schedule=True) if schedule else D.collate
    gen = torch.Generator()
    gen.manual_seed(seed)
    if shard is not None:  # the one-process batches, each split over the ranks
        from torch.utils.data import RandomSampler, SequentialSampler

        data = D.TreeDataset(split)
        order = RandomSampler(data, generator=gen) if shuffle else SequentialSampler(data)
        return DataLoader(data, batch_sampler=ShardedBatches(order, batch_size, *shard),
                          collate_fn=collate, generator=gen if shuffle else None)
    return DataLoader(D.TreeDataset(split), batch_size=batch_size, shuffle=shuffle,
                      collate_fn=collate, generator=gen if shuffle else None)


class ShardedBatches:
    """The batches one process would draw (same sampler, same generator draws), each split
    round-robin over ``world`` ranks: rank ``r`` gets ``batch[r::world]``, so the ranks of a
    step together see exactly the one-process batch. ``last_global`` is the size of the
    global batch the last yielded share came from. A final batch smaller than ``world`` is
    topped up by repeating its first examples, so that every rank has a share."""

    def __init__(self, sampler: Iterable[int], batch_size: int, rank: int, world: int):
        self.sampler, self.batch_size, self.rank, self.world = sampler, batch_size, rank, world
        self.last_global = 0

    def __len__(self) -> int:
        return math.ceil(len(self.sampler) / self.batch_size)  # type: ignore[arg-type]

    def __iter__(self):
        batch: list[int] = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield self._share(batch)
                batch = []
        if batch:
            yield self._share(batch)

    def _share(self, batch: list[int]) -> list[int]:
        if len(batch) < self.world:
            batch = (batch * self.world)[:self.world]
        self.last_global = len(batch)
        return batch[self.rank::self.world]


def _to_device(batch: D.Batch, device: torch.device, graphs_on_device: bool) -> D.Batch:
    if device.type == "cpu":
        return batch
    if graphs_on_device:
        return batch.to(device)
    return D.Batch(batch.graph, batch.graph_b,
                   {k: v.to(device) for k, v in batch.targets.items()}, batch.index,
                   None if batch.schedule is None else batch.schedule.to(device))


def _word_counts(g: dgl.DGLGraph) -> np.ndarray:
    has_word = (g.ndata[G.WORD] != G.NO_WORD).to(torch.float32).cpu()
    seg = torch.repeat_interleave(torch.arange(g.batch_size), g.batch_num_nodes().cpu())
    return torch.zeros(g.batch_size).index_add_(0, seg, has_word).numpy()


@torch.no_grad()
def evaluate(model: TreeLSTMModel, split: D.Split, *, batch_size: int = 256,
             device: torch.device | str = "cpu", graphs_on_device: bool = True,
             tokens: Sequence[tuple[list[str], list[str] | None]] | None = None
             ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Metrics of ``model`` on ``split`` and the gathered per-example arrays.

    The arrays hold the task's ``gather`` output plus ``index`` (example id) and ``length``
    (words per sentence; the mean of both sentences for pairs, as Tai Fig 4).
    """
    device = torch.device(device)
    task = model.task
    was_training = model.training
    model.eval()
    parts = []
    level = model.cell.engine == "level"
    try:
        for batch in make_loader(split, batch_size, shuffle=False, schedule=level):
            lengths = _word_counts(batch.graph)
            if batch.graph_b is not None:
                lengths = (lengths + _word_counts(batch.graph_b)) / 2
            batch = _to_device(batch, device, graphs_on_device)
            out = model(batch.graph, batch.graph_b, schedule=batch.schedule)
            part = task.gather(out, batch)
            part["index"] = batch.index.cpu().numpy()
            part["length"] = lengths
            parts.append(part)
    finally:
        model.train(was_training)
    gathered = gather_batches(parts)
    toks = None
    if tokens is not None and len(tokens) >= len(split):
        toks = [tokens[int(i)] for i in gathered.get("index", [])]
    return task.metrics(gathered, toks), gathered


def release_free_heap() -> bool:
    """Return the C heap's free pages to the OS (glibc ``malloc_trim(0)``; False where
    there is no glibc). PyTorch's CPU tensors come from ``malloc``: batches of different
    sizes leave holes in the heap, and without this the resident set drifts upwards by
    10-30 MB an epoch although the live memory does not grow."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if not _MALLOC_TRIM:
        return False
    _MALLOC_TRIM(0)
    return True


_MALLOC_TRIM = None

#: glibc ``mallopt`` parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_heap_pages(threshold_mb: int = 1024, top_pad_mb: int = 64) -> bool:
    """Let freed tensor memory stay in the C heap between batches (glibc ``mallopt``;
    False where there is no glibc). Process-wide, so the CLIs call it, not the library.

    By default glibc serves allocations above its mmap threshold (128 KB, rising to at most
    32 MB) with fresh ``mmap`` pages and gives the heap's top back to the OS when it frees;
    every batch then allocates its buffers on new pages and pays a page fault per 4 KB
    (about 900 faults and 0.5 ms per batch of 25 SST trees with the level engine, ~10%).
    Raising the mmap and trim thresholds to ``threshold_mb`` and padding heap growth by
    ``top_pad_mb`` keeps those pages; :func:`release_free_heap`, which the trainer runs
    before every epoch, still returns the free ones to the OS."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    ok = all(mallopt(param, value << 20) == 1 for param, value in (
        (_M_MMAP_THRESHOLD, threshold_mb), (_M_TRIM_THRESHOLD, threshold_mb),
        (_M_TOP_PAD, top_pad_mb)))
    log.info("heap: mmap/trim thresholds %d MB, top pad %d MB (%s)", threshold_mb,
                top_pad_mb, "set" if ok else "mallopt refused")
    return ok


def reset_peak_memory(device: torch.device | str = "cpu") -> bool:
    """Start a new peak-memory window: free heap pages go back to the OS
    (:func:`release_free_heap`), then Linux's resident high-water mark (what
    ``getrusage``'s ``ru_maxrss`` reports; ``/proc/self/clear_refs`` ``5``) and, on CUDA,
    torch's peak are reset. Returns whether the RSS peak could be reset (else it is the
    process's)."""
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    release_free_heap()
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def memory_stats(device: torch.device | str = "cpu") -> dict[str, float]:
    """Memory of this process, in MiB: ``peak_rss_mb`` (the largest resident set since
    :func:`reset_peak_memory`, or since the start; ``getrusage``), ``rss_mb`` (resident now,
    from ``/proc/self/statm`` where there is one) and, on CUDA, ``cuda_peak_mb`` (most
    memory allocated by tensors since the reset) and ``cuda_allocated_mb`` (allocated now)."""
    out = {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
        out["rss_mb"] = round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    device = torch.device(device)
    if device.type == "cuda":
        out["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
        out["cuda_allocated_mb"] = round(torch.cuda.memory_allocated(device) / 2**20, 1)
    return out


def batch_objective(mean_loss: torch.Tensor, batch_size: int, reduction: str) -> torch.Tensor:
    """What one optimizer step minimizes, from the task's mean loss over a batch.

    ``mean``: the mean (Tai's code: loss and gradients divided by the batch size);
    ``sum``: the sum over the batch's examples, as Tran & Cheng's code does by calling
    ``backward`` once per example and stepping every 25 examples. With Adam the two differ
    only through L2 (weight decay is added to a gradient 25× larger, so it weighs 25× less)
    and ε.
    """
    if reduction == "mean":
        return mean_loss
    if reduction == "sum":
        return mean_loss * batch_size
    raise ValueError(f"unknown loss reduction {reduction!r}; choose one of: "
                     f"{', '.join(LOSS_REDUCTIONS)}")


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


ProgressFn = Callable[..., Iterable]


def train_model(
    cfg: RunConfig,
    rd: RunData,
    model_config: ModelConfig,
    *,
    seed: int,
    out_dir: Path,
    embeddings: torch.Tensor | None = None,
    progress: ProgressFn | None = None,
    on_epoch: Callable[[dict], None] | None = None,
    metrics_file: Path | None = None,
    config_record: dict | None = None,
    resume: bool = False,
) -> dict:
    """Train one model with one seed; return the per-seed result (best epoch, metrics).

    The training state is saved to ``out_dir/state.pt`` after every epoch and every
    ``cfg.checkpoint_every`` batches (:mod:`gnn_treelstm.resume`); ``resume`` continues
    from it (a fresh start when there is none)."""
    _seed_everything(seed)
    device, graphs_on_device = resolve_device(cfg)
    model = TreeLSTMModel(model_config)
    if embeddings is not None:
        model.load_embeddings(embeddings)
    model.to(device)
    task = model.task
    optimizer = build_optimizer(model, cfg)
    train, dev = rd.splits["train"], rd.splits[rd.dev_split]
    dev_tokens = rd.tokens(rd.dev_split) if getattr(task, "subsets", False) else None
    world = DIST.world_size() if cfg.distributed else 1
    main = DIST.is_main()
    loader = make_loader(train, cfg.batch_size, shuffle=True, seed=seed,
                         schedule=cfg.engine == "level",
                         shard=(DIST.rank(), world) if cfg.distributed else None)
    net: torch.nn.Module = model
    if cfg.distributed:  # gradients averaged over the ranks in backward
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, find_unused_parameters=True)
    best_score: float | None = None
    best: dict = {}
    epochs_done = []
    ckpt_path = out_dir / "best.pt"
    sel = task.selection_metric
    reduction = cfg.resolved().loss_reduction
    process_peak = 0.0
    # gradients checked for NaN/inf each step: all but the word embedding (a fault upstream
    # of it shows in the cell's gradients too); ~0.2 ms a step
    checked = [p for n, p in model.named_parameters()
               if p.requires_grad and not n.startswith("embedding.")]
    state = R.load_state(out_dir) if resume else None
    start_epoch, done_steps, partial = 1, 0, None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        best_score, best, epochs_done = state["best_score"], state["best"], state["epochs"]
        process_peak = state["process_peak"]
        start_epoch, done_steps = state["epoch"], state["step"]
        partial = state.get("partial")
        loader.generator.set_state(state["loader"])
        R.restore_rng(state["rng"])
        _truncate_metrics(metrics_file, seed, len(epochs_done))
        log.info("seed %d: resuming at epoch %d after %d batches (%s)", seed, start_epoch,
                 done_steps, out_dir / R.STATE_NAME)

    def snapshot(epoch: int, step: int, loader_state: torch.Tensor | None,
                 partial: dict | None) -> None:
        if cfg.distributed:
            return  # a distributed run does not resume (yet)
        R.save_state(out_dir, {
            "seed": seed, "epoch": epoch, "step": step, "loader": loader_state,
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "rng": R.capture_rng(), "best_score": best_score, "best": best,
            "epochs": epochs_done, "process_peak": process_peak, "partial": partial,
            "run_id": (config_record or {}).get("run_id")})

    for epoch in range(start_epoch, cfg.epochs + 1):
        model.train()
        process_peak = max(process_peak, memory_stats(device)["peak_rss_mb"])
        per_epoch_peak = reset_peak_memory(device)
        epoch_loader_state = loader.generator.get_state()  # replays this epoch's order
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=device)  # summed on the device: no sync per step
        n_ex, n_trees, skipped, skip_to = 0, 0, 0, 0
        if partial is not None and epoch == start_epoch:  # resumed inside this epoch
            loss_sum += partial["loss_sum"]
            n_ex, n_trees, skipped = partial["n_ex"], partial["n_trees"], partial["skipped"]
            t0 -= partial["seconds"]
            skip_to = done_steps
        it: Iterable = loader
        if progress is not None:
            it = progress(loader, total=len(loader),
                          desc=f"seed {seed} epoch {epoch}/{cfg.epochs}")
        for step, batch in enumerate(it, 1):
            if step <= skip_to:
                continue  # done before the run was stopped
            if step == skip_to + 1 and skip_to:
                R.restore_rng(state["rng"])  # as it was after batch ``skip_to``
            batch = _to_device(batch, device, graphs_on_device)
            out = net(batch.graph, batch.graph_b, schedule=batch.schedule)
            loss = task.loss(out, batch)
            b = len(batch)
            optimizer.zero_grad(set_to_none=True)
            objective = batch_objective(loss, b, reduction)
            if world > 1:  # DDP averages over the ranks: make that the global batch's
                # objective (the mean over the global batch, or its sum)
                glob = loader.batch_sampler.last_global
                objective = objective * (world if reduction == "sum" else b * world / glob)
            objective.backward()
            fault = _nonfinite(loss, checked)
            if world > 1 and DIST.all_sum([float(bool(fault))], device)[0] and not fault:
                fault = "another rank's loss or gradients are NaN or infinite"
            if fault:
                if not cfg.skip_nonfinite:
                    raise NonFiniteError(_nonfinite_message(
                        fault, epoch, step, batch, best, ckpt_path))
                skipped += 1
                log.warning("seed %d epoch %d step %d: %s; batch skipped (examples %s)",
                            seed, epoch, step, fault, _ids(batch))
                optimizer.zero_grad(set_to_none=True)
                continue
            optimizer.step()
            loss_sum += loss.detach() * b
            n_ex += b
            n_trees += b * (2 if batch.graph_b is not None else 1)
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 \
                    and step < len(loader):
                snapshot(epoch, step, epoch_loader_state, {
                    "loss_sum": float(loss_sum), "n_ex": n_ex, "n_trees": n_trees,
                    "skipped": skipped, "seconds": time.perf_counter() - t0})
            if step % 5 == 0 or step == len(loader):
                mean_loss = float(loss_sum) / max(n_ex, 1)
                if hasattr(it, "set_postfix"):
                    el = time.perf_counter() - t0
                    it.set_postfix(loss=f"{mean_loss:.4f}",
                                   trees_s=f"{n_trees / max(el, 1e-9):.0f}")
        total_loss = float(loss_sum)  # waits for the device: the epoch's work is done
        if world > 1:  # the epoch over all ranks
            total_loss, n_ex, n_trees, skipped = DIST.all_sum(
                [total_loss, n_ex, n_trees, skipped], device)
            n_ex, n_trees, skipped = int(n_ex), int(n_trees), int(skipped)
        train_seconds = time.perf_counter() - t0
        memory = memory_stats(device)  # the training epoch's peak (per_epoch_peak)
        process_peak = max(process_peak, memory["peak_rss_mb"])
        reset_peak_memory(device)
        t_eval = time.perf_counter()
        dev_metrics, _ = evaluate(model, dev, batch_size=cfg.eval_batch_size, device=device,
                                  graphs_on_device=graphs_on_device, tokens=dev_tokens)
        eval_seconds = time.perf_counter() - t_eval
        eval_memory = memory_stats(device)
        process_peak = max(process_peak, eval_memory["peak_rss_mb"])
        score = dev_metrics.get(sel, math.nan)
        improved = task.better(score, best_score)
        if improved:
            best_score = score
            best = {"epoch": epoch, "dev": dev_metrics}
        if improved and main:
            save_checkpoint(
                ckpt_path, model, vocab=rd.vocab, relations=rd.relations,
                label_names=rd.label_names, run_config=cfg.to_dict(),
                meta={"epoch": epoch, "seed": seed, "dev": dev_metrics,
                      "data_dir": str(rd.data_dir), "dataset": rd.meta.get("dataset"),
                      "tree": cfg.tree, "dev_split": rd.dev_split,
                      **(config_record or {})},
            )
        record = {
            "run_id": (config_record or {}).get("run_id"),
            "seed": seed, "epoch": epoch, "train_loss": total_loss / max(n_ex, 1),
            "train_seconds": round(train_seconds, 3),
            "trees_per_second": round(n_trees / max(train_seconds, 1e-9), 1),
            "skipped_nonfinite": skipped,
            "examples": n_ex, "dev": dev_metrics, "best": improved,
            "eval_seconds": round(eval_seconds, 3), **memory,
            "peak_rss_scope": "epoch" if per_epoch_peak else "process",
            "eval_peak_rss_mb": eval_memory["peak_rss_mb"],
            "process_peak_rss_mb": process_peak,
        }
        epochs_done.append(record)
        if metrics_file is not None:
            with open(metrics_file, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(_jsonable(record)) + "\n")
            append_csv(metrics_file.with_suffix(".csv"), record)
        log.info("seed %d epoch %d/%d: loss %.4f, dev %s %.4f%s, %.1fs (%.0f trees/s)",
                 seed, epoch, cfg.epochs, record["train_loss"], sel, score,
                 " (best)" if improved else "", train_seconds, record["trees_per_second"])
        snapshot(epoch + 1, 0, loader.generator.get_state(), None)  # the epoch is done
        if on_epoch is not None:
            on_epoch(record)
    if not best:
        raise RuntimeError(f"no epoch produced a finite dev {sel}; nothing to select")
    result = {"seed": seed, "best_epoch": best["epoch"], "dev": best["dev"],
              "checkpoint": str(ckpt_path),
              "seconds_per_epoch": float(np.median([r["train_seconds"] for r in epochs_done])),
              "peak_rss_mb": max(r["peak_rss_mb"] for r in epochs_done),
              "process_peak_rss_mb": process_peak,
              "epochs": epochs_done}
    if cfg.test and "test" in rd.splits and main:
        from .checkpoint import load_model

        ck = load_model(ckpt_path, device=device)
        test_tokens = rd.tokens("test") if getattr(task, "subsets", False) else None
        result["test"], _ = evaluate(ck.model, rd.splits["test"],
                                     batch_size=cfg.eval_batch_size, device=device,
                                     graphs_on_device=graphs_on_device, tokens=test_tokens)
        log.info("seed %d: best epoch %d, dev %s %.4f, test %s", seed, best["epoch"], sel,
                 best_score, _fmt(result["test"]))
    return result


def config_changes(recorded: dict[str, Any], cfg: RunConfig,
                   ignore: Iterable[str] = ()) -> list[tuple[str, Any, Any]]:
    """The :class:`RunConfig` fields (not in ``ignore``) whose value in ``cfg`` differs from
    ``recorded`` (a ``config.json``'s ``run_config``), as ``(field, recorded, now)``. A
    field added after the run was recorded counts as its default there."""
    want = json.loads(json.dumps(_jsonable(cfg.to_dict())))
    default = json.loads(json.dumps(_jsonable(RunConfig().to_dict())))
    had = {**{k: v for k, v in default.items() if k not in recorded}, **recorded}
    skip = set(ignore)
    return [(k, had.get(k), want.get(k)) for k in sorted(set(had) | set(want))
            if k not in skip and had.get(k) != want.get(k)]


def _resumed_run_id(out: Path, cfg: RunConfig) -> str:
    """The id of the run in ``out`` that ``cfg`` resumes; refuses another configuration."""
    path = out / "config.json"
    try:
        had = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise rundir.RunDirError(f"--resume {out}: no readable config.json ({exc}); it is "
                                 "not a run directory") from exc
    diff = config_changes(had.get("run_config", {}), cfg,
                          ignore=("name", "runs_dir", "checkpoint_every"))
    if diff:
        raise rundir.RunDirError(
            f"--resume {out}: the configuration differs from the run's "
            f"({', '.join(k for k, _, _ in diff)}); a run resumes with its recorded "
            "configuration")
    return had.get("run_id") or rundir.new_run_id()


def _truncate_metrics(metrics_file: Path | None, seed: int, epochs: int) -> None:
    """Drop the records of ``seed`` past its first ``epochs`` (written after the saved
    state, before the run was stopped), and rewrite ``metrics.csv`` to match."""
    if metrics_file is None or not metrics_file.exists():
        return
    kept = [json.loads(line) for line in metrics_file.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    kept = [r for r in kept if r.get("seed") != seed or r.get("epoch", 0) <= epochs]
    atomic_write(metrics_file, "".join(json.dumps(r) + "\n" for r in kept))
    csv_file = metrics_file.with_suffix(".csv")
    csv_file.unlink(missing_ok=True)
    for r in kept:
        append_csv(csv_file, r)


def _nonfinite(loss: torch.Tensor, params: Sequence[torch.Tensor]) -> str:
    """"" if the loss and the gradients of ``params`` are finite, else what is not."""
    if not bool(torch.isfinite(loss.detach())):
        return f"the training loss is {float(loss.detach())}"
    grads = [p.grad for p in params if p.grad is not None and not p.grad.is_sparse]
    if grads and not bool(torch.isfinite(torch.nn.utils.get_total_norm(grads))):
        return "a gradient is NaN or infinite"
    return ""


def _ids(batch: Any) -> str:
    ids = batch.index.tolist()
    return ", ".join(map(str, ids[:10])) + (f", ... ({len(ids)} in all)" if len(ids) > 10
                                            else "")


def _nonfinite_message(fault: str, epoch: int, step: int, batch: Any, best: dict,
                       ckpt: Path) -> str:
    kept = (f"{ckpt} holds the last good checkpoint (epoch {best['epoch']})" if best
            else "no checkpoint was written yet")
    return (f"{fault} at epoch {epoch}, step {step} (training examples {_ids(batch)}); "
            f"{kept}. Lower the learning rate (--lr), check those examples, or pass "
            "--skip-nonfinite to skip such batches and count them")


def _fmt(metrics: dict) -> str:
    return ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in metrics.items())


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, np.generic):
        return _jsonable(x.item())
    return x


def _write_json(path: Path, obj: Any) -> None:
    atomic_write(path, json.dumps(_jsonable(obj), indent=2) + "\n")


def _flat(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in record.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}_"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def append_csv(path: Path, record: dict[str, Any]) -> None:
    """Append one epoch record to ``metrics.csv`` (nested keys joined by ``_``, e.g.
    ``dev_accuracy``), writing the header with the first row: the same numbers as
    ``metrics.jsonl``, for spreadsheets and plotting tools."""
    import csv

    row = _flat(_jsonable(record))
    new = not path.exists()
    with open(path, "a", encoding="utf-8", newline="") as fh:
        if not new:  # the columns of the first row: a later extra key is dropped, not shifted
            with open(path, encoding="utf-8", newline="") as rf:
                fields = next(csv.reader(rf))
        else:
            fields = list(row)
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)


def run_config_yaml(cfg: RunConfig) -> str:
    """``config.yaml`` of a run: the resolved :class:`RunConfig` (every default filled in)
    as YAML, which ``gnn-treelstm train --config`` reads back. The run's ``name`` is left
    out, so training from the file makes a new run directory instead of overwriting this
    one (``--name`` picks one)."""
    import yaml

    body = {k: v for k, v in _jsonable(cfg.to_dict()).items() if k != "name"}
    return ("# the resolved configuration of this run; `gnn-treelstm train --config "
            "THIS_FILE` trains it again\n# (command-line flags override these keys)\n"
            + yaml.safe_dump(body, sort_keys=False, allow_unicode=True))


def aggregate(per_seed: list[dict], split: str) -> dict[str, dict]:
    """``{metric: {"mean", "std", "values"}}`` over seeds for one split."""
    keys: list[str] = []
    for r in per_seed:
        for k in r.get(split, {}):
            if k not in keys:
                keys.append(k)
    out = {}
    for k in keys:
        vals = [r[split].get(k) for r in per_seed if split in r]
        nums = [float(v) for v in vals if isinstance(v, int | float)]
        mean, std = M.mean_std(nums)
        out[k] = {"mean": mean, "std": std, "values": vals}
    return out


def run(cfg: RunConfig, *, progress: ProgressFn | None = None,
        on_epoch: Callable[[dict], None] | None = None, overwrite: bool = False,
        keep: Sequence[str] = (), resume: bool = False) -> dict:
    """Check, load, train ``cfg.seeds`` models, write the run directory; return results.

    The run directory is claimed first (:func:`gnn_treelstm.rundir.claim`): one writer at a
    time, and a directory that already holds a run is refused unless ``overwrite``;
    ``keep`` names files the caller put there for this run (the CLI's ``train.log``).
    ``resume``: continue the run in that directory where it stopped (its seeds' saved
    states, :mod:`gnn_treelstm.resume`); ``cfg`` must be the run's recorded configuration."""
    cfg.check()
    mode_given = cfg.embeddings_mode is not None
    cfg = cfg.resolved()
    task = build_task(cfg.task, supervision=cfg.supervision)
    resolve_device(cfg)
    rd = prepare_data(cfg, task)
    num_relations = int(rd.meta.get("num_relations", {}).get(cfg.tree, len(rd.relations))
                        or 1)
    check_compatibility(cfg, rd, num_relations)
    embeddings, emb_info = load_embeddings(cfg, rd, explicit=mode_given)
    if embeddings is not None and cfg.emb_dim is not None \
            and embeddings.shape[1] != cfg.emb_dim:
        raise ValueError(f"--emb-dim {cfg.emb_dim} but {emb_info['path']} has "
                         f"{embeddings.shape[1]}-dimensional vectors")
    emb_dim = int(embeddings.shape[1]) if embeddings is not None else (cfg.emb_dim or 300)
    model_config = ModelConfig(
        task=cfg.task, cell=cfg.model, vocab_size=len(rd.vocab), emb_dim=emb_dim,
        hidden=cfg.hidden, embeddings_mode=emb_info["mode"], dropout=cfg.dropout,
        emb_dropout=cfg.emb_dropout, head_hidden=cfg.head_hidden,
        supervision=task.supervision, num_relations=max(num_relations, 1),
        engine=cfg.engine, cell_kwargs=dict(cfg.cell_kwargs),
        sentence_state=cfg.sentence_state, head_kwargs=dict(cfg.head_kwargs),
    )
    TreeLSTMModel(model_config)  # fail on a bad architecture before writing anything
    name = cfg.name or f"{cfg.task}-{cfg.model}-{cfg.tree}-{time.strftime('%Y%m%d-%H%M%S')}"
    out = Path(cfg.runs_dir) / name
    if not cfg.distributed:
        with rundir.claim(out, overwrite=overwrite, keep=keep, resume=resume):
            return _train_run(cfg, task, rd, model_config, embeddings, emb_info,
                              num_relations, out, name, progress=progress,
                              on_epoch=on_epoch, resume=resume)
    # data parallel: rank 0 claims the directory and tells the others whether it could
    device, _ = resolve_device(cfg)
    if resume:
        raise ValueError("--resume of a --distributed run is not supported yet; run it "
                         "again with --overwrite")
    DIST.init(device)
    if not DIST.is_main():
        if DIST.all_sum([0.0], device)[0] < 1:
            raise rundir.RunDirError(f"rank 0 could not take {out} (see its message)")
        return _train_run(cfg, task, rd, model_config, embeddings, emb_info, num_relations,
                          out, name, progress=None, on_epoch=None, main=False)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(rundir.claim(out, overwrite=overwrite, keep=keep))
        except BaseException:
            DIST.all_sum([0.0], device)  # the others stop too
            raise
        DIST.all_sum([1.0], device)
        return _train_run(cfg, task, rd, model_config, embeddings, emb_info, num_relations,
                          out, name, progress=progress, on_epoch=on_epoch)


def _train_run(cfg: RunConfig, task: Task, rd: RunData, model_config: ModelConfig,
               embeddings: torch.Tensor | None, emb_info: dict, num_relations: int,
               out: Path, name: str, *, progress: ProgressFn | None,
               on_epoch: Callable[[dict], None] | None, resume: bool = False,
               main: bool = True) -> dict:
    """The body of :func:`run`, inside the claimed run directory ``out``; ``main=False``
    (ranks > 0 of a distributed run): train, write nothing, return ``{"rank": r}``."""
    metrics_file = out / "metrics.jsonl" if main else None
    counts = {k: len(v) for k, v in rd.splits.items()}
    run_id = _resumed_run_id(out, cfg) if resume else rundir.new_run_id()
    record = {"run_id": run_id, "run_config": cfg.to_dict(),
              "model_config": model_config.to_dict(),
              "data": {"dir": str(rd.data_dir), "dataset": rd.meta.get("dataset"),
                       "tree": cfg.tree, "examples": counts, "vocab_size": len(rd.vocab),
                       "num_relations": num_relations, "sample": rd.meta.get("sample"),
                       "dev_split": rd.dev_split},
              "embeddings": emb_info,
              "optimizer": {"name": cfg.optimizer, "lr": cfg.lr, "emb_lr": cfg.emb_lr,
                            "l2": cfg.l2, "emb_l2": cfg.emb_l2, "rel_lr": cfg.rel_lr,
                            "loss_reduction": cfg.loss_reduction},
              "task": {"name": task.name, "supervision": task.supervision,
                       "selection_metric": task.selection_metric},
              "device": cfg.device, "engine": cfg.engine,
              "torch_threads": torch.get_num_threads(),
              "openmp_env": {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                                        "OMP_NUM_THREADS") if k in os.environ}}
    if not resume and main:
        _write_json(out / "config.json", record)
        atomic_write(out / "config.yaml", run_config_yaml(cfg))
    log.info("run %s: %s/%s/%s on %s (%s)", out, cfg.task, cfg.model, cfg.tree, rd.data_dir,
             ", ".join(f"{k} {v}" for k, v in counts.items()))
    seeds = [cfg.seed + k for k in range(cfg.seeds)]
    per_seed = []
    for s in seeds:
        seed_dir = out if len(seeds) == 1 else out / f"seed-{s}"
        if main:
            seed_dir.mkdir(parents=True, exist_ok=True)
        done = R.load_seed_result(seed_dir) if resume else None
        if done is not None:
            log.info("seed %d: finished before the run was stopped (%s)", s,
                     seed_dir / R.SEED_RESULT_NAME)
            per_seed.append(done)
            continue
        result = train_model(
            cfg, rd, model_config, seed=s, out_dir=seed_dir, embeddings=embeddings,
            progress=progress, on_epoch=on_epoch, metrics_file=metrics_file,
            config_record={"data_examples": counts, "run_id": run_id}, resume=resume)
        if main:
            R.save_seed_result(seed_dir, _jsonable(result))
        per_seed.append(result)
    if not main:
        return {"rank": DIST.rank()}
    best_i = 0
    for i, r in enumerate(per_seed):
        if task.better(r["dev"].get(task.selection_metric, math.nan),
                       per_seed[best_i]["dev"].get(task.selection_metric, math.nan)):
            best_i = i
    if len(seeds) > 1:
        src = Path(per_seed[best_i]["checkpoint"])
        with open(src, "rb") as f:
            atomic_write(out / "best.pt", lambda dst: shutil.copyfileobj(f, dst))
    results = {
        "run_id": run_id, "name": name, "task": cfg.task, "model": cfg.model, "tree": cfg.tree,
        "selection_metric": task.selection_metric,
        "metric_names": list(task.metric_names),
        "seeds": [{k: v for k, v in r.items() if k != "epochs"} for r in per_seed],
        "best_seed": seeds[best_i], "checkpoint": str(out / "best.pt"),
        "dev": aggregate(per_seed, "dev"),
        "test": aggregate(per_seed, "test") if cfg.test and "test" in rd.splits else {},
        "seconds_per_epoch": float(np.median([r["seconds_per_epoch"] for r in per_seed])),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in per_seed),
        "process_peak_rss_mb": max(r["process_peak_rss_mb"] for r in per_seed),
        "data": record["data"],
    }
    _write_json(out / "results.json", results)
    results["run_dir"] = str(out)
    return results
