import pytest

from gnn_treelstm.cells import build_cell, cells
from gnn_treelstm.registry import Registry, UnknownNameError


def test_unknown_name_lists_choices():
    r: Registry[int] = Registry("thing")
    r.add("b", 2)
    r.add("a", 1)
    assert r.get("a") == 1 and r.names() == ["a", "b"] and "a" in r and len(r) == 2
    with pytest.raises(UnknownNameError, match="unknown thing 'zz'; choose one of: a, b"):
        r.get("zz")
    with pytest.raises(ValueError, match="registered twice"):
        r.add("a", 3)


def test_cell_registry_fails_loudly():
    with pytest.raises(KeyError, match="unknown cell 'nope'; choose one of"):
        build_cell("nope", 3, 4)
    assert isinstance(cells.names(), list)
