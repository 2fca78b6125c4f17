"""The fast training paths compute what the reference paths compute: a level
engine step (schedule built in collate) equals a dgl engine step, sparse embedding
gradients equal dense ones, AdaGrad's sparse update equals its dense update, batched
fetching equals per-example fetching."""

import copy
from types import SimpleNamespace

import pytest
import torch

from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel
from gnn_treelstm.tasks import build_task
from gnn_treelstm.training import optim
from gnn_treelstm.training.batching import make_loader
from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.memory import memory_stats, reset_peak_memory
from gnn_treelstm.training.optim import _fused_ok, build_optimizer
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees.schedule import LevelSchedule
from tests.tiny_data import WORDS, build_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    for ds in ("sst", "sick"):
        build_tiny(root, ds)
    return root


def _split(tiny, dataset, task, tree):
    return build_task(task).prepare_split(D.load_split(tiny / dataset, "train", tree))


def _models(task, cell, **kw):
    cfg = ModelConfig(task=task, cell=cell, vocab_size=len(WORDS), emb_dim=6, hidden=5,
                      dropout=0.0, engine="dgl", **kw)
    torch.manual_seed(0)
    ref = TreeLSTMModel(cfg)
    lvl = TreeLSTMModel(ModelConfig(**{**cfg.to_dict(), "engine": "level"}))
    lvl.load_state_dict(ref.state_dict())
    return ref, lvl


def _step(model, batch, schedule):
    model.zero_grad(set_to_none=True)
    out = model(batch.graph, batch.graph_b, schedule=schedule, num_a=batch.num_a)
    loss = model.task.loss(out, batch)
    loss.backward()
    return loss.detach(), {n: p.grad.to_dense() for n, p in model.named_parameters()
                           if p.grad is not None}


@pytest.mark.parametrize("dataset,task,cell,tree,kw", [
    ("sst", "sst-5", "nary", "constituency", {}),
    ("sick", "sick-r", "childsum", "dependency", {}),
])
def test_level_step_equals_dgl_step(tiny, dataset, task, cell, tree, kw):
    split = _split(tiny, dataset, task, tree)
    batch = next(iter(make_loader(split, 7, shuffle=True, seed=3, schedule=True)))
    assert isinstance(batch.schedule, LevelSchedule)
    assert batch.schedule.num_nodes == batch.encoder_graph().num_nodes()
    ref, lvl = _models(task, cell, **kw)
    lvl.sparse_embedding_grad = True           # also: sparse and dense gradients agree
    loss_ref, grads_ref = _step(ref, batch, None)
    loss_lvl, grads_lvl = _step(lvl, batch, batch.schedule)
    assert loss_lvl.item() == pytest.approx(loss_ref.item(), rel=1e-5, abs=1e-6)
    assert grads_ref.keys() == grads_lvl.keys() and grads_ref
    for name, g in grads_ref.items():
        torch.testing.assert_close(grads_lvl[name], g, rtol=1e-5, atol=1e-6, msg=name)
    # the level engine without a collate-time schedule builds the same one itself
    loss_own, _ = _step(lvl, batch, None)
    assert loss_own.item() == pytest.approx(loss_lvl.item(), rel=1e-6)


