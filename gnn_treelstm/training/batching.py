"""Minibatches of a split (:func:`make_loader`), shared out over the ranks of a data
parallel run (:class:`ShardedBatches`), and moved to the compute device (:func:`to_device`)."""

from __future__ import annotations

import functools
import math
import queue
import threading
import weakref
from collections.abc import Iterable, Iterator

import torch
from torch.utils.data import DataLoader

from gnn_treelstm.argtypes import usable_cpus
from gnn_treelstm.kernels import native
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees.packed import PackedTrees

__all__ = ["CUDA_WORKERS", "RECEIVED_AHEAD", "level_schedules", "loader_workers", "make_loader",
           "Loader", "ReceivedBatches", "ShardedBatches", "Share", "to_device"]

#: loader processes of a run on CUDA that does not say (``--workers`` left out): the batches,
#: their level schedules and pinned copies are made beside the steps, not between them
CUDA_WORKERS = 2

#: batches the receiving thread of a loader with processes holds ready for the step
#: (:class:`ReceivedBatches`), beside the processes' own ``prefetch_factor`` each
RECEIVED_AHEAD = 4


def loader_workers(device: torch.device | str, given: int | None,
                   cpus: int | None = None) -> int:
    """The loader processes of a run on ``device``: ``given`` when the run says
    (``--workers N``, 0 included); else :data:`CUDA_WORKERS` on CUDA, at most ``cpus - 1``
    (the training process keeps a CPU; ``cpus`` None: those this process may use), and 0
    on any other device (the step itself is the CPU's work)."""
    if given is not None:
        return given
    if torch.device(device).type != "cuda":
        return 0
    cpus = usable_cpus() if cpus is None else cpus
    return max(0, min(CUDA_WORKERS, cpus - 1))


def level_schedules(cell: torch.nn.Module, level: bool) -> bool | str:
    """:func:`make_loader`'s ``schedule`` for a model's ``cell``: none without the level
    engine (``level`` False), else both directions where the cell reads the top-down
    levels (its ``runs_top_down``), the bottom-up ones alone where it does not."""
    if not level:
        return False
    return True if getattr(cell, "runs_top_down", True) else "up"


def make_loader(split: D.Split, batch_size: int, *, shuffle: bool, seed: int = 0,
                schedule: bool | str = False, shard: tuple[int, int] | None = None,
                workers: int = 0, pin_memory: bool = False) -> Loader:
    """Minibatches of ``split``; ``schedule``: build each batch's level schedule in the
    collate function (for ``engine="level"``; see :func:`gnn_treelstm.trees.data.collate`),
    both directions (True) or the bottom-up levels alone (``"up"``: a cell whose
    ``runs_top_down`` is False; :func:`level_schedules` says which a cell needs).
    ``shard=(rank, world)``: this process's share of the same batches under data
    parallelism, ``batch_size`` being the global batch (:class:`ShardedBatches`).
    ``workers``: loader processes building the batches (the same batches for any number:
    the order is drawn in this process; packed trees are shared with them page by page,
    and so are their levels, computed here first). ``pin_memory``: the batches' tensors in
    pinned memory, for asynchronous copies to a CUDA device (:func:`loader_workers` gives
    the number of processes a device asks for). The processes stay up from one epoch to
    the next (:class:`Loader`)."""
    if schedule not in (False, True, "up"):
        raise ValueError(f"make_loader: schedule={schedule!r}; use False, True (both "
                         "directions) or 'up' (the bottom-up levels alone)")
    # the same draws for any number of workers: see Loader
    extra = {"num_workers": workers, "pin_memory": pin_memory, "persistent_workers": workers > 0}
    if schedule and workers:  # computed once, before the processes fork, which share them
        for trees in (split.graphs, split.graphs_b):
            if isinstance(trees, PackedTrees):
                trees.node_levels()
    # a loader process sends a batch's arrays; the graph is made once, in this process.
    # With schedules (the level engine, which builds and loads the native library anyway),
    # batches taken from packed trees and their schedules built by the C++ routines where
    # the library is (loaded here, once, before any loader process forks); without (the
    # dgl engine), numpy: no first-use build of the library for a loader alone
    collate = functools.partial(D.collate, schedule=bool(schedule), top_down=schedule is True,
                                wire=workers > 0,
                                builder=native.batch_builder() if schedule else None)
    gen = torch.Generator()
    gen.manual_seed(seed)
    if shard is not None:  # the one-process batches, each split over the ranks
        from torch.utils.data import RandomSampler, SequentialSampler

        data = D.TreeDataset(split)
        order = RandomSampler(data, generator=gen) if shuffle else SequentialSampler(data)
        shares = ShardedBatches(order, batch_size, *shard)
        return Loader(_SharedOut(data), batch_sampler=shares,
                      collate_fn=functools.partial(_collate_share, collate=collate),
                      generator=gen if shuffle else None, **extra)
    return Loader(D.TreeDataset(split), batch_size=batch_size, shuffle=shuffle,
                   collate_fn=collate, generator=gen if shuffle else None, **extra)


