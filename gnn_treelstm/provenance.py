"""Which source code a model's math came from: one fingerprint per module.

A run records, beside its configuration, the fingerprints of the modules that define its
model's math (``config.json``'s ``code``): the module of the registered cell and of the
task, every module of the ``cells`` and ``tasks`` packages those refer to (a BiConTree's
``bidirectional`` refers to ``lexicalized`` and ``topdown``, every cell to ``base``), and
``model`` (embedding, dropout, head wiring). The reproduction ledger compares them with
today's, so a result measured before a change to a cell's equations is named as such
(``python -m gnn_treelstm.reproduce --list``) even though its configuration is unchanged.

A fingerprint is the SHA-256 of the module's syntax tree with its docstrings removed, so
editing a comment, a docstring or the layout does not change it; renaming a variable does.
Engines and kernels are not fingerprinted: they are checked equal to the cells' math by
the registry-wide test (``tests/test_cell_registry.py``), and fingerprinting them
would name every row after every speed change.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
import logging
import types
from collections.abc import Mapping

from . import __version__

log = logging.getLogger(__name__)

__all__ = ["MATH_PACKAGES", "NO_SOURCE", "fingerprint", "model_modules", "model_sources",
           "code_record", "source_changes"]

#: the packages whose modules hold a model's math (followed from the cell and the task)
MATH_PACKAGES = ("gnn_treelstm.cells", "gnn_treelstm.tasks")
#: modules fingerprinted for every model, not followed (they refer to every cell and task)
ALWAYS = ("gnn_treelstm.model",)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
    return tree


def fingerprint(source: str) -> str:
    """12 hex digits of the SHA-256 of ``source``'s syntax tree without docstrings
    (comments, docstrings and layout do not change it)."""
    tree = _strip_docstrings(ast.parse(source))
    dump = ast.dump(tree, annotate_fields=False, include_attributes=False)
    return hashlib.sha256(dump.encode("utf-8")).hexdigest()[:12]


#: the fingerprint of a module whose source cannot be read (a cell registered from a
#: notebook): recorded, and equal to itself, so such a run is never named as changed
NO_SOURCE = "no-source"


@functools.cache
def _module_fingerprint(name: str) -> str:
    try:
        source = inspect.getsource(importlib.import_module(name))
    except (OSError, TypeError):  # no file behind it (interactive, frozen)
        log.info("no source for module %s: its code is recorded as %r", name, NO_SOURCE)
        return NO_SOURCE
    return fingerprint(source)


def _in_math_package(name: str) -> bool:
    return any(name.startswith(p + ".") for p in MATH_PACKAGES)


def _referred(module: types.ModuleType) -> set[str]:
    """The modules of the math packages that ``module``'s globals come from."""
    out = set()
    for value in vars(module).values():
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(
            value, "__module__", None)
        if isinstance(name, str) and _in_math_package(name):
            out.add(name)
    return out


def model_modules(cell: str, task: str) -> list[str]:
    """The modules (dotted names, sorted) that define the math of a model of the registered
    ``cell`` on the registered ``task`` (``UnknownNameError`` for an unknown name); a cell
    or task registered from outside the package brings its own module."""
    from .cells import cells
    from .tasks import tasks

    todo = [cells.get(cell).__module__, tasks.get(task).__module__]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(_referred(importlib.import_module(name)) - seen)
    return sorted(seen | set(ALWAYS))


def model_sources(cell: str, task: str) -> dict[str, str]:
    """``{module: fingerprint}`` for :func:`model_modules`."""
    return {name: _module_fingerprint(name) for name in model_modules(cell, task)}


def code_record(cell: str, task: str) -> dict[str, object]:
    """What a run records of its code: the package version and :func:`model_sources`."""
    return {"version": __version__, "modules": model_sources(cell, task)}


def source_changes(had: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """The modules whose fingerprint in ``had`` (recorded) differs from ``now``'s, or that
    only one of them has, sorted."""
    return sorted(k for k in set(had) | set(now) if had.get(k) != now.get(k))
