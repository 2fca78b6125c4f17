"""gnn_treelstm: the Tree-LSTM family as DGL message passing."""

from . import (
    _dgl_compat,  # noqa: F401  (must run before anything imports dgl)
    graph,
)
from .cells import build_cell, cells

__version__ = "0.1.0"

__all__ = ["graph", "cells", "build_cell", "__version__"]
