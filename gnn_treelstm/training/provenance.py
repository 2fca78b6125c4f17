"""Which source code a model's math came from: one fingerprint per module.

A run records, beside its configuration, the fingerprints of the modules that define its
model's math (``config.json``'s ``code``): the module of the registered cell and of the
task, every module of the ``cells`` and ``tasks`` packages those refer to (a BiConTree's
``bidirectional`` refers to ``lexicalized`` and ``topdown``, every cell to ``base``), and
``model`` (embedding and head wiring) and ``dropout``. The reproduction ledger compares
them with today's, so a result measured before a change to a cell's equations is named as
such (``python -m gnn_treelstm.reproduce --list``) even though its configuration is
unchanged.

A fingerprint is the SHA-256 of the module's syntax tree with its docstrings removed, so
editing a comment, a docstring or the layout does not change it; renaming a variable does.
The syntax tree's form differs between Python versions, so fingerprints are compared only
when recorded under the same one (:data:`PYTHON`). Engines and kernels are not
fingerprinted: they are checked equal to the cells' math by the registry-wide test
(``tests/cells/test_registry.py``), and fingerprinting them would name every row after every
speed change.

The fingerprints are taken from the files the first time any is asked for, for every
module of the math packages already imported (a training process imports them all at its
start), so a file edited while a long process (the reproduction runner) runs on does not
pass for the code that process imported. Recording never fails a run: a module whose
source cannot be read or parsed is recorded as :data:`NO_SOURCE`.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import logging
import sys
import types
from collections.abc import Mapping

from gnn_treelstm import __version__

log = logging.getLogger(__name__)

__all__ = ["MATH_PACKAGES", "ALWAYS", "NO_SOURCE", "PYTHON", "fingerprint", "model_modules",
           "model_sources", "code_record", "source_changes", "code_changes"]

#: the packages whose modules hold a model's math (followed from the cell and the task)
MATH_PACKAGES = ("gnn_treelstm.cells", "gnn_treelstm.tasks")
#: modules fingerprinted for every model, not followed (they refer to every cell and task)
ALWAYS = ("gnn_treelstm.kernels.dropout", "gnn_treelstm.models.treelstm")
#: the fingerprint of a module whose source cannot be read or parsed (a cell registered
#: from a notebook): recorded, and equal to itself, so such a run is never named as changed
NO_SOURCE = "no-source"
#: the Python version fingerprints are comparable within (``ast.dump`` changes between them)
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

_SNAPSHOT: dict[str, str] = {}


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
    (comments, docstrings and layout do not change it). ``SyntaxError`` if it does not
    parse."""
    tree = _strip_docstrings(ast.parse(source))
    dump = ast.dump(tree, annotate_fields=False, include_attributes=False)
    return hashlib.sha256(dump.encode("utf-8")).hexdigest()[:12]


def _read(name: str) -> str:
    module = sys.modules.get(name)
    try:
        if module is None:
            module = importlib.import_module(name)
        return fingerprint(inspect.getsource(module))
    except Exception as e:  # noqa: BLE001 - recording must never fail a run
        log.info("no readable source for module %s (%s): recorded as %r", name,
                 type(e).__name__, NO_SOURCE)
        return NO_SOURCE


def _in_math_package(name: str) -> bool:
    return any(name.startswith(p + ".") for p in MATH_PACKAGES)


def _tracked(name: str) -> bool:
    return name in ALWAYS or _in_math_package(name)


def _module_fingerprint(name: str) -> str:
    if not _SNAPSHOT:  # first use: every math module this process has imported, at once
        for loaded in sorted(n for n in list(sys.modules) if _tracked(n)):
            _SNAPSHOT[loaded] = _read(loaded)
    if name not in _SNAPSHOT:
        _SNAPSHOT[name] = _read(name)
    return _SNAPSHOT[name]


def _referred(module: types.ModuleType) -> set[str]:
    """The modules of the math packages that ``module``'s globals come from. Dunder names
    are not the module's own (``torch.compile`` installs its compiled frames there as
    ``__compiled_fn_*`` / ``__resume_at_*``, whose ``__module__`` may be any cell's)."""
    out = set()
    for key, value in vars(module).items():
        if key.startswith("__"):
            continue
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(
            value, "__module__", None)
        if isinstance(name, str) and _in_math_package(name):
            out.add(name)
    return out


def model_modules(cell: str, task: str) -> list[str]:
    """The modules (dotted names, sorted) that define the math of a model of the registered
    ``cell`` on the registered ``task`` (``UnknownNameError`` for an unknown name); a cell
    or task registered from outside the package brings its own module."""
    from gnn_treelstm.cells import cells
    from gnn_treelstm.tasks import tasks

    todo = [cells.get(cell).__module__, tasks.get(task).__module__]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        module = sys.modules.get(name)
        if module is not None:  # a module that is not loaded refers to nothing we can see
            todo.extend(_referred(module) - seen)
    return sorted(seen | set(ALWAYS))


def model_sources(cell: str, task: str) -> dict[str, str]:
    """``{module: fingerprint}`` for :func:`model_modules`."""
    return {name: _module_fingerprint(name) for name in model_modules(cell, task)}


def code_record(cell: str, task: str) -> dict[str, object]:
    """What a run records of its code: the package and Python versions and
    :func:`model_sources`; never raises (a failure is recorded as ``error``, logged)."""
    try:
        modules = model_sources(cell, task)
    except Exception as e:  # noqa: BLE001 - recording must never fail a run
        log.warning("could not fingerprint the code of %s on %s (%s); the run records no "
                    "fingerprints", cell, task, e)
        return {"version": __version__, "python": PYTHON, "error": str(e)}
    return {"version": __version__, "python": PYTHON, "modules": modules}


def source_changes(had: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """The modules whose fingerprint in ``had`` (recorded) differs from ``now``'s, or that
    only one of them has, sorted."""
    return sorted(k for k in set(had) | set(now) if had.get(k) != now.get(k))


def code_changes(had: Mapping[str, object] | None, cell: str, task: str) -> list[str]:
    """How the code a run recorded (its :func:`code_record`) differs from today's for the
    model of ``cell`` on ``task``: the modules whose fingerprints differ, or one line saying
    the fingerprints were recorded under another Python (not comparable); [] when the same,
    or when it recorded none."""
    modules = (had or {}).get("modules")
    if not isinstance(modules, Mapping) or not modules:
        return []
    python = (had or {}).get("python")
    if python != PYTHON:
        return [f"(recorded under Python {python or 'unknown'}, not comparable with "
                f"{PYTHON})"]
    return source_changes(modules, model_sources(cell, task))
