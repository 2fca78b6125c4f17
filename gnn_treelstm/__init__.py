"""gnn_treelstm: the Tree-LSTM family as DGL message passing.

Cells (``forward(graph, x) -> (h, c)`` over batched trees built to :mod:`gnn_treelstm.trees.graph`):

=========================  ==========================  ===============================
class                      registry name(s)            paper
=========================  ==========================  ===============================
ChildSumTreeLSTM           childsum                    Tai et al. 2015, eqs 2-8
NaryTreeLSTM               nary                        Tai et al. 2015, eqs 9-14
SequentialLSTM             lstm bilstm lstm2 bilstm2   Tai et al. 2015, Table 1
LexicalizedTreeLSTM        lex                         Teng & Zhang, eqs 5-12
TopDownTreeLSTM            topdown                     Teng & Zhang, eqs 14-15
BidirectionalTreeLSTM      bitree                      Teng & Zhang, eqs 5-16
MTreeLSTM                  mtree                       Tran & Cheng 2018, eqs 3-4
AddTreeLSTM                mtree-add                   Tran & Cheng 2018, Table 6
FullTreeLSTM               mtree-full                  Tran & Cheng 2018, eq 2
=========================  ==========================  ===============================

``MultiplicativeTreeLSTM`` is the base class of the last three.
"""

from gnn_treelstm import _dgl_compat  # noqa: F401  (must run before anything imports dgl)

__version__ = "0.1.0"

# Public names resolve on first use (PEP 562), so ``import gnn_treelstm`` (and the command
# line entry points) load neither torch nor dgl until a cell or graph is needed: the CLIs
# set process-wide settings (OpenMP waiting) that torch reads when it loads.
_LAZY = {
    # trees: build, check and batch graphs; vocabularies; drawing
    "graph": ("gnn_treelstm.trees.graph", None),
    "make_tree": ("gnn_treelstm.trees.graph", "make_tree"),
    "validate_tree": ("gnn_treelstm.trees.graph", "validate_tree"),
    "batch_roots": ("gnn_treelstm.trees.graph", "batch_roots"),
    "batch_leaves": ("gnn_treelstm.trees.graph", "batch_leaves"),
    "collate": ("gnn_treelstm.trees.data", "collate"),
    "TreeDataset": ("gnn_treelstm.trees.data", "TreeDataset"),
    "Vocab": ("gnn_treelstm.trees.vocab", "Vocab"),
    "Relations": ("gnn_treelstm.trees.vocab", "Relations"),
    "build_embedding_matrix": ("gnn_treelstm.trees.vectors", "build_embedding_matrix"),
    "from_dgl_sst": ("gnn_treelstm.trees.adapters", "from_dgl_sst"),
    "vocab_from_dgl_sst": ("gnn_treelstm.trees.adapters", "vocab_from_dgl_sst"),
    "drawing": ("gnn_treelstm.trees.drawing", None),
    "draw_tree": ("gnn_treelstm.trees.drawing", "draw_tree"),
    # cells
    "TreeCell": ("gnn_treelstm.cells", "TreeCell"),
    "build_cell": ("gnn_treelstm.cells", "build_cell"),
    "cell_registry": ("gnn_treelstm.cells", "cells"),
    "ChildSumTreeLSTM": ("gnn_treelstm.cells.childsum", "ChildSumTreeLSTM"),
    "NaryTreeLSTM": ("gnn_treelstm.cells.nary", "NaryTreeLSTM"),
    "SequentialLSTM": ("gnn_treelstm.cells.sequential", "SequentialLSTM"),
    "LexicalizedTreeLSTM": ("gnn_treelstm.cells.lexicalized", "LexicalizedTreeLSTM"),
    "TopDownTreeLSTM": ("gnn_treelstm.cells.topdown", "TopDownTreeLSTM"),
    "BidirectionalTreeLSTM": ("gnn_treelstm.cells.bidirectional", "BidirectionalTreeLSTM"),
    "MultiplicativeTreeLSTM": ("gnn_treelstm.cells.multiplicative", "MultiplicativeTreeLSTM"),
    "MTreeLSTM": ("gnn_treelstm.cells.multiplicative", "MTreeLSTM"),
    "AddTreeLSTM": ("gnn_treelstm.cells.multiplicative", "AddTreeLSTM"),
    "FullTreeLSTM": ("gnn_treelstm.cells.multiplicative", "FullTreeLSTM"),
    # models: a cell with embeddings and a task head; trained checkpoints
    "ModelConfig": ("gnn_treelstm.models.treelstm", "ModelConfig"),
    "TreeLSTMModel": ("gnn_treelstm.models.treelstm", "TreeLSTMModel"),
    "load_model": ("gnn_treelstm.models.checkpoint", "load_model"),
    "Predictor": ("gnn_treelstm.models.predictor", "Predictor"),
}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):  # noqa: ANN202 - module protocol
    if name not in _LAZY:
        raise AttributeError(f"module 'gnn_treelstm' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    value = value if attr is None else getattr(value, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
