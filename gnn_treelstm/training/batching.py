"""Minibatches of a split (:func:`make_loader`), shared out over the ranks of a data
parallel run (:class:`ShardedBatches`), and moved to the compute device (:func:`to_device`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

import torch
from torch.utils.data import DataLoader

from gnn_treelstm.trees import data as D

__all__ = ["make_loader", "ShardedBatches", "to_device"]


def make_loader(split: D.Split, batch_size: int, *, shuffle: bool, seed: int = 0,
                schedule: bool = False, shard: tuple[int, int] | None = None,
                workers: int = 0) -> DataLoader:
    """Minibatches of ``split``; ``schedule``: build each batch's level schedule in the
    collate function (for ``engine="level"``; see :func:`gnn_treelstm.trees.data.collate`).
    ``shard=(rank, world)``: this process's share of the same batches under data
    parallelism, ``batch_size`` being the global batch (:class:`ShardedBatches`).
    ``workers``: loader processes building the batches (the same batches for any number:
    the order is drawn in this process; packed trees are shared with them page by page)."""
    extra = {"num_workers": workers}  # a new iterator each epoch: the same draws as 0
    collate = functools.partial(D.collate, schedule=True) if schedule else D.collate
    gen = torch.Generator()
    gen.manual_seed(seed)
    if shard is not None:  # the one-process batches, each split over the ranks
        from torch.utils.data import RandomSampler, SequentialSampler

        data = D.TreeDataset(split)
        order = RandomSampler(data, generator=gen) if shuffle else SequentialSampler(data)
        return DataLoader(data, batch_sampler=ShardedBatches(order, batch_size, *shard),
                          collate_fn=collate, generator=gen if shuffle else None, **extra)
    return DataLoader(D.TreeDataset(split), batch_size=batch_size, shuffle=shuffle,
                      collate_fn=collate, generator=gen if shuffle else None, **extra)


class ShardedBatches:
    """The batches one process would draw (same sampler, same generator draws), each split
    round-robin over ``world`` ranks: rank ``r`` gets ``batch[r::world]``, so the ranks of a
    step together see exactly the one-process batch. ``last_global`` is the size of the
    global batch the last yielded share came from. A final batch smaller than ``world`` is
    topped up by repeating its first examples, so that every rank has a share."""

    def __init__(self, sampler: Iterable[int], batch_size: int, rank: int, world: int):
        self.sampler, self.batch_size, self.rank, self.world = sampler, batch_size, rank, world
        self.last_global = 0

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

    def _share(self, batch: list[int]) -> list[int]:
        if len(batch) < self.world:
            batch = (batch * self.world)[:self.world]
        self.last_global = len(batch)
        return batch[self.rank::self.world]


def to_device(batch: D.Batch, device: torch.device, graphs_on_device: bool) -> D.Batch:
    """``batch`` on ``device``: all of it, or (``graphs_on_device`` False: a CPU-only DGL
    build) its targets and level schedule while the graphs stay on the CPU."""
    if device.type == "cpu":
        return batch
    if graphs_on_device:
        return batch.to(device)
    return D.Batch(batch.graph, batch.graph_b,
                   {k: v.to(device) for k, v in batch.targets.items()}, batch.index,
                   None if batch.schedule is None else batch.schedule.to(device), batch.num_a)