class Loader(DataLoader):
    """A ``DataLoader`` whose loader processes stay up from one epoch to the next
    (``persistent_workers``, set where there are any): forking them and the pinning thread
    again at every epoch's start kept its first step waiting (docs/speed.md, *The loader
    alone*). A fresh iterator draws its processes' base seed (one int64) from the loader's
    generator, or torch's global one, before the epoch's order; a persistent one draws it
    once. So each later epoch draws it here, as a fresh iterator would: the shuffle order
    and the global generator (dropout's masks) then follow the same draws as with no loader
    process (``tests/training/test_batching.py``).

    With loader processes, an epoch's batches are received by a thread of this process
    (:class:`ReceivedBatches`): it takes each batch from the processes (unpickling it, the
    data loader's bookkeeping, pinning it where ``pin_memory`` asks and an accelerator is
    there) while the step runs, and the step's ``next`` takes a batch it holds ready. The
    data loader's own pinning thread is then not started: the receiving thread pins.

    :meth:`start_next_epoch` starts the next epoch once the last one's batches are all
    taken, so that its processes take it up and build its first batches while the caller
    does other work (the dev evaluation); the next ``iter`` hands that epoch out.
    :meth:`epoch_state` is the shuffle generator's state the epoch to come is drawn from,
    whether it started early or not: what a saved state replays it from."""

    _ahead: ReceivedBatches | Iterator | None = None  # the next epoch, started early
    _ahead_state: torch.Tensor | None = None  # the shuffle generator's state before it
    _received: ReceivedBatches | None = None  # the epoch the receiving thread serves

    def __init__(self, *args, pin_memory: bool = False, **kwargs):
        workers = kwargs.get("num_workers", 0)
        #: pinned batches asked for (``pin_memory``); with processes the receiving thread
        #: pins them, so the data loader's own ``pin_memory`` is False there
        self.pins = pin_memory
        super().__init__(*args, pin_memory=pin_memory and not workers, **kwargs)

    def __iter__(self) -> Iterator:
        if self._ahead is not None:  # started early, its draws made
            it, self._ahead, self._ahead_state = self._ahead, None, None
            return it
        self._stop_receiving()  # the persistent iterator is reset for the new epoch
        if self._iterator is not None:  # an epoch after the first, on the same processes
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        it = super().__iter__()
        if not self.num_workers:
            return it
        self._received = ReceivedBatches(it, pin=_pinning_device() if self.pins else None)
        return self._received

    def start_next_epoch(self) -> None:
        """Start the next epoch now, its draws from the shuffle generator made: with loader
        processes, they take it up and build its first batches (the data loader's
        ``prefetch_factor`` each, and the receiving thread's :data:`RECEIVED_AHEAD`) while
        the caller does other work, and the next ``iter`` returns it. Nothing to do without
        loader processes, without a shuffle generator (an unshuffled loader draws from
        torch's global generator, which the caller's own draws meanwhile would then
        follow, not precede) or when it already started. Raises ``RuntimeError`` while an
        epoch still has batches to take: starting another would drop them."""
        if self._ahead is not None or not self.num_workers or self.generator is None:
            return
        it = self._received
        if it is not None and it.taken < len(it):
            raise RuntimeError(
                f"start_next_epoch: the epoch in progress has {len(it) - it.taken} of "
                f"its {len(it)} batches still to take; start the next one after its last")
        state = self.generator.get_state()
        self._ahead = self.__iter__()
        self._ahead_state = state

    def epoch_state(self) -> torch.Tensor | None:
        """The shuffle generator's state that the epoch the next ``iter`` hands out is
        drawn from (as of before its draws, also when :meth:`start_next_epoch` made them);
        None for a loader without one (unshuffled)."""
        if self._ahead_state is not None:
            return self._ahead_state.clone()
        return None if self.generator is None else self.generator.get_state()

    def close(self) -> None:
        """Stop the receiving thread and the loader processes now (a later epoch starts
        new ones), not when the interpreter exits: with pinned memory, torch 2.4's exit
        handler waits 5 s for each persistent process it never told to stop
        (pytorch/pytorch#81794). An epoch started early is dropped and its draws undone:
        the shuffle generator goes back to :meth:`epoch_state`."""
        self._stop_receiving()  # first: its next() may still draw the epoch's last indices
        if self._ahead_state is not None and self.generator is not None:
            self.generator.set_state(self._ahead_state)
        self._ahead = self._ahead_state = None
        it, self._iterator = self._iterator, None
        if it is not None:
            it._shutdown_workers()

    def _stop_receiving(self) -> None:
        """The receiving thread stopped (joined): nothing reads the data loader's iterator
        while it is reset or shut down."""
        received, self._received = self._received, None
        if received is not None:
            received.stop()


