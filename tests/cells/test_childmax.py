"""The Child-Max module of docs/write-a-cell.md (``childmax.py``, a cell of one's own with
``aggregate="max"``): on both engines it equals a per-node reference, states and gradients;
``gnn-treelstm train --cell-module childmax --model childmax`` trains it, ``evaluate`` finds
its module through the checkpoint, ``load_model`` loads it in Python, an entry point of the
group ``gnn_treelstm.cells`` registers it by name, and a checkpoint whose module is gone
names that module."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import dgl
import pytest
import torch

from gnn_treelstm import make_tree
from gnn_treelstm.cells import ENTRY_POINT_GROUP, build_cell, cells
from gnn_treelstm.models.checkpoint import load_model
from tests.cells.common import tree_by_tree

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "write-a-cell.md"
X, H = 4, 3


def module_source() -> str:
    m = re.search(r'^```python title="childmax.py"\n(.*?)^```', PAGE.read_text(), re.S | re.M)
    assert m, f"{PAGE}: no ```python title=\"childmax.py\" block"
    return m.group(1)


@pytest.fixture
def module_dir(tmp_path) -> Path:
    folder = tmp_path / "cellmod"
    folder.mkdir()
    (folder / "childmax.py").write_text(module_source())
    return folder


@pytest.fixture
def fresh_registry(monkeypatch):
    """A copy of the registry and no ``childmax`` module imported: what this test registers
    leaves the registry as it was."""
    monkeypatch.setattr(cells, "_items", dict(cells._items))
    monkeypatch.delitem(sys.modules, "childmax", raising=False)
    yield
    sys.modules.pop("childmax", None)


@pytest.fixture
def childmax(module_dir, fresh_registry, monkeypatch):
    monkeypatch.syspath_prepend(str(module_dir))
    import childmax as mod

    return mod


def child_max_reference(cell, parents, x):
    """(h, c) of every node of one tree, node by node, from the module's docstring."""
    W_i, W_o, W_u, W_f = cell.W_x.weight.split(H)
    b_i, b_o, b_u, b_f = cell.W_x.bias.split(H)
    U_i, U_o, U_u = cell.U_iou.weight.split(H)
    U_f = cell.U_f.weight
    children = [[k for k, p in enumerate(parents) if p == j] for j in range(len(parents))]
    h, c = {}, {}

    def visit(j):
        for k in children[j]:
            visit(k)
        kids = children[j]
        h_max = torch.stack([h[k] for k in kids]).amax(0) if kids else x.new_zeros(H)
        fc = (torch.stack([torch.sigmoid(W_f @ x[j] + U_f @ h[k] + b_f) * c[k]
                           for k in kids]).amax(0) if kids else x.new_zeros(H))
        i = torch.sigmoid(W_i @ x[j] + U_i @ h_max + b_i)
        o = torch.sigmoid(W_o @ x[j] + U_o @ h_max + b_o)
        u = torch.tanh(W_u @ x[j] + U_u @ h_max + b_u)
        c[j] = i * u + fc
        h[j] = o * torch.tanh(c[j])

    visit(parents.index(-1))
    return (torch.stack([h[j] for j in range(len(parents))]),
            torch.stack([c[j] for j in range(len(parents))]))


TREES = [[-1], [1, 2, -1], [-1, 0, 0, 0, 0], [-1, 0, 0, 1, 1, 1, 2, 6]]


@pytest.mark.parametrize("engine", ["dgl", "level"])
def test_child_max_equals_its_reference_on_both_engines(childmax, engine):
    torch.manual_seed(0)
    cell = build_cell("childmax", X, H, engine=engine).double()
    assert isinstance(cell, childmax.ChildMaxTreeLSTM)
    for p in cell.parameters():
        torch.nn.init.uniform_(p, -1.0, 1.0)
    graph = dgl.batch([make_tree(p, list(range(1, len(p) + 1))) for p in TREES])
    x = torch.randn(graph.num_nodes(), X, dtype=torch.float64, requires_grad=True)
    h, c = cell(graph, x)
    (h.sum() + 0.5 * c.sum()).backward()
    got = {n: p.grad.clone() for n, p in cell.named_parameters()} | {"x": x.grad.clone()}
    cell.zero_grad()
    x_ref = x.detach().clone().requires_grad_(True)
    h_ref, c_ref = tree_by_tree(child_max_reference, cell, TREES, x_ref)
    (h_ref.sum() + 0.5 * c_ref.sum()).backward()
    want = {n: p.grad for n, p in cell.named_parameters()} | {"x": x_ref.grad}
    torch.testing.assert_close(h, h_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(c, c_ref, rtol=1e-10, atol=1e-10)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-10, atol=1e-10, msg=name)


