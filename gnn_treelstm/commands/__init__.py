"""The command lines: ``gnn-treelstm COMMAND`` (:mod:`~gnn_treelstm.commands.cli`), one module
per command (and :mod:`~gnn_treelstm.commands.http`, the bounded HTTP server under
``serve``). Process-wide settings (OpenMP waiting, the C heap, denormal floats, progress
bars) live here only; library code never imports this package.
"""
