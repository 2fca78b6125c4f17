r"""Semantic relatedness of sentence pairs: SICK-R (Tai et al. 2015, §4.2, eq 15).

Given the sentence representations ``h_L`` and ``h_R`` of the two sentences of a pair::

    h×  = h_L ⊙ h_R                                  (eq 15)
    h+  = |h_L − h_R|
    h_s = σ(W^(×) h× + W^(+) h+ + b^(h))             hidden size 50 (Tai §5.2)
    p̂_θ = softmax(W^(p) h_s + b^(p))                 over the ratings 1..K, K = 5
    ŷ   = rᵀ p̂_θ,    r = [1, 2, ..., K]

Training target: the sparse distribution ``p`` with ``rᵀ p = y`` (:func:`sparse_target`)::

    p_i = y − ⌊y⌋        if i = ⌊y⌋ + 1
    p_i = ⌊y⌋ − y + 1    if i = ⌊y⌋
    p_i = 0              otherwise,        1 ≤ i ≤ K

and the loss is ``KL(p ‖ p̂_θ)`` averaged over the pairs of the minibatch. No dropout by
default (Tai §5.3: "we did not observe performance gains using dropout on the semantic
relatedness task"). Metrics: Pearson's r, Spearman's ρ and MSE of ``ŷ`` against ``y``;
model selection on Pearson's r.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from gnn_treelstm import metrics as M
from gnn_treelstm.kernels.dropout import Dropout
from gnn_treelstm.tasks.base import Encoded, Task, distribution
from gnn_treelstm.tasks.registry import tasks

__all__ = ["RelatednessHead", "Relatedness", "sparse_target", "kl_loss"]


def sparse_target(y: torch.Tensor, num_classes: int = 5) -> torch.Tensor:
    """Tai §4.2's sparse target distribution: ``(B,) -> (B, K)`` with ``rᵀ p = y``.

    Raises ``ValueError`` when a score lies outside ``[1, K]``.
    """
    y = y.to(torch.float32).reshape(-1)
    if y.numel() and (float(y.min()) < 1 or float(y.max()) > num_classes):
        raise ValueError(
            f"relatedness scores must lie in [1, {num_classes}], got "
            f"[{float(y.min())}, {float(y.max())}]"
        )
    floor = y.floor().clamp(max=num_classes - 1)           # y = K -> all mass on K
    frac = y - floor                                       # (B,) in [0, 1]
    p = torch.zeros(y.shape[0], num_classes, dtype=torch.float32, device=y.device)
    idx = floor.long() - 1                                 # 0-based index of class ⌊y⌋
    rows = torch.arange(y.shape[0], device=y.device)
    p[rows, idx] = 1 - frac                                # p_⌊y⌋ = ⌊y⌋ − y + 1
    p[rows, idx + 1] = frac                                # p_⌊y⌋+1 = y − ⌊y⌋
    return p


def kl_loss(log_probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``mean_b KL(p_b ‖ p̂_b) = mean_b Σ_i p_bi (log p_bi − log p̂_bi)``, with 0·log 0 = 0."""
    return (torch.xlogy(target, target) - target * log_probs).sum(-1).mean()


class RelatednessHead(nn.Module):
    """Tai eq 15: distance and angle features, sigmoid hidden layer, softmax over 1..K."""

    def __init__(self, sent_size: int, *, hidden: int = 50, num_classes: int = 5,
                 dropout: float = 0.0) -> None:
        super().__init__()
        if hidden <= 0:
            raise ValueError(f"the relatedness head needs a hidden layer (Tai: 50), got {hidden}")
        self.num_classes = num_classes
        self.dropout = Dropout(dropout)
        self.W_mul = nn.Linear(sent_size, hidden, bias=False)  # W^(×)
        self.W_abs = nn.Linear(sent_size, hidden)              # W^(+), with b^(h)
        self.W_p = nn.Linear(hidden, num_classes)              # W^(p), b^(p)
        self.register_buffer("r", torch.arange(1, num_classes + 1, dtype=torch.float32),
                             persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.W_mul, self.W_abs, self.W_p):
            lin.reset_parameters()

    def forward(self, enc: Encoded) -> dict[str, torch.Tensor]:
        h_l = self.dropout(enc.sent[: enc.num_a])                    # (B, d)
        h_r = self.dropout(enc.sent[enc.num_a:])                     # (B, d)
        h_mul = h_l * h_r                                            # h× (eq 15)
        h_abs = (h_l - h_r).abs()                                    # h+
        h_s = torch.sigmoid(self.W_mul(h_mul) + self.W_abs(h_abs))   # (B, hidden)
        log_probs = torch.log_softmax(self.W_p(h_s), dim=-1)         # (B, K)
        score = log_probs.exp() @ self.r                             # ŷ = rᵀ p̂, (B,)
        return {"log_probs": log_probs, "score": score}


@tasks.register("sick-r")
class Relatedness(Task):
    """SICK relatedness (Tai §4.2, §5.2): KL loss to the sparse target, Pearson/Spearman/MSE."""

    name = "sick-r"
    dataset = "sick"
    pair = True
    num_classes = 5
    metric_names = ("pearson", "spearman", "mse")
    selection_metric = "pearson"
    default_dropout = 0.0
    default_head_hidden = 50
    target_keys = ("score",)

    def head_hidden(self, hidden: int | None, teng: bool = False) -> int:
        h = super().head_hidden(hidden, teng)
        if h <= 0:
            raise ValueError(f"sick-r needs a hidden layer (Tai: 50); --head-hidden {h}")
        return h

    def build_head(self, node_size: int, sent_size: int, *, hidden: int,
                   dropout: float) -> RelatednessHead:
        return RelatednessHead(sent_size, hidden=hidden, num_classes=self.num_classes,
                               dropout=dropout)

    def label_names(self, data_label_names: Sequence[str] | None) -> None:
        return None

    def loss(self, out: dict[str, torch.Tensor], batch: Any) -> torch.Tensor:
        y = batch.targets["score"].to(out["log_probs"].device)
        return kl_loss(out["log_probs"], sparse_target(y, self.num_classes))

    def gather(self, out: dict[str, torch.Tensor], batch: Any) -> dict[str, np.ndarray]:
        return {"pred": out["score"].detach().cpu().numpy().astype(np.float64),
                "gold": batch.targets["score"].cpu().numpy().astype(np.float64)}

    def metrics(self, gathered: dict[str, np.ndarray],
                tokens: Sequence[tuple[list[str], list[str] | None]] | None = None
                ) -> dict[str, float]:
        p, g = gathered["pred"], gathered["gold"]
        return {"pearson": M.pearson(p, g), "spearman": M.spearman(p, g), "mse": M.mse(p, g),
                "count": int(len(g))}

    def curve_metric(self) -> str:
        return "pearson"

    def describe(self, out: dict[str, torch.Tensor], i: int,
                 label_names: Sequence[str] | None) -> str:
        return f"relatedness {float(out['score'][i]):.3f} (1-5)"

    def record(self, out: dict[str, torch.Tensor], i: int,
               label_names: Sequence[str] | None) -> dict[str, Any]:
        """The expected score ``ŷ = rᵀ p̂`` and its distribution over the classes
        ``1 .. K``."""
        probs = out["log_probs"][i].exp()
        return {"score": round(float(out["score"][i]), 6),
                "probabilities": distribution(probs, [str(k + 1) for k in range(probs.numel())])}

    def verdict(self, record: dict[str, Any]) -> str:
        return f"{record['score']:.3f}"
