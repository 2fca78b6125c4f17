"""``python -m gnn_treelstm COMMAND ...`` = ``gnn-treelstm COMMAND ...``
(see :mod:`gnn_treelstm.commands.cli`)."""

import sys

from gnn_treelstm.commands.cli import main

if __name__ == "__main__":
    sys.exit(main())
