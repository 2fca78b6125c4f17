"""How many loader processes a run uses (``loader_workers``: by default on CUDA, resolved
without one) and the loader options ``make_loader`` passes on."""

from __future__ import annotations

import gc
import time

import dgl
import pytest
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.kernels import native
from gnn_treelstm.kernels.syncs import SyncWatch
from gnn_treelstm.training import batching
from gnn_treelstm.training.batching import (
    CUDA_WORKERS,
    RECEIVED_AHEAD,
    ReceivedBatches,
    level_schedules,
    loader_workers,
    make_loader,
    to_device,
)
from gnn_treelstm.training.config import RunConfig, run_options
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees.data import Split
from gnn_treelstm.trees.packed import PackedTrees, pack_graphs
from tests.handbuilt import random_batch


def test_loader_processes_by_default_on_cuda_only():
    assert RunConfig().workers is None  # left out: the device decides
    for device in ("cuda", "cuda:1", torch.device("cuda", 0)):
        assert loader_workers(device, None, cpus=16) == CUDA_WORKERS > 0
    assert loader_workers("cuda", None, cpus=2) == 1  # the training process keeps a CPU
    assert loader_workers("cuda", None, cpus=1) == 0
    for device in ("cpu", torch.device("cpu"), "meta"):
        assert loader_workers(device, None, cpus=16) == 0


def test_a_given_number_of_loader_processes_wins():
    for device in ("cuda", "cpu"):
        for given in (0, 1, 3):
            assert loader_workers(device, given, cpus=16) == given


def test_the_option_help_names_the_default():
    opt = next(o for o in run_options() if o.flag == "--workers")
    assert opt.default is None and f"{CUDA_WORKERS} on CUDA" in opt.help


def test_make_loader_pins_and_computes_the_levels_before_its_processes():
    trees = PackedTrees(*pack_graphs(random_batch(seed=2, count=9)))
    split = Split(trees, None, {"label": torch.zeros(9, dtype=torch.int64)})
    assert "depth" not in trees._derived
    loader = make_loader(split, 4, shuffle=True, schedule=True, workers=1, pin_memory=False)
    assert "depth" in trees._derived  # shared with the loader processes they fork
    assert (loader.num_workers, loader.pins, loader.pin_memory) == (1, False, False)
    # no loader process: the data loader pins; with them, the receiving thread does
    assert make_loader(split, 4, shuffle=False, pin_memory=True).pin_memory
    pinned = make_loader(split, 4, shuffle=False, pin_memory=True, workers=1)
    assert pinned.pins and not pinned.pin_memory


def test_the_loader_builds_batches_with_the_cpp_routines_where_they_are(monkeypatch):
    """``collate`` gets the C++ routines where the native library is (loaded before any
    loader process forks) and schedules are built, numpy where it is not or without
    schedules (a dgl-engine loader never builds the library); both give the same batches
    (tests/trees/test_packed.py) and the reference schedule
    (tests/trees/test_schedule_arrays.py)."""
    trees = PackedTrees(*pack_graphs(random_batch(seed=2, count=9)))
    split = Split(trees, None, {"label": torch.zeros(9, dtype=torch.int64)})
    want = native.BUILDER if native.available() else None

    def builder(**options):
        return make_loader(split, 4, shuffle=False, **options).collate_fn.keywords["builder"]

    assert builder(schedule=True, workers=1) is want
    assert builder() is None
    monkeypatch.setitem(native._state, "choice", "off")  # GNN_TREELSTM_BACKEND=general
    assert builder(schedule=True) is None


@pytest.mark.parametrize("workers", [0, 1])
def test_a_bottom_up_cell_s_batches_come_without_top_down_levels(workers):
    """``make_loader(schedule="up")`` (a cell whose ``runs_top_down`` is False, as the
    trainer and ``evaluate`` pass it: :func:`level_schedules`) builds each batch's
    bottom-up levels only, through loader processes too; ``schedule=True`` both
    directions."""
    trees = PackedTrees(*pack_graphs(random_batch(seed=2, count=9)))
    split = Split(trees, None, {"label": torch.zeros(9, dtype=torch.int64)})
    up = list(make_loader(split, 4, shuffle=False, schedule="up", workers=workers))
    both = list(make_loader(split, 4, shuffle=False, schedule=True, workers=workers))
    assert len(up) == len(both) == 3
    for a, b in zip(up, both):
        assert a.schedule.down is None and b.schedule.down is not None
        assert torch.equal(a.schedule.up.order, b.schedule.up.order)
    if workers == 0:
        nary, topdown = (build_cell(name, 4, 4, engine="level") for name in ("nary", "topdown"))
        assert level_schedules(nary, True) == "up" and level_schedules(topdown, True) is True
        assert level_schedules(topdown, False) is False
        with pytest.raises(ValueError, match="schedule='down'"):
            make_loader(split, 4, shuffle=False, schedule="down")


