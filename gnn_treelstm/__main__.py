"""``python -m gnn_treelstm COMMAND ...`` = ``gnn-treelstm COMMAND ...``
(see :mod:`gnn_treelstm.commands.cli`).

``python -m`` puts the working directory first on ``sys.path``, where a file of the user's
(a ``data_prep.py``, say) would shadow the modules installed beside this package. Where
the package was not imported from there (an installed package, not a checkout), that entry
is dropped before the command runs, as ``python -P`` does: a setting of this command-line
process only.
"""

import os
import sys
from pathlib import Path

import gnn_treelstm
from gnn_treelstm.commands.cli import main


def _drop_working_directory() -> None:
    if not sys.path or getattr(sys.flags, "safe_path", False):  # -P: Python 3.11+
        return
    first = Path(sys.path[0] or os.getcwd()).resolve()
    home = Path(gnn_treelstm.__file__).resolve().parent.parent
    if first == Path.cwd().resolve() and first != home:
        del sys.path[0]


if __name__ == "__main__":
    _drop_working_directory()
    sys.exit(main())
