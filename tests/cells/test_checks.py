"""A cell checks a batch once: a second forward on the same, unchanged batch skips the
checks; any change to the graph, its fields, ``x``'s shape or the schedule checks again."""

from __future__ import annotations

import dgl
import pytest
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.trees.graph import make_tree
from gnn_treelstm.trees.schedule import LevelSchedule


def _counted(cell, monkeypatch) -> list[int]:
    calls: list[int] = []
    real = cell.check_input
    monkeypatch.setattr(cell, "check_input", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.mark.parametrize("engine", ["dgl", "level"])
def test_an_unchanged_batch_is_checked_once(engine, monkeypatch):
    cell = build_cell("nary", 3, 2, engine=engine)
    calls = _counted(cell, monkeypatch)
    g = dgl.batch([make_tree([2, 2, -1], [1, 2, -1]), make_tree([-1], [3])])
    x = torch.randn(4, 3)
    sched = LevelSchedule.from_graph(g)
    h1, _ = cell(g, x, schedule=sched)
    h2, _ = cell(g, x, schedule=sched)
    assert len(calls) == 1
    assert torch.equal(h1, h2)
    cell(g, torch.randn(4, 3), schedule=sched)  # new values, same shape: no check needed
    assert len(calls) == 1
    cell(g, x)  # another schedule (built here)
    assert len(calls) == 2


def test_every_change_is_checked_again(monkeypatch):
    cell = build_cell("nary", 3, 2, engine="level")
    calls = _counted(cell, monkeypatch)
    g = make_tree([2, 2, -1], [1, 2, -1])
    x = torch.randn(3, 3)
    cell(g, x)
    g.edata["pos"][1] = 0  # in place: both children at position 0
    with pytest.raises(ValueError, match="share a child position"):
        cell(g, x)
    g.edata["pos"] = torch.tensor([0, 5])  # a new tensor
    with pytest.raises(ValueError, match="child position 5"):
        cell(g, x)
    g.edata["pos"] = torch.tensor([0, 1])
    cell(g, x)
    with pytest.raises(ValueError, match="x has shape"):
        cell(g, torch.randn(3, 4))
    cell.double()
    with pytest.raises(ValueError, match="dtype"):
        cell(g, x)
    assert len(calls) == 6


def _tree_and_x(**kw):
    g = make_tree([2, 2, -1], [1, 2, -1])
    return g, torch.randn(3, 3, **kw)


def test_features_on_another_device_than_the_cell_are_named():
    cell = build_cell("childsum", 3, 2)
    g, x = _tree_and_x(device="meta")
    with pytest.raises(ValueError, match=r"x is on meta but the cell's parameters are on cpu"):
        cell(g, x)


def test_a_graph_on_another_device_than_the_features_is_named():
    cell = build_cell("childsum", 3, 2, engine="dgl").to("meta")
    g, x = _tree_and_x(device="meta")
    with pytest.raises(ValueError, match=r"x is on meta but the graph is on cpu.*graph.to"):
        cell(g, x)


def test_float16_on_the_cpu_with_the_dgl_engine_is_named():
    cell = build_cell("childsum", 3, 2, engine="dgl").half()
    g, x = _tree_and_x(dtype=torch.float16)
    with pytest.raises(ValueError, match=r"dgl engine on the CPU takes float32.*not float16"):
        cell(g, x)


def test_the_fields_compared_are_the_graphs_own(monkeypatch):
    from gnn_treelstm.trees.graph import field_views

    g = dgl.batch([make_tree([2, 2, -1], [1, 2, -1]), make_tree([-1], [3])])
    nodes, edges = field_views(g)
    for view, real in ((nodes, g.ndata), (edges, g.edata)):
        assert list(view.keys()) == list(real.keys())
        assert all(view[k] is real[k] for k in real.keys())
    cell = build_cell("nary", 3, 2, engine="level")
    calls = _counted(cell, monkeypatch)
    x = torch.randn(4, 3)
    cell(g, x)
    g.ndata["extra"] = torch.zeros(4)  # a field added: checked again
    cell(g, x)
    cell(g, x)
    assert len(calls) == 2
