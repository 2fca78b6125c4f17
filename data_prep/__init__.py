"""Data preparation: raw benchmark files -> cached DGL sentence graphs.

Modules: :mod:`.ptb` (SST PTB trees), :mod:`.dependency` (spaCy parses),
:mod:`.binarize` (binary trees from dependency parses), :mod:`.chain` (chains),
:mod:`.preparsed` (Stanford ``.toks/.parents/.rels/.cparents``), :mod:`.readers`
(SICK, TREC, SNLI files) and the CLI :mod:`.build` (``python -m data_prep.build``).
"""

import gnn_treelstm  # noqa: F401  (dgl compat before anything imports dgl)
