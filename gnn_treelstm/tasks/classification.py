r"""Sentence and phrase classification: SST-5, SST-2 (sentiment) and TREC (question type).

Head (Tai et al. 2015, §4.1): a softmax classifier on the hidden state of node ``j``::

    p̂(y | {x}_j) = softmax(W^(s) h_j + b^(s)),     ŷ_j = argmax_y p̂(y | {x}_j)

trained with the negative log-likelihood of the gold labels of the labelled nodes
(``--supervision phrase``, Tai §4.1; every labelled node of the tree) or of the root only
(``--supervision root``, the root-level setting of Tran & Cheng Table 1). With
``--supervision phrase-sequences`` (SST, sequential models on ``chain`` trees: Teng & Zhang's
BiLSTM baseline), every labelled phrase is its own chain labelled at its root
(:mod:`gnn_treelstm.trees.phrases`); the loss is the mean NLL of the chains' roots. As in
Tai's released code, the per-example loss is the *sum* over the example's labelled nodes, and the
minibatch loss is its mean over examples (Teng §6: "for Tree LSTMs we sum up errors at
every node"). Dropout (rate 0.5, Tai §5.3) is applied to the classifier's input.

Root predictions read the sentence vector: the root state, or the cell's
``sentence_vector`` (Teng & Zhang 2017 eq 16 for the bidirectional lexicalized Tree-LSTM:
``h = h↑_root ⊕ h↓_root ⊕ mean_i h'_i``; the final states for the sequential LSTMs).
Other nodes read ``h_j``, or the cell's ``node_vectors`` (eq 16's parts per phrase, as the
authors' code does). If the two sizes differ, roots get their own input matrix into the
same output layer. With Teng & Zhang's cells (``lex``, ``topdown``, ``bitree``) the
classifier has the ReLU hidden layer of eq 17::

    h_l = ReLU(W_hl h + b_hl),     P = softmax(W_lp h_l + b_lp)

with hidden size 128 for sentiment and 64 for question type (Teng §7.1); ``--head-hidden``
overrides this for any model.

Metrics: root (sentence-level) accuracy, which is what all three papers report, and, for
SST, all-phrase accuracy over every labelled node (Teng Table 1 reports both).

SST-2 (Tai §5.1): node labels 0,1 -> negative (0), 3,4 -> positive (1), 2 (neutral) ->
ignored; sentences whose root is neutral are dropped (6920/872/1821 sentences).
``--supervision phrase-neutral`` trains it as Tai et al.'s released code does
(``remap_labels``, ``TreeLSTMSentiment:predict``): neutral phrases keep a label, a third
class (2) of a 3-way softmax, and a sentence or phrase is predicted negative or positive by
the larger of those two outputs; neutral is trained, never predicted in the metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from gnn_treelstm import metrics as M
from gnn_treelstm.kernels.dropout import Dropout
from gnn_treelstm.tasks.base import (
    Encoded,
    Task,
    class_names,
    distribution,
    label_record,
    label_text,
)
from gnn_treelstm.tasks.registry import tasks
from gnn_treelstm.trees.data import label_order, to_sst2
from gnn_treelstm.trees.graph import IGNORE, LABEL

__all__ = ["ClassifierHead", "ClassificationTask", "SST5", "SST2", "TREC"]

class ClassifierHead(nn.Module):
    """Softmax classifier on node states / sentence vectors (Tai §4.1; Teng eq 17).

    Args:
        node_size: size of the node states ``h_j``.
        sent_size: size of the sentence vectors.
        num_classes: number of classes.
        hidden: 0 for Tai's linear softmax; > 0 for Teng's ReLU hidden layer (eq 17).
        dropout: dropout rate on the classifier's input.
        node_outputs: compute logits for every node (phrase supervision / phrase metrics).
    """

    def __init__(self, node_size: int, sent_size: int, num_classes: int, *, hidden: int = 0,
                 dropout: float = 0.5, node_outputs: bool = False) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"a classifier needs at least 2 classes, got {num_classes}")
        self.num_classes = num_classes
        self.hidden = int(hidden)
        self.node_outputs = node_outputs
        self.separate_sentence = sent_size != node_size
        first = self.hidden or num_classes
        self.dropout = Dropout(dropout)
        # W^(s) (Tai §4.1), or W_hl (Teng eq 17) when hidden > 0
        self.node_in = nn.Linear(node_size, first)
        self.sent_in = nn.Linear(sent_size, first) if self.separate_sentence else None
        self.out = nn.Linear(self.hidden, num_classes) if self.hidden else None  # W_lp
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.node_in, self.sent_in, self.out):
            if lin is not None:
                lin.reset_parameters()

    def _logits(self, lin: nn.Linear, v: torch.Tensor) -> torch.Tensor:
        z = lin(self.dropout(v))                  # (n, hidden or C)
        if self.out is not None:
            z = self.out(F.relu(z))               # eq 17: ReLU hidden layer -> (n, C)
        return z

    def forward(self, enc: Encoded) -> dict[str, torch.Tensor]:
        sent_lin = self.sent_in if self.sent_in is not None else self.node_in
        root_logits = self._logits(sent_lin, enc.sent[: enc.num_a])      # (B, C)
        out = {"root_logits": root_logits}
        if self.node_outputs:
            node_logits = self._logits(self.node_in, enc.nodes())        # (N, C)
            # roots are predicted from the sentence vector (a no-op when it is h[root])
            out["node_logits"] = node_logits.index_copy(0, enc.roots[: enc.num_a], root_logits)
        return out


class ClassificationTask(Task):
    """Root (and optionally phrase) classification with the NLL loss."""

    target_keys = ("label",)
    node_labels: bool = False  # the data carries gold labels on inner nodes (SST)
    #: the supervisions that train every labelled node (the others: the roots)
    phrase_supervisions: tuple[str, ...] = ("phrase",)

    @property
    def predicted_classes(self) -> int:
        """Classes ``0 .. k-1`` the metrics predict among (the argmax of those logits);
        classes from ``k`` on are trained, never predicted (SST-2's neutral phrases)."""
        return self.num_classes

    def build_head(self, node_size: int, sent_size: int, *, hidden: int,
                   dropout: float) -> ClassifierHead:
        return ClassifierHead(node_size, sent_size, self.num_classes, hidden=hidden,
                              dropout=dropout, node_outputs=self.node_labels)

    def loss(self, out: dict[str, torch.Tensor], batch: Any) -> torch.Tensor:
        if self.supervision in self.phrase_supervisions:
            logits = out["node_logits"]
            labels = batch.graph.ndata[LABEL].to(logits.device)
            n = out["root_logits"].shape[0]
            # Tai §4.1: NLL summed over the labelled nodes of a tree, averaged over trees.
            # The unlabelled nodes are ignored in place (ignore_index), not masked out: a
            # boolean mask's output size depends on the labels, which makes a GPU wait.
            # The labelled rows go first, in their order (a stable sort, made once per
            # batch by collate), so that the sum adds the same terms in the same order as
            # over the masked rows: the same loss to the bit, and the same gradient.
            first = getattr(batch, "label_order", None)
            first = label_order(labels) if first is None else first.to(logits.device)
            # (index_select, whose backward is an index_add, not indexing's index_put)
            return F.cross_entropy(logits.index_select(0, first), labels.index_select(0, first),
                                   ignore_index=IGNORE, reduction="sum") / max(n, 1)
        gold = batch.targets["label"].to(out["root_logits"].device)
        return F.cross_entropy(out["root_logits"], gold)

    def gather(self, out: dict[str, torch.Tensor], batch: Any) -> dict[str, np.ndarray]:
        k = self.predicted_classes
        probs = out["root_logits"].detach()[:, :k].softmax(-1)
        res = {
            "pred": probs.argmax(-1).cpu().numpy(),
            "gold": batch.targets["label"].cpu().numpy(),
            "prob": probs.max(-1).values.cpu().numpy(),
        }
        keep = self.examples_scored(batch)
        if keep is not None:
            res = {name: v[keep] for name, v in res.items()}
        if self.node_labels and "node_logits" in out:
            labels = batch.graph.ndata[LABEL].to(out["node_logits"].device)
            mask = (labels != IGNORE) & (labels < k)
            res["node_pred"] = out["node_logits"].detach()[mask][:, :k].argmax(-1).cpu().numpy()
            res["node_gold"] = labels[mask].cpu().numpy()
        return res

    def examples_scored(self, batch: Any) -> np.ndarray | None:
        """Phrase sequences: the sentences' own chains (root accuracy is theirs; every chain
        counts in phrase accuracy)."""
        if "sentence" in batch.targets:
            return batch.targets["sentence"].cpu().numpy()
        return None

    def metrics(self, gathered: dict[str, np.ndarray],
                tokens: Sequence[tuple[list[str], list[str] | None]] | None = None
                ) -> dict[str, float]:
        res = {"accuracy": M.accuracy(gathered["pred"], gathered["gold"])}
        if "node_pred" in gathered:
            res["phrase_accuracy"] = M.accuracy(gathered["node_pred"], gathered["node_gold"])
        res["count"] = int(len(gathered["gold"]))
        return res

    def describe(self, out: dict[str, torch.Tensor], i: int,
                 label_names: Sequence[str] | None) -> str:
        probs = out["root_logits"][i].detach()[: self.predicted_classes].softmax(-1)
        k = int(probs.argmax())
        name = label_names[k] if label_names is not None and k < len(label_names) else str(k)
        return f"{name} (p={float(probs[k]):.3f})"

    def record(self, out: dict[str, torch.Tensor], i: int,
               label_names: Sequence[str] | None) -> dict[str, Any]:
        """The sentence's label: the root's (all of the head's classes)."""
        return label_record(out["root_logits"][i], label_names)

    def verdict(self, record: dict[str, Any]) -> str:
        return label_text(record)

    def node_records(self, out: dict[str, torch.Tensor], nodes: slice,
                     label_names: Sequence[str] | None) -> list[dict[str, Any]]:
        if not self.node_labels:  # a label per sentence only (TREC)
            return super().node_records(out, nodes, label_names)
        if "node_logits" not in out:
            raise ValueError("--nodes: this model was trained on sentence labels only "
                             "(root supervision) and has no per-node outputs")
        logits = out["node_logits"][nodes]
        names = class_names(label_names, logits.shape[-1])
        return [{"label": names[int(p.argmax())], "probabilities": distribution(p, names)}
                for p in logits.softmax(-1)]


@tasks.register("sst-5")
class SST5(ClassificationTask):
    """Fine-grained sentiment (Tai §5.1): 5 classes on every node of the SST trees."""

    name = "sst-5"
    dataset = "sst"
    num_classes = 5
    node_labels = True
    supervisions = ("phrase", "root", "phrase-sequences")
    metric_names = ("accuracy", "phrase_accuracy")
    default_head_hidden_teng = 128  # Teng §7.1


@tasks.register("sst-2")
class SST2(SST5):
    """Binary sentiment (Tai §5.1): neutral sentences dropped, the two negative and the two
    positive classes merged (:data:`gnn_treelstm.trees.data.SST2_MAP`).

    ``phrase-neutral`` supervision: neutral phrases are a third class, trained and never
    predicted (:data:`gnn_treelstm.trees.data.SST2_NEUTRAL_MAP`; Tai et al.'s code)."""

    name = "sst-2"
    num_classes = 2
    supervisions = (*SST5.supervisions, "phrase-neutral")
    phrase_supervisions = ("phrase", "phrase-neutral")

    def __init__(self, supervision: str | None = None) -> None:
        super().__init__(supervision)
        self.neutral_class = self.supervision == "phrase-neutral"
        self.num_classes = 3 if self.neutral_class else 2  # the head's outputs

    @property
    def predicted_classes(self) -> int:
        return 2  # negative, positive

    def label_names(self, data_label_names: Sequence[str] | None) -> list[str]:
        return ["negative", "positive"] + (["neutral"] if self.neutral_class else [])

    def prepare_split(self, split: Any) -> Any:
        """:func:`gnn_treelstm.trees.data.to_sst2`: labels mapped, neutral sentences dropped."""
        return to_sst2(super().prepare_split(split), neutral_class=self.neutral_class)


@tasks.register("trec")
class TREC(ClassificationTask):
    """Question type (Li & Roth 2002), 6 coarse classes; softmax on the root (Teng §7)."""

    name = "trec"
    dataset = "trec"
    num_classes = 6
    metric_names = ("accuracy",)
    default_head_hidden_teng = 64  # Teng §7.1
