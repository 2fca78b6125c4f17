"""The level engine's driver: schedules given or built, batches equal single trees, the
general driver's backward (gradcheck), CUDA, and the boundary of a precomputed schedule.

Engine-equals-engine for every cell is ``tests/cells/test_registry.py``."""

from __future__ import annotations

from dataclasses import replace

import dgl
import pytest
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.engine import level
from gnn_treelstm.engine.propagator import Propagator, check_schedule
from gnn_treelstm.kernels import native
from gnn_treelstm.trees.graph import NO_WORD, make_tree
from gnn_treelstm.trees.schedule import LevelSchedule
from tests.handbuilt import random_batch, random_dependency_batch

X, H = 7, 5


def test_schedule_argument_and_batch_equals_single_trees():
    torch.manual_seed(0)
    trees = random_batch(6, 6, max_children=2, words="leaves")
    g = dgl.batch(trees)
    cell = build_cell("nary", X, H, engine="level")
    x = torch.randn(g.num_nodes(), X)
    sched = LevelSchedule.from_graph(g)
    h1, c1 = cell(g, x, schedule=sched)
    h2, c2 = cell(g, x)  # schedule built by the cell
    torch.testing.assert_close(h1, h2, rtol=0, atol=0)
    rows = 0
    for t in trees:
        n = t.num_nodes()
        ht, ct = cell(t, x[rows:rows + n])
        torch.testing.assert_close(ht, h1[rows:rows + n], rtol=1e-6, atol=1e-6)
        rows += n


def test_a_schedule_of_another_graph_is_refused():
    """Same node count, different tree: a clear error, not a silently wrong result."""
    a = dgl.batch(random_batch(1, 3, max_children=2, words="leaves"))
    for seed in range(2, 1000):  # the first other batch of a's sizes and other edges
        b = dgl.batch(random_batch(seed, 3, max_children=2, words="leaves"))
        if (b.num_nodes(), b.num_edges()) == (a.num_nodes(), a.num_edges()) and not all(
                torch.equal(u, v) for u, v in zip(a.edges(), b.edges())):
            break
    cell = build_cell("nary", X, H, engine="level")
    x = torch.randn(a.num_nodes(), X)
    with pytest.raises(ValueError, match="schedule's edges differ"):
        cell(a, x, schedule=LevelSchedule.from_graph(b))
    small = dgl.batch(random_batch(3, 2, max_children=2, words="leaves"))
    with pytest.raises(ValueError, match="schedule is for a graph of"):
        cell(a, x, schedule=LevelSchedule.from_graph(small))


def test_a_moved_schedule_is_checked_on_the_host():
    """A schedule moved off the CPU is checked against a CPU graph with its CPU copy: the
    device copy is never read (a ``meta`` copy holds no values), the errors stay."""
    words = [0, 1, 2, NO_WORD, NO_WORD]
    a = make_tree([3, 3, 4, 4, -1], words)
    b = make_tree([4, 3, 3, 4, -1], words)  # same sizes, other edges
    sched = LevelSchedule.from_graph(a)
    moved = sched.to("meta")
    assert moved.up.edge_src.is_meta and moved.host is sched and moved.on_host() is sched
    assert sched.to("cpu").host is None and sched.on_host() is sched
    check_schedule(moved, a, "cell")
    with pytest.raises(ValueError, match="cell: the schedule's edges differ"):
        check_schedule(LevelSchedule.from_graph(b).to("meta"), a, "cell")
    with pytest.raises(RuntimeError, match="meta"):  # without the CPU copy: the device's
        check_schedule(replace(moved, host=None), a, "cell")


def test_a_schedule_made_with_the_graph_is_not_compared_again(monkeypatch):
    """A schedule the graph's maker made of the same edges (``remember_edges(...,
    schedule=)``, a data loader's batch), on the CPU or moved, is taken as the graph's; a
    schedule of another graph of the same sizes is still compared and refused."""
    from gnn_treelstm.trees import graph as G

    words = [0, 1, 2, NO_WORD, NO_WORD]
    a = make_tree([3, 3, 4, 4, -1], words)
    b = make_tree([4, 3, 3, 4, -1], words)  # same sizes, other edges
    theirs, ours = LevelSchedule.from_graph(b), LevelSchedule.from_graph(a)
    G.remember_edges(a, *a.edges(), schedule=ours)
    monkeypatch.setattr(G, "host_edges", lambda g: pytest.fail("compared"))
    check_schedule(ours, a, "cell")
    check_schedule(ours.to("meta"), a, "cell")
    monkeypatch.undo()
    with pytest.raises(ValueError, match="cell: the schedule's edges differ"):
        check_schedule(theirs, a, "cell")
    G.remember_edges(a, *a.edges(), schedule=theirs)  # a maker's word is taken as given
    check_schedule(theirs, a, "cell")
    a.add_edges(torch.tensor([4]), torch.tensor([3]))  # forgotten once the edges change
    with pytest.raises(ValueError, match="schedule is for a graph of"):
        check_schedule(ours, a, "cell")


