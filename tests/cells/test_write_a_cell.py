"""The page docs/write-a-cell.md: its Python blocks run, and the cell they write equals the
per-node reference written beside it, on both engines, on small hand-built trees and a
batched forest, states and gradients alike; and it passes the registry-wide test's
comparison (:func:`tests.cells.common.assert_engines_agree`), as a cell added to the
package would."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dgl
import pytest
import torch

from gnn_treelstm import make_tree
from gnn_treelstm.cells import build_cell, cells
from gnn_treelstm.cells.childsum import ChildSumTreeLSTM
from tests.cells.common import assert_engines_agree, on_forest, tree_by_tree
from tests.engine.compare import assert_same_run

PAGE = Path(__file__).resolve().parents[2] / "docs" / "write-a-cell.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
X, H = 4, 3
TOL = 1e-10

#: name -> parent pointers (-1: the root)
TREES = {
    "one node": [-1],
    "chain": [1, 2, -1],
    "wide": [-1, 0, 0, 0, 0],
    "mixed": [-1, 0, 0, 1, 1, 1, 2, 6],
}


def page_source() -> str:
    """The page's ```python blocks, each on its own lines of the page (so a traceback
    names the page's line), everything else blank."""
    text = PAGE.read_text(encoding="utf-8")
    lines = [""] * (text.count("\n") + 1)
    blocks = list(BLOCK.finditer(text))
    assert len(blocks) >= 3, f"{PAGE}: expected the cell, the reference and a run"
    for m in blocks:
        first = text.count("\n", 0, m.start(1))
        for n, line in enumerate(m.group(1).splitlines()):
            lines[first + n] = line
    return "\n".join(lines)


@pytest.fixture
def page(monkeypatch) -> dict:
    """The namespace of the page's code, run once (its own checks included); the cell it
    registers stays in this test's copy of the registry."""
    monkeypatch.setattr(cells, "_items", dict(cells._items))
    namespace: dict = {"__name__": "write_a_cell"}
    exec(compile(page_source(), str(PAGE), "exec"), namespace)
    assert "childmean" in cells
    return namespace


def _words(parents):
    return list(range(1, len(parents) + 1))


def _run(cell, fwd, x, wh, wc):
    """States and the gradients of every parameter and of ``x`` for a weighted sum."""
    x = x.detach().clone().requires_grad_(True)
    cell.zero_grad(set_to_none=True)
    h, c = fwd(x)
    ((h * wh).sum() + (c * wc).sum()).backward()
    grads = {n: torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
             for n, p in cell.named_parameters()}  # a lone node reads no U
    grads["x"] = x.grad.detach().clone()
    return h.detach(), c.detach(), grads


def _cells(page, engine):
    torch.manual_seed(0)
    cell = page["ChildMeanTreeLSTM"](X, H, engine=engine).double()
    for p in cell.parameters():  # larger than the default init: gates away from 1/2
        torch.nn.init.uniform_(p, -1.0, 1.0)
    return cell


@pytest.mark.parametrize("engine", ["dgl", "level"])
@pytest.mark.parametrize("name", list(TREES))
def test_one_tree_equals_the_reference(page, engine, name):
    parents = TREES[name]
    cell = _cells(page, engine)
    reference = page["child_mean_reference"]
    graph = make_tree(parents, _words(parents))
    torch.manual_seed(1)
    x = torch.randn(len(parents), X, dtype=torch.float64)
    wh, wc = torch.randn(2, len(parents), H, dtype=torch.float64)
    got = _run(cell, lambda xx: cell(graph, xx), x, wh, wc)
    want = _run(cell, lambda xx: reference(cell, parents, xx), x, wh, wc)
    assert_same_run(got, want, tol=TOL)
    if len(parents) > 1:
        flat = [k for k, g in got[2].items() if not bool(g.abs().sum() > 0)]
        assert not flat, f"no gradient reaches {flat}"


