r"""Tasks for a data set of your own (``gnn-treelstm build --dataset jsonl``):
``classify``,
``pair-classify`` and ``pair-score``.

They are the built-in tasks with the size of the output read from the data instead of
fixed by a benchmark:

* ``classify`` (single sentences, a ``label``): Tai et al. (2015) §4.1's softmax on the
  root, ``p̂(y | x) = softmax(W^(s) h_root + b^(s))``, NLL loss, dropout 0.5 on its input,
  accuracy (as ``trec``; :class:`~gnn_treelstm.tasks.classification.ClassifierHead`).
* ``pair-classify`` (pairs, a ``label``): Tran & Cheng (2018) §5.3's
  ``softmax(W^(p) σ(W^(c) [h_A; h_B; h_A ⊙ h_B; |h_A − h_B|]))`` with a hidden layer of 50,
  NLL loss, accuracy (as ``sick-e``/``snli``;
  :class:`~gnn_treelstm.tasks.inference.InferenceHead`).
* ``pair-score`` (pairs, a ``score`` in ``[LO, HI]``): Tai §4.2 / eq 15's relatedness
  head over the integers ``r = [LO, LO+1, ..., HI]``: ``p̂ = softmax(W^(p) h_s + b^(p))``,
  ``ŷ = rᵀ p̂``, trained with ``KL(p ‖ p̂)`` to the sparse target ``p`` with ``rᵀ p = y``
  (:func:`~gnn_treelstm.tasks.relatedness.sparse_target` of ``y − LO + 1``); Pearson's r
  (model selection), Spearman's ρ and MSE (as ``sick-r``, which is the case LO=1, HI=5).

The number of classes (``num_classes``) and the score range (``score_min``,
``score_max``) are head options (``ModelConfig.head_kwargs``, saved in checkpoints);
:meth:`CustomTask.head_kwargs_from_data` reads them off the built data set's ``meta.json``
(``label_names``, ``score_range``; else the training scores' floor and ceiling), and the
training command passes them on (or ``--head-arg num_classes=K``). The tasks read any
built data set with the targets they need (``dataset`` is ``jsonl``, the default name of
``gnn-treelstm build --dataset jsonl``; ``any_dataset`` lets ``train`` accept another).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from gnn_treelstm.tasks.base import Task
from gnn_treelstm.tasks.classification import ClassificationTask, ClassifierHead
from gnn_treelstm.tasks.inference import Inference, InferenceHead
from gnn_treelstm.tasks.registry import tasks
from gnn_treelstm.tasks.relatedness import Relatedness, RelatednessHead, kl_loss, sparse_target

__all__ = ["CustomTask", "Classify", "PairClassify", "PairScore", "ScoreHead"]


class CustomTask(Task):
    """What the three tasks share: the output size comes from the data."""

    dataset = "jsonl"
    #: the task reads a built data set of any name that has its targets
    any_dataset: ClassVar[bool] = True

    @classmethod
    def head_kwargs_from_data(cls, meta: dict, train: Any = None) -> dict[str, Any]:
        """The head options this data set needs (``num_classes`` or the score range),
        from ``meta.json`` (and the training split's targets where meta has no range).

        Raises:
            ValueError: the data has no class names / scores for this task.
        """
        raise NotImplementedError

    def _check_labels(self, split: Any, meta: dict) -> None:
        names = meta.get("label_names")
        if not names:
            raise ValueError(f"task {self.name!r}: the data set {meta.get('dataset')!r} has no "
                             "class names (meta.json label_names); build it with labels")
        y = split.targets["label"]
        if len(y) and (int(y.min()) < 0 or int(y.max()) >= len(names)):
            raise ValueError(f"task {self.name!r}: {split.name} has class ids "
                             f"{int(y.min())}..{int(y.max())} but meta.json names "
                             f"{len(names)} classes")


def _num_classes(meta: dict, name: str) -> dict[str, Any]:
    names = meta.get("label_names")
    if not names or len(names) < 2:
        raise ValueError(f"task {name!r} needs a data set with at least 2 classes; "
                         f"{meta.get('dataset')!r} has label_names {names!r} (build it from "
                         "rows with a 'label')")
    return {"num_classes": len(names)}


def _given(value: int | None, what: str, name: str, minimum: int = 2) -> int:
    if value is None:
        raise ValueError(f"task {name!r} needs {what}: in Python, ModelConfig(..., "
                         f"head_kwargs={{{what!r}: K}}); gnn-treelstm train reads it from "
                         f"the data set's meta.json (or --head-arg {what}=K)")
    if int(value) != value or value < minimum:
        raise ValueError(f"task {name!r}: {what} must be an integer >= {minimum}, got {value}")
    return int(value)


@tasks.register("classify")
class Classify(ClassificationTask, CustomTask):
    """One sentence, one class: softmax on the root (Tai §4.1), accuracy."""

    name = "classify"
    dataset = "jsonl"
    metric_names = ("accuracy",)

    @classmethod
    def head_kwargs_from_data(cls, meta: dict, train: Any = None) -> dict[str, Any]:
        return _num_classes(meta, cls.name)

    def build_head(self, node_size: int, sent_size: int, *, hidden: int, dropout: float,
                   num_classes: int | None = None) -> ClassifierHead:
        self.num_classes = _given(num_classes, "num_classes", self.name)
        return ClassifierHead(node_size, sent_size, self.num_classes, hidden=hidden,
                              dropout=dropout)

    def prepare_split(self, split: Any) -> Any:
        split = super().prepare_split(split)
        self._check_labels(split, split.meta)
        return split


@tasks.register("pair-classify")
class PairClassify(Inference, CustomTask):
    """A pair, one class: Tran §5.3's head with ``|h_A − h_B|`` (the authors' code)."""

    name = "pair-classify"
    dataset = "jsonl"
    num_classes = 0

    @classmethod
    def head_kwargs_from_data(cls, meta: dict, train: Any = None) -> dict[str, Any]:
        return _num_classes(meta, cls.name)

    def build_head(self, node_size: int, sent_size: int, *, hidden: int, dropout: float,
                   num_classes: int | None = None, **head_kwargs: Any) -> InferenceHead:
        self.num_classes = _given(num_classes, "num_classes", self.name)
        return InferenceHead(sent_size, hidden=hidden, num_classes=self.num_classes,
                             dropout=dropout, **head_kwargs)

    def prepare_split(self, split: Any) -> Any:
        split = super().prepare_split(split)
        self._check_labels(split, split.meta)
        return split


class ScoreHead(RelatednessHead):
    """Tai eq 15's head over the scores ``r = [LO, ..., HI]``: ``ŷ = rᵀ p̂``."""

    def __init__(self, sent_size: int, *, score_min: int, score_max: int, hidden: int = 50,
                 dropout: float = 0.0) -> None:
        super().__init__(sent_size, hidden=hidden, num_classes=score_max - score_min + 1,
                         dropout=dropout)
        self.score_min, self.score_max = score_min, score_max
        self.r = torch.arange(score_min, score_max + 1, dtype=torch.float32)


