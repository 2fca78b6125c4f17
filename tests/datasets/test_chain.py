import dgl
import pytest

from gnn_treelstm.datasets.chain import chain_graph, chain_parents, chain_spans, word_chains
from gnn_treelstm.trees.graph import NO_WORD, WORD, make_tree, topological_levels, validate_tree


def test_chain_forward():
    g = chain_graph([4, 5, 6])
    validate_tree(g, max_children=1)
    assert [x.tolist() for x in g.edges()] == [[0, 1], [1, 2]]
    assert g.ndata["root"].tolist() == [False, False, True]
    assert g.ndata["word"].tolist() == [4, 5, 6]
    assert g.ndata["span"].tolist() == [[0, 1], [0, 2], [0, 3]]
    assert topological_levels(g).tolist() == [0, 1, 2]


def test_chain_reverse_matches_dgl_reverse():
    g = chain_graph([4, 5, 6], reverse=True)
    assert g.ndata["root"].tolist() == [True, False, False]
    r = dgl.reverse(chain_graph([4, 5, 6]))
    assert sorted(zip(*(x.tolist() for x in g.edges()))) == \
        sorted(zip(*(x.tolist() for x in r.edges())))
    assert chain_spans(3, reverse=True) == [(0, 3), (1, 3), (2, 3)]


def test_single_and_empty():
    assert chain_parents(1) == [-1]
    with pytest.raises(ValueError, match="empty"):
        chain_parents(0)


def test_word_chains_take_each_trees_words_in_node_order():
    # a binary tree: words 7, 8 on leaves 0, 1, word 9 on leaf 3; nodes 2 and 4 wordless
    tree = make_tree([2, 2, 4, 4, -1], [7, 8, NO_WORD, 9, NO_WORD])
    (chain,) = word_chains([tree])
    assert chain.ndata[WORD].tolist() == [7, 8, 9]
    src, dst = chain.edges()
    assert (src.tolist(), dst.tolist()) == ([0, 1], [1, 2])  # word i -> word i + 1
    assert chain.ndata[WORD].tolist() == chain_graph([7, 8, 9]).ndata[WORD].tolist()
