"""The top-level names: every name in ``gnn_treelstm.__all__`` resolves, the drawing module
does not shadow networkx, and a tree built from the top level runs through a cell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gnn_treelstm


def test_every_public_name_resolves() -> None:
    for name in gnn_treelstm.__all__:
        assert getattr(gnn_treelstm, name) is not None, name
    assert set(gnn_treelstm.__all__) <= set(dir(gnn_treelstm))


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        gnn_treelstm.no_such_name  # noqa: B018
    except AttributeError as err:
        assert "no_such_name" in str(err)
    else:
        raise AssertionError("gnn_treelstm.no_such_name resolved")


def test_drawing_is_reachable_without_importing_it() -> None:
    code = ("import gnn_treelstm as g, networkx as nx\n"
            "t = g.make_tree([1, -1], [0, 1])\n"
            "assert isinstance(g.drawing.to_networkx(t), nx.DiGraph)\n"
            "assert g.draw_tree is g.drawing.draw_tree\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_top_level_tree_through_a_cell() -> None:
    import torch

    tree = gnn_treelstm.make_tree([2, 2, -1], [0, 1, -1])
    cell = gnn_treelstm.build_cell("childsum", 4, 3)
    h, c = cell(tree, torch.randn(3, 4))
    assert h.shape == c.shape == (3, 3)
    assert gnn_treelstm.batch_roots(tree).tolist() == [2]


def test_py_typed_marker_ships() -> None:
    assert (Path(gnn_treelstm.__file__).parent / "py.typed").is_file()


def test_dir_lists_each_name_once() -> None:
    assert gnn_treelstm.Predictor is not None and gnn_treelstm.draw_tree is not None
    names = dir(gnn_treelstm)
    assert len(names) == len(set(names)) and {"Predictor", "draw_tree"} <= set(names)
