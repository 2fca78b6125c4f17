"""Data sets: raw benchmark files and users' own JSONL -> packed DGL sentence graphs.

Readers (:mod:`.readers` SICK, TREC, SNLI files; :mod:`.ptb` SST's PTB trees;
:mod:`.preparsed` Stanford ``.toks/.parents/.rels/.cparents``; :mod:`.jsonl` a data set of
one's own; :mod:`.amr_data` / :mod:`.penman_io` AMR banks), the sentence-graph building
blocks (:mod:`.dependency` spaCy parses, :mod:`.labels` their Stanford relation names,
:mod:`.binarize` binary trees from dependency parses, :mod:`.chain` chains, :mod:`.amr`
AMR trees, :mod:`.example` one example's graph of each tree kind, :mod:`.text` a model's
graphs of raw text), the build
(:mod:`.build`, run by ``gnn-treelstm build``) and the raw data's download (:mod:`.fetch`,
``gnn-treelstm fetch``).
"""
