"""``python -m data_prep.fetch ...``: the checkout's entry for ``gnn-treelstm fetch`` (same flags).

The command lives in :mod:`gnn_treelstm.commands.fetch`, so an installed package has it too.
"""

import sys

from gnn_treelstm.commands.fetch import main

if __name__ == "__main__":
    sys.exit(main())
