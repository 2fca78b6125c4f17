"""Metrics of a model on a split, with the per-example arrays they come from."""

from __future__ import annotations

from collections.abc import Sequence

import dgl
import numpy as np
import torch

from . import data as D
from . import graph as G
from .batching import make_loader, to_device
from .model import TreeLSTMModel
from .tasks import gather_batches

__all__ = ["evaluate"]


def _word_counts(g: dgl.DGLGraph) -> np.ndarray:
    has_word = (g.ndata[G.WORD] != G.NO_WORD).to(torch.float32).cpu()
    seg = torch.repeat_interleave(torch.arange(g.batch_size), g.batch_num_nodes().cpu())
    return torch.zeros(g.batch_size).index_add_(0, seg, has_word).numpy()


@torch.no_grad()
def evaluate(model: TreeLSTMModel, split: D.Split, *, batch_size: int = 256,
             device: torch.device | str = "cpu", graphs_on_device: bool = True,
             tokens: Sequence[tuple[list[str], list[str] | None]] | None = None
             ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Metrics of ``model`` on ``split`` and the gathered per-example arrays.

    The arrays hold the task's ``gather`` output plus ``index`` (example id) and ``length``
    (words per sentence; the mean of both sentences for pairs, as Tai Fig 4).
    """
    device = torch.device(device)
    task = model.task
    was_training = model.training
    model.eval()
    parts = []
    level = model.cell.engine == "level"
    try:
        for batch in make_loader(split, batch_size, shuffle=False, schedule=level):
            lengths = _word_counts(batch.graph)
            if batch.graph_b is not None:
                lengths = (lengths + _word_counts(batch.graph_b)) / 2
            batch = to_device(batch, device, graphs_on_device)
            out = model(batch.graph, batch.graph_b, schedule=batch.schedule)
            part = task.gather(out, batch)
            part["index"] = batch.index.cpu().numpy()
            part["length"] = lengths
            parts.append(part)
    finally:
        model.train(was_training)
    gathered = gather_batches(parts)
    toks = None
    if tokens is not None and len(tokens) >= len(split):
        toks = [tokens[int(i)] for i in gathered.get("index", [])]
    return task.metrics(gathered, toks), gathered
