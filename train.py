#!/usr/bin/env python
"""``python train.py ...``: the checkout's shim for ``gnn-treelstm train`` (same flags).

The command lives in :mod:`gnn_treelstm.commands.train`, so an installed package has it too
(``gnn-treelstm train``, ``python -m gnn_treelstm train``).
"""

import sys

from gnn_treelstm.commands.train import main  # sets the OpenMP wait policy before torch loads

if __name__ == "__main__":
    sys.exit(main())
