"""The ``cells`` registry: name -> cell constructor, and the checks of a cell's options.

Cells of other packages join it in two ways (``docs/write-a-cell.md``):

* an entry point in the group ``gnn_treelstm.cells`` (:data:`ENTRY_POINT_GROUP`) named as
  the cell, whose value is the module that registers it (``"mypkg.childmax"``) or its
  class (``"mypkg.childmax:ChildMaxTreeLSTM"``), loaded the first time the name is asked
  for;
* the module imported before the name is used: in Python, or ``--cell-module MODULE`` of
  ``train``, ``evaluate``, ``predict`` and ``serve`` (:func:`import_cell_modules`).

A checkpoint records the module that defines its cell (:func:`cell_module`), but loading
never imports it on the checkpoint's word: a downloaded file does not choose the code that
runs (:func:`gnn_treelstm.models.checkpoint.require_cell` names the module to trust).
"""


from __future__ import annotations

import importlib
import inspect
import numbers
import re
import types
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from gnn_treelstm.cells.base import TreeCell
from gnn_treelstm.registry import Registry

__all__ = ["cells", "build_cell", "cell_options", "check_cell_options", "run_defaults",
           "ENTRY_POINT_GROUP", "CELL_MODULE_HELP", "import_cell_modules", "cell_module",
           "MODULE_NAME"]

#: an absolute module name (``pkg.cells``): no relative import, no path
MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")

#: the entry-point group through which an installed package registers its cells
ENTRY_POINT_GROUP = "gnn_treelstm.cells"
#: ``--help`` of the commands' ``--cell-module``
CELL_MODULE_HELP = ("import MODULE first: a module of your own that registers a cell "
                    "(@cells.register(NAME)), for --model NAME or a checkpoint of it; "
                    "repeatable (installed packages may use the entry-point group "
                    f"{ENTRY_POINT_GROUP} instead)")


def _load_entry_point(name: str) -> None:
    """Register the cell ``name`` from an installed package's entry point, if one has it."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name != name:
            continue
        try:
            obj = ep.load()
        except Exception as exc:
            raise ValueError(f"cell {name!r}: the entry point {ep.name} = {ep.value!r} of "
                             f"group {ENTRY_POINT_GROUP} failed to load ({exc})") from exc
        if name not in cells and callable(obj) and not isinstance(obj, types.ModuleType):
            cells.add(name, obj)   # the entry point names the class itself
        return


cells: Registry[Callable[..., TreeCell]] = Registry("cell", loader=_load_entry_point)


def import_cell_modules(modules: Iterable[str]) -> None:
    """Import each module, which registers its cells; ``ValueError`` naming one that cannot
    be imported."""
    for module in modules:
        if not isinstance(module, str) or not MODULE_NAME.fullmatch(module):
            raise ValueError(f"--cell-module {str(module)[:200]!r}: not a module name; give "
                             "an absolute dotted name (mypkg.cells), its directory on "
                             "PYTHONPATH, not a file path or a relative name")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(f"--cell-module {module}: cannot import it ({exc}); put the "
                             "directory holding it on PYTHONPATH or install its package"
                             ) from exc


def cell_module(name: str) -> str:
    """The module that defines the cell registered as ``name`` (where its class lives)."""
    cls = cells.get(name)
    return getattr(cls, "__module__", None) or type(cls).__module__


#: arguments of every cell that are not options: sizes are build_cell's own, the engine is
#: chosen apart (``engine=``, ``--engine``)
_NOT_OPTIONS = {"x_size": "--emb-dim", "h_size": "--hidden", "engine": "--engine"}


def cell_options(name: str) -> dict[str, inspect.Parameter]:
    """The options of the cell registered as ``name``: its constructor's keyword parameters
    other than the sizes and the engine."""
    params = inspect.signature(cells.get(name)).parameters
    return {k: p for k, p in params.items()
            if k != "self" and k not in _NOT_OPTIONS
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _conforms(value: Any, annotation: Any) -> bool:
    """Does ``value`` have a type the annotation (``"bool"``, ``"int | None"``, ...) allows?
    Annotations of other types are not checked."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    checks = {
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "None": lambda v: v is None,
    }
    kinds = [t.strip() for t in text.split("|")]
    if any(k not in checks for k in kinds):
        return True
    return any(checks[k](value) for k in kinds)


def check_cell_options(name: str, options: Mapping[str, Any]) -> None:
    """Refuse an option the cell registered as ``name`` does not take, or a value of the
    wrong type (``ValueError`` naming the option, the value and the fix)."""
    if not isinstance(options, Mapping):
        raise ValueError(f"cell {name!r}: options must be a mapping of option names to "
                         f"values, got {options!r}")
    known = cell_options(name)
    for key, value in options.items():
        if key in _NOT_OPTIONS:
            raise ValueError(f"cell {name!r}: {key!r} is not a cell option; set it with "
                             f"{_NOT_OPTIONS[key]} (ModelConfig / build_cell argument)")
        if key not in known:
            raise ValueError(f"cell {name!r} has no option {key!r}; its options: "
                             f"{', '.join(sorted(known)) or 'none'}")
        want = known[key].annotation
        if want is not inspect.Parameter.empty and not _conforms(value, want):
            raise ValueError(
                f"cell {name!r}: option {key}={value!r} ({type(value).__name__}) must be "
                f"{want}; on the command line write booleans as true / false and None as "
                "null (--cell-arg KEY=VALUE reads VALUE as JSON)")


def run_defaults(name: str) -> Mapping[str, Any]:
    """The training defaults of the paper family of the cell registered as ``name``: its
    class attribute :attr:`TreeCell.run_defaults` (none for a constructor that is not a
    :class:`TreeCell` class)."""
    return getattr(cells.get(name), "run_defaults", MappingProxyType({}))


def build_cell(name: str, x_size: int, h_size: int, **kwargs) -> TreeCell:
    """Instantiate the cell registered as ``name``; ``kwargs`` are its options
    (:func:`cell_options`) and ``engine``, checked first (:func:`check_cell_options`)."""
    check_cell_options(name, {k: v for k, v in kwargs.items() if k != "engine"})
    return cells.get(name)(x_size, h_size, **kwargs)