@pytest.mark.parametrize("name", ["childsum", "lex", "topdown"])
def test_general_driver_gradcheck(name):
    """The autograd-over-levels driver's backward (tape writes and gathers) in float64."""
    torch.manual_seed(0)
    g = (random_dependency_batch(1, 4) if name == "childsum"
         else dgl.batch(random_batch(7, 4, max_children=2, words="leaves")))
    cell = build_cell(name, 3, 2, engine="level").double()
    x = torch.randn(g.num_nodes(), 3, dtype=torch.float64, requires_grad=True)
    prop = Propagator("level", g)
    assert torch.autograd.gradcheck(lambda xx: cell.compute(prop, xx)[0], (x,))


def test_heads_argument_passes_through():
    torch.manual_seed(0)
    g = dgl.batch(random_batch(12, 5, max_children=2, words="leaves"))
    cell = build_cell("lex", X, H)
    lvl = build_cell("lex", X, H, engine="level")
    lvl.load_state_dict(cell.state_dict())
    x = torch.randn(g.num_nodes(), X)
    heads = torch.randn(g.num_nodes(), X)
    torch.testing.assert_close(lvl(g, x, heads=heads)[0], cell(g, x, heads=heads)[0],
                               rtol=1e-5, atol=1e-5)


def test_native_off_runs_the_general_driver(monkeypatch):
    """``GNN_TREELSTM_NATIVE=off``: the cells' level_kernel declines, compute runs."""
    native.set_choice("off")
    try:
        g = random_dependency_batch(1, 3)
        cell = build_cell("childsum", X, H, engine="level")
        x = torch.randn(g.num_nodes(), X)
        assert cell.level_kernel(Propagator("level", g), x) is None
        called = []
        real = level.propagate
        monkeypatch.setattr(level, "propagate", lambda *a: called.append(1) or real(*a))
        cell(g, x)
        assert called
    finally:
        native.set_choice(None)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name,words", [("childsum", "all"), ("nary", "leaves"),
                                        ("lex", "leaves"), ("bitree", "leaves")])
def test_cuda_matches_cpu(name, words):
    torch.manual_seed(0)
    g = dgl.batch(random_batch(8, 20, max_children=2, words=words))
    cell = build_cell(name, X, H, engine="level")
    x = torch.randn(g.num_nodes(), X)
    sched = LevelSchedule.from_graph(g)
    h, c = cell(g, x, schedule=sched)
    hc, cc = cell.to("cuda")(g, x.cuda(), schedule=sched.to("cuda"))
    torch.testing.assert_close(hc.cpu(), h, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cc.cpu(), c, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ boundary
@pytest.mark.parametrize("engine", ["dgl", "level"])
def test_self_loop_is_a_clear_error(engine):
    g = dgl.graph(([0, 1, 2], [2, 2, 2]), num_nodes=3)  # node 2 points to itself
    g.ndata["word"] = torch.tensor([1, 2, 3])
    cell = build_cell("childsum", X, H, engine=engine)
    with pytest.raises(ValueError, match="node 2 has an edge to itself"):
        cell(g, torch.randn(3, X))


@pytest.mark.parametrize("name", ["childsum", "nary", "lex", "bitree", "mtree", "lstm"])
@pytest.mark.parametrize("engine", ["dgl", "level"])
def test_empty_graph_backpropagates(name, engine):
    from gnn_treelstm.trees.graph import make_tree

    g = dgl.batch([make_tree([-1], [1])])
    g = dgl.node_subgraph(g, torch.zeros(0, dtype=torch.int64))
    kw = {"num_relations": 3} if name == "mtree" else {}
    cell = build_cell(name, X, H, engine=engine, **kw)
    x = torch.zeros(0, X, requires_grad=True)
    h, c = cell(g, x)
    assert h.shape == (0, cell.out_size) and h.grad_fn is not None
    (h.sum() + c.sum()).backward()  # no error; the gradients are zero
    assert x.grad.shape == (0, X)


@pytest.mark.parametrize("name", ["nary", "lex", "topdown", "bitree"])
def test_no_word_anywhere_is_a_clear_error(name):
    from gnn_treelstm.trees.graph import NO_WORD, make_tree

    g = make_tree([2, 2, -1], [NO_WORD] * 3, positions=[0, 1, 0])
    cell = build_cell(name, X, H)
    with pytest.raises(ValueError, match="NO_WORD .* at every node"):
        cell(g, torch.randn(3, X))
