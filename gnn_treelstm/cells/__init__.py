"""Tree-LSTM cells and the ``cells`` registry (name -> constructor).

Every module in this package registers its cells with ``@cells.register(name)`` on a
factory ``f(x_size, h_size, **kwargs) -> TreeCell``. :func:`build_cell` resolves a name.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from ..registry import Registry
from .base import ENGINES, TreeCell

__all__ = ["cells", "build_cell", "TreeCell", "ENGINES"]

cells: Registry[Callable[..., TreeCell]] = Registry("cell")


def build_cell(name: str, x_size: int, h_size: int, **kwargs) -> TreeCell:
    """Instantiate the cell registered as ``name``."""
    return cells.get(name)(x_size, h_size, **kwargs)


for _mod in pkgutil.iter_modules(__path__):
    if _mod.name not in ("base",):
        importlib.import_module(f"{__name__}.{_mod.name}")