def test_loader_processes_stay_up_and_draw_as_no_loader_process_does():
    """With loader processes the same processes serve every epoch, and each epoch still
    draws from the shuffle generator (or, unshuffled, torch's global one, which dropout
    reads) what a loader without them draws: the same orders, the same generators after."""
    trees = PackedTrees(*pack_graphs(random_batch(seed=2, count=9)))
    split = Split(trees, None, {"label": torch.zeros(9, dtype=torch.int64)})
    for shuffle in (True, False):
        seen = []
        for workers in (0, 1):
            torch.manual_seed(0)
            loader = make_loader(split, 4, shuffle=shuffle, seed=3, schedule=True,
                                 workers=workers)
            epochs = [[b.index.tolist() for b in loader]]
            first = loader._iterator
            epochs += [[b.index.tolist() for b in loader] for _ in range(2)]
            assert loader.persistent_workers == (workers > 0)
            assert (loader._iterator is first) if workers else first is None
            processes = list(first._workers) if workers else []
            loader.close()  # the processes stopped; a later epoch starts new ones
            assert loader._iterator is None and not any(p.is_alive() for p in processes)
            epochs.append([b.index.tolist() for b in loader])
            loader.close()
            gen = None if loader.generator is None else loader.generator.get_state()
            seen.append((epochs, torch.random.get_rng_state(), gen))
        (epochs_0, global_0, gen_0), (epochs_1, global_1, gen_1) = seen
        assert epochs_0 == epochs_1 and len(epochs_0) == 4
        assert shuffle == (epochs_0[0] != epochs_0[1])  # shuffled: a new order each epoch
        assert torch.equal(global_0, global_1)
        assert (gen_0 is None) == (gen_1 is None) == (not shuffle)
        assert gen_0 is None or torch.equal(gen_0, gen_1)


def test_an_epoch_started_early_draws_as_one_started_at_its_iter():
    """``start_next_epoch`` after an epoch's last batch: with a loader process the next
    epoch starts there (its first batches asked for), hands out the same batches, and
    ``epoch_state`` is the shuffle generator's state before its draws; without processes
    it does nothing. An epoch started early and never taken is undone by ``close``."""
    trees = PackedTrees(*pack_graphs(random_batch(seed=2, count=9)))
    split = Split(trees, None, {"label": torch.zeros(9, dtype=torch.int64)})
    seen = []
    for workers in (0, 1):
        torch.manual_seed(0)
        loader = make_loader(split, 4, shuffle=True, seed=3, schedule=True, workers=workers)
        epochs, states = [], []
        for _ in range(3):
            states.append(loader.epoch_state())
            epochs.append([b.index.tolist() for b in loader])
            before = loader.epoch_state()
            loader.start_next_epoch()
            assert torch.equal(loader.epoch_state(), before)  # not the draws made
            assert (loader._ahead is not None) == (workers > 0)
            if workers:  # the epoch taken up, its first batches asked for and received
                assert loader._iterator._send_idx > 0 and loader._ahead.taken == 0
                _wait_for(loader._ahead.ready)
                assert not torch.equal(loader.generator.get_state(), before)
            loader.start_next_epoch()  # once started, started
        it = iter(loader)
        next(it)
        try:  # a batch taken, two still to take: starting another would drop them
            loader.start_next_epoch()
        except RuntimeError as e:
            assert "has 2 of its 3 batches still to take" in str(e)
        else:
            assert not workers, "started an epoch over one in progress"
        list(it)
        loader.start_next_epoch()
        loader.close()  # the epoch started early never ran: its draws undone
        seen.append((epochs, states, loader.generator.get_state(), torch.random.get_rng_state()))
    (epochs_0, states_0, gen_0, global_0), (epochs_1, states_1, gen_1, global_1) = seen
    assert epochs_0 == epochs_1 and len({str(e) for e in epochs_0}) == 3
    assert all(torch.equal(a, b) for a, b in zip(states_0, states_1, strict=True))
    assert torch.equal(gen_0, gen_1) and torch.equal(global_0, global_1)


def test_an_unshuffled_loader_does_not_start_early():
    """Its processes' seed comes from torch's global generator, whose draws would move."""
    trees = PackedTrees(*pack_graphs(random_batch(seed=2, count=9)))
    split = Split(trees, None, {"label": torch.zeros(9, dtype=torch.int64)})
    loader = make_loader(split, 4, shuffle=False, schedule=True, workers=1)
    list(loader)
    state = torch.random.get_rng_state()
    loader.start_next_epoch()
    assert loader._ahead is None and loader.epoch_state() is None
    assert torch.equal(torch.random.get_rng_state(), state)
    loader.close()


def _wait_for(condition, seconds: float = 30.0) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "not within 30 s"
        time.sleep(0.005)


