"""ZeroWatch, and the mechanism it watches for: coupled L2 under an adaptive optimizer zeroes
mTreeLSTM's relation path when the loss gradient is small (docs/RESULTS.md)."""

from __future__ import annotations

import logging

import pytest
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.training.zerowatch import ZeroWatch
from tests.handbuilt import random_dependency_batch


def test_names_a_zeroed_block_once_and_ignores_zero_init():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    torch.nn.init.zeros_(model[0].bias)  # starts at zero: never reported
    watch = ZeroWatch(model)
    assert watch.check() == []
    with torch.no_grad():
        model[1].weight.mul_(1e-7)
    assert watch.check() == ["1.weight"]
    assert watch.check() == []  # once
    assert watch.zeroed == ["1.weight"]
    with torch.no_grad():
        model[1].weight.mul_(1e7)  # a small but live block is not dead
        model[0].weight.mul_(1e-3)
    assert watch.check() == []


def test_warning_names_the_parameter_and_the_fix(caplog):
    model = torch.nn.Linear(3, 3)
    watch = ZeroWatch(model)
    with torch.no_grad():
        model.weight.zero_()
    with caplog.at_level(logging.WARNING, logger="gnn_treelstm.training.zerowatch"):
        assert watch.warn(seed=2, epoch=3) == ["weight"]
    assert "seed 2 epoch 3: weight went to zero" in caplog.text
    assert "--loss-reduction sum" in caplog.text


def test_rejects_bad_tolerance():
    with pytest.raises(ValueError, match="rel_tol must be positive"):
        ZeroWatch(torch.nn.Linear(2, 2), rel_tol=0)


def _train_mtree(weight_decay: float, steps: int = 40) -> tuple[ZeroWatch, torch.nn.Module]:
    torch.manual_seed(0)
    cell = build_cell("mtree", 8, 32, num_relations=5)
    graph = random_dependency_batch(seed=0, count=25, num_relations=5)
    x = torch.randn(graph.num_nodes(), 8)
    target = torch.randn(graph.num_nodes(), 32)
    watch = ZeroWatch(cell, rel_tol=1e-3)
    opt = torch.optim.Adagrad(cell.parameters(), lr=0.05, weight_decay=weight_decay)
    for _ in range(steps):
        h, _ = cell(graph, x)
        loss = torch.nn.functional.mse_loss(h, target) * 1e-3  # a small loss gradient
        opt.zero_grad()
        loss.backward()
        opt.step()
    watch.check()
    return watch, cell


def test_adagrad_with_l2_zeroes_the_relation_path_and_without_l2_does_not():
    watch, _ = _train_mtree(weight_decay=1e-2)
    assert {"W_mh.weight", "W_hm.weight"} <= set(watch.zeroed), watch.zeroed
    watch, _ = _train_mtree(weight_decay=0.0)
    assert watch.zeroed == []
