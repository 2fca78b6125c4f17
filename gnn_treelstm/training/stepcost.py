"""The host cost of a whole training step: embedding, cell, head, loss, backward, the
finiteness check and the optimizer's step, as :meth:`Trainer.train_step
<gnn_treelstm.training.trainer.Trainer.train_step>` runs them in one process (no clipping),
measured as :mod:`gnn_treelstm.kernels.host` measures the cell's step (x 8, h 8, one
thread, Triton launches no-ops, the median of the calling thread's CPU time, one batch
repeated). ``gnn-treelstm bench --host-cost`` prints it beside the cell's.
"""

from __future__ import annotations

from collections.abc import Sequence

import dgl
import torch

from gnn_treelstm.kernels import host
from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel
from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.faults import FiniteChecks
from gnn_treelstm.training.optim import build_optimizer, release_grads
from gnn_treelstm.trees.data import Batch, label_order
from gnn_treelstm.trees.graph import LABEL, WORD, batch_roots
from gnn_treelstm.trees.schedule import LevelSchedule

__all__ = ["train_step_cost"]


def _batch(graphs: Sequence[dgl.DGLGraph]) -> Batch:
    """The SST-5 batch of ``graphs`` (node labels, the roots' as targets), its level
    schedule and label order built as the data loader builds them."""
    graph = dgl.batch(list(graphs))
    targets = {"label": graph.ndata[LABEL][batch_roots(graph)]}
    return Batch(graph, None, targets, torch.arange(len(graphs)),
                 LevelSchedule.from_graph(graph), label_order=label_order(graph.ndata[LABEL]))


def train_step_cost(cell: str, graphs: Sequence[dgl.DGLGraph], path: str, *,
                    cell_kwargs: dict | None = None, optimizer: str = "adagrad",
                    steps: int = 30, seed: int = 0) -> float:
    """Host µs of one SST-5 training step (phrase supervision, ``optimizer`` with the
    task's defaults, word vectors trained) of ``cell`` at x 8, h 8 on the batch of
    ``graphs`` (SST constituency trees with node labels), on path ``path``
    (:data:`gnn_treelstm.kernels.host.PATHS`; ``"triton"``: the optimizer as on CUDA,
    AdaGrad's dense embedding update, no fused kernel)."""
    batch = _batch(graphs)
    torch.manual_seed(seed)
    vocab = int(batch.graph.ndata[WORD].max()) + 1
    model = TreeLSTMModel(ModelConfig(task="sst-5", cell=cell, vocab_size=vocab, emb_dim=8,
                                      hidden=8, engine="level",
                                      cell_kwargs=dict(cell_kwargs or {})))
    # the Triton path stands for a GPU's step: the optimizer chosen as for CUDA parameters
    opt = build_optimizer(model, RunConfig(task="sst-5", model=cell,
                                           optimizer=optimizer).resolved(),
                          device_type="cuda" if path == "triton" else None)
    checked = [p for n, p in model.named_parameters()
               if p.requires_grad and not n.startswith("embedding.")]
    checks = FiniteChecks()
    model.train()

    def step() -> None:
        out = model(batch.graph, schedule=batch.schedule)  # one sentence per example
        loss = model.task.loss(out, batch)
        release_grads(opt)
        loss.backward()
        checks.add(loss, checked, None)
        list(checks.faults())  # read as the trainer reads them (not raised: the no-op
        # launches leave whatever the states' memory held)
        opt.step()

    return host.measure(step, path, steps=steps)
