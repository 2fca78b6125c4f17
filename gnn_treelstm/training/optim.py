"""The optimizer of a run (AdaGrad or Adam with the papers' parameter groups, Tai et al.
2015 §5.3, Tran & Cheng 2018 §6.1), what one optimizer step minimizes, and gradient
clipping (``--clip-grad-norm``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from gnn_treelstm.models.treelstm import TreeLSTMModel
from gnn_treelstm.training.adagrad import FlatAdagrad
from gnn_treelstm.training.config import LOSS_REDUCTIONS
from gnn_treelstm.training.faults import total_norm

if TYPE_CHECKING:
    from gnn_treelstm.training.config import RunConfig

__all__ = ["build_optimizer", "batch_objective", "clip_gradients", "release_grads"]


#: devices each optimizer's fused kernel runs on (torch's AdaGrad has a CPU kernel only:
#: ``fused=True`` on CUDA raises)
FUSED_DEVICES = {"adagrad": ("cpu",), "adam": ("cpu", "cuda")}


#: devices AdaGrad's sparse embedding update runs on: it coalesces the gradient (sums
#: its repeated rows), whose size depends on the batch's words, so a GPU would wait for it
SPARSE_DEVICES = ("cpu",)


def _fused_ok(params: Sequence[torch.Tensor], optimizer: str,
              device_type: str | None = None) -> bool:
    """Can ``optimizer``'s ``fused=True`` implementation update these parameters (floating
    point, on a device of :data:`FUSED_DEVICES`; ``device_type``: as if there)?"""
    devices = FUSED_DEVICES[optimizer]
    return bool(params) and all(p.dtype in (torch.float32, torch.float64, torch.float16,
                                            torch.bfloat16)
                                and (device_type or p.device.type) in devices for p in params)


def _sparse_embedding(model: TreeLSTMModel, cfg: RunConfig, emb: list,
                      device_type: str | None) -> bool:
    """Whether the word embedding trains with sparse gradients (set on ``model``): AdaGrad
    without ``emb_l2``, on a device of :data:`SPARSE_DEVICES` (``device_type``: as if
    there), not data parallel (DDP reduces dense tensors on every backend; the dense
    update is the same, see :func:`build_optimizer`)."""
    sparse = cfg.optimizer == "adagrad" and bool(emb) and not cfg.emb_l2 \
        and not cfg.distributed \
        and all((device_type or p.device.type) in SPARSE_DEVICES for p in emb)
    model.sparse_embedding_grad = sparse
    if sparse:
        # torch's default (no invariant checks on sparse tensors), chosen explicitly: torch
        # otherwise warns when AdaGrad builds its sparse update
        torch.sparse.check_sparse_tensor_invariants.disable()
    return sparse


def build_optimizer(model: TreeLSTMModel, cfg: RunConfig, *,
                    device_type: str | None = None) -> torch.optim.Optimizer:
    """The optimizer of a resolved ``cfg``
    (:meth:`~gnn_treelstm.training.config.RunConfig.resolved`; ``ValueError`` for
    one with unset fields): AdaGrad/Adam; word embeddings in their own group (own lr, L2
    ``emb_l2``, default 0), L2 ``l2`` on the rest; with ``rel_lr``, the cell's relation
    embeddings in a third group (that lr, no L2).

    Speed without changing the update:

    * **AdaGrad**: the word embedding gets *sparse* gradients
      (``model.sparse_embedding_grad = True``: ``nn.Embedding(sparse=True)``), and AdaGrad's
      sparse path updates only the rows of the batch's words. For every other row the
      dense update is exactly a no-op (zero gradient: the accumulator and the row stay
      the same), so this is the same algorithm; it saves the dense ``(vocab, dim)``
      gradient, accumulator and square-root passes of every step (most of an SST epoch's
      optimizer time with 300-d vectors). The sparse path takes no weight decay, so
      ``emb_l2 > 0`` turns it off (dense gradients, same update), and it runs on the
      devices of :data:`SPARSE_DEVICES` only: on a GPU the dense update runs, which makes
      the host wait for nothing.
    * **Adam**: dense embedding gradients. ``torch.optim.SparseAdam`` is *lazy* Adam (only
      the moments of the rows in the batch decay and update), a different algorithm, so
      it is not used; Adam's dense update is cheap anyway with the fused kernel.
    * The dense groups use the fused (single kernel) implementation of the same update
      (``fused=True``) where torch has one for the parameters' device (:data:`FUSED_DEVICES`).
      AdaGrad's has none for a GPU: there (not data parallel) each group is updated as one
      buffer, the same update (:class:`~gnn_treelstm.training.adagrad.FlatAdagrad`).

    ``device_type`` (e.g. ``"cuda"``): choose as for parameters on that kind of device
    (default: where they are), which the host-cost measurement of a GPU step on the CPU
    uses (:mod:`gnn_treelstm.training.stepcost`).
    """
    unset = [k for k in ("optimizer", "lr", "emb_lr", "emb_l2") if getattr(cfg, k) is None]
    if unset:
        raise ValueError(f"build_optimizer: {', '.join(unset)} unset; pass the resolved "
                         "configuration (cfg.resolved())")
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
    sparse = _sparse_embedding(model, cfg, emb, device_type)
    groups: list[dict] = [{"params": rest, "lr": cfg.lr, "weight_decay": cfg.l2,
                           "fused": _fused_ok(rest, cfg.optimizer, device_type)}]
    if emb:
        groups.append({"params": emb, "lr": cfg.emb_lr, "weight_decay": cfg.emb_l2,
                       "fused": not sparse and _fused_ok(emb, cfg.optimizer, device_type)})
    if rel:  # relation embeddings at their own rate, no L2 (Tran §6.1: lr 0.1)
        groups.append({"params": rel, "lr": cfg.rel_lr, "weight_decay": 0.0,
                       "fused": _fused_ok(rel, cfg.optimizer, device_type)})
    if cfg.optimizer == "adam":
        return torch.optim.Adam(groups)
    if sparse or cfg.distributed or any(g["fused"] for g in groups):
        return torch.optim.Adagrad(groups)
    return FlatAdagrad(groups)


def release_grads(optimizer: torch.optim.Optimizer) -> None:
    """Drop the gradient of every parameter ``optimizer`` updates, as
    ``optimizer.zero_grad(set_to_none=True)`` does, without the wrappers torch puts around
    that method (a profiler record and Dynamo's disable: tens of µs of a step's host time,
    against a few for the loop; docs/speed.md, *Host cost of a step*)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = None


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


def clip_gradients(params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale the gradients of ``params`` so that their joint L2 norm is at most
    ``max_norm``, as ``torch.nn.utils.clip_grad_norm_`` does (every gradient times
    ``min(1, max_norm / (norm + 1e-6))``, no host sync); return the norm before clipping.

    Sparse gradients are clipped too, as part of the same norm: under AdaGrad the word
    embedding's gradient is sparse (:func:`build_optimizer`), and ``clip_grad_norm_``
    cannot read it. It is coalesced first (its repeated rows summed, which AdaGrad's
    sparse update does anyway), so its norm is that of the dense gradient and the clipped
    update is the one a dense embedding gradient would get.
    """
    grads: list[torch.Tensor] = []
    for p in params:
        if p.grad is None:
            continue
        if p.grad.is_sparse:
            p.grad = p.grad.coalesce()
            grads.append(p.grad._values())  # the coalesced tensor's own values: scaled in place
        else:
            grads.append(p.grad)
    if not grads:
        return torch.zeros(())
    total = total_norm(grads)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.to(g.device))
    return total
