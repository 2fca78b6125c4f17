"""The CPU dropout (:mod:`gnn_treelstm.kernels.dropout`): nn.Dropout's distribution and scaling."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gnn_treelstm.kernels.dropout import Dropout


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_keeps_one_minus_p_and_scales_the_kept(p):
    torch.manual_seed(0)
    x = torch.rand(400, 300) + 0.5  # no zeros: a zero output means dropped
    y = Dropout(p)(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.01  # 120000 draws
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    # the gradient is the same mask and scale
    x.requires_grad_(True)
    torch.manual_seed(1)
    y = Dropout(p)(x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, (y != 0).float() / (1 - p))


def test_repeatable_under_a_seed_and_identity_where_nn_dropout_is():
    x = torch.randn(50, 20)
    torch.manual_seed(3)
    a = Dropout(0.5)(x)
    torch.manual_seed(3)
    assert torch.equal(Dropout(0.5)(x), a)
    d = Dropout(0.5).eval()
    assert torch.equal(d(x), x)
    assert torch.equal(Dropout(0.0)(x), x)
    assert torch.equal(Dropout(1.0)(x), torch.zeros_like(x))
    assert isinstance(Dropout(0.5), nn.Dropout)  # same module type, state_dict and repr
    assert repr(Dropout(0.3)) == "Dropout(p=0.3, inplace=False)"


def test_heads_and_embedding_dropout_use_it():
    from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel

    for task in ("sst-5", "sick-r", "sick-e"):
        model = TreeLSTMModel(ModelConfig(task=task, cell="childsum", vocab_size=10,
                                          emb_dim=4, hidden=3, emb_dropout=0.1))
        drops = [m for m in model.modules() if isinstance(m, nn.Dropout)]
        assert drops and all(isinstance(m, Dropout) for m in drops), task
