"""Sentence trees as DGL graphs: the schema, the vocabulary, built data sets, level
schedules, drawing.

* :mod:`~gnn_treelstm.trees.graph` — the graph schema every part agrees on (edges child ->
  parent, node and edge fields) and :func:`~gnn_treelstm.trees.graph.make_tree`.
* :mod:`~gnn_treelstm.trees.vocab` — word and relation vocabularies.
* :mod:`~gnn_treelstm.trees.vectors` — pre-trained word vectors (GloVe / word2vec text, a
  binary cache, the unknown-word rule) as an embedding matrix over a vocabulary.
* :mod:`~gnn_treelstm.trees.data` — the built data sets ``gnn-treelstm build`` writes.
* :mod:`~gnn_treelstm.trees.packed` — a split's trees as memory-mapped flat arrays.
* :mod:`~gnn_treelstm.trees.schedule` — a batch's level schedule: which nodes update at each
  level, as index tensors (``collate`` builds it; the level engine runs on it).
* :mod:`~gnn_treelstm.trees.phrases` — every labelled phrase of a treebank as its own
  chain (``--supervision phrase-sequences``).
* :mod:`~gnn_treelstm.trees.drawing` — networkx conversion and tree drawing (matplotlib).
* :mod:`~gnn_treelstm.trees.treesvg` — trees with per-node predictions as SVG / HTML.
* :mod:`~gnn_treelstm.trees.adapters` — trees from elsewhere (DGL's ``SSTDataset``) into
  the schema.
"""
