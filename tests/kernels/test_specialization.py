"""The Triton level kernels compile a few variants per model, not one per batch shape.

Triton compiles a kernel once per *specialization* of its arguments: each tensor's dtype
and 16-byte alignment, each integer's type and (unless the kernel says
``do_not_specialize``) whether it is 1 or a multiple of 16, and every constexpr. Here the
launches of a whole SST epoch (batches of 25 and of 256 trees, forward and backward) are
recorded on the CPU with the GPU's block sizes, the launches themselves no-ops, and
Triton's own binder (``create_function_from_signature``, the function its launcher runs)
computes each launch's specialization."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import dgl
import pytest
import torch

triton = pytest.importorskip("triton")

from triton.backends.compiler import BaseBackend  # noqa: E402
from triton.runtime import interpreter  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

from gnn_treelstm.cells import build_cell  # noqa: E402
from gnn_treelstm.datasets.sources import sst_graphs  # noqa: E402
from gnn_treelstm.kernels import fused_triton  # noqa: E402
from gnn_treelstm.trees.schedule import LevelSchedule  # noqa: E402

#: the most compiled variants a kernel may need over an epoch (float32, one model size)
MOST = 2


def _binder(kernel):
    """Triton's argument binder of ``kernel`` (a JITFunction, or under the interpreter the
    InterpretedFunction around the same Python function)."""
    if not isinstance(kernel, JITFunction):
        kernel = JITFunction(kernel.fn, **kernel.kwargs)
    return create_function_from_signature(kernel.signature, kernel.params, BaseBackend)


@pytest.fixture
def launches(monkeypatch):
    """Every Triton launch recorded, by kernel name, as its specialization key (the
    launch itself does nothing); CPU tensors take the GPU's block sizes."""
    keys: dict[str, set[str]] = defaultdict(set)
    binders: dict[str, object] = {}

    def record(self, *args, grid, warmup, **kwargs):
        name = self.fn.__name__
        if name not in binders:
            binders[name] = _binder(self)
        _, spec, options = binders[name](*args, **kwargs)
        keys[name].add(repr(spec) + repr(sorted(options.items())))

    monkeypatch.setattr(JITFunction, "run", record)
    monkeypatch.setattr(interpreter.InterpretedFunction, "run", record)
    monkeypatch.setattr(fused_triton, "interpreted", lambda: True)
    monkeypatch.setattr(fused_triton, "gpu_blocks", lambda t: True)
    fused_triton.set_choice("triton")
    yield keys
    fused_triton.set_choice(None)


@pytest.fixture(scope="module")
def sst_train(shared_data: Path) -> list[dgl.DGLGraph]:
    return sst_graphs(shared_data)


@pytest.mark.parametrize("name", ["nary", "childsum"])
def test_an_epoch_compiles_at_most_two_variants_per_kernel(name, launches, sst_train):
    torch.manual_seed(0)
    cell = build_cell(name, 8, 8, engine="level")
    for bs in (25, 256):
        for i in range(0, len(sst_train), bs):
            g = dgl.batch(sst_train[i:i + bs])
            x = torch.randn(g.num_nodes(), 8, requires_grad=True)
            h, c = cell(g, x, schedule=LevelSchedule.from_graph(g))
            (h.sum() + c.sum()).backward()
    assert launches, "no Triton launch was recorded"
    variants = {k: len(v) for k, v in launches.items()}
    assert all(v <= MOST for v in variants.values()), variants
