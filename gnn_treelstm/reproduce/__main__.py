"""``python -m gnn_treelstm.reproduce`` = ``gnn-treelstm reproduce``."""

import sys

from gnn_treelstm.commands.reproduce import main

if __name__ == "__main__":
    sys.exit(main())
