"""No operation of a step makes the host wait for the GPU: found on the CPU with
:class:`gnn_treelstm.kernels.syncs.SyncWatch` (the step's device tensors tracked from the
model's parameters and the inputs)."""

from __future__ import annotations

import dgl
import pytest
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.kernels import fused_triton, host
from gnn_treelstm.kernels.syncs import SyncWatch, host_buffer
from gnn_treelstm.trees.graph import NO_WORD, make_tree
from gnn_treelstm.trees.schedule import LevelSchedule

triton = pytest.importorskip("triton")


def _batch() -> dgl.DGLGraph:
    a = make_tree([4, 4, 5, 5, 6, 6, -1], [1, 2, 3, 4, NO_WORD, NO_WORD, NO_WORD])
    b = make_tree([2, 2, -1], [5, 6, NO_WORD])
    return dgl.batch([a, b])


def test_the_watch_finds_each_kind_of_sync():
    p = torch.nn.Parameter(torch.randn(5))
    host_side = torch.arange(5)
    with SyncWatch(seeds=[p]) as watch:
        q = p * 2
        q.sum().item()
        bool(q[0] > 0)
        q[q > 0]
        q.nonzero()
        q.tolist()
        torch.unique(q)
        host_side.max().item()  # the host's own tensor: no wait
        host_side[host_side > 2]
    kinds = " | ".join(what for what, _ in watch.found)
    for word in ("item", "boolean-mask", "nonzero", "tolist", "unique"):
        assert word in kinds, kinds
    assert len(watch.found) == 6, watch.found


@pytest.mark.parametrize("name", ["nary", "childsum"])
def test_the_triton_path_step_does_not_sync(name, monkeypatch):
    """Forward + backward of a cell on the Triton path (launches no-ops, CPU tensors
    standing in for the GPU's): no synchronising operation on the device tensors."""
    monkeypatch.setattr(fused_triton, "interpreted", lambda: True)
    monkeypatch.setattr(fused_triton, "gpu_blocks", lambda t: True)
    g = _batch()
    sched = LevelSchedule.from_graph(g)
    cell = build_cell(name, 4, 3, engine="level")
    x = torch.randn(g.num_nodes(), 4, requires_grad=True)
    with host.use_path("triton"), host.no_launches(), \
            SyncWatch(seeds=[x, *cell.parameters()]) as watch:
        h, c = cell(g, x, schedule=sched)
        (h.sum() + c.sum()).backward()
    assert cell.W_x.weight.grad is not None if name == "nary" else True
    assert watch.found == []


def _train_step_syncs(tiny_sst, tmp_path, monkeypatch, model: str) -> list[tuple[str, str]]:
    """The synchronising operations of every ``train_step`` of one epoch on the tiny SST
    data (level engine; the cell's own step on the Triton path is the test above, here
    the C++ loops compute real states for the rest of the step), the optimizer choosing
    as on a GPU (AdaGrad's dense embedding update, no fused kernel: FlatAdagrad)."""
    from gnn_treelstm.training import optim
    from gnn_treelstm.training.adagrad import FlatAdagrad
    from gnn_treelstm.training.config import RunConfig
    from gnn_treelstm.training.trainer import Trainer

    # the parameters stand in for a GPU's
    monkeypatch.setattr(optim, "SPARSE_DEVICES", ())
    monkeypatch.setattr(optim, "FUSED_DEVICES", {**optim.FUSED_DEVICES, "adagrad": ()})
    cfg = RunConfig(task="sst-5", model=model, tree="constituency", data=str(tiny_sst),
                    engine="level", epochs=1, batch_size=4, embeddings_mode="random",
                    emb_dim=6, hidden=5, runs_dir=str(tmp_path), name="t")
    found: list[tuple[str, str]] = []
    real = Trainer.train_step
    steps = []

    def watched(self, batch, epoch, step):
        assert not self.model.sparse_embedding_grad
        assert isinstance(self.current.optimizer, FlatAdagrad)
        with SyncWatch(seeds=self.model.parameters()) as watch:
            out = real(self, batch, epoch, step)
        found.extend(watch.found)
        steps.append(out)
        return out

    monkeypatch.setattr(Trainer, "train_step", watched)
    Trainer(cfg).fit()
    assert len(steps) == 4 and all(loss is not None for loss in steps)
    return found


def test_a_training_step_does_not_sync(tiny_sst, tmp_path, monkeypatch):
    """Embedding, cell, head, phrase-level loss, backward, finiteness check, AdaGrad: no
    operation waits for the device."""
    found = _train_step_syncs(tiny_sst, tmp_path, monkeypatch, "nary")
    assert found == []


def test_a_blocking_copy_to_a_host_buffer_is_flagged():
    p = torch.nn.Parameter(torch.randn(3))
    with SyncWatch(seeds=[p]) as watch:
        buf = host_buffer((3,), p.dtype, p.device)
        buf.copy_(p * 2, non_blocking=True)
        assert buf.tolist() == (p * 2).detach().tolist()  # the host's own tensor now
        assert watch.found[-1][0] == "Tensor.tolist"  # (the right side's, on the device)
        watch.found.clear()
        buf.copy_(p * 3)
    assert [what for what, _ in watch.found] == ["a blocking copy to the host"]
