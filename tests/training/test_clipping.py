"""``--clip-grad-norm``: the gradient's joint norm is bounded at every optimizer step, sparse
word-embedding gradients (AdaGrad) included, with the update dense gradients would get."""

import pytest
import torch

from gnn_treelstm.training.optim import clip_gradients
from gnn_treelstm.training.trainer import Trainer
from tests.training.helpers import tiny_config


def _grad_norm(params) -> float:
    grads = [p.grad.to_dense() if p.grad.is_sparse else p.grad for p in params
             if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads])))


class NormSpy(Trainer):
    """Records the gradient norm each optimizer step sees."""

    norms: list[float]

    def start_seed(self, seed, seed_dir, *, resume=False):
        super().start_seed(seed, seed_dir, resume=resume)
        self.norms = []
        step = self.optimizer.step

        def spied(*a, **k):
            self.norms.append(_grad_norm(self.current.trained))
            return step(*a, **k)

        self.optimizer.step = spied


def test_clipping_bounds_the_gradient_norm_of_every_step(tiny_sst, tmp_path):
    free = NormSpy(tiny_config(tiny_sst, tmp_path, epochs=2))
    free.fit()
    # AdaGrad on trained word vectors: the embedding's gradient is sparse and clipped too
    assert free.model.sparse_embedding_grad
    bound = min(free.norms) / 4              # every step of the free run is above it
    clipped = NormSpy(tiny_config(tiny_sst, tmp_path, name="c", epochs=2,
                                  clip_grad_norm=bound))
    clipped.fit()
    assert len(clipped.norms) == len(free.norms) > 0
    assert max(clipped.norms) <= bound * (1 + 1e-4)
    assert max(free.norms) > bound * 2       # without the option nothing bounds it


def test_sparse_and_dense_gradients_clip_alike():
    """The sparse embedding gradient is part of the norm, clipped as its dense form, and
    the result matches torch's clip_grad_norm_ on dense gradients."""
    torch.manual_seed(0)
    ids = torch.tensor([1, 1, 2, 7])
    nets = []
    for sparse in (True, False):
        torch.manual_seed(0)
        emb, lin = torch.nn.Embedding(10, 3, sparse=sparse), torch.nn.Linear(3, 2)
        (lin(emb(ids)).pow(2).sum() * 50).backward()
        nets.append([emb.weight, lin.weight, lin.bias])
    sparse, dense = nets
    assert sparse[0].grad.is_sparse and not sparse[0].grad.is_coalesced()
    before = _grad_norm(dense)
    reference = [p.detach().clone().requires_grad_() for p in dense]
    for r, p in zip(reference, dense):
        r.grad = p.grad.clone()
    torch.nn.utils.clip_grad_norm_(reference, 0.5)
    for params in (sparse, dense):
        total = clip_gradients(params, 0.5)
        assert float(total) == pytest.approx(before, rel=1e-5) and before > 0.5
        assert _grad_norm(params) == pytest.approx(0.5, rel=1e-4)
        for p, r in zip(params, reference):
            got = p.grad.to_dense() if p.grad.is_sparse else p.grad
            assert torch.allclose(got, r.grad, atol=1e-6)
    small = clip_gradients(dense, 10.0)      # under the bound: unchanged
    assert float(small) == pytest.approx(0.5, rel=1e-4)
    assert _grad_norm(dense) == pytest.approx(0.5, rel=1e-4)


@pytest.mark.parametrize("value", [0.0, -1.0, float("inf"), float("nan")])
def test_a_bad_bound_is_refused(value):
    from gnn_treelstm.training.config import RunConfig

    with pytest.raises(ValueError, match="--clip-grad-norm .*: must be a positive number"):
        RunConfig(clip_grad_norm=value).check()
