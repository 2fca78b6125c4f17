import io

import pytest
import torch

from gnn_treelstm.training.adagrad import FlatAdagrad

SHAPES = [(7, 3), (5,), (4, 6), (1,), (3, 2, 2)]


def _params(seed: int, shapes=SHAPES, dtype=torch.float32) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*s, generator=gen, dtype=dtype)) for s in shapes]


def _groups(params, **extra):
    return [{"params": params[:3], "lr": 0.05, "weight_decay": 1e-4, **extra},
            {"params": params[3:], "lr": 0.1, "weight_decay": 0.0}]


def _grads(seed: int, params, skip: int | None = None) -> list[torch.Tensor | None]:
    """Gradients of every size from 1e-3 to 1e2 (``skip``: that parameter gets none)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, p in enumerate(params):
        scale = 10.0 ** float(torch.randint(-3, 3, (1,), generator=gen))
        g = torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale
        out.append(None if i == skip else g)
    return out


def _step(opt, params, grads) -> None:
    for p, g in zip(params, grads):
        p.grad = None if g is None else g.clone()
    opt.step()


def _assert_same(a, b, opt_a, opt_b) -> None:
    for p, q in zip(a, b, strict=True):
        assert torch.equal(p, q)
        assert torch.equal(opt_a.state[p]["sum"], opt_b.state[q]["sum"])
        assert torch.equal(opt_a.state[p]["step"], opt_b.state[q]["step"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_flat_adagrad_is_torchs_adagrad_to_the_bit(dtype):
    """Parameter groups with and without weight decay, a step in which one parameter has
    no gradient (that group then updated one by one, as torch does), a learning rate
    changed between steps (a scheduler's): parameters, accumulators and step counts the
    same to the bit as torch's per-parameter AdaGrad."""
    flat_p, ref_p = _params(0, dtype=dtype), _params(0, dtype=dtype)
    flat = FlatAdagrad(_groups(flat_p), initial_accumulator_value=0.1)
    ref = torch.optim.Adagrad(_groups(ref_p), initial_accumulator_value=0.1, foreach=False)
    assert all(p.data_ptr() != q.data_ptr() for p, q in zip(flat_p, ref_p))
    for step in range(12):
        grads = _grads(step, flat_p, skip=1 if step == 4 else None)
        if step == 7:
            for opt in (flat, ref):
                opt.param_groups[0]["lr"] = 0.02
        _step(flat, flat_p, grads)
        _step(ref, ref_p, grads)
        _assert_same(flat_p, ref_p, flat, ref)
    # the parameters are views of one buffer per group, updated in place
    buf = flat_p[0].untyped_storage().data_ptr()
    assert all(p.untyped_storage().data_ptr() == buf for p in flat_p[:3])


def test_flat_adagrad_with_lr_decay_is_torchs():
    flat_p, ref_p = _params(1), _params(1)
    flat = FlatAdagrad(_groups(flat_p), lr_decay=0.01)
    ref = torch.optim.Adagrad(_groups(ref_p), lr_decay=0.01, foreach=False)
    for step in range(5):
        grads = _grads(10 + step, flat_p)
        _step(flat, flat_p, grads)
        _step(ref, ref_p, grads)
    _assert_same(flat_p, ref_p, flat, ref)


def test_state_dict_moves_between_flat_and_torchs_adagrad():
    """A checkpoint of either loads into the other and the runs go on bit for bit."""
    a_p, b_p = _params(2), _params(2)
    a = FlatAdagrad(_groups(a_p))
    b = torch.optim.Adagrad(_groups(b_p), foreach=False)
    for step in range(3):
        _step(a, a_p, _grads(20 + step, a_p))
        _step(b, b_p, _grads(20 + step, b_p))
    saved_a, saved_b = io.BytesIO(), io.BytesIO()
    torch.save(a.state_dict(), saved_a)
    torch.save(b.state_dict(), saved_b)
    saved_a.seek(0)
    saved_b.seek(0)
    # crossed: torch's state into a new flat optimizer and the flat one's into torch's
    c_p = [torch.nn.Parameter(p.detach().clone()) for p in a_p]
    d_p = [torch.nn.Parameter(p.detach().clone()) for p in b_p]
    c = FlatAdagrad(_groups(c_p))
    c.load_state_dict(torch.load(saved_b, weights_only=True))
    d = torch.optim.Adagrad(_groups(d_p), foreach=False)
    d.load_state_dict(torch.load(saved_a, weights_only=True))
    for step in range(3):
        for p_, o_ in ((a_p, a), (b_p, b), (c_p, c), (d_p, d)):
            _step(o_, p_, _grads(30 + step, p_))
    _assert_same(a_p, b_p, a, b)
    _assert_same(c_p, b_p, c, b)
    _assert_same(d_p, b_p, d, b)


def test_a_parameter_whose_data_is_replaced_is_flattened_again():
    """``p.data = ...`` (as ``Module.to`` does) after the optimizer was built: the next
    step takes the new data into a new buffer instead of updating a stale one."""
    flat_p, ref_p = _params(3), _params(3)
    flat = FlatAdagrad(_groups(flat_p))
    ref = torch.optim.Adagrad(_groups(ref_p), foreach=False)
    _step(flat, flat_p, _grads(40, flat_p))
    _step(ref, ref_p, _grads(40, ref_p))
    with torch.no_grad():
        for p, q in zip(flat_p, ref_p):
            p.data = p.data.clone().add_(1.0)
            q.add_(1.0)
    for step in range(2):
        _step(flat, flat_p, _grads(41 + step, flat_p))
        _step(ref, ref_p, _grads(41 + step, ref_p))
    _assert_same(flat_p, ref_p, flat, ref)


def test_what_flat_adagrad_refuses():
    p = _params(4)
    with pytest.raises(ValueError, match="maximize=True is not supported"):
        FlatAdagrad(p, maximize=True)
    with pytest.raises(ValueError, match="group 1 sets fused=True"):
        FlatAdagrad([{"params": p[:2]}, {"params": p[2:], "fused": True}])
    with pytest.raises(ValueError, match="mixes devices or dtypes"):
        FlatAdagrad([p[0], torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))])
    emb = torch.nn.Embedding(5, 3, sparse=True)
    opt = FlatAdagrad(emb.parameters())
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match=r"dense gradients; a parameter of shape \(5, 3\) "
                                           "has a sparse one"):
        opt.step()
