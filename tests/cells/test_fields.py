"""docs/trees.md's table of the fields each registry cell reads stays true: every registry
name is in it, and removing any field from a graph of the cell's case raises the table's
error where it lists one and nothing where it lists none, on both engines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from gnn_treelstm.cells import build_cell, cells
from tests.cells.test_registry import CASES, X

DOCS = Path(__file__).resolve().parents[2] / "docs" / "trees.md"


def _table() -> dict[tuple[str, str], str]:
    """{(cell name, field or "none"): "error: MESSAGE" | "optional: ..." | ...}."""
    text = DOCS.read_text()
    body = text.split("<!-- fields-table:start -->")[1].split("<!-- fields-table:end -->")[0]
    rows = {}
    for line in body.strip().splitlines()[2:]:
        names, field, effect = (c.strip() for c in line.strip().strip("|").split("|"))
        m = re.fullmatch(r"`(?:ndata|edata)\['(\w+)'\]`", field)
        for name in re.findall(r"`([\w-]+)`", names):
            rows[(name, m.group(1) if m else field)] = effect
    return rows


TABLE = _table()


def test_every_registry_cell_is_in_the_table():
    assert {name for name, _ in TABLE} == set(cells.names())


def _error(effect: str) -> str | None:
    m = re.fullmatch(r"error: `(.+)`", effect)
    return m.group(1) if m else None


@pytest.mark.parametrize("engine", ["dgl", "level"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_table_says_what_each_missing_field_does(name, engine):
    trees, _, options = CASES[name]
    graph = trees()
    fields = [("ndata", f) for f in graph.ndata] + [("edata", f) for f in graph.edata]
    for store, field in fields:
        g = trees()
        del getattr(g, store)[field]
        cell = build_cell(name, X, 5, engine=engine, **options[0])
        expected = _error(TABLE.get((name, field), ""))
        if expected is None:
            cell(g, torch.randn(g.num_nodes(), X))   # reads no such field, or optionally
        else:
            with pytest.raises(ValueError, match=re.escape(expected)):
                cell(g, torch.randn(g.num_nodes(), X))
    listed = {f for (n, f), effect in TABLE.items() if n == name and _error(effect)}
    assert listed <= {f for _, f in fields}, f"{name}: the table names fields no graph has"


def test_a_table_that_drops_a_required_field_fails(monkeypatch):
    """What the table test reports when the table forgets that N-ary needs 'word'."""
    monkeypatch.delitem(TABLE, ("nary", "word"))
    with pytest.raises(ValueError, match="no node field 'word'"):
        test_the_table_says_what_each_missing_field_does("nary", "dgl")
