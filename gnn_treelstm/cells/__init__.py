"""Tree-LSTM cells and the ``cells`` registry (name -> constructor).

Every cell module registers its cells with ``@cells.register(name)`` (from
:mod:`~gnn_treelstm.cells.registry`) on a :class:`TreeCell` class, one class per name (its
constructor's keyword arguments are the cell's options, its class attribute ``run_defaults``
the training defaults of its paper family), and is imported here; :func:`build_cell`
resolves a name.
"""

from gnn_treelstm.cells import (  # noqa: F401  (each module registers its cells)
    bidirectional,
    childsum,
    lexicalized,
    mean,
    multiplicative,
    nary,
    sequential,
    topdown,
)
from gnn_treelstm.cells.base import TreeCell
from gnn_treelstm.cells.registry import (
    ENTRY_POINT_GROUP,
    build_cell,
    cell_module,
    cell_options,
    cells,
    check_cell_options,
    import_cell_modules,
    run_defaults,
)
from gnn_treelstm.engine.propagator import ENGINES

__all__ = ["cells", "build_cell", "cell_options", "check_cell_options", "run_defaults", "TreeCell",
           "ENGINES", "ENTRY_POINT_GROUP", "import_cell_modules", "cell_module", "cell_names"]


def cell_names() -> list[str]:
    """Every cell name ``--model`` takes: the registered ones and those of installed
    packages' entry points (group :data:`ENTRY_POINT_GROUP`, loaded when first used)."""
    from importlib.metadata import entry_points

    return sorted({*cells.names(), *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})