@tasks.register("pair-score")
class PairScore(Relatedness, CustomTask):
    """A pair, one number in ``[LO, HI]``: Tai §4.2's relatedness head and KL loss."""

    name = "pair-score"
    dataset = "jsonl"
    num_classes = 0
    score_range: tuple[int, int] | None = None

    @classmethod
    def head_kwargs_from_data(cls, meta: dict, train: Any = None) -> dict[str, Any]:
        rng = meta.get("score_range")
        if rng is None:
            y = None if train is None else train.targets.get("score")
            if y is None or not len(y):
                raise ValueError(f"task {cls.name!r} needs scores; the data set "
                                 f"{meta.get('dataset')!r} has none (targets: "
                                 f"{meta.get('targets')})")
            lo, hi = math.floor(float(y.min())), math.ceil(float(y.max()))
            rng = [lo, max(hi, lo + 1)]
        return {"score_min": int(rng[0]), "score_max": int(rng[1])}

    def build_head(self, node_size: int, sent_size: int, *, hidden: int, dropout: float,
                   score_min: int | None = None, score_max: int | None = None) -> ScoreHead:
        lo = _given(score_min, "score_min", self.name, minimum=-(2 ** 31))
        hi = _given(score_max, "score_max", self.name, minimum=-(2 ** 31))
        if hi <= lo:
            raise ValueError(f"task {self.name!r}: score_max {hi} must be above score_min {lo}")
        self.score_range = (lo, hi)
        self.num_classes = hi - lo + 1
        return ScoreHead(sent_size, score_min=lo, score_max=hi, hidden=hidden,
                         dropout=dropout)

    def loss(self, out: dict[str, torch.Tensor], batch: Any) -> torch.Tensor:
        assert self.score_range is not None, "build_head sets the score range"
        lo, hi = self.score_range
        y = batch.targets["score"].to(out["log_probs"].device)
        if y.numel() and (float(y.min()) < lo or float(y.max()) > hi):
            raise ValueError(f"task {self.name!r}: scores [{float(y.min())}, {float(y.max())}] "
                             f"outside the model's range [{lo}, {hi}]")
        return kl_loss(out["log_probs"], sparse_target(y - lo + 1, self.num_classes))

    def prepare_split(self, split: Any) -> Any:
        split = super().prepare_split(split)
        rng = split.meta.get("score_range")
        y = split.targets["score"]
        if rng is not None and len(y) and (float(y.min()) < rng[0] or float(y.max()) > rng[1]):
            raise ValueError(f"task {self.name!r}: {split.name} has scores "
                             f"[{float(y.min())}, {float(y.max())}] outside meta.json's "
                             f"score_range {rng}")
        return split

    def describe(self, out: dict[str, torch.Tensor], i: int,
                 label_names: Sequence[str] | None) -> str:
        rng = f" ({self.score_range[0]}-{self.score_range[1]})" if self.score_range else ""
        return f"score {float(out['score'][i]):.3f}{rng}"