def test_reset_parameters_draws_the_weights_again(childmax):
    cell = build_cell("childmax", X, H)
    before = [p.detach().clone() for p in cell.parameters()]
    cell.reset_parameters()
    assert all(not torch.equal(a, b) for a, b in zip(before, cell.parameters()))


def _install_entry_point(module_dir, tmp_path, monkeypatch) -> None:
    """An installed distribution naming childmax in the cells' entry-point group, on sys.path
    beside the module it names."""
    dist = tmp_path / "site" / "childmax_cells-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: childmax-cells\n"
                                   "Version: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nchildmax = childmax\n")
    monkeypatch.syspath_prepend(str(module_dir))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def test_an_entry_point_registers_the_cell_by_name(module_dir, fresh_registry, monkeypatch,
                                                   tmp_path):
    _install_entry_point(module_dir, tmp_path, monkeypatch)
    assert "childmax" not in cells
    cell = build_cell("childmax", X, H)
    assert type(cell).__name__ == "ChildMaxTreeLSTM" and "childmax" in cells


def _cli(*args: str, cwd: Path, extra_path: Path | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([str(extra_path)] if extra_path else []))
    return subprocess.run([sys.executable, "-m", "gnn_treelstm", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_train_evaluate_and_load_a_child_max_model(module_dir, tiny_sst, tmp_path,
                                                   fresh_registry, monkeypatch):
    runs = tmp_path / "runs"
    trained = _cli("train", "--cell-module", "childmax", "--model", "childmax",
                   "--task", "sst-5", "--tree", "dependency", "--data", str(tiny_sst),
                   "--runs-dir", str(runs), "--name", "cm", "--epochs", "1",
                   "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5", "-q",
                   cwd=tmp_path, extra_path=module_dir)
    assert trained.returncode == 0, trained.stderr[-3000:]
    best = runs / "cm" / "best.pt"
    # evaluate imports the module it is told to trust, never the one a checkpoint names
    scored = _cli("evaluate", str(best), "--cell-module", "childmax", "--split", "dev",
                  "--json", cwd=tmp_path, extra_path=module_dir)
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert json.loads(scored.stdout.splitlines()[-1])["split"] == "dev"
    # in Python: load_model imports the modules it is given
    monkeypatch.syspath_prepend(str(module_dir))
    ck = load_model(best, cell_modules=["childmax"])
    assert type(ck.model.cell).__name__ == "ChildMaxTreeLSTM"
    saved = torch.load(best, weights_only=True)
    assert saved["cell_module"] == "childmax"
    for name, tensor in ck.model.state_dict().items():
        torch.testing.assert_close(tensor, saved["state_dict"][name])
    # the module not named: the command and load_model name it, and how to trust it
    missing = _cli("evaluate", str(best), cwd=tmp_path, extra_path=module_dir)
    assert missing.returncode == 2
    assert "defined in the module 'childmax'" in missing.stderr, missing.stderr[-2000:]
    assert "--cell-module childmax" in missing.stderr
    monkeypatch.setattr(cells, "_items", {k: v for k, v in cells._items.items()
                                          if k != "childmax"})
    monkeypatch.delitem(sys.modules, "childmax")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(module_dir)])
    with pytest.raises(ValueError, match="defined in the module 'childmax', which is not "
                       "imported; a checkpoint never imports code by itself"):
        load_model(best)


def test_an_unknown_cell_module_is_refused_on_the_command_line(tmp_path):
    proc = _cli("train", "--cell-module", "no_such_cells_here", "--model", "childmax",
                cwd=tmp_path, extra_path=None)
    assert proc.returncode == 2
    assert "--cell-module no_such_cells_here: cannot import it" in proc.stderr


def test_train_help_lists_the_cells_of_entry_points(module_dir, fresh_registry, monkeypatch,
                                                    tmp_path, capsys):
    from gnn_treelstm.commands import train

    _install_entry_point(module_dir, tmp_path, monkeypatch)
    assert "childmax" not in cells  # not loaded: named by its entry point
    with pytest.raises(SystemExit):
        train.parse_args(["--help"])
    listed = " ".join(capsys.readouterr().out.split())
    assert re.search(r"--model MODEL\s+one of: [^-]*\bchildmax\b", listed), listed[:2000]
    assert "childmax" not in cells
