"""DGL's ``SSTDataset`` graphs into this library's schema, on a hand-built graph of that
format: "(3 (2 (2 a) (3 fine)) (2 film))" with "fine" unknown to DGL's vocabulary."""

from __future__ import annotations

import dgl
import pytest
import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.adapters import from_dgl_sst, vocab_from_dgl_sst
from gnn_treelstm.trees.graph import validate_tree


def dgl_sst_tree() -> dgl.DGLGraph:
    """What ``dgl/data/tree.py`` builds: preorder ids, child -> parent edges, ``x`` = -1 at
    phrases and unknown words, ``mask`` 1 at leaves."""
    # 0 root (3) -> 1 phrase (2) -> 2 "a" (2), 3 "fine" (3, unknown); 4 "film" (2)
    src, dst = [1, 2, 3, 4], [0, 1, 1, 0]
    g = dgl.graph((torch.tensor(src), torch.tensor(dst)), num_nodes=5)
    g.ndata["x"] = torch.tensor([-1, -1, 0, -1, 1])
    g.ndata["y"] = torch.tensor([3, 2, 2, 3, 2])
    g.ndata["mask"] = torch.tensor([0, 0, 1, 1, 1])
    return g


def test_schema_words_labels_spans_positions():
    g = from_dgl_sst(dgl_sst_tree())
    validate_tree(g)
    vocab = vocab_from_dgl_sst({"a": 0, "film": 1})
    assert vocab.itos == ["<unk>", "a", "film"]
    assert g.ndata[G.WORD].tolist() == [G.NO_WORD, G.NO_WORD, 1, 0, 2]  # unknown -> 0
    assert [vocab.itos[w] for w in g.ndata[G.WORD].tolist() if w >= 0] == ["a", "<unk>", "film"]
    assert g.ndata[G.LABEL].tolist() == [3, 2, 2, 3, 2]
    assert g.ndata[G.SPAN].tolist() == [[0, 3], [0, 2], [0, 1], [1, 2], [2, 3]]
    assert g.ndata[G.ROOT].tolist() == [True, False, False, False, False]
    assert g.ndata[G.LEAF].tolist() == [False, False, True, True, True]
    src, dst = g.edges()
    pos = dict(zip(src.tolist(), g.edata[G.POS].tolist()))
    assert pos == {1: 0, 4: 1, 2: 0, 3: 1}  # left child 0, right child 1


def test_adapted_trees_run_through_a_binary_cell():
    g = dgl.batch([from_dgl_sst(dgl_sst_tree())] * 2)
    cell = build_cell("nary", 4, 3)
    h, c = cell(g, torch.randn(g.num_nodes(), 4))
    assert h.shape == (10, 3)


def test_bad_graphs_are_refused():
    g = dgl_sst_tree()
    del g.ndata["mask"]
    with pytest.raises(ValueError, match=r"no node field\(s\) \['mask'\]"):
        from_dgl_sst(g)
    g = dgl.add_edges(dgl_sst_tree(), [2], [4])
    with pytest.raises(ValueError, match="node 2 has two parents"):
        from_dgl_sst(g)
    with pytest.raises(ValueError, match="ids must be 0..V-1"):
        vocab_from_dgl_sst({"a": 0, "b": 2})
