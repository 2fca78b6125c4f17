"""``python -m data_prep.build ...``: the checkout's entry for ``gnn-treelstm build`` (same flags).

The command lives in :mod:`gnn_treelstm.commands.build`, so an installed package has it too.
"""

import sys

from gnn_treelstm.commands.build import main

if __name__ == "__main__":
    sys.exit(main())
