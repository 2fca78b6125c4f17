"""Denormal floats flushed to zero for the training command lines.

A float32 below 1.2e-38 is *denormal* (subnormal); Intel CPUs compute with such numbers
through a microcode assist that costs ~100 cycles an operation. Adam makes them: an
embedding row that no batch of the last few hundred steps touched has its first moment
multiplied by ``beta1 = 0.9`` at every step, and ``0.9 ** 800`` carries a moment of
``1e-2`` below 1e-38. Measured on an Intel Xeon (2 cores, one thread;
``gnn-treelstm train --task sst-5 --model bilstm --tree chain --supervision
phrase-sequences ...``, the Teng & Zhang BiLSTM row, 21,702 tuned 50-d word vectors): the
fused Adam step grows from 2.5 ms to 12 ms over the first 4,000 steps and stays there,
while with denormals flushed it stays at 2 ms (docs/speed.md#denormal-floats). On the AMD
EPYC machines of docs/speed.md the same epoch took 123 s with denormals kept, against 342 s
on the Xeon.

Flushing (x86's FTZ and DAZ bits, ``torch.set_flush_denormal``) changes a result only
where a value falls below 1.2e-38, which in Adam's update ``m / (sqrt(v) + eps)`` is far
below float32's resolution of the weights it moves. It is a process-wide (per-thread)
setting, so the CLIs set it at start, before torch starts its worker threads, and the
library never does. ``GNN_TREELSTM_DENORMALS=keep`` leaves the CPU's default (for
bit-for-bit comparisons with runs that kept it).
"""

from __future__ import annotations

import logging

from gnn_treelstm.kernels.settings import env_choice

log = logging.getLogger(__name__)

__all__ = ["flush_denormals", "CHOICES"]

#: values of ``$GNN_TREELSTM_DENORMALS``
CHOICES = ("flush", "keep")


def flush_denormals() -> bool:
    """Flush denormal floats to zero in this thread and the threads torch starts after it,
    unless ``$GNN_TREELSTM_DENORMALS`` is ``keep``. Returns whether they are flushed
    (False where the CPU has no such mode, e.g. not x86); a bad value of the variable is
    a ``ValueError`` naming it."""
    choice = env_choice("GNN_TREELSTM_DENORMALS", CHOICES, "denormal-float mode",
                        default="flush")
    import torch

    if choice == "keep":
        torch.set_flush_denormal(False)
        return False
    ok = bool(torch.set_flush_denormal(True))
    if not ok:
        log.debug("this CPU cannot flush denormal floats; they are kept")
    return ok
