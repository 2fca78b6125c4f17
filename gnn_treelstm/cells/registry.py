"""The ``cells`` registry: name -> cell constructor, and the checks of a cell's options."""


from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from gnn_treelstm.cells.base import TreeCell
from gnn_treelstm.registry import Registry

__all__ = ["cells", "build_cell", "cell_options", "check_cell_options", "run_defaults"]

cells: Registry[Callable[..., TreeCell]] = Registry("cell")


#: arguments of every cell that are not options: sizes are build_cell's own, the engine is
#: chosen apart (``engine=``, ``--engine``)
_NOT_OPTIONS = {"x_size": "--emb-dim", "h_size": "--hidden", "engine": "--engine"}


def cell_options(name: str) -> dict[str, inspect.Parameter]:
    """The options of the cell registered as ``name``: its constructor's keyword parameters
    other than the sizes and the engine (a factory function names the class it builds in
    ``cell_class``)."""
    factory = cells.get(name)
    params = inspect.signature(getattr(factory, "cell_class", factory)).parameters
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
    """The training defaults of the paper family of the cell registered as ``name``
    (:attr:`TreeCell.run_defaults`; a factory may carry its own ``run_defaults``)."""
    factory = cells.get(name)
    found = getattr(factory, "run_defaults", None)
    if found is None:
        found = getattr(getattr(factory, "cell_class", None), "run_defaults", {})
    return found


def build_cell(name: str, x_size: int, h_size: int, **kwargs) -> TreeCell:
    """Instantiate the cell registered as ``name``; ``kwargs`` are its options
    (:func:`cell_options`) and ``engine``, checked first (:func:`check_cell_options`)."""
    check_cell_options(name, {k: v for k, v in kwargs.items() if k != "engine"})
    return cells.get(name)(x_size, h_size, **kwargs)

