"""gnn_treelstm: the Tree-LSTM family as DGL message passing.

Cells (``forward(graph, x) -> (h, c)`` over batched trees built to :mod:`gnn_treelstm.graph`):

=========================  ==========================  ===============================
class                      registry name(s)            paper
=========================  ==========================  ===============================
ChildSumTreeLSTM           childsum                    Tai et al. 2015, eqs 2-8
NaryTreeLSTM               nary                        Tai et al. 2015, eqs 9-14
SequentialLSTM             lstm bilstm lstm2 bilstm2   Tai et al. 2015, Table 1
LexicalizedTreeLSTM        lex                         Teng & Zhang, eqs 5-12
TopDownTreeLSTM            topdown                     Teng & Zhang, eqs 14-15
BidirectionalTreeLSTM      bitree                      Teng & Zhang, eqs 5-16
MultiplicativeTreeLSTM     mtree mtree-add mtree-full  Tran & Cheng 2018, eqs 2-4
=========================  ==========================  ===============================
"""

from . import _dgl_compat  # noqa: F401, I001  (must run before anything imports dgl)
from . import graph
from .cells import TreeCell, build_cell
from .cells import cells as cell_registry
from .cells.bidirectional import BidirectionalTreeLSTM
from .cells.childsum import ChildSumTreeLSTM
from .cells.lexicalized import LexicalizedTreeLSTM
from .cells.multiplicative import MultiplicativeTreeLSTM
from .cells.nary import NaryTreeLSTM
from .cells.sequential import SequentialLSTM
from .cells.topdown import TopDownTreeLSTM

__version__ = "0.1.0"

__all__ = [
    "graph",
    "TreeCell",
    "build_cell",
    "cell_registry",
    "ChildSumTreeLSTM",
    "NaryTreeLSTM",
    "SequentialLSTM",
    "LexicalizedTreeLSTM",
    "TopDownTreeLSTM",
    "BidirectionalTreeLSTM",
    "MultiplicativeTreeLSTM",
    "__version__",
]
