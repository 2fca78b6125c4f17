"""Training from packed trees is training from lists of graphs: a fixed-seed run gives
bit-identical losses and parameters, and loader processes (``--workers``) build the same
batches as the training process."""

from __future__ import annotations

import json
import multiprocessing

import pytest
import torch

from gnn_treelstm.commands import train
from gnn_treelstm.training.batching import make_loader
from gnn_treelstm.trees import data as D
from tests.tiny_data import build_tiny
from tests.trees.test_packed import assert_graphs_equal, assert_schedules_equal

RUN = ["--epochs", "2", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
       "--seed", "3", "-q"]


def _as_lists(load):
    """``load_split`` returning lists of graphs (batched by ``dgl.batch``, as before)."""
    def load_lists(*args, **kw):
        sp = load(*args, **kw)
        return D.Split(list(sp.graphs), None if sp.graphs_b is None else list(sp.graphs_b),
                       sp.targets, sp.name, sp.tree, sp.meta)
    return load_lists


def _run(tmp_path, name, args):
    assert train.main(["--data", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "runs"),
                       "--name", name, *args, *RUN]) == 0
    run = tmp_path / "runs" / name
    losses = [json.loads(line)["train_loss"] for line in (run / "metrics.jsonl").open()]
    return losses, torch.load(run / "best.pt", weights_only=True)["state_dict"]


@pytest.mark.parametrize("args", [
    ["--task", "sst-5", "--model", "nary", "--tree", "constituency", "--engine", "level"],
    ["--task", "snli", "--model", "mtree", "--tree", "dependency"],
])
def test_fixed_seed_run_bit_identical(tmp_path, monkeypatch, capsys, args):
    build_tiny(tmp_path / "data", args[1].split("-")[0])
    packed = _run(tmp_path, "packed", args)
    with monkeypatch.context() as m:
        m.setattr(D, "load_split", _as_lists(D.load_split))
        lists = _run(tmp_path, "lists", args)
    workers = _run(tmp_path, "workers", [*args, "--workers", "1"])
    assert not multiprocessing.active_children()  # the run's loader processes stopped
    assert len(packed[0]) == 2
    for losses, params in (lists, workers):
        assert losses == packed[0]
        assert params.keys() == packed[1].keys()
        assert all(torch.equal(params[k], packed[1][k]) for k in params)


def test_loader_workers_same_batches(tmp_path):
    split = D.load_split(build_tiny(tmp_path, "sick"), "train", "dependency")
    for epoch_a, epoch_b in zip(*(
            [list(loader) for _ in range(2)] for loader in (
                make_loader(split, 4, shuffle=True, seed=5, schedule=True),
                make_loader(split, 4, shuffle=True, seed=5, schedule=True, workers=2)))):
        for a, b in zip(epoch_a, epoch_b, strict=True):
            assert torch.equal(a.index, b.index)
            assert_graphs_equal(a.graph, b.graph)
            assert a.graph_b is None and b.graph_b is None and a.num_a == b.num_a == 4
            assert_schedules_equal(a.schedule, b.schedule)


def test_distributed_sampler_over_packed_trees(tmp_path):
    """``DistributedSampler`` shares a packed split out over ranks: every example once,
    each rank's batches those of the same split held as lists of graphs."""
    from torch.utils.data import DataLoader, DistributedSampler

    split = D.load_split(build_tiny(tmp_path, "snli"), "train", "dependency")
    lists = _as_lists(lambda: split)()
    seen = []
    for rank in range(2):
        got = []
        for sp in (split, lists):
            ds = D.TreeDataset(sp)
            sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=4)
            got.append(list(DataLoader(ds, batch_size=3, sampler=sampler,
                                       collate_fn=D.collate)))
        for a, b in zip(*got, strict=True):
            assert torch.equal(a.index, b.index)
            assert_graphs_equal(a.graph, b.graph)  # A sentences, then B sentences
            assert a.num_a == b.num_a == len(a.index) and a.graph_b is b.graph_b is None
            seen += a.index.tolist()
    assert sorted(seen) == list(range(len(split)))


def test_states_saved_with_a_loader_process_replay_each_epoch_as_without(tmp_path,
                                                                         monkeypatch):
    """With a loader process each next epoch starts before the dev evaluation
    (``Loader.start_next_epoch``); every state saved, inside an epoch and after one, still
    holds the shuffle generator as of its epoch's start, as a run without processes saves
    it, and the runs are the same to the bit."""
    from gnn_treelstm.training.trainer import Trainer

    build_tiny(tmp_path / "data", "sst")
    real_save, saved = Trainer.save_state, []

    def recording(self, loader_state):
        saved.append((self.state.epoch, self.state.step, loader_state.clone()))
        real_save(self, loader_state)

    monkeypatch.setattr(Trainer, "save_state", recording)
    args = ["--task", "sst-5", "--model", "nary", "--tree", "constituency", "--engine",
            "level", "--batch-size", "4", "--checkpoint-every", "2"]
    runs = []
    for workers in ("0", "1"):
        saved.clear()
        assert train.main(["--data", str(tmp_path / "data"), "--runs-dir",
                           str(tmp_path / "runs"), "--name", f"w{workers}", *args, *RUN,
                           "--epochs", "3", "--workers", workers]) == 0
        runs.append((list(saved), [json.loads(line)["train_loss"] for line in
                                   (tmp_path / "runs" / f"w{workers}" / "metrics.jsonl").open()]))
    (saves_0, losses_0), (saves_1, losses_1) = runs
    assert len(losses_0) == 3 and losses_0 == losses_1
    assert [s[:2] for s in saves_0] == [s[:2] for s in saves_1]
    assert {s[1] for s in saves_0} > {0}  # inside epochs too
    assert all(torch.equal(a[2], b[2]) for a, b in zip(saves_0, saves_1, strict=True))
    # one state an epoch: each epoch's start, and after the last the generator it left
    assert len({bytes(s[2].numpy()) for s in saves_0}) == 4
