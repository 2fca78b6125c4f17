#!/usr/bin/env python
"""``python evaluate.py ...``: the checkout's shim for ``gnn-treelstm evaluate`` (same flags).

The command lives in :mod:`gnn_treelstm.commands.evaluate`, so an installed package has it too
(``gnn-treelstm evaluate``, ``python -m gnn_treelstm evaluate``).
"""

import sys

from gnn_treelstm.commands.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
