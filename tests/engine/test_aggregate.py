"""``Recurrence(aggregate=...)``: sum, mean and max of a node's messages on both engines
equal a per-node reference, states and gradients, zeros where a node has no sources, and
equal maxima share the gradient evenly on both engines."""

from __future__ import annotations

import random

import dgl
import pytest
import torch

from gnn_treelstm import make_tree
from gnn_treelstm.engine.propagator import ENGINES, Propagator
from gnn_treelstm.engine.recurrence import Recurrence
from tests.handbuilt import random_dependency_tree

W = 3
AGGREGATE = {"sum": lambda t: t.sum(0), "mean": lambda t: t.mean(0),
             "max": lambda t: torch.amax(t, 0)}


def _recurrence(aggregate: str, direction: str = "up") -> Recurrence:
    def message(src, dst, rel):
        return {"h": torch.tanh(src.h) * dst.x}   # reads the receiver's input too

    def update(x, m):
        return {"h": x.x + 0.5 * m.h}

    return Recurrence(state={"h": W}, inputs=("x",), message=message, update=update,
                      aggregate=aggregate, direction=direction)


def _reference(parents: list[int], x: torch.Tensor, aggregate: str) -> torch.Tensor:
    """h_j = x_j + 0.5 * agg_{k in C(j)} tanh(h_k) * x_j, node by node; agg of none = 0."""
    children = [[k for k, p in enumerate(parents) if p == j] for j in range(len(parents))]
    h: dict[int, torch.Tensor] = {}

    def visit(j):
        for k in children[j]:
            visit(k)
        if children[j]:
            msgs = torch.stack([torch.tanh(h[k]) * x[j] for k in children[j]])
            m = AGGREGATE[aggregate](msgs)
        else:
            m = torch.zeros(W, dtype=x.dtype)
        h[j] = x[j] + 0.5 * m

    for root in (j for j, p in enumerate(parents) if p == -1):
        visit(root)
    return torch.stack([h[j] for j in range(len(parents))])


def _parents(g: dgl.DGLGraph) -> list[int]:
    parents = [-1] * g.num_nodes()
    for s, d in zip(*(t.tolist() for t in g.edges())):
        parents[s] = d
    return parents


def _forest() -> dgl.DGLGraph:
    rng = random.Random(4)
    trees = [make_tree([-1], [1]), make_tree([-1, 0, 0, 0, 0, 1], [1] * 6)]
    trees += [random_dependency_tree(rng, rng.randint(2, 9)) for _ in range(6)]
    return dgl.batch(trees)


def _run(engine, graph, x, aggregate, direction="up"):
    x = x.detach().clone().requires_grad_(True)
    h = Propagator(engine, graph)(_recurrence(aggregate, direction), x=x).h
    weights = torch.linspace(-1, 1, h.numel(), dtype=h.dtype, device=h.device).view_as(h)
    (h * weights).sum().backward()
    return h.detach(), x.grad


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("aggregate", ["sum", "mean", "max"])
def test_engines_equal_the_per_node_reference(engine, aggregate):
    graph = _forest()
    torch.manual_seed(0)
    x = torch.randn(graph.num_nodes(), W, dtype=torch.float64)
    x_ref = x.clone().requires_grad_(True)
    h_ref = _reference(_parents(graph), x_ref, aggregate)
    weights = torch.linspace(-1, 1, h_ref.numel(), dtype=h_ref.dtype).view_as(h_ref)
    (h_ref * weights).sum().backward()
    h, gx = _run(engine, graph, x, aggregate)
    torch.testing.assert_close(h, h_ref.detach(), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gx, x_ref.grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("aggregate", ["sum", "mean", "max"])
def test_leaves_get_zeros_and_the_aggregations_differ(aggregate):
    graph = make_tree([-1, 0, 0], [1, 2, 3])   # node 0 with two leaves
    x = torch.tensor([[1.0, 1, 1], [0.5, -2, 1], [1.5, 0, -1]], dtype=torch.float64)
    for engine in ENGINES:
        h, _ = _run(engine, graph, x, aggregate)
        torch.testing.assert_close(h[1:], x[1:])   # leaves: x + 0.5 * 0
    t = torch.tanh(x[1:])
    want = {"sum": t.sum(0), "mean": t.mean(0), "max": t.amax(0)}[aggregate]
    torch.testing.assert_close(_run("level", graph, x, aggregate)[0][0], x[0] + 0.5 * want)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_equal_maxima_share_the_gradient(engine):
    graph = make_tree([-1, 0, 0], [1, 2, 3])
    x = torch.tensor([[1.0, 1, 1], [0.3, 0.3, 0.3], [0.3, 0.3, 0.3]], dtype=torch.float64)
    x = x.requires_grad_(True)
    h = Propagator(engine, graph)(_recurrence("max"), x=x).h
    h[0].sum().backward()
    # d h_0 / d x_k = 0.5 * (1 - tanh(0.3)^2) / 2 for each of the two equal children
    share = 0.5 * (1 - torch.tanh(torch.tensor(0.3, dtype=torch.float64)) ** 2) / 2
    torch.testing.assert_close(x.grad[1:], share.expand(2, 3))


def test_top_down_sources_are_one_parent_so_every_aggregation_agrees():
    graph = _forest()
    x = torch.randn(graph.num_nodes(), W, dtype=torch.float64)
    for engine in ENGINES:
        hs = [_run(engine, graph, x, agg, "down")[0] for agg in ("sum", "mean", "max")]
        torch.testing.assert_close(hs[1], hs[0])
        torch.testing.assert_close(hs[2], hs[0])


def test_a_wrong_aggregation_is_refused():
    def upd(x, m):
        return {"h": x.x}

    with pytest.raises(ValueError, match="aggregate 'min' not in"):
        Recurrence(state={"h": W}, inputs=("x",), message=lambda s, d, r: {"h": s.h},
                   update=upd, aggregate="min")
    with pytest.raises(ValueError, match="aggregate applies to messages"):
        Recurrence(state={"h": W}, inputs=("x",), slots=2, update=upd, aggregate="max")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("aggregate", ["sum", "mean", "max"])
def test_level_engine_on_cuda_equals_the_cpu(aggregate):
    graph = _forest()
    torch.manual_seed(1)
    x = torch.randn(graph.num_nodes(), W, dtype=torch.float64)
    h_cpu, g_cpu = _run("level", graph, x, aggregate)
    h_gpu, g_gpu = _run("level", graph, x.cuda(), aggregate)
    torch.testing.assert_close(h_gpu.cpu(), h_cpu, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(g_gpu.cpu(), g_cpu, rtol=1e-10, atol=1e-10)
