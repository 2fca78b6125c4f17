"""The host cost of a whole training step (gnn_treelstm.training.stepcost): it runs the
step the trainer runs (the weights move, the finiteness check reads its copy) and times
it; on the Triton path the optimizer is chosen as on CUDA."""

import pytest
import torch

from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel
from gnn_treelstm.training import stepcost
from gnn_treelstm.training.adagrad import FlatAdagrad
from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.optim import build_optimizer
from tests.handbuilt import random_batch


def _graphs():
    return random_batch(0, 5, words="leaves", exact_children=True)


@pytest.mark.parametrize("path", ["native", "general"])
def test_a_training_step_is_timed_and_trains(path, monkeypatch):
    steps = []
    real = stepcost.FiniteChecks.add

    def add(self, loss, params, where):
        steps.append([p.detach().clone() for p in params])
        return real(self, loss, params, where)

    monkeypatch.setattr(stepcost.FiniteChecks, "add", add)
    us = stepcost.train_step_cost("nary", _graphs(), path, cell_kwargs={"n_ary": 2}, steps=3)
    assert us > 0 and len(steps) == 3 + 3  # warm-up and timed steps
    assert any(not torch.equal(a, b) for a, b in zip(steps[0], steps[-1]))  # it trains


def test_the_optimizer_is_chosen_as_on_the_device_named():
    model = TreeLSTMModel(ModelConfig(task="sst-5", cell="nary", vocab_size=9, emb_dim=4,
                                      hidden=3, engine="level"))
    cfg = RunConfig(task="sst-5", optimizer="adagrad").resolved()
    cpu = build_optimizer(model, cfg)
    assert model.sparse_embedding_grad and cpu.param_groups[0]["fused"]
    cuda = build_optimizer(model, cfg, device_type="cuda")  # AdaGrad: no fused CUDA kernel
    assert not model.sparse_embedding_grad
    assert not any(g["fused"] for g in cuda.param_groups)
    assert isinstance(cuda, FlatAdagrad) and not isinstance(cpu, FlatAdagrad)


def test_new_batches_are_checked_each_step(monkeypatch):
    """With ``batch_size`` every step takes the next batch (cycling: six batches, more
    than the cell remembers), and the cell checks each as new; without it one batch,
    checked once."""
    from gnn_treelstm.cells.nary import NaryTreeLSTM

    seen = []
    real = NaryTreeLSTM.check_input

    def check_input(self, graph, x, **kw):
        seen.append(graph.num_nodes())
        return real(self, graph, x, **kw)

    monkeypatch.setattr(NaryTreeLSTM, "check_input", check_input)
    graphs = random_batch(1, 12, words="leaves", exact_children=True)
    step = stepcost.train_step("nary", graphs, "native", cell_kwargs={"n_ary": 2},
                               batch_size=2)
    for _ in range(8):
        step()
    sizes = [sum(g.num_nodes() for g in graphs[i:i + 2]) for i in range(0, 12, 2)]
    assert seen == (sizes * 2)[:8]
    seen.clear()
    step = stepcost.train_step("nary", graphs, "native", cell_kwargs={"n_ary": 2})
    for _ in range(3):
        step()
    assert seen == [sum(g.num_nodes() for g in graphs)]
    with pytest.raises(ValueError, match="batch_size=7: new batches need at least two"):
        stepcost.train_step("nary", graphs, "native", batch_size=7)


def test_each_part_of_the_step_is_timed():
    """train_step_parts times every part of the same step, the cell's forward within the
    model's forward."""
    parts = stepcost.train_step_parts("nary", _graphs(), "native", cell_kwargs={"n_ary": 2},
                                      steps=3)
    assert tuple(parts) == stepcost.PARTS
    assert all(us > 0 for us in parts.values()), parts
    assert parts["cell"] < parts["forward"]
