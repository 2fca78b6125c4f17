"""Reproduce the papers' tables: a registry of table rows, a resumable runner, a report.

    python -m gnn_treelstm.reproduce tran-t3 --data DATA --vectors-dir GLOVE
    python -m gnn_treelstm.reproduce --list
    python -m gnn_treelstm.reproduce 'tai-t3/*' --quick      # smoke test on the sample

:mod:`.rows` holds the rows (paper numbers and settings), :mod:`.runner` trains their seeds
under ``runs/reproduce/`` and :mod:`.report` writes the tables of ``docs/RESULTS.md``.
"""

from gnn_treelstm.reproduce.ledger import done_seeds
from gnn_treelstm.reproduce.report import write_results
from gnn_treelstm.reproduce.rows import ROWS, TABLES, Row, get, select, unavailable_reason
from gnn_treelstm.reproduce.runner import RowRun, RunRowsOptions, run_rows

__all__ = ["ROWS", "TABLES", "Row", "RowRun", "RunRowsOptions", "done_seeds", "get",
           "run_rows", "select", "unavailable_reason", "write_results"]