def _pinning_device() -> int | None:
    """The index of the accelerator that pinned batches serve (the current one), as the
    data loader decides it (``torch.accelerator`` where this torch has it, else CUDA; none
    on MPS, where pinning is not supported); None: no pinning."""
    acc = getattr(torch, "accelerator", None)
    if acc is None:
        return torch.cuda.current_device() if torch.cuda.is_available() else None
    if not acc.is_available() or getattr(acc.current_accelerator(), "type", None) == "mps":
        return None
    return acc.current_device_index()


def _set_device(index: int) -> None:
    """Make accelerator ``index`` current in the calling thread (pinned memory is
    allocated for the current device)."""
    acc = getattr(torch, "accelerator", None)
    if acc is None:
        torch.cuda.set_device(index)
    else:
        acc.set_device_index(index)


class _Raised:
    """An exception the receiving thread met, raised again in the step's ``next``."""

    def __init__(self, error: BaseException):
        self.error = error


_END = object()  # the epoch's last batch was received


class ReceivedBatches(Iterator):
    """An epoch's batches from the loader processes, received by a thread of this process
    while the step runs: the thread takes each batch off the data loader's iterator
    (unpickling it and the data loader's bookkeeping: recording its arrival, sending the
    processes the next indices), pins it (its ``pin_memory``) for accelerator ``pin`` (an
    index; None: no pinning) and holds up to ``ahead`` batches ready; the step's ``next``
    takes one of those. The batches, their order and every generator's draws are those of
    the data loader's iterator (the thread only calls its ``next``, one at a time); an
    error in a loader process, or in the thread, is raised again by the ``next`` that would
    have returned that batch. :meth:`stop` ends the thread before the data loader's
    iterator is reset or shut down."""

    def __init__(self, it: Iterator, *, pin: int | None = None, ahead: int = RECEIVED_AHEAD):
        self._it = it
        self._ready: queue.SimpleQueue = queue.SimpleQueue()
        self._room: queue.SimpleQueue = queue.SimpleQueue()  # one token a batch it may hold
        for _ in range(ahead):
            self._room.put(None)
        self._stopping = threading.Event()
        self._done = False
        #: batches the step took (the data loader's iterator is ahead by those held ready)
        self.taken = 0
        # the thread holds the queues and the iterator, not this object: one dropped
        # unfinished (its loader dropped) stops its thread, which lets the iterator go
        self._thread = threading.Thread(
            target=_receive, args=(it, pin, self._ready, self._room, self._stopping),
            name="gnn-treelstm-batches", daemon=True)
        self._thread.start()
        self._stop = weakref.finalize(self, _stop, self._stopping, self._room)  # runs once

    def __len__(self) -> int:
        return len(self._it)  # type: ignore[arg-type]

    def ready(self) -> int:
        """Batches received and not yet taken (the last one's end mark counts too)."""
        return self._ready.qsize()

    def __next__(self) -> object:
        if self._done:
            raise StopIteration
        item = self._ready.get()
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, _Raised):
            self._done = True
            raise item.error
        self.taken += 1
        self._room.put(None)  # the thread receives the next one while the step runs
        return item

    def stop(self) -> None:
        """End the thread (after the batch it may be receiving) and wait for it."""
        self._stop()
        self._thread.join()
        self._done = True


