"""What the cell modules say of themselves: the fast kernel their docstring names is the
one their level engine calls, and no module keeps a logger it never uses."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

import gnn_treelstm.cells as C

CELL_FILES = sorted(Path(C.__file__).parent.glob("*.py"))


@pytest.mark.parametrize("name", ["childsum", "nary"])
def test_the_named_fast_kernel_is_the_one_the_level_engine_calls(name):
    module = importlib.import_module(f"gnn_treelstm.cells.{name}")
    named = re.findall(r":func:`(gnn_treelstm\.kernels\.[\w.]+_levels)`", module.__doc__)
    assert named, f"{name}'s docstring names no level kernel"
    cls = C.cells.get(name)
    called = re.findall(r"\b(fused\w*)\.(\w+_levels)\b", inspect.getsource(cls.level_kernel))
    assert {f"gnn_treelstm.kernels.{m}.{f}" for m, f in called} == set(named)


@pytest.mark.parametrize("path", CELL_FILES, ids=lambda p: p.name)
def test_no_logger_is_kept_unused(path):
    tree = ast.parse(path.read_text())
    loggers = {t.id for node in tree.body if isinstance(node, ast.Assign)
               for t in node.targets if isinstance(t, ast.Name)
               and "getLogger" in ast.unparse(node.value)}
    used = {n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name)}
    assert loggers <= used, f"{path.name}: {sorted(loggers - used)} never logs"
