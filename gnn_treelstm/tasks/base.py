"""What every task (head + loss + metrics) provides, and the encoder output it reads.

A task is the part of a model that sits on top of a Tree-LSTM cell. It knows which data
set it reads (``dataset``, the ``meta.json`` name), whether examples are sentence pairs,
how to build its head module from the cell's output sizes, its loss, and its metrics.

The encoder (:class:`gnn_treelstm.models.treelstm.TreeLSTMModel`) hands the head an
:class:`Encoded`: node states of the (batched) graph(s) and one sentence vector per
sentence. For pair data sets both sides are encoded in one batched graph, sentence A of
every pair first, so ``sent[:num_a]`` are the premises / left sentences and
``sent[num_a:]`` the hypotheses / right sentences.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import dgl
import numpy as np
import torch
from torch import nn

__all__ = ["Encoded", "Task", "gather_batches", "distribution", "class_names",
           "label_record", "label_text"]


@dataclass
class Encoded:
    """Output of the encoder for one batch.

    Attributes:
        graph: the batched graph that was encoded (for pairs: A-graphs then B-graphs).
        h: node states, ``(num_nodes, node_size)``.
        sent: sentence vectors, ``(num_sentences, sent_size)``: the root state, or the
            cell's ``sentence_vector`` (Teng eq 16) when it has one.
        roots: node id of every sentence's root in ``graph``, ``(num_sentences,)``.
        num_a: number of A-side sentences (``num_sentences`` for single sentences).
        node_fn: the cell's ``node_vectors`` if it has one (see :meth:`nodes`).
    """

    graph: dgl.DGLGraph
    h: torch.Tensor
    sent: torch.Tensor
    roots: torch.Tensor
    num_a: int
    node_fn: Callable[[dgl.DGLGraph, torch.Tensor], torch.Tensor] | None = None
    _nodes: torch.Tensor | None = dataclasses.field(default=None, repr=False)

    def nodes(self) -> torch.Tensor:
        """Per-node classifier input, ``(num_nodes, node_size)``: the cell's
        ``node_vectors`` when it has them (Teng's per-phrase eq 16 parts), else ``h``."""
        if self._nodes is None:
            self._nodes = self.h if self.node_fn is None else self.node_fn(self.graph, self.h)
        return self._nodes


class Task:
    """Base class of the tasks in the registry (see :mod:`gnn_treelstm.tasks`).

    Subclasses set the class attributes and implement :meth:`build_head`, :meth:`loss`,
    :meth:`gather` and :meth:`metrics`.
    """

    name: ClassVar[str] = ""
    dataset: ClassVar[str] = ""
    pair: ClassVar[bool] = False
    num_classes: ClassVar[int] = 0
    metric_names: ClassVar[tuple[str, ...]] = ()
    #: metric used for model selection on dev (higher is better unless listed below)
    selection_metric: ClassVar[str] = "accuracy"
    lower_is_better: ClassVar[frozenset[str]] = frozenset({"mse", "loss"})
    supervisions: ClassVar[tuple[str, ...]] = ("root",)
    #: dropout on the head's input (Tai §5.3, Tran §6.1: sentiment and inference only)
    default_dropout: ClassVar[float] = 0.5
    #: size of the head's hidden layer (Tai: none for classification, 50 for relatedness)
    default_head_hidden: ClassVar[int] = 0
    #: hidden layer size with Teng & Zhang's cells (eq 17; 0 = as above)
    default_head_hidden_teng: ClassVar[int] = 0
    #: the root state a pair task compares (``h``; ``c`` as Tran & Cheng's code)
    default_sentence_state: ClassVar[str] = "h"
    #: how a batch's per-example losses are combined (see training.LOSS_REDUCTIONS)
    default_loss_reduction: ClassVar[str] = "mean"
    #: L2 on the word embeddings (the papers' L2 is on the other parameters)
    default_emb_l2: ClassVar[float] = 0.0
    #: keyword arguments of the head that differ from its own defaults
    default_head_kwargs: ClassVar[dict[str, Any]] = {}
    #: graph-level target keys the task reads from ``Batch.targets``
    target_keys: ClassVar[tuple[str, ...]] = ("label",)

    def __init__(self, supervision: str | None = None) -> None:
        supervision = supervision or self.supervisions[0]
        if supervision not in self.supervisions:
            raise ValueError(
                f"task {self.name!r} supports --supervision "
                f"{' or '.join(self.supervisions)}, not {supervision!r}"
            )
        self.supervision = supervision

    # ------------------------------------------------------------------ configuration
    def head_hidden(self, hidden: int | None, teng: bool = False) -> int:
        """Resolve the head's hidden size: explicit value, else the paper's default
        (``teng``: the model is one of Teng & Zhang's, whose classifiers have eq 17's
        ReLU hidden layer)."""
        if hidden is not None:
            if hidden < 0:
                raise ValueError(f"head hidden size must be >= 0, got {hidden}")
            return int(hidden)
        if teng and self.default_head_hidden_teng:
            return self.default_head_hidden_teng
        return self.default_head_hidden

    def build_head(self, node_size: int, sent_size: int, *, hidden: int,
                   dropout: float) -> nn.Module:
        """The head module: ``head(encoded) -> dict`` of output tensors.

        ``node_size``: size of :meth:`Encoded.nodes` rows; ``sent_size``: size of the
        sentence vectors.
        """
        raise NotImplementedError

    def label_names(self, data_label_names: Sequence[str] | None) -> list[str] | None:
        """Names of the classes (default: the data set's ``meta.json`` names)."""
        return None if data_label_names is None else list(data_label_names)

    def better(self, a: float, b: float | None) -> bool:
        """Is selection score ``a`` better than ``b`` (``None`` = no score yet)?"""
        if b is None or b != b:  # None or NaN
            return a == a
        if a != a:
            return False
        if self.selection_metric in self.lower_is_better:
            return a < b
        return a > b

    # ------------------------------------------------------------------ data
    def prepare_split(self, split: Any) -> Any:
        """Adapt a loaded :class:`gnn_treelstm.trees.data.Split` to the task (default: as is).

        Checks that the graph-level targets the task needs are there.
        """
        missing = [k for k in self.target_keys if k not in split.targets]
        if missing:
            raise ValueError(
                f"task {self.name!r} needs graph-level targets {missing} but the data has "
                f"{sorted(split.targets)}; is this the {self.dataset!r} data set?"
            )
        if self.pair and split.graphs_b is None:
            raise ValueError(f"task {self.name!r} needs sentence pairs but the data has none")
        return split

    # ------------------------------------------------------------------ training
    def loss(self, out: dict[str, torch.Tensor], batch: Any) -> torch.Tensor:
        """Mean over the batch's examples of the per-example loss (Tai §4)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ evaluation
    def gather(self, out: dict[str, torch.Tensor], batch: Any) -> dict[str, np.ndarray]:
        """Per-example (and per-node) arrays from one batch, for :meth:`metrics`; the
        examples are those :meth:`examples_scored` keeps."""
        raise NotImplementedError

    def examples_scored(self, batch: Any) -> np.ndarray | None:
        """Which of a batch's examples the per-example arrays of :meth:`gather` describe (a
        boolean mask), or ``None`` for all of them."""
        return None

    def metrics(self, gathered: dict[str, np.ndarray],
                tokens: Sequence[tuple[list[str], list[str] | None]] | None = None
                ) -> dict[str, float]:
        """Metrics from the concatenated :meth:`gather` arrays.

        ``tokens`` (optional, aligned with the examples) lets pair tasks compute subsets.
        """
        raise NotImplementedError

    def example_scores(self, gathered: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``(prediction, gold)`` per example, for length curves (Tai Figs 3-4)."""
        return gathered["pred"], gathered["gold"]

    def curve_metric(self) -> str:
        """The metric a length curve shows."""
        return "accuracy"

    def describe(self, out: dict[str, torch.Tensor], i: int,
                 label_names: Sequence[str] | None) -> str:
        """Human-readable prediction of example ``i`` of a batch."""
        raise NotImplementedError

    # ------------------------------------------------------------------ prediction
    def record(self, out: dict[str, torch.Tensor], i: int,
               label_names: Sequence[str] | None) -> dict[str, Any]:
        """Example ``i`` of a batch's outputs as fields of a ``gnn-treelstm predict``
        record: ``label`` and ``probabilities`` (class name -> probability,
        :func:`label_record`) for a classifier, ``score`` and its distribution for a
        scorer. ``label_names``: the checkpoint's class names (``None``: the class ids).

        Raises:
            ValueError: ``label_names`` does not match the head's classes.
        """
        raise NotImplementedError

    def node_records(self, out: dict[str, torch.Tensor], nodes: slice,
                     label_names: Sequence[str] | None) -> list[dict[str, Any]]:
        """``label`` and ``probabilities`` of the batch's nodes ``nodes`` (one example's
        tree; ``predict --nodes``), for a task that labels every node."""
        raise ValueError(f"--nodes: the {self.name} task predicts one label per "
                         f"{'pair' if self.pair else 'sentence'}, not one per node")

    def verdict(self, record: dict[str, Any]) -> str:
        """The prediction of a :meth:`record` in ``predict``'s text output: the columns
        before the sentence (``label<TAB>p`` for a classifier, the score for a scorer)."""
        raise NotImplementedError


