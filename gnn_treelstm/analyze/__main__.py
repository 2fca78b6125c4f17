"""``python -m gnn_treelstm.analyze`` = ``gnn-treelstm analyze``."""

import sys

from gnn_treelstm.commands.analyze import main

if __name__ == "__main__":
    sys.exit(main())
