"""``torch.compile`` on the level engine: for every registry name, the compiled cell gives
the eager cell's node states and the same gradient of every parameter and of ``x``, with
graph breaks only where the library runs host-side work eagerly on purpose, and nothing
run eagerly behind the user's back.

Every cell goes through Dynamo and AOTAutograd (backend ``aot_eager``: the forward and
backward graphs that Inductor is given); the default backend, Inductor, compiles one cell
per path of the level driver (slotted children going up, summed messages, the top-down
direction), since it takes 15-40 s a cell on 2 cores with a cold compile cache. The trees
are tiny (height 2 at most: the level loop is unrolled into the graph) and each cell
compiles once."""

from __future__ import annotations

import logging
import random

import dgl
import pytest
import torch
from torch._dynamo.utils import counters

from gnn_treelstm.cells import build_cell, cells
from gnn_treelstm.engine import propagator
from gnn_treelstm.engine.propagator import Propagator, compiling
from gnn_treelstm.kernels import gemm
from tests.handbuilt import chain, random_dependency_tree, random_tree

X, H, R = 4, 3, 3


def _trees(name: str) -> dgl.DGLGraph:
    """Two tiny trees of the kind the cell reads, batched."""
    rng = random.Random(0)
    if name in ("lstm", "bilstm", "lstm2", "bilstm2"):
        return dgl.batch([chain(3, seed=1), chain(2, seed=2)])
    if name in ("childsum", "mtree", "mtree-add", "mtree-full", "mean"):
        return dgl.batch([random_dependency_tree(rng, n, num_relations=R, max_children=2)
                          for n in (4, 3)])
    # constituency: binary, words at the leaves
    return dgl.batch([random_tree(rng, n, max_children=2, exact_children=True, words="leaves")
                      for n in (3, 2)])


def _kwargs(name: str) -> dict:
    return {"num_relations": R} if name.startswith("mtree") else {}


def _run(cell, fwd, g, x, wh, wc):
    """Forward + backward of ``sum(h * wh) + sum(c * wc)``: states and gradients."""
    x = x.detach().clone().requires_grad_(True)
    cell.zero_grad(set_to_none=True)
    h, c = fwd(g, x)
    ((h * wh).sum() + (c * wc).sum()).backward()
    grads = {n: p.grad.detach().clone() for n, p in cell.named_parameters()}
    grads["x"] = x.grad.detach().clone()
    return h.detach(), c.detach(), grads


