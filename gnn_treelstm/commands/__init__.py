"""The command lines: ``gnn-treelstm COMMAND`` (:mod:`~gnn_treelstm.commands.cli`), one module
per command. Process-wide settings (OpenMP waiting, the C heap, denormal floats, progress
bars) live here only; library code never imports this package.
"""
