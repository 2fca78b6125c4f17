"""Trees from elsewhere into this library's schema: DGL's own ``dgl.data.SSTDataset``.

DGL's SST graphs (``dgl.data.SSTDataset``, built by ``dgl/data/tree.py``) hold, per node,
``x`` (the word id in DGL's vocabulary, ``-1`` for a phrase node and for an unknown
word), ``y`` (the sentiment label 0-4) and ``mask`` (1 at leaves); edges point from child
to parent, node 0 is the root, and nodes are numbered in preorder, so a node's children
in sentence order have increasing ids and leaves in sentence order have increasing ids.

:func:`from_dgl_sst` turns one such graph into a graph of the schema of
:mod:`gnn_treelstm.trees.graph` (``word``, ``leaf``, ``label``, ``span``, ``root``; edges'
``rel`` and ``pos``), and :func:`vocab_from_dgl_sst` DGL's vocabulary into a
:class:`~gnn_treelstm.trees.vocab.Vocab` whose ids are DGL's plus one (id 0 is the unknown
word, which DGL writes as ``-1``)::

    ds = dgl.data.SSTDataset(mode="train")
    vocab = vocab_from_dgl_sst(ds.vocab)
    graphs = [from_dgl_sst(g) for g in ds]
"""

from __future__ import annotations

from collections.abc import Mapping

import dgl
import torch

from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.vocab import Vocab

__all__ = ["from_dgl_sst", "vocab_from_dgl_sst", "DGL_SST_FIELDS"]

#: the node fields of a DGL SST graph
DGL_SST_FIELDS = ("x", "y", "mask")


def vocab_from_dgl_sst(vocab: Mapping[str, int]) -> Vocab:
    """This library's vocabulary for DGL's SST vocabulary (word -> id 0..V-1): the same
    words, each at DGL's id plus one, the unknown word at 0."""
    words = sorted(vocab.items(), key=lambda kv: kv[1])
    ids = [i for _, i in words]
    if ids != list(range(len(ids))):
        raise ValueError("vocab_from_dgl_sst: DGL's ids must be 0..V-1, each once; got "
                         f"{len(ids)} words with ids {ids[:5]}...")
    return Vocab(w for w, _ in words)


def from_dgl_sst(graph: dgl.DGLGraph) -> dgl.DGLGraph:
    """One DGL ``SSTDataset`` tree as a graph of this library's schema (a new graph).

    Word ids become DGL's id plus one (unknown: 0), matching :func:`vocab_from_dgl_sst`;
    every node keeps its label; spans are the leaves each node covers.

    Raises:
        ValueError: the graph lacks ``x``, ``y`` or ``mask``, a node has more than one
            parent, or it is not one tree (see :func:`~gnn_treelstm.trees.graph.make_tree`).
    """
    missing = [f for f in DGL_SST_FIELDS if f not in graph.ndata]
    if missing:
        raise ValueError(f"from_dgl_sst: the graph has no node field(s) {missing}; expected "
                         f"DGL SSTDataset graphs with ndata {list(DGL_SST_FIELDS)}")
    n = graph.num_nodes()
    src, dst = (t.tolist() for t in graph.edges())
    parents = [-1] * n
    for s, d in zip(src, dst):
        if parents[s] != -1:
            raise ValueError(f"from_dgl_sst: node {s} has two parents ({parents[s]} and {d}); "
                             "edges must point from child to parent")
        parents[s] = d
    leaf = graph.ndata["mask"].bool().tolist()
    x = graph.ndata["x"].tolist()
    words = [(w + 1 if w >= 0 else 0) if is_leaf else G.NO_WORD for w, is_leaf in zip(x, leaf)]
    order = [v for v in range(n) if leaf[v]]  # preorder ids: leaves in sentence order
    spans = [[n, -1] for _ in range(n)]
    for k, v in enumerate(order):
        u = v
        while u != -1:
            spans[u][0] = min(spans[u][0], k)
            spans[u][1] = max(spans[u][1], k + 1)
            u = parents[u]
    spans = [s if s[1] >= 0 else [-1, -1] for s in spans]
    return G.make_tree(parents, words, labels=graph.ndata["y"].to(torch.int64).tolist(),
                       spans=spans)