@pytest.fixture
def fresh_dynamo():
    """Each cell compiles from scratch: ``TreeCell.forward`` is one function for every
    cell, and Dynamo's recompile limit would otherwise run later cells eagerly."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


#: how Dynamo names a call of a ``torch.compiler.disable``d function, the one graph break the
#: library makes on purpose: "Skip calling `torch.compiler.disable()`d function" (torch 2.6
#: and later), "call torch._dynamo.disable() wrapped function" (torch 2.4, where
#: ``torch.compiler.disable`` is ``torch._dynamo.disable``)
DISABLED_CALL = ("torch.compiler.disable()", "call torch._dynamo.disable() wrapped function")


def _unplanned_breaks() -> list[str]:
    """The graph breaks of this compilation other than calls of disabled functions."""
    return [r for r in counters["graph_break"] if not any(d in r for d in DISABLED_CALL)]


#: compiled with Inductor too: slotted children (up), summed messages, top-down
INDUCTOR = ("nary", "mean", "topdown")


def _cases():
    out = [pytest.param(name, "aot_eager", id=f"{name}-aot_eager") for name in cells.names()]
    return out + [pytest.param(name, "inductor", id=f"{name}-inductor") for name in INDUCTOR]


def test_inductor_cases_are_registry_names():
    assert set(INDUCTOR) <= set(cells.names())


@pytest.mark.parametrize("name,backend", _cases())
def test_compiled_cell_equals_eager(name, backend, fresh_dynamo):
    g = _trees(name)
    torch.manual_seed(0)
    cell = build_cell(name, X, H, engine="level", **_kwargs(name))
    x = torch.randn(g.num_nodes(), X)
    wh = torch.randn(g.num_nodes(), cell.out_size)
    wc = torch.randn(g.num_nodes(), cell.out_size)
    want = _run(cell, cell, g, x, wh, wc)
    got = _run(cell, torch.compile(cell, backend=backend), g, x, wh, wc)
    (h1, c1, g1), (h2, c2, g2) = want, got
    torch.testing.assert_close(h2, h1)
    torch.testing.assert_close(c2, c1)
    assert set(g2) == set(g1)
    for n in g1:
        torch.testing.assert_close(g2[n], g1[n], msg=lambda m, n=n: f"{name}: grad of {n}: {m}")
    # compiled, not run eagerly: graphs were made, and the graph breaks only where the
    # library runs host-side work eagerly on purpose (torch.compiler.disable: the input
    # checks and schedule, DGL's graph structure), never inside DGL or the level loop
    assert counters["stats"]["unique_graphs"] >= 1, f"{name}: nothing was compiled"
    breaks = _unplanned_breaks()
    assert not breaks, f"{name}: graph breaks {breaks}"


def test_fast_kernels_and_onednn_are_off_while_compiling(fresh_dynamo):
    """Under tracing the engine takes the general driver and ``torch.mm``; eager, the fast
    kernels apply (and oneDNN, where usable)."""
    prop = Propagator("level", dgl.batch([chain(2)]))
    assert prop.kernels and not compiling()

    @torch.compile(backend="eager", fullgraph=True)
    def seen(t):
        return t + (1.0 if prop.kernels else 2.0) + (1.0 if gemm.backend(t) == "torch" else 0.0)

    assert float(seen(torch.zeros(()))) == 3.0


def test_a_level_product_compiles(fresh_dynamo):
    """The level kernels' product :func:`gemm.mm_nt` with a trained weight (a graph input)
    compiles with Inductor (oneDNN's linear op lowers only for a constant weight); a
    product eager ``auto`` would give oneDNN (not a small one, which is ``torch.mm``'s)."""
    rows = gemm.SMALL_PRODUCT // (32 * 32) + 1
    a = torch.randn(rows, 32)
    w = torch.randn(32, 32, requires_grad=True)
    out = torch.compile(gemm.mm_nt)(a, w)
    torch.testing.assert_close(out, a @ w.detach().t())


def test_dgl_engine_propagates_eagerly_with_one_warning(fresh_dynamo, caplog, monkeypatch):
    """``dgl.prop_nodes_topo`` cannot be traced: under compilation the DGL engine runs it
    eagerly (a graph break), says so once, and gives the eager results."""
    monkeypatch.setattr(propagator, "_dgl_eager_logged", [False])
    g = _trees("topdown")  # DGL's graph code for the leaves and the sides, and a down pass
    torch.manual_seed(0)
    cell = build_cell("topdown", X, H, engine="dgl")
    x = torch.randn(g.num_nodes(), X)
    wh = torch.randn(g.num_nodes(), cell.out_size)
    wc = torch.randn(g.num_nodes(), cell.out_size)
    with caplog.at_level(logging.WARNING, logger=propagator.__name__):
        want = _run(cell, cell, g, x, wh, wc)
        assert not caplog.records  # eager: nothing to say
        compiled = torch.compile(cell, backend="aot_eager")
        runs = [_run(cell, compiled, g, x, wh, wc) for _ in range(2)]
    said = [r for r in caplog.records if r.getMessage() == propagator.DGL_EAGER_REASON]
    assert len(said) == 1 and len(caplog.records) == 1
    assert counters["stats"]["unique_graphs"] >= 1
    breaks = _unplanned_breaks()
    assert not breaks, f"graph breaks {breaks}"
    for h, c, grads in runs:
        torch.testing.assert_close(h, want[0])
        torch.testing.assert_close(c, want[1])
        for n in want[2]:
            torch.testing.assert_close(grads[n], want[2][n])
