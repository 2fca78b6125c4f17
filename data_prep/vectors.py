"""Pre-trained word vectors, for the data-building command lines: the reader, the binary
cache and the unknown-word rule live in :mod:`gnn_treelstm.trees.vectors` (the library's
public API imports nothing of ``data_prep``); this module names them here too."""

from gnn_treelstm.trees.vectors import (
    UNK,
    EmbeddingStats,
    VectorsFormatError,
    build_embedding_matrix,
    cache_path_for,
    embedding_from_vectors,
    load_vectors,
    read_vectors,
)

__all__ = ["UNK", "VectorsFormatError", "EmbeddingStats", "read_vectors", "load_vectors",
           "cache_path_for", "embedding_from_vectors", "build_embedding_matrix"]
