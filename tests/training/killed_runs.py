"""What the kill-and-resume tests share: a training command whose optimizer steps sleep
(so that a kill lands inside an epoch) and the wait for a saved state of a given epoch."""

from __future__ import annotations

import time
from pathlib import Path

import torch

# each optimizer step sleeps argv[1] seconds; the rest of argv is `gnn-treelstm train`'s
SLOW_TRAIN = """
import sys, time, torch
step = torch.optim.Adagrad.step
def slow(self, *a, **k):
    time.sleep(float(sys.argv[1]))
    return step(self, *a, **k)
torch.optim.Adagrad.step = slow
from gnn_treelstm.commands.train import main
sys.exit(main(sys.argv[2:]))
"""


def _state(path: Path) -> dict | None:
    try:
        return torch.load(path, weights_only=True)
    except Exception:  # not there yet
        return None


def wait_for_state(path: Path, epoch: int, timeout: float) -> dict | None:
    """The training state at ``path`` once it is inside ``epoch`` (a batch of it done), or
    None if that did not happen within ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = _state(path)
        if state is not None and state["epoch"] == epoch and state["step"] >= 1:
            return state
        time.sleep(0.05)
    return None
