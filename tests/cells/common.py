"""What the cell tests share: graph snapshots, gradients, per-tree references run over a
forest, and the registry-wide comparison of a cell's engines with its reference
(:func:`assert_engines_agree`, run by ``tests/cells/test_registry.py`` for every registry
name and by ``tests/cells/test_write_a_cell.py`` for the page's cell)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import dgl
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.engine.propagator import Propagator
from gnn_treelstm.kernels import fused, fused_triton, native
from tests.engine.compare import assert_same_run

#: the sizes the registry-wide comparison builds every cell with
X, H = 6, 5
TOL = {torch.float32: 2e-5, torch.float64: 1e-10}


def snapshot(g: dgl.DGLGraph) -> tuple[dict, dict]:
    return ({k: v.clone() for k, v in g.ndata.items()},
            {k: v.clone() for k, v in g.edata.items()})


def assert_same_graph(g: dgl.DGLGraph, snap: tuple[dict, dict]) -> None:
    nd, ed = snap
    assert set(g.ndata.keys()) == set(nd)
    assert set(g.edata.keys()) == set(ed)
    for k, v in nd.items():
        assert torch.equal(g.ndata[k], v), k
    for k, v in ed.items():
        assert torch.equal(g.edata[k], v), k


def grads(cell, loss) -> dict[str, torch.Tensor]:
    cell.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in cell.named_parameters()}


# ---------------------------------------------------------------- per-tree references
def tree_by_tree(reference: Callable, cell, trees: Sequence[Sequence[int]], x: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``reference(cell, parents, x)`` (one tree by parent pointers, -1 at the root) run
    over a forest tree by tree; the rows of ``x`` and of the states follow the trees."""
    hs, cs, row = [], [], 0
    for parents in trees:
        h, c = reference(cell, list(parents), x[row:row + len(parents)])
        hs.append(h)
        cs.append(c)
        row += len(parents)
    return torch.cat(hs), torch.cat(cs)


def forest_parents(g: dgl.DGLGraph) -> list[list[int]]:
    """Parent pointers of each tree of a batched graph (-1 at its root)."""
    out = []
    for tree in dgl.unbatch(g):
        parents = [-1] * tree.num_nodes()
        for child, parent in zip(*(t.tolist() for t in tree.edges())):
            parents[child] = parent
        out.append(parents)
    return out


def on_forest(reference: Callable) -> Callable:
    """A per-tree reference as the registry-wide comparison calls one: ``ref(cell, g, x)``
    over a batched graph."""
    return lambda cell, g, x: tree_by_tree(reference, cell, forest_parents(g), x)


# ---------------------------------------------------------------- registry-wide comparison
def run_and_grads(cell, fwd, g, x, wh, wc):
    """States of ``fwd(g, x)`` and the gradients of every parameter and of ``x`` for the
    loss ``Σ h ⊙ wh + Σ c ⊙ wc``."""
    x = x.detach().clone().requires_grad_(True)
    for p in cell.parameters():
        p.grad = None
    h, c = fwd(g, x)
    ((h * wh).sum() + (c * wc).sum()).backward()
    out = {n: p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
           for n, p in cell.named_parameters()}
    out["x"] = x.grad.detach().clone()
    return h.detach(), c.detach(), out


def engine_runs(name, kw, g, x, dtype):
    """One cell's weights on the dgl engine and the general level driver (the C++ loops
    off): the dgl cell, the loss weights and the two runs."""
    torch.manual_seed(0)
    cell_dgl = build_cell(name, X, H, **kw).to(dtype)
    cell_lvl = build_cell(name, X, H, engine="level", **kw).to(dtype)
    cell_lvl.load_state_dict(cell_dgl.state_dict())
    torch.manual_seed(1)
    wh = torch.randn(g.num_nodes(), cell_dgl.out_size, dtype=dtype)
    wc = torch.randn(g.num_nodes(), cell_dgl.out_size, dtype=dtype)
    out = {"dgl": run_and_grads(cell_dgl, cell_dgl, g, x, wh, wc)}
    native.set_choice("off")
    try:
        out["level"] = run_and_grads(cell_lvl, cell_lvl, g, x, wh, wc)
    finally:
        native.set_choice(None)
    return cell_dgl, wh, wc, out


def assert_engines_agree(name: str, kw: dict, trees: Callable, ref: Callable,
                         dtype: torch.dtype) -> None:
    """The cell registered as ``name`` (options ``kw``) on the trees ``trees()``: the
    reference ``ref(cell, g, x)``, the dgl engine, the general level driver and the level
    engine's C++ kernel (where the cell names one and it applies) give the same states and
    the same gradients of every parameter and of ``x``."""
    g = trees()
    torch.manual_seed(2)
    x = torch.randn(g.num_nodes(), X, dtype=dtype)
    cell, wh, wc, out = engine_runs(name, kw, g, x, dtype)
    tol = TOL[dtype]
    want = run_and_grads(cell, lambda gg, xx: ref(cell, gg, xx), g, x, wh, wc)
    assert_same_run(out["dgl"], want, tol=tol)
    assert_same_run(out["level"], want, tol=tol)
    # the C++ kernel, where the cell names one and it applies (float32 CPU, library built)
    cell_fast = build_cell(name, X, H, engine="level", **kw).to(dtype)
    cell_fast.load_state_dict(cell.state_dict())
    fused_triton.set_choice("native")
    try:
        _check_cpp_kernel(f"{name} {kw}", cell_fast, g, x, (wh, wc), want)
    finally:
        fused_triton.set_choice(None)


def _check_cpp_kernel(label, cell_fast, g, x, weights, want):
    fast = cell_fast.level_kernel(Propagator("level", g), x)
    if x.dtype == torch.float32 and fused.available(x) and cell_fast.has_kernel:
        assert fast is not None, f"{label}: no fast kernel applies in float32 on the CPU"
    if not cell_fast.has_kernel:
        assert fast is None, f"{label}: has_kernel is False but level_kernel ran"
    if fast is not None:
        assert x.dtype == torch.float32 and fused.available(x)
        assert_same_run(run_and_grads(cell_fast, cell_fast, g, x, *weights), want,
                        tol=TOL[x.dtype])