def _receive(it: Iterator, pin: int | None, ready: queue.SimpleQueue, room: queue.SimpleQueue,
             stopping: threading.Event) -> None:
    """The receiving thread of a :class:`ReceivedBatches`: a batch off ``it`` for each token
    in ``room``, pinned for accelerator ``pin`` (None: not pinned), into ``ready``; then the
    end mark, or the error met."""
    try:
        if pin is not None:  # the device of the thread that made the iterator
            _set_device(pin)
        while True:
            room.get()
            if stopping.is_set():
                return
            try:
                batch = next(it)
            except StopIteration:
                ready.put(_END)
                return
            ready.put(batch if pin is None else batch.pin_memory())
    except BaseException as e:  # handed to the step, which raises it
        ready.put(_Raised(e))


def _stop(stopping: threading.Event, room: queue.SimpleQueue) -> None:
    """Tell a receiving thread to end (it does once it has a token)."""
    stopping.set()
    room.put(None)


class Share(list):
    """One rank's share of a global batch (its example ids), which knows the size of the
    global batch it came from (``global_size``): it travels with the ids to the loader
    process that builds the batch, so the batch carries it
    (:attr:`gnn_treelstm.trees.data.Batch.global_size`)
    however far ahead the loader draws."""

    def __init__(self, ids: Iterable[int], global_size: int):
        super().__init__(ids)
        self.global_size = global_size


class _SharedOut(torch.utils.data.Dataset):
    """A :class:`~gnn_treelstm.trees.data.TreeDataset` whose minibatch fetch also returns
    the global batch size of the :class:`Share` it was asked for."""

    def __init__(self, data: D.TreeDataset):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> D.Example:
        return self.data[i]

    def __getitems__(self, share: Share) -> tuple[int, object]:
        return share.global_size, self.data.__getitems__(list(share))


def _collate_share(fetched: tuple[int, object], collate) -> D.Batch:
    """The batch of a rank's share, carrying the size of its global batch."""
    global_size, examples = fetched
    batch = collate(examples)
    batch.global_size = global_size
    return batch


class ShardedBatches:
    """The batches one process would draw (same sampler, same generator draws), each split
    round-robin over ``world`` ranks: rank ``r`` gets ``batch[r::world]``, so the ranks of a
    step together see exactly the one-process batch. Each yielded :class:`Share` knows the
    size of the global batch it came from. A final batch smaller than ``world`` is
    topped up by repeating its first examples, so that every rank has a share."""

    def __init__(self, sampler: Iterable[int], batch_size: int, rank: int, world: int):
        self.sampler, self.batch_size, self.rank, self.world = sampler, batch_size, rank, world

    def __len__(self) -> int:
        return math.ceil(len(self.sampler) / self.batch_size)  # type: ignore[arg-type]

    def __iter__(self):
        batch: list[int] = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield self._share(batch)
                batch = []
        if batch:
            yield self._share(batch)

    def _share(self, batch: list[int]) -> Share:
        if len(batch) < self.world:
            batch = (batch * self.world)[:self.world]
        return Share(batch[self.rank::self.world], len(batch))


def to_device(batch: D.Batch, device: torch.device, graphs_on_device: bool) -> D.Batch:
    """``batch`` on ``device``: all of it, or (``graphs_on_device`` False: a CPU-only DGL
    build) its targets and level schedule while the graphs stay on the CPU; copied without
    waiting for the device (:meth:`~gnn_treelstm.trees.data.Batch.to`)."""
    if device.type == "cpu":
        return batch
    return batch.to(device, graphs=graphs_on_device)
