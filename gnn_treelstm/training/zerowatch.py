"""Notice parameter blocks that training drives to exactly zero.

AdaGrad and Adam divide every gradient element by its own running scale, so a parameter
whose loss gradient is far below its L2 gradient (``l2 * p``, coupled weight decay) moves
by about one learning rate per step *towards zero*, whatever the size of the loss gradient.
A block that starts with a tiny loss gradient is then zeroed within a few dozen steps, and a
product of zeroed blocks has zero gradient for good. mTreeLSTM's relation transition
``W_hm diag(W_mr e_r) W_mh`` (Tran & Cheng 2018, eq 4) starts at about 1/175 of the child
sum it replaces, and with the mean batch loss and L2 1e-4 it dies this way in about 20
AdaGrad steps (``docs/RESULTS.md``, "mTreeLSTM's relation path"). Nothing fails: the model
trains on as a smaller model. :class:`ZeroWatch` tells the user, once per block.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)

__all__ = ["ZeroWatch"]


class ZeroWatch:
    """Initial norm of every trainable parameter; :meth:`check` names those now at most
    ``rel_tol`` times it (each once). Parameters that start at zero (biases) are ignored."""

    def __init__(self, model: torch.nn.Module, *, rel_tol: float = 1e-6) -> None:
        if not rel_tol > 0:
            raise ValueError(f"rel_tol must be positive, got {rel_tol}")
        self.rel_tol = rel_tol
        self._params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        self._init = {n: float(p.detach().norm()) for n, p in self._params.items()}
        self.zeroed: list[str] = []

    def check(self) -> list[str]:
        """The parameters newly found at (near) zero, in model order."""
        new = []
        for name, p in self._params.items():
            start = self._init[name]
            if start > 0 and name not in self.zeroed \
                    and float(p.detach().norm()) <= self.rel_tol * start:
                new.append(name)
        self.zeroed += new
        return new

    def warn(self, seed: int, epoch: int) -> list[str]:
        """:meth:`check`, logging a warning that names what went to zero and why."""
        new = self.check()
        if new:
            log.warning(
                "seed %d epoch %d: %s went to zero (norm below %g of its initial norm): "
                "their loss gradient is far below the L2 term, which the adaptive optimizer "
                "turns into full-size steps towards zero, so the model trains on without "
                "them; --loss-reduction sum (L2 25x weaker against the summed loss) or "
                "--l2 0 keeps them (see docs/RESULTS.md)",
                seed, epoch, ", ".join(new), self.rel_tol)
        return new
