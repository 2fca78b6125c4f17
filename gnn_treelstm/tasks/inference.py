r"""Natural language inference: SICK-E and SNLI (Tran & Cheng 2018, §5.3).

With ``h_P`` and ``h_H`` the representations of the premise and the hypothesis
(following Bowman et al. 2016)::

    x_c = [h_P ; h_H ; h_P ⊙ h_H ; |h_P − h_H|]        (B, 4d)
    p̂_θ = softmax(W^(p) σ(W^(c) x_c))                   over {entailment, contradiction,
                                                          neutral} (the data's label order)

with a hidden layer of size 50 (Tran §6.1), dropout 0.5 on the features, and the negative
log-likelihood of the gold labels as the loss.

The difference feature. Tran §5.3 says "their difference"; the authors' released code,
which produced their tables, uses the *absolute* difference ``|h_P − h_H|``, and so does
this task by default (``features="abs"``). The signed difference adds nothing: ``W [h_P;
h_H; h_P − h_H]`` is ``W' [h_P; h_H]`` for some ``W'``, so with it the head has no distance
feature at all. Measured on SICK-E, Tree-LSTM(D), 3 seeds, mean (sample std): 71.4 (0.6) %
with the signed difference, 83.0 (0.1) % with the absolute one (Tran Table 3: 82.9 (0.3); see
docs/RESULTS.md). ``features="paper"`` keeps the signed version.

Metric: accuracy; on SICK also the two subsets of Tran Table 3: *LS*, pairs whose premise
has at least 18 words, and *Negation*, pairs where a negation word (*not*, *n't*, *no*)
appears in the hypothesis but not in the premise.
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
from gnn_treelstm.tasks.base import Encoded, Task, label_record, label_text
from gnn_treelstm.tasks.registry import tasks

__all__ = ["InferenceHead", "pair_features", "FEATURES", "ACTIVATIONS", "Inference",
           "SickEntailment", "SNLI", "NEGATION_WORDS", "LONG_PREMISE", "subset_masks"]

NEGATION_WORDS = frozenset({"not", "n't", "no"})
LONG_PREMISE = 18


def subset_masks(tokens: Sequence[tuple[Sequence[str], Sequence[str] | None]]
                 ) -> dict[str, np.ndarray]:
    """Boolean masks of Tran Table 3's subsets, from (premise, hypothesis) tokens."""
    ls = np.zeros(len(tokens), dtype=bool)
    neg = np.zeros(len(tokens), dtype=bool)
    for i, (prem, hyp) in enumerate(tokens):
        ls[i] = len(prem) >= LONG_PREMISE
        in_p = any(t.lower() in NEGATION_WORDS for t in prem)
        in_h = hyp is not None and any(t.lower() in NEGATION_WORDS for t in hyp)
        neg[i] = in_h and not in_p
    return {"ls": ls, "negation": neg}


#: pair features: ``paper`` is Tran §5.3 / Bowman et al. 2016; ``abs`` is what the authors'
#: released code computes (``[h_P; h_H; h_P ⊙ h_H; |h_P − h_H|]``)
FEATURES = ("paper", "abs")
#: hidden-layer activation: ``sigmoid`` as written in Tran §5.3, ``relu`` as in their code
ACTIVATIONS = {"sigmoid": torch.sigmoid, "relu": torch.relu, "tanh": torch.tanh}


def pair_features(h_p: torch.Tensor, h_h: torch.Tensor, kind: str = "paper") -> torch.Tensor:
    """``x_c`` of Tran §5.3 (``paper``) or of the authors' code (``abs``), ``(B, 4d)``."""
    if kind == "paper":
        return torch.cat([h_p, h_h, h_p - h_h, h_p * h_h], dim=-1)
    if kind == "abs":
        return torch.cat([h_p, h_h, h_p * h_h, (h_p - h_h).abs()], dim=-1)
    raise ValueError(f"unknown pair features {kind!r}; choose one of: {', '.join(FEATURES)}")


