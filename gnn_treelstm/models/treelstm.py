"""The full model: word embedding -> Tree-LSTM cell (from the registry) -> task head.

:class:`ModelConfig` holds everything needed to rebuild a model (the checkpoint stores it),
and :class:`TreeLSTMModel` is built from the config alone::

    x_j   = E[word_j]      for nodes with a word, 0 for the others (NO_WORD rows masked)
    x_j   = dropout(x_j)   (Teng §6: dropout on the lexical input; off by default)
    h, c  = cell(graph, x)                          node states (Tai §3, Teng §4, Tran §3)
    s     = cell.sentence_vector(graph, h)          if the cell defines one (Teng eq 16)
          = h[root]                                 otherwise (``sentence_state="h"``)
          = c[root]                                 ``sentence_state="c"``: the root's memory
                                                    cell, as Tran & Cheng's released code
                                                    feeds its heads
    n     = cell.node_vectors(graph, h)             per-node classifier input, if defined
          = h                                       otherwise
    out   = head(n, s)                              (see gnn_treelstm.tasks)

Embedding modes (Tai Table 2 rows): ``tuned`` (pre-trained vectors, updated during
training), ``fixed`` (pre-trained, frozen) and ``random`` (uniform in [-0.05, 0.05],
updated). For pair tasks both sentences of every pair are encoded in one batched graph
with the same cell (shared weights, Tai §4.2).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from dataclasses import dataclass, field
from typing import Any

import dgl
import torch
from torch import nn

from gnn_treelstm.cells import build_cell, cells, check_cell_options
from gnn_treelstm.cells.base import ENGINES, TreeCell
from gnn_treelstm.kernels.dropout import Dropout
from gnn_treelstm.tasks import Encoded, Task, build_task
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.schedule import LevelSchedule

log = logging.getLogger(__name__)

__all__ = ["ModelConfig", "TreeLSTMModel", "EMBEDDING_MODES", "SENTENCE_STATES", "cell_accepts",
           "meta_model"]

EMBEDDING_MODES = ("tuned", "fixed", "random")
#: which root state is the sentence vector: ``h`` (the papers' text) or ``c`` (Tran's code)
SENTENCE_STATES = ("h", "c")


@dataclass
class ModelConfig:
    """Everything that determines a model's architecture.

    Attributes:
        task: task registry name (``sst-5``, ``sick-r``, ...).
        cell: cell registry name (``nary``, ``childsum``, ...).
        vocab_size: rows of the word embedding (``len(vocab.json)``).
        emb_dim: word vector size (300 in the papers; 50 with the GloVe 6B.50d subset).
        hidden: cell memory size ``d`` (Tai Table 1: 150 / 168 / 142 ...).
        embeddings_mode: ``tuned``, ``fixed`` or ``random``.
        dropout: dropout on the head's input (None: the task's default).
        emb_dropout: dropout on the word embeddings (Teng §6).
        head_hidden: hidden layer of the head (None: the task's default, see ``teng_head``).
        teng_head: the head is Teng & Zhang's classifier (eq 17), whose default hidden
            layer is the task's ``default_head_hidden_teng`` (a ReLU layer of 128 for SST,
            64 for TREC). Training sets it from the cell's paper family
            (:func:`gnn_treelstm.cells.run_defaults`, ``teng_head``: lex, topdown, bitree).
        supervision: ``root`` or ``phrase`` (SST; None: the task's default).
        num_relations: size of the tree kind's relation vocabulary.
        engine: ``dgl`` or ``level`` (passed to the cell).
        cell_kwargs: extra keyword arguments of the cell.
        sentence_state: which root state is the sentence vector, ``h`` or ``c`` (None:
            the task's default; cells with their own ``sentence_vector`` need ``h``).
        head_kwargs: extra keyword arguments of the task's head (over the task's
            defaults), e.g. ``{"features": "abs", "activation": "relu"}`` for inference.
    """

    task: str = "sst-5"
    cell: str = "nary"
    vocab_size: int = 1
    emb_dim: int = 300
    hidden: int = 150
    embeddings_mode: str = "tuned"
    dropout: float | None = None
    emb_dropout: float = 0.0
    head_hidden: int | None = None
    teng_head: bool = False
    supervision: str | None = None
    num_relations: int = 1
    engine: str = "dgl"
    cell_kwargs: dict[str, Any] = field(default_factory=dict)
    sentence_state: str | None = None
    head_kwargs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"ModelConfig: unknown fields {unknown}; known: {sorted(known)}")
        return cls(**d)

    def validate(self) -> None:
        if self.vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {self.vocab_size}")
        if self.emb_dim <= 0 or self.hidden <= 0:
            raise ValueError(f"emb_dim and hidden must be positive, got {self.emb_dim}, "
                             f"{self.hidden}")
        if self.embeddings_mode not in EMBEDDING_MODES:
            raise ValueError(f"unknown embeddings mode {self.embeddings_mode!r}; choose one of: "
                             f"{', '.join(EMBEDDING_MODES)}")
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; choose one of: "
                             f"{', '.join(ENGINES)}")
        for name in ("dropout", "emb_dropout"):
            v = getattr(self, name)
            if v is not None and not 0 <= v < 1:
                raise ValueError(f"{name} must be in [0, 1), got {v}")
        if self.num_relations <= 0:
            raise ValueError(f"num_relations must be positive, got {self.num_relations}")
        if not isinstance(self.head_kwargs, dict) or not isinstance(self.cell_kwargs, dict):
            raise ValueError(f"head_kwargs and cell_kwargs must be dicts, got "
                             f"{self.head_kwargs!r} and {self.cell_kwargs!r}")
        check_cell_options(self.cell, self.cell_kwargs)
        if self.sentence_state not in (None, *SENTENCE_STATES):
            raise ValueError(f"unknown sentence state {self.sentence_state!r}; choose one of: "
                             f"{', '.join(SENTENCE_STATES)}")


def cell_accepts(name: str, param: str) -> bool:
    """Does the cell factory registered as ``name`` take keyword ``param``?"""
    factory = cells.get(name)
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return False
    if param in sig.parameters:
        return True
    return False


def meta_model(config: ModelConfig) -> TreeLSTMModel | None:
    """The model ``config`` makes, built on torch's ``meta`` device: its weights have their
    shapes and no storage, so they are counted without allocating them. None where the
    model cannot be built there (a cell that needs real tensors while it is built; an
    invalid ``config`` is also None: building it for real reports why). ``RuntimeError``
    where a weight's size overflows torch's count."""
    try:
        with torch.device("meta"):
            return TreeLSTMModel(config)
    except Exception as exc:  # noqa: BLE001 - any other failure: the model is not countable
        if isinstance(exc, RuntimeError) and "overflow" in str(exc):
            raise
        return None


def _schedule_roots(schedule: LevelSchedule, graph: dgl.DGLGraph,
                    device: torch.device) -> torch.Tensor:
    """The roots of ``graph`` as :func:`gnn_treelstm.trees.graph.batch_roots` finds them,
    read from ``schedule`` (built once per batch; the cell checked it against ``graph``:
    the same edges, so the same parentless nodes) instead of from the graph's out-degrees
    on every forward; the graph's when the schedule carries none. The same refusal of a
    batch whose graphs are not single trees (a shape: no device synchronisation)."""
    roots = schedule.roots
    if roots is None or (graph.batch_size > 1 and roots.shape[0] != graph.batch_size):
        return G.batch_roots(graph).to(device)  # (a miscount: its error, naming the counts)
    return roots if roots.device == device else roots.to(device, non_blocking=True)


class TreeLSTMModel(nn.Module):
    """Embedding + cell + task head, built from a :class:`ModelConfig` alone."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        self.task: Task = build_task(config.task, supervision=config.supervision)
        self.embedding = nn.Embedding(config.vocab_size, config.emb_dim)
        self.emb_dropout = Dropout(config.emb_dropout)
        kwargs = dict(config.cell_kwargs)
        if cell_accepts(config.cell, "num_relations"):
            kwargs.setdefault("num_relations", config.num_relations)
        self.cell: TreeCell = build_cell(config.cell, config.emb_dim, config.hidden,
                                         engine=config.engine, **kwargs)
        self.has_sentence_vector = callable(getattr(self.cell, "sentence_vector", None))
        self.has_node_vectors = callable(getattr(self.cell, "node_vectors", None))
        self.sentence_state = config.sentence_state or self.task.default_sentence_state
        if self.sentence_state == "c" and self.has_sentence_vector:
            raise ValueError(
                f"cell {config.cell!r} builds its own sentence vector (sentence_vector); "
                "sentence_state 'c' needs a cell whose sentence vector is a root state: "
                "use sentence_state 'h'")
        sent_size = self.cell.sentence_size if self.has_sentence_vector else self.cell.out_size
        node_size = sent_size if self.has_node_vectors else self.cell.out_size
        dropout = self.task.default_dropout if config.dropout is None else config.dropout
        head_kwargs = {**self.task.default_head_kwargs, **config.head_kwargs}
        try:
            self.head = self.task.build_head(
                node_size, sent_size,
                hidden=self.task.head_hidden(config.head_hidden, config.teng_head),
                dropout=dropout, **head_kwargs,
            )
        except TypeError as exc:
            raise ValueError(f"task {config.task!r}: bad head option in {head_kwargs} "
                             f"({exc})") from exc
        # the defaults resolved now are part of the architecture: a checkpoint rebuilds this
        # head even if a task default changes later
        self.config = dataclasses.replace(config, sentence_state=self.sentence_state,
                                          head_kwargs=head_kwargs)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Word vectors uniform in [-0.05, 0.05] (Tai's code for words without a vector);
        the cell and head initialize themselves in their constructors."""
        nn.init.uniform_(self.embedding.weight, -0.05, 0.05)
        self.embedding.weight.requires_grad_(self.config.embeddings_mode != "fixed")

    # ------------------------------------------------------------------ embeddings
    def load_embeddings(self, weights: torch.Tensor) -> None:
        """Copy pre-trained vectors ``(vocab_size, emb_dim)`` into the embedding."""
        if tuple(weights.shape) != tuple(self.embedding.weight.shape):
            raise ValueError(
                f"embedding matrix has shape {tuple(weights.shape)} but the model expects "
                f"{tuple(self.embedding.weight.shape)} (vocab_size, emb_dim); pass --emb-dim "
                f"{weights.shape[1]} or use vectors of dimension {self.config.emb_dim}"
            )
        with torch.no_grad():
            self.embedding.weight.copy_(weights)

    @property
    def sparse_embedding_grad(self) -> bool:
        """Whether the word embedding's gradient is a sparse tensor (rows of the batch's
        words only) instead of a dense ``(vocab_size, emb_dim)`` one. Same values; an
        optimizer that takes sparse gradients (AdaGrad, SGD) then touches only those rows.
        The training loop turns it on for AdaGrad
        (:func:`gnn_treelstm.training.optim.build_optimizer`); it is not part of the
        architecture (not in the config)."""
        return bool(self.embedding.sparse)

    @sparse_embedding_grad.setter
    def sparse_embedding_grad(self, value: bool) -> None:
        self.embedding.sparse = bool(value)

    def embed(self, graph: dgl.DGLGraph) -> torch.Tensor:
        """Word vectors per node, zero where the node has no word. ``(N, emb_dim)``."""
        words = graph.ndata[G.WORD]
        # checked where the graph lives (the CPU, usually): no device sync per batch
        if words.numel() and int(words.max()) >= self.config.vocab_size:
            raise ValueError(
                f"word id {int(words.max())} is outside the vocabulary of "
                f"{self.config.vocab_size} words; the graphs were built with another vocab.json"
            )
        # graphs may stay on the CPU (CPU-only DGL) while the model is on the GPU
        words = words.to(self.embedding.weight.device, non_blocking=True)
        has_word = (words != G.NO_WORD).unsqueeze(-1)                # (N, 1)
        x = self.embedding(words.clamp(min=0)) * has_word            # (N, emb_dim)
        return self.emb_dropout(x)

    # ------------------------------------------------------------------ forward
    def encode(self, graph: dgl.DGLGraph, graph_b: dgl.DGLGraph | None = None, *,
               schedule: LevelSchedule | None = None, num_a: int | None = None) -> Encoded:
        """Run the cell on one batch (pairs: A and B graphs batched together).

        ``schedule``: the level schedule of that graph (``graph``, or
        ``dgl.batch([graph, graph_b])``), as :func:`gnn_treelstm.trees.data.collate` builds it;
        passed to the cell (level engine). Without it the level engine builds its own.
        ``num_a``: ``graph`` is a pair batch already batched together (its first ``num_a``
        sentences the A sides, then the B sides, as ``collate`` builds it); ``graph_b`` is
        then None.
        """
        if num_a is not None:
            if graph_b is not None or not 0 <= num_a <= graph.batch_size:
                raise ValueError(
                    f"num_a={num_a}: a pair batch batched together is one graph of "
                    f"{graph.batch_size} sentences, its first num_a the A sides (no graph_b)")
            g = graph
        else:
            num_a = graph.batch_size
            g = graph if graph_b is None else dgl.batch([graph, graph_b])
        if schedule is not None and schedule.num_nodes != g.num_nodes():
            raise ValueError(
                f"the schedule has {schedule.num_nodes} nodes but the batch's graph has "
                f"{g.num_nodes()}; build it from the same graph (for pairs: "
                "dgl.batch([graph, graph_b]), as gnn_treelstm.trees.data.collate does)"
            )
        x = self.embed(g)
        if schedule is not None and self.cell.engine == "level":
            h, c = self.cell(g, x, schedule=schedule)                # (N, out_size)
            roots = _schedule_roots(schedule, g, h.device)           # checked by the cell
        else:
            h, c = self.cell(g, x)                                   # (N, out_size)
            roots = G.batch_roots(g).to(h.device)                    # (num_sentences,)
        if self.has_sentence_vector:
            sent = self.cell.sentence_vector(g, h)
            if sent.shape[-1] != self.cell.sentence_size:  # shapes only: no synchronisation
                raise ValueError(
                    f"{type(self.cell).__name__}.sentence_vector returns rows of "
                    f"{sent.shape[-1]} but its sentence_size is {self.cell.sentence_size}, "
                    "the width the model's head was built for: a cell whose sentence "
                    "vector is not out_size wide overrides the sentence_size property")
        else:
            sent = (c if self.sentence_state == "c" else h).index_select(0, roots)  # (B, d)
        node_fn = self.cell.node_vectors if self.has_node_vectors else None
        return Encoded(graph=g, h=h, sent=sent, roots=roots, num_a=num_a, node_fn=node_fn)

    def forward(self, graph: dgl.DGLGraph, graph_b: dgl.DGLGraph | None = None, *,
                schedule: LevelSchedule | None = None,
                num_a: int | None = None) -> dict[str, torch.Tensor]:
        pair = graph_b is not None or num_a is not None
        if self.task.pair and not pair:
            raise ValueError(f"task {self.task.name!r} needs sentence pairs: pass graph_b")
        if not self.task.pair and pair:
            raise ValueError(f"task {self.task.name!r} takes single sentences, got a pair")
        return self.head(self.encode(graph, graph_b, schedule=schedule, num_a=num_a))

    def parameter_groups(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """``(word embedding parameters that train, all other trainable parameters)``."""
        emb = [p for p in self.embedding.parameters() if p.requires_grad]
        emb_ids = {id(p) for p in self.embedding.parameters()}
        rest = [p for p in self.parameters() if p.requires_grad and id(p) not in emb_ids]
        return emb, rest
