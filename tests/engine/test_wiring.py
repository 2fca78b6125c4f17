"""``engine="level"`` on the cell itself: forward dispatches to the level engine and agrees
with the reference engine for every registry name, with and without a precomputed schedule."""

from __future__ import annotations

import random

import dgl
import pytest
import torch

from gnn_treelstm.cells import build_cell, cells
from gnn_treelstm.trees.schedule import LevelSchedule
from tests.handbuilt import chain, random_batch, random_dependency_tree

X, H, R = 6, 5, 4


def _graph_for(name: str) -> dgl.DGLGraph:
    if name in ("lstm", "bilstm", "lstm2", "bilstm2"):
        return dgl.batch([chain(n, seed=n) for n in (1, 3, 7, 4)])
    if name in ("lex", "topdown", "bitree", "mean"):
        return dgl.batch(random_batch(seed=5, count=8, exact_children=True, words="leaves"))
    if name == "nary":
        return dgl.batch(random_batch(seed=6, count=8))
    rng = random.Random(7)
    return dgl.batch([random_dependency_tree(rng, rng.randint(1, 10), num_relations=R)
                      for _ in range(8)])


def _kwargs(name: str) -> dict:
    return {"num_relations": R} if name.startswith("mtree") else {}


@pytest.mark.parametrize("name", cells.names())
@pytest.mark.parametrize("precomputed", [False, True])
def test_level_engine_via_forward(name, precomputed):
    g = _graph_for(name)
    torch.manual_seed(0)
    ref = build_cell(name, X, H, **_kwargs(name))
    lvl = build_cell(name, X, H, engine="level", **_kwargs(name))
    lvl.load_state_dict(ref.state_dict())
    x = torch.randn(g.num_nodes(), X)
    h1, c1 = ref(g, x)
    sched = LevelSchedule.from_graph(g) if precomputed else None
    h2, c2 = lvl(g, x, schedule=sched)
    torch.testing.assert_close(h2, h1, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(c2, c1, rtol=1e-5, atol=1e-5)
    x.requires_grad_(True)
    h2, c2 = lvl(g, x, schedule=sched)
    (h2.sum() + c2.sum()).backward()
    params = list(lvl.parameters())
    assert (any(p.grad is not None and p.grad.abs().sum() > 0 for p in params) if params
            else x.grad.abs().sum() > 0)      # a cell without parameters (mean): the input


def test_unknown_engine_is_refused():
    with pytest.raises(ValueError, match="unknown engine 'fast'"):
        build_cell("childsum", X, H, engine="fast")
