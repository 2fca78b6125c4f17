"""The host cost of a level-engine step: the Python and dispatch work that issues the
kernels, which bounds a GPU step from below however fast the kernels run.

Measured on the CPU (:func:`host_cost`): the cell at small sizes (x 8, h 8: the products
cost next to nothing), the Triton kernels under triton's interpreter with every launch
replaced by a no-op (:func:`no_launches`), one forward + backward (loss ``h.sum() +
c.sum()``, ``x`` requiring grad as an embedding's output does), the median over the steps
of the calling thread's CPU time (``time.thread_time``, which other processes on the host
do not inflate), one intra-op thread. The same step on the C++ loops and on the general
level driver gives the CPU paths' host cost. :func:`measure` times any step so (a whole
training step: :mod:`gnn_treelstm.training.stepcost`). ``gnn-treelstm bench --host-cost``
prints both.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

import dgl
import torch

from gnn_treelstm.kernels import fused_triton, native
from gnn_treelstm.trees.schedule import LevelSchedule

__all__ = ["PATHS", "no_launches", "use_path", "on_path", "median_step_us", "measure",
           "cell_step", "host_cost"]

#: the level engine's paths, by name: (level-kernel choice, C++-loop choice)
PATHS = {"triton": ("triton", None), "native": ("native", None), "general": ("native", "off")}


@contextlib.contextmanager
def no_launches() -> Iterator[None]:
    """Every Triton launch a no-op while active, compiled or interpreted (the kernels'
    outputs are left as they were allocated, so the states are garbage)."""
    from triton.runtime import interpreter, jit

    # a launch is ``kernel[grid](...)``: its ``__getitem__`` is replaced (triton 3.0's
    # interpreted kernels launch from there, not through ``run``), then the class's own, or
    # the inherited one, restored
    classes = (interpreter.InterpretedFunction, jit.JITFunction)
    own = [cls.__dict__.get("__getitem__") for cls in classes]
    for cls in classes:
        cls.__getitem__ = lambda self, grid: lambda *args, **kwargs: None
    try:
        yield
    finally:
        for cls, method in zip(classes, own):
            if method is None:
                del cls.__getitem__
            else:
                cls.__getitem__ = method


@contextlib.contextmanager
def use_path(path: str) -> Iterator[None]:
    """The level engine runs path ``path`` (:data:`PATHS`) while active."""
    if path not in PATHS:
        raise ValueError(f"unknown path {path!r}; use one of {', '.join(PATHS)}")
    kernels, nat = PATHS[path]
    fused_triton.set_choice(kernels)
    native.set_choice(nat)
    try:
        yield
    finally:
        fused_triton.set_choice(None)
        native.set_choice(None)


def median_step_us(step: Callable[[], object], steps: int = 30, warmup: int = 3) -> float:
    """The median CPU time of the calling thread over ``steps`` calls of ``step`` (after
    ``warmup`` untimed ones), in µs."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.thread_time_ns()
        step()
        times.append(time.thread_time_ns() - t0)
    return statistics.median(times) / 1e3


@contextlib.contextmanager
def on_path(path: str) -> Iterator[None]:
    """The conditions of :func:`measure` while active: the level engine on path ``path``
    (:data:`PATHS`), one intra-op thread, Triton launches no-ops (``"triton"`` needs
    ``TRITON_INTERPRET=1`` set before Python started)."""
    if path == "triton" and not fused_triton.interpreted():
        raise RuntimeError("the Triton path's host cost needs triton's interpreter: set "
                           "TRITON_INTERPRET=1 before starting Python")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    launches = no_launches() if path == "triton" else contextlib.nullcontext()
    try:
        with use_path(path), launches:
            yield
    finally:
        torch.set_num_threads(threads)


def measure(step: Callable[[], object], path: str, *, steps: int = 30,
            warmup: int = 3) -> float:
    """The host cost of ``step`` on path ``path`` (:func:`on_path`): the median CPU time of
    the calling thread over ``steps`` calls (:func:`median_step_us`), in µs."""
    with on_path(path):
        return median_step_us(step, steps, warmup)


def cell_step(cell: torch.nn.Module, graph: dgl.DGLGraph, *, x_size: int | None = None,
              seed: int = 0) -> tuple[Callable[[], None], LevelSchedule]:
    """The step :func:`host_cost` measures: one forward + backward of ``cell`` (level
    engine) on ``graph`` (loss ``h.sum() + c.sum()``, ``x`` random, requiring grad), with
    the level schedule built once, before it, as the data loader does; and that schedule."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(graph.num_nodes(), x_size or cell.x_size, generator=gen,
                    requires_grad=True)
    sched = LevelSchedule.from_graph(graph)

    def step() -> None:
        h, c = cell(graph, x, schedule=sched)
        (h.sum() + c.sum()).backward()

    return step, sched


def host_cost(cell: torch.nn.Module, graph: dgl.DGLGraph, path: str, *, steps: int = 30,
              warmup: int = 3, x_size: int | None = None, seed: int = 0) -> dict[str, float]:
    """Host cost of one forward + backward of ``cell`` (level engine) on ``graph`` on path
    ``path`` (:data:`PATHS`; ``"triton"`` needs ``TRITON_INTERPRET=1`` set before Python
    started, and its launches are no-ops): ``{"step_us", "levels", "level_us"}``, the
    median step and the step over the up schedule's levels. The schedule is built before
    the clock, as the data loader does; one intra-op thread while measuring."""
    step, sched = cell_step(cell, graph, x_size=x_size, seed=seed)
    us = measure(step, path, steps=steps, warmup=warmup)
    levels = sched.up.num_levels
    return {"step_us": us, "levels": levels, "level_us": us / max(levels, 1)}
