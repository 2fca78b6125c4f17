"""AdaGrad over one buffer per parameter group (:class:`FlatAdagrad`).

torch's AdaGrad updates each parameter with its own operations: without a fused kernel
(torch has one for CPU tensors only) a step dispatches some seven operations per
parameter (CUDA's multi-tensor path launches them over lists of tensors, with its Python
around them). :class:`FlatAdagrad` keeps each group's parameters and accumulators as views
of one buffer each, so that a step is one update of the group's buffer: the gradients
concatenated, ``sum += g²``, ``std = sqrt(sum) + eps``, ``param -= lr g / std``, five
operations a group however many parameters it holds. The update is torch's
(``torch.optim.Adagrad`` with ``foreach=False``), operation for operation, so the
parameters and accumulators are the same to the bit
(``tests/training/test_adagrad.py``), and its ``state_dict`` is torch's: a checkpoint
loads into either optimizer.

:func:`gnn_treelstm.training.optim.build_optimizer` takes it where torch has no fused
AdaGrad for the parameters' device (a GPU) and the gradients are dense.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import torch

__all__ = ["FlatAdagrad"]


class _Flat(NamedTuple):
    """A group's buffers (its parameters' values, their accumulators, their step counts)
    and where each parameter's data was when they were made."""

    params: torch.Tensor
    sums: torch.Tensor
    steps: torch.Tensor
    ptrs: list[int]


class FlatAdagrad(torch.optim.Adagrad):
    """``torch.optim.Adagrad`` (same arguments, same update, same ``state_dict``) with
    each group's parameters and accumulators in one buffer each, updated together.

    The parameters become views of their group's buffer (``p.data``; their values kept).
    Where a parameter's data is replaced afterwards (``model.to(...)``), the next step
    puts it back into a new buffer. A step in which some parameter of a group has no
    gradient updates that group's parameters one by one, as torch does (those without a
    gradient untouched). Dense gradients only (``RuntimeError`` for a sparse one), no
    ``maximize``, ``differentiable``, ``foreach`` or ``fused``, and a group's parameters
    on one device with one dtype (``ValueError``)."""

    def __init__(self, params: Iterable[Any], **kwargs: Any) -> None:
        for key in ("maximize", "differentiable", "foreach", "fused"):
            if kwargs.get(key):
                raise ValueError(f"FlatAdagrad: {key}=True is not supported; use "
                                 "torch.optim.Adagrad")
        super().__init__(params, **kwargs)
        for i, group in enumerate(self.param_groups):
            for key in ("maximize", "differentiable", "foreach", "fused"):
                if group.get(key):
                    raise ValueError(f"FlatAdagrad: parameter group {i} sets {key}=True, "
                                     "which it does not support; use torch.optim.Adagrad")
            if any(p.is_complex() for p in group["params"]):
                raise ValueError(f"FlatAdagrad: parameter group {i} holds complex "
                                 "parameters; use torch.optim.Adagrad")
            kinds = {(p.device, p.dtype) for p in group["params"]}
            if len(kinds) > 1:
                raise ValueError(f"FlatAdagrad: parameter group {i} mixes devices or dtypes "
                                 f"({sorted(map(str, kinds))}); one buffer holds one kind")
        self._flat: list[_Flat] = []
        self._flatten()

    def _flatten(self) -> None:
        """Each group's parameters, accumulators and step counts copied into one buffer
        each, the parameters' data and the ``sum`` and ``step`` states made views of them
        (values kept)."""
        flats = []
        with torch.no_grad():
            for group in self.param_groups:
                params = group["params"]
                if not params:
                    flats.append(_Flat(torch.empty(0), torch.empty(0), torch.empty(0), []))
                    continue
                pf = torch.cat([p.detach().reshape(-1) for p in params])
                sf = torch.cat([self.state[p]["sum"].detach().reshape(-1) for p in params])
                steps = torch.stack([self.state[p]["step"].detach().reshape(()) for p in params])
                start = 0
                for i, p in enumerate(params):
                    n = p.numel()
                    p.data = pf[start:start + n].view_as(p)
                    self.state[p]["sum"] = sf[start:start + n].view_as(p)
                    self.state[p]["step"] = steps[i]
                    start += n
                flats.append(_Flat(pf, sf, steps, [p.data_ptr() for p in params]))
        self._flat = flats

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's, then the loaded accumulators copied into the groups' buffers."""
        super().load_state_dict(state_dict)
        self._flatten()

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One AdaGrad step over every group (``closure``: as torch's)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if any(f.ptrs != [p.data_ptr() for p in g["params"]]
               for g, f in zip(self.param_groups, self._flat)):
            self._flatten()  # a parameter's data was replaced (moved, reloaded)
        for group, flat in zip(self.param_groups, self._flat):
            params = group["params"]
            grads = [p.grad for p in params]
            for p, g in zip(params, grads):
                if g is not None and g.is_sparse:
                    raise RuntimeError(
                        f"FlatAdagrad takes dense gradients; a parameter of shape "
                        f"{tuple(p.shape)} has a sparse one (nn.Embedding(sparse=True)): "
                        "use torch.optim.Adagrad for it")
            if not params:
                continue
            if any(g is None for g in grads) or group["lr_decay"]:
                self._each(group)
            else:
                self._together(group, flat, grads)
        return loss

    def _together(self, group: dict, flat: _Flat, grads: list[torch.Tensor]) -> None:
        """The group's update on its buffers (every parameter has a gradient, no lr decay:
        the learning rate is the same for all)."""
        flat.steps.add_(1)
        g = torch.cat([t.reshape(-1) for t in grads]) if len(grads) > 1 else \
            grads[0].reshape(-1)
        if group["weight_decay"]:
            g = g.add(flat.params, alpha=group["weight_decay"])
        flat.sums.addcmul_(g, g, value=1)
        std = flat.sums.sqrt().add_(group["eps"])
        flat.params.addcdiv_(g, std, value=-group["lr"])

    def _each(self, group: dict) -> None:
        """torch's per-parameter update (``foreach=False``) of the group's parameters that
        have a gradient: the update of :meth:`_together`, one parameter at a time."""
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            state["step"] += 1
            step = float(state["step"])
            g = p.grad
            if group["weight_decay"]:
                g = g.add(p, alpha=group["weight_decay"])
            clr = group["lr"] / (1 + (step - 1) * group["lr_decay"])
            state["sum"].addcmul_(g, g, value=1)
            std = state["sum"].sqrt().add_(group["eps"])
            p.addcdiv_(g, std, value=-clr)