def test_sparse_embedding_grad_equals_dense(tiny):
    split = _split(tiny, "sst", "sst-5", "constituency")
    batch = next(iter(make_loader(split, 5, shuffle=False)))
    dense, _ = _models("sst-5", "nary")
    sparse = copy.deepcopy(dense)
    sparse.sparse_embedding_grad = True
    _, gd = _step(dense, batch, None)
    sparse.zero_grad(set_to_none=True)
    sparse.task.loss(sparse(batch.graph), batch).backward()
    assert sparse.embedding.weight.grad.is_sparse
    assert not dense.embedding.weight.grad.is_sparse
    torch.testing.assert_close(sparse.embedding.weight.grad.to_dense(),
                               gd["embedding.weight"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("optimizer,sparse_devices", [
    ("adagrad", ("cpu",)), ("adagrad", ()), ("adam", ("cpu",))])
def test_optimizer_paths_equal_reference_update(tiny, optimizer, sparse_devices,
                                                monkeypatch):
    """build_optimizer (sparse AdaGrad embedding rows where they run, as on the CPU; else,
    as on a GPU, the dense ones; fused dense groups) makes the same updates over a few
    steps as plain torch optimizers on dense gradients."""
    monkeypatch.setattr(optim, "SPARSE_DEVICES", sparse_devices)
    split = _split(tiny, "sst", "sst-5", "constituency")
    cfg = RunConfig(task="sst-5", optimizer=optimizer, l2=1e-2)
    fast, _ = _models("sst-5", "nary")
    ref = copy.deepcopy(fast)
    r = cfg.resolved()
    opt = build_optimizer(fast, r)
    assert fast.sparse_embedding_grad is (optimizer == "adagrad" and bool(sparse_devices))
    emb, rest = ref.parameter_groups()
    groups = [{"params": rest, "lr": r.lr, "weight_decay": r.l2},
              {"params": emb, "lr": r.emb_lr, "weight_decay": 0.0}]
    ref_opt = (torch.optim.Adagrad(groups, foreach=False) if optimizer == "adagrad"
               else torch.optim.Adam(groups, foreach=False))
    for batch in list(make_loader(split, 6, shuffle=True, seed=1))[:3]:
        for model, o in ((fast, opt), (ref, ref_opt)):
            o.zero_grad(set_to_none=True)
            model.task.loss(model(batch.graph), batch).backward()
            o.step()
    for (name, p), q in zip(fast.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    assert not torch.equal(fast.embedding.weight, _models("sst-5", "nary")[0].embedding.weight)


def test_fused_only_where_torch_has_the_kernel():
    """AdaGrad's fused kernel is CPU-only in torch (``fused=True`` on CUDA raises); Adam's
    runs on both."""
    on = {d: SimpleNamespace(dtype=torch.float32, device=torch.device(d)) for d in ("cpu", "cuda")}
    assert _fused_ok([on["cpu"]], "adagrad") and _fused_ok([on["cpu"]], "adam")
    assert not _fused_ok([on["cuda"]], "adagrad") and _fused_ok([on["cuda"]], "adam")
    assert not _fused_ok([on["cpu"], on["cuda"]], "adagrad") and not _fused_ok([], "adam")
    ints = SimpleNamespace(dtype=torch.int64, device=torch.device("cpu"))
    assert not _fused_ok([ints], "adam")


def test_fixed_embeddings_get_no_gradient_and_no_group(tiny):
    ref, _ = _models("sst-5", "nary", embeddings_mode="fixed")
    opt = build_optimizer(ref, RunConfig(task="sst-5").resolved())
    assert len(opt.param_groups) == 1
    assert all(p is not ref.embedding.weight for p in opt.param_groups[0]["params"])


def test_batched_fetch_equals_per_example_collate(tiny):
    split = _split(tiny, "sick", "sick-r", "dependency")
    ds = D.TreeDataset(split)
    idx = [4, 0, 7, 2]
    a = D.collate(ds.__getitems__(idx), schedule=True)
    b = D.collate([ds[i] for i in idx])
    assert a.index.tolist() == b.index.tolist() == idx
    assert a.targets.keys() == b.targets.keys()
    for k in a.targets:
        assert torch.equal(a.targets[k], b.targets[k])
    # pairs batched once: A sentences, then B sentences
    assert a.graph_b is b.graph_b is None and a.num_a == b.num_a == len(idx)
    assert a.graph.batch_size == b.graph.batch_size == 2 * len(idx)
    assert [t.tolist() for t in a.graph.edges()] == [t.tolist() for t in b.graph.edges()]
    joint = a.encoder_graph()
    assert joint is a.graph
    ref = LevelSchedule.from_graph(joint)
    assert a.schedule.up.node_offsets == ref.up.node_offsets
    assert torch.equal(a.schedule.up.order, ref.up.order)
    assert b.schedule is None
    moved = a.to("cpu")
    assert isinstance(moved.schedule, LevelSchedule)


def test_schedule_of_the_wrong_graph_is_refused(tiny):
    split = _split(tiny, "sst", "sst-5", "constituency")
    batches = list(make_loader(split, 3, shuffle=False, schedule=True))
    _, lvl = _models("sst-5", "nary")
    small, other = batches[0], next(b for b in batches
                                    if b.graph.num_nodes() != batches[0].graph.num_nodes())
    with pytest.raises(ValueError, match="schedule has"):
        lvl(small.graph, schedule=other.schedule)


def test_memory_stats_and_peak_reset():
    reset_peak_memory()
    m = memory_stats()
    assert m["peak_rss_mb"] > 0 and m.get("rss_mb", 1) > 0
    big = torch.ones(64 << 18)                  # 64 MiB touched
    after = memory_stats()["peak_rss_mb"]
    del big
    assert after >= m["peak_rss_mb"] + 32


def test_release_grads_is_zero_grad_set_to_none():
    """optim.release_grads drops the gradients of every group (the word embedding's own
    too) as zero_grad(set_to_none=True) does."""
    cfg = ModelConfig(task="sst-5", cell="nary", vocab_size=len(WORDS), emb_dim=4, hidden=3,
                      engine="level")
    torch.manual_seed(0)
    ours, ref = TreeLSTMModel(cfg), TreeLSTMModel(cfg)
    ref.load_state_dict(ours.state_dict())
    run = RunConfig(task="sst-5", optimizer="adagrad").resolved()
    opts = [build_optimizer(m, run) for m in (ours, ref)]
    assert len(opts[0].param_groups) == 2  # the word embedding has its own group
    for model in (ours, ref):
        for p in model.parameters():
            p.grad = torch.ones_like(p)
    optim.release_grads(opts[0])
    opts[1].zero_grad(set_to_none=True)
    assert all(p.grad is None for m in (ours, ref) for p in m.parameters())
