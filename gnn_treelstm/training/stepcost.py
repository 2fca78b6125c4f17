"""The host cost of a whole training step: embedding, cell, head, loss, backward, the
finiteness check and the optimizer's step, as :meth:`Trainer.train_step
<gnn_treelstm.training.trainer.Trainer.train_step>` runs them in one process (no clipping),
measured as :mod:`gnn_treelstm.kernels.host` measures the cell's step (x 8, h 8, one
thread, Triton launches no-ops, the median of the calling thread's CPU time), on one batch
repeated or, as training runs, on a new batch every step (whose checks the cell then
runs: a batch it checked before, unchanged, it does not check again). The batches are made
as the data loader makes them (packed trees, ``collate`` with the level schedule), the
word embedding small as the products are (:data:`WORD_ROWS`).
``gnn-treelstm bench --host-cost`` prints both beside the cell's.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence

import dgl
import torch

from gnn_treelstm.kernels import host
from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel
from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.faults import FiniteChecks
from gnn_treelstm.training.optim import build_optimizer, release_grads
from gnn_treelstm.trees.data import Batch, Split, TreeDataset, collate
from gnn_treelstm.trees.graph import LABEL, WORD, batch_roots
from gnn_treelstm.trees.packed import PackedTrees, pack_graphs

__all__ = ["train_step", "train_step_cost", "train_step_parts", "PARTS"]

#: the parts of a training step, in the order the trainer runs them (``forward``: the word
#: embedding, the cell and the head; ``release``: the last step's gradients dropped;
#: ``check``: the finiteness check), and ``cell``, the cell's forward within ``forward``
PARTS = ("forward", "cell", "loss", "release", "backward", "check", "optimizer")


#: the rows of the measured step's word embedding: the graphs' word ids are folded into
#: them (``id % WORD_ROWS``), as the products are made small (x 8, h 8), so that the
#: table's arithmetic (its gradient, AdaGrad's update of it: a few kernels on a GPU
#: whatever its size) costs next to nothing here too, and one batch's step and the steps on
#: 40 batches (SST's first 1,000 trees hold 5,115 words, its first 25 trees 287) update a
#: table of the same size
WORD_ROWS = 256


def _batches(graphs: Sequence[dgl.DGLGraph], batch_size: int | None) -> list[Batch]:
    """The batches of :func:`train_step` (``batch_size``: see there), as the data loader
    builds them: SST-5 (node labels, the roots' as targets), the trees packed
    (:func:`~gnn_treelstm.trees.packed.pack_graphs`, their levels computed, the word ids
    folded into :data:`WORD_ROWS`) and each batch
    collated with its level schedule (by numpy: the loader's C++ routines make the same
    arrays, and are not loaded where the C++ path is not measured)."""
    if batch_size is not None and (batch_size < 1 or len(graphs) < 2 * batch_size):
        raise ValueError(f"batch_size={batch_size}: new batches need at least two of them "
                         f"({2 * batch_size} graphs), got {len(graphs)} graphs")
    store = PackedTrees(*pack_graphs(graphs))
    store.node_levels()
    words = max(int(g.ndata[WORD].max()) for g in graphs) + 1
    store = store.remap("n." + WORD, torch.arange(max(words, 1)) % WORD_ROWS)
    roots = torch.stack([g.ndata[LABEL][batch_roots(g)][0] for g in graphs])
    data = TreeDataset(Split(store, None, {"label": roots}))
    size = len(graphs) if batch_size is None else batch_size
    return [collate(data.__getitems__(range(lo, lo + size)), schedule=True)
            for lo in range(0, len(graphs) - size + 1, size)]


def _step(cell: str, graphs: Sequence[dgl.DGLGraph], path: str, cell_kwargs: dict | None,
          optimizer: str, seed: int, batch_size: int | None = None
          ) -> tuple[TreeLSTMModel, list[tuple[str, Callable]]]:
    """The model of :func:`train_step_cost` and its training step as named parts, in
    order (:data:`PARTS` but ``cell``)."""
    batches = _batches(graphs, batch_size)
    torch.manual_seed(seed)
    vocab = WORD_ROWS
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
    held: dict[str, torch.Tensor | dict] = {}
    turn = itertools.count()

    def forward() -> None:
        batch = held["batch"] = batches[next(turn) % len(batches)]
        held["out"] = model(batch.graph, schedule=batch.schedule)  # one sentence each

    def loss() -> None:
        held["loss"] = model.task.loss(held["out"], held["batch"])  # type: ignore[arg-type]

    def check() -> None:
        checks.add(held["loss"], checked, None)  # type: ignore[arg-type]
        list(checks.faults())  # read as the trainer reads them (not raised: the no-op
        # launches leave whatever the states' memory held)

    return model, [("forward", forward), ("loss", loss), ("release", lambda: release_grads(opt)),
                   ("backward", lambda: held["loss"].backward()),  # type: ignore[union-attr]
                   ("check", check), ("optimizer", opt.step)]


def train_step_cost(cell: str, graphs: Sequence[dgl.DGLGraph], path: str, *,
                    cell_kwargs: dict | None = None, optimizer: str = "adagrad",
                    steps: int = 30, seed: int = 0, batch_size: int | None = None) -> float:
    """Host µs of one SST-5 training step (phrase supervision, ``optimizer`` with the
    task's defaults, word vectors trained) of ``cell`` at x 8, h 8 on the batch of
    ``graphs`` (SST constituency trees with node labels; with ``batch_size``, each step
    the next of their consecutive batches of that size, as training takes a new batch
    every step), on path ``path``
    (:data:`gnn_treelstm.kernels.host.PATHS`; ``"triton"``: the optimizer as on CUDA,
    AdaGrad's dense embedding update, no fused kernel:
    :class:`~gnn_treelstm.training.adagrad.FlatAdagrad`)."""
    step = train_step(cell, graphs, path, cell_kwargs=cell_kwargs, optimizer=optimizer,
                      seed=seed, batch_size=batch_size)
    return host.measure(step, path, steps=steps)


def train_step(cell: str, graphs: Sequence[dgl.DGLGraph], path: str, *,
               cell_kwargs: dict | None = None, optimizer: str = "adagrad",
               seed: int = 0, batch_size: int | None = None) -> Callable[[], None]:
    """The step :func:`train_step_cost` measures (same arguments), to be run on ``path``
    (:func:`gnn_treelstm.kernels.host.on_path`): each call one whole training step.
    ``batch_size``: each call the next batch of that many of ``graphs`` (cycling; at
    least two batches), which the cell checks as new where there are more batches than a
    cell remembers as checked (four: a batch it checked, unchanged, it does not check
    again); None: every call the batch of all ``graphs``."""
    _, parts = _step(cell, graphs, path, cell_kwargs, optimizer, seed, batch_size)

    def step() -> None:
        for _, part in parts:
            part()

    return step


def train_step_parts(cell: str, graphs: Sequence[dgl.DGLGraph], path: str, *,
                     cell_kwargs: dict | None = None, optimizer: str = "adagrad",
                     steps: int = 30, seed: int = 0,
                     batch_size: int | None = None) -> dict[str, float]:
    """The step of :func:`train_step_cost` (same arguments), each of its :data:`PARTS`
    timed on its own: the median over the steps of the calling thread's CPU time in it, in
    µs (``cell``: the cell's forward, from hooks on the model's cell, part of
    ``forward``). The parts but ``cell`` add up to the whole step, plus the clock reads
    (some µs)."""
    model, parts = _step(cell, graphs, path, cell_kwargs, optimizer, seed, batch_size)
    times: dict[str, list[int]] = {name: [] for name in PARTS}
    start: list[int] = []
    model.cell.register_forward_pre_hook(lambda *_: start.append(time.thread_time_ns()))
    model.cell.register_forward_hook(
        lambda *_: times["cell"].append(time.thread_time_ns() - start.pop()))

    def step() -> None:
        for name, part in parts:
            t0 = time.thread_time_ns()
            part()
            times[name].append(time.thread_time_ns() - t0)

    host.measure(step, path, steps=steps)
    # the last ``steps`` of each: the timed steps, after the warm-up ones
    return {name: statistics.median(ts[-steps:]) / 1e3 for name, ts in times.items()}