def test_a_loader_process_s_batches_are_received_by_a_thread_beside_the_step():
    """With loader processes a thread of this process takes each batch off the data
    loader's iterator and holds RECEIVED_AHEAD of them ready, so the step's ``next`` waits
    for no loader process and does none of the data loader's work; the batches are those
    without processes, an epoch's end and a new ``iter`` stop the thread."""
    trees = PackedTrees(*pack_graphs(random_batch(seed=2, count=13)))
    split = Split(trees, None, {"label": torch.zeros(13, dtype=torch.int64)})
    plain = [b.index.tolist() for b in make_loader(split, 2, shuffle=True, seed=5)]
    loader = make_loader(split, 2, shuffle=True, seed=5, workers=1, schedule=True)
    it = iter(loader)
    assert isinstance(it, ReceivedBatches) and len(it) == len(plain) == 7
    _wait_for(lambda: it.ready() == RECEIVED_AHEAD)  # received beside the step...
    time.sleep(0.2)
    assert it.ready() == RECEIVED_AHEAD and loader._iterator._num_yielded == RECEIVED_AHEAD
    got = [next(it).index.tolist()]  # ...no more than that, until the step takes one
    _wait_for(lambda: loader._iterator._num_yielded == RECEIVED_AHEAD + 1)
    got += [b.index.tolist() for b in it]
    assert got == plain and it.taken == 7 and next(it, None) is None
    thread = it._thread
    assert not thread.is_alive()
    second = iter(loader)  # a new epoch, on the same processes
    next(second)
    first_thread = second._thread
    third = iter(loader)  # the epoch left: its thread stopped before the iterator's reset
    assert not first_thread.is_alive() and len(list(third)) == 7
    loader.close()
    assert not third._thread.is_alive() and loader._iterator is None


def test_the_receiving_thread_pins_where_asked_and_raises_a_processes_error(monkeypatch):
    """``pin_memory`` with loader processes: the receiving thread pins each batch (where
    an accelerator is there); an error in a loader process is raised by the step's
    ``next``, as the data loader raises it, the same type and message."""
    trees = PackedTrees(*pack_graphs(random_batch(seed=2, count=6)))
    split = Split(trees, None, {"label": torch.zeros(6, dtype=torch.int64)})
    pinned = []
    assert batching._pinning_device() is None  # this machine: no accelerator, no pinning
    devices = []
    monkeypatch.setattr(batching, "_pinning_device", lambda: 3)
    monkeypatch.setattr(batching, "_set_device", devices.append)
    monkeypatch.setattr(D.Batch, "pin_memory", lambda self: pinned.append(self) or self)
    loader = make_loader(split, 2, shuffle=False, workers=1, pin_memory=True)
    batches = list(loader)
    loader.close()
    assert len(batches) == 3 and [id(b) for b in batches] == [id(b) for b in pinned]
    assert devices == [3]  # the thread pins for the device current where the epoch began

    def broken(examples):
        raise ValueError("a bad tree in the batch")

    loader = make_loader(split, 2, shuffle=False, workers=1)
    loader.collate_fn = broken
    with pytest.raises(ValueError, match="a bad tree in the batch"):
        list(loader)
    loader.close()


@pytest.mark.parametrize("graphs_on_device", [True, False])
def test_a_batch_moves_to_the_device_without_waiting(monkeypatch, graphs_on_device):
    """Every copy of a batch to the device is ``non_blocking``: a blocking copy to a GPU
    waits for the kernels queued before it (the last step's). Seen here as copies to the
    ``meta`` device (the graph's own copy recorded: DGL has no meta device)."""
    trees = PackedTrees(*pack_graphs(random_batch(seed=2, count=5)))
    split = Split(trees, None, {"label": torch.arange(5)})
    batch = next(iter(make_loader(split, 5, shuffle=False, schedule=True)))
    assert batch.label_order is not None and batch.schedule is not None
    graph_copies = []
    monkeypatch.setattr(dgl.DGLGraph, "to",
                        lambda self, device, **kw: graph_copies.append(kw) or self)
    with SyncWatch() as watch:
        moved = to_device(batch, torch.device("meta"), graphs_on_device)
    assert watch.found == []
    assert graph_copies == ([{"non_blocking": True}] if graphs_on_device else [])
    assert moved.targets["label"].device.type == "meta"
    assert moved.label_order.device.type == moved.schedule.up.order.device.type == "meta"
    with SyncWatch() as watch:  # what the watch sees of a blocking one
        batch.targets["label"].to("meta")
    assert [what for what, _ in watch.found] == ["Tensor.to(device) without non_blocking"]


def test_a_loader_dropped_mid_epoch_stops_its_receiving_thread_and_processes():
    """The receiving thread does not hold its :class:`ReceivedBatches`: a loader let go
    mid-epoch (its batches not all taken, never closed) stops the thread, and the data
    loader's iterator it read from, its processes with it, goes too."""
    trees = PackedTrees(*pack_graphs(random_batch(seed=2, count=13)))
    split = Split(trees, None, {"label": torch.zeros(13, dtype=torch.int64)})
    loader = make_loader(split, 2, shuffle=True, seed=5, workers=1)
    it = iter(loader)
    next(it)
    thread, processes, ready = it._thread, list(loader._iterator._workers), it._ready
    _wait_for(lambda: ready.qsize() == RECEIVED_AHEAD)
    del it, loader
    gc.collect()
    thread.join(timeout=30)
    assert not thread.is_alive()
    _wait_for(lambda: not any(p.is_alive() for p in processes))