@pytest.mark.parametrize("engine", ["dgl", "level"])
def test_a_batched_forest_equals_the_reference_tree_by_tree(page, engine):
    cell = _cells(page, engine)
    reference = page["child_mean_reference"]
    trees = list(TREES.values()) * 2
    forest = dgl.batch([make_tree(p, _words(p)) for p in trees])
    n = forest.num_nodes()
    torch.manual_seed(2)
    x = torch.randn(n, X, dtype=torch.float64)
    wh, wc = torch.randn(2, n, H, dtype=torch.float64)

    got = _run(cell, lambda xx: cell(forest, xx), x, wh, wc)
    want = _run(cell, lambda xx: tree_by_tree(reference, cell, trees, xx), x, wh, wc)
    assert_same_run(got, want, tol=TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_the_page_cell_passes_the_registry_wide_comparison(page, dtype):
    """What tests/cells/test_registry.py runs for a registry name, for ``childmean`` with
    the page's reference: reference = dgl engine = level engine, states and gradients (no
    fast kernel: the level engine runs the declaration)."""
    def forest():
        return dgl.batch([make_tree(p, _words(p)) for p in TREES.values()] * 2)

    assert_engines_agree("childmean", {}, forest, on_forest(page["child_mean_reference"]),
                         dtype)


def test_the_page_cells_follow_the_design_rules():
    """Every cell class on the page (Child-Mean, and Child-Max of childmax.py) has its own
    ``reset_parameters`` and its constructor ends by calling it (docs/design.md), and the
    page calls the registry by the package's name, ``cells``."""
    text = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"^```python[^\n]*\n(.*?)^```", text, re.S | re.M)
    classes = [node for block in blocks for node in ast.walk(ast.parse(block))
               if isinstance(node, ast.ClassDef)]
    assert {c.name for c in classes} == {"ChildMeanTreeLSTM", "ChildMaxTreeLSTM"}
    for cls in classes:
        methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
        assert "reset_parameters" in methods, cls.name
        last = methods["__init__"].body[-1]
        assert ast.unparse(last) == "self.reset_parameters()", cls.name
        assert [ast.unparse(d) for d in cls.decorator_list] == [
            f"cells.register({'childmean' if 'Mean' in cls.name else 'childmax'!r})"]
    assert "cell_registry" not in text and "from gnn_treelstm.cells import cells" in text


def test_on_a_chain_it_is_childsum_and_on_a_wide_tree_it_is_not(page):
    """One child: the mean is the sum. Several: they differ, so the comparisons above
    tell the cell from Child-Sum."""
    cell = _cells(page, "level")
    childsum = ChildSumTreeLSTM(X, H).double()
    childsum.load_state_dict(cell.state_dict())
    for name, same in (("chain", True), ("wide", False), ("mixed", False)):
        parents = TREES[name]
        graph = make_tree(parents, _words(parents))
        x = torch.randn(len(parents), X, dtype=torch.float64)
        h_mean, _ = cell(graph, x)
        h_sum, _ = childsum(graph, x)
        assert torch.allclose(h_mean, h_sum, rtol=0, atol=1e-12) == same, name


def test_the_registered_cell_runs_its_declaration_on_the_level_engine(page):
    cell = build_cell("childmean", X, H, engine="level")
    assert cell.engine == "level" and not cell.has_kernel
    graph = make_tree(TREES["mixed"], _words(TREES["mixed"]))
    h, c = cell(graph, torch.randn(graph.num_nodes(), X))
    assert h.shape == c.shape == (graph.num_nodes(), H)


def test_a_part_the_recurrence_does_not_declare_is_a_clear_error(page):
    cell = _cells(page, "dgl")
    real = cell.recurrence

    def wrong():
        rec = real()
        return type(rec)(state=rec.state, inputs=rec.inputs, message=rec.message,
                         msg={"h": H, "fc": H}, update=rec.update)  # no "n"

    cell.recurrence = wrong
    graph = make_tree(TREES["wide"], _words(TREES["wide"]))
    with pytest.raises(ValueError, match=r"returned the parts \['fc', 'h', 'n'\]"):
        cell(graph, torch.randn(graph.num_nodes(), X, dtype=torch.float64))