class InferenceHead(nn.Module):
    """Tran §5.3: ``softmax(W^(p) σ(W^(c) [h_P; h_H; h_P − h_H; h_P ⊙ h_H]))``.

    ``features`` and ``activation`` choose between the paper's text (defaults) and the
    authors' released code (``abs`` features, ``relu``); see docs/RESULTS.md for what each
    choice measurably changes.
    """

    def __init__(self, sent_size: int, *, hidden: int = 50, num_classes: int = 3,
                 dropout: float = 0.5, features: str = "paper",
                 activation: str = "sigmoid") -> None:
        super().__init__()
        if hidden <= 0:
            raise ValueError(f"the inference head needs a hidden layer (Tran: 50), got {hidden}")
        if features not in FEATURES:
            raise ValueError(f"unknown pair features {features!r}; choose one of: "
                             f"{', '.join(FEATURES)}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown head activation {activation!r}; choose one of: "
                             f"{', '.join(ACTIVATIONS)}")
        self.features = features
        self.activation = activation
        self.dropout = Dropout(dropout)
        self.W_c = nn.Linear(4 * sent_size, hidden)   # W^(c)
        self.W_p = nn.Linear(hidden, num_classes)     # W^(p)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.W_c.reset_parameters()
        self.W_p.reset_parameters()

    def forward(self, enc: Encoded) -> dict[str, torch.Tensor]:
        h_p, h_h = enc.sent[: enc.num_a], enc.sent[enc.num_a:]           # (B, d) each
        x_c = pair_features(h_p, h_h, self.features)                      # (B, 4d)
        hidden = ACTIVATIONS[self.activation](self.W_c(self.dropout(x_c)))  # (B, hidden)
        return {"logits": self.W_p(hidden)}                               # (B, 3)


class Inference(Task):
    """Three-way sentence-pair classification with the NLL loss."""

    #: |h_P − h_H| as the authors' code (see the module docstring for the measurement)
    default_head_kwargs = {"features": "abs"}

    pair = True
    num_classes = 3
    metric_names = ("accuracy",)
    default_head_hidden = 50
    target_keys = ("label",)
    subsets = False

    def head_hidden(self, hidden: int | None, teng: bool = False) -> int:
        h = super().head_hidden(hidden, teng)
        if h <= 0:
            raise ValueError(f"{self.name} needs a hidden layer (Tran: 50); --head-hidden {h}")
        return h

    def build_head(self, node_size: int, sent_size: int, *, hidden: int,
                   dropout: float, **head_kwargs: Any) -> InferenceHead:
        return InferenceHead(sent_size, hidden=hidden, num_classes=self.num_classes,
                             dropout=dropout, **head_kwargs)

    def loss(self, out: dict[str, torch.Tensor], batch: Any) -> torch.Tensor:
        return F.cross_entropy(out["logits"], batch.targets["label"].to(out["logits"].device))

    def gather(self, out: dict[str, torch.Tensor], batch: Any) -> dict[str, np.ndarray]:
        probs = out["logits"].detach().softmax(-1)
        return {"pred": probs.argmax(-1).cpu().numpy(),
                "gold": batch.targets["label"].cpu().numpy(),
                "prob": probs.max(-1).values.cpu().numpy()}

    def metrics(self, gathered: dict[str, np.ndarray],
                tokens: Sequence[tuple[list[str], list[str] | None]] | None = None
                ) -> dict[str, float]:
        p, g = gathered["pred"], gathered["gold"]
        res: dict[str, float] = {"accuracy": M.accuracy(p, g), "count": int(len(g))}
        if self.subsets and tokens is not None:
            if len(tokens) != len(g):
                raise ValueError(f"{len(tokens)} token pairs for {len(g)} examples")
            for name, mask in subset_masks(tokens).items():
                res[f"accuracy_{name}"] = M.accuracy(p[mask], g[mask])
                res[f"count_{name}"] = int(mask.sum())
        return res

    def describe(self, out: dict[str, torch.Tensor], i: int,
                 label_names: Sequence[str] | None) -> str:
        probs = out["logits"][i].detach().softmax(-1)
        k = int(probs.argmax())
        name = label_names[k] if label_names is not None and k < len(label_names) else str(k)
        return f"{name} (p={float(probs[k]):.3f})"

    def record(self, out: dict[str, torch.Tensor], i: int,
               label_names: Sequence[str] | None) -> dict[str, Any]:
        """The pair's label."""
        return label_record(out["logits"][i], label_names)

    def verdict(self, record: dict[str, Any]) -> str:
        return label_text(record)


@tasks.register("sick-e")
class SickEntailment(Inference):
    """SICK entailment (Tran Table 3): accuracy on all pairs, LS and Negation subsets."""

    name = "sick-e"
    dataset = "sick"
    metric_names = ("accuracy", "accuracy_ls", "accuracy_negation")
    subsets = True


@tasks.register("snli")
class SNLI(Inference):
    """SNLI 1.0 (Bowman et al. 2015), as in Tran §6.4."""

    name = "snli"
    dataset = "snli"