def distribution(probs: torch.Tensor, names: Sequence[str]) -> dict[str, float]:
    """Class name -> probability (6 decimals) of one example: a record's ``probabilities``."""
    return {name: round(float(p), 6) for name, p in zip(names, probs.tolist())}


def class_names(label_names: Sequence[str] | None, count: int) -> list[str]:
    """The names of a head's ``count`` classes: ``label_names``, else the class ids.

    Raises:
        ValueError: ``label_names`` names another number of classes.
    """
    names = list(label_names or [])
    if names and len(names) != count:
        raise ValueError(f"the checkpoint names {len(names)} labels ({', '.join(names)}) "
                         f"but its head predicts {count} classes")
    return names or [str(k) for k in range(count)]


def label_record(logits: torch.Tensor, label_names: Sequence[str] | None) -> dict[str, Any]:
    """``label`` (the most probable class) and ``probabilities`` of one row of logits."""
    names = class_names(label_names, logits.shape[-1])
    probs = logits.softmax(-1)
    return {"label": names[int(probs.argmax())], "probabilities": distribution(probs, names)}


def label_text(record: dict[str, Any]) -> str:
    """``label<TAB>p``: a classifier's :meth:`Task.verdict`."""
    return f"{record['label']}\t{record['probabilities'][record['label']]:.3f}"


def gather_batches(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate the :meth:`Task.gather` outputs of several batches."""
    if not parts:
        return {}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
