"""The graph schema: make_tree, validation, levels, batch helpers."""

import random
import re
from pathlib import Path

import dgl
import numpy as np
import pytest
import torch

from gnn_treelstm.trees import graph as G
from tests.handbuilt import random_batch, random_dependency_tree


def small():
    #      4
    #    /   \
    #   0     3
    #        / \
    #       1   2
    return G.make_tree([4, 3, 3, 4, -1], [10, 11, 12, G.NO_WORD, G.NO_WORD],
                       labels=[1, 2, 3, 4, 0], rels=[0, 0, 1, 1, 0],
                       spans=[[0, 1], [1, 2], [2, 3], [1, 3], [0, 3]])


def test_edges_point_child_to_parent_with_positions():
    g = small()
    src, dst = g.edges()
    pairs = sorted(zip(src.tolist(), dst.tolist(), g.edata[G.POS].tolist()))
    assert pairs == [(0, 4, 0), (1, 3, 0), (2, 3, 1), (3, 4, 1)]
    assert g.ndata[G.LEAF].tolist() == [True, True, True, False, False]
    assert g.ndata[G.ROOT].tolist() == [False, False, False, False, True]
    assert g.ndata[G.SPAN][3].tolist() == [1, 3]
    assert G.topological_levels(g).tolist() == [0, 0, 0, 1, 2]


def test_explicit_positions_are_kept_not_edge_order():
    g = G.make_tree([2, 2, -1], [1, 2, G.NO_WORD], positions=[1, 0, 0])
    assert dict(zip(g.edges()[0].tolist(), g.edata[G.POS].tolist())) == {0: 1, 1: 0}


@pytest.mark.parametrize(
    "parents, match",
    [([], "empty"), ([-1, -1], "exactly one root"), ([1, 2, 0], "exactly one root"),
     ([-1, 5], "invalid parent"), ([-1, 1], "invalid parent")],
)
def test_make_tree_rejects_bad_parents(parents, match):
    with pytest.raises(ValueError, match=match):
        G.make_tree(parents, [0] * len(parents))


def test_make_tree_rejects_cycle_and_bad_lengths():
    with pytest.raises(ValueError, match="cycle"):
        G.make_tree([-1, 2, 1], [0, 0, 0])
    with pytest.raises(ValueError, match="words has 2 entries"):
        G.make_tree([-1, 0, 0], [0, 0])
    with pytest.raises(ValueError, match="duplicate"):
        G.make_tree([2, 2, -1], [0, 0, 0], positions=[0, 0, 0])


def test_validate_tree_errors_name_the_fix():
    g = small()
    with pytest.raises(ValueError, match="2 children but the cell is 1-ary"):
        G.validate_tree(g, max_children=1)
    with pytest.raises(ValueError, match="num_relations=1"):
        G.validate_tree(g, edge_fields=(G.REL,), num_relations=1)
    bare = dgl.graph(([0], [1]))
    with pytest.raises(ValueError, match="no edge field 'pos'"):
        G.validate_tree(bare, fields=(G.POS,))
    cyc = dgl.graph(([0, 1, 2], [1, 2, 0]))
    cyc.edata[G.POS] = torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match="cycle"):
        G.validate_tree(cyc)
    two_parents = dgl.graph(([0, 0, 1, 2], [3, 4, 3, 3]))
    two_parents.edata[G.POS] = torch.tensor([0, 0, 1, 2])
    with pytest.raises(ValueError, match="node 0 has 2 outgoing edges: a node has more than one"):
        G.validate_tree(two_parents)
    G.validate_tree(g, edge_fields=(G.REL, G.POS), max_children=2, num_relations=2)


def test_levels_match_a_naive_recursion():
    rng = random.Random(3)
    for _ in range(10):
        g = random_dependency_tree(rng, rng.randint(1, 15))
        src, dst = (t.tolist() for t in g.edges())
        kids = {i: [] for i in range(g.num_nodes())}
        for s, d in zip(src, dst):
            kids[d].append(s)

        def level(n, kids=kids):
            return 0 if not kids[n] else 1 + max(level(k) for k in kids[n])

        assert G.topological_levels(g).tolist() == [level(i) for i in range(g.num_nodes())]


def test_batch_roots_and_leaves():
    graphs = random_batch(seed=1, count=7)
    b = dgl.batch(graphs)
    roots = G.batch_roots(b)
    offsets = np.cumsum([0] + [g.num_nodes() for g in graphs])
    expected = [int(o + torch.nonzero(g.ndata[G.ROOT])[0]) for o, g in zip(offsets, graphs)]
    assert roots.tolist() == expected
    leaves, owner = G.batch_leaves(b)
    assert len(leaves) == sum(int(g.ndata[G.LEAF].sum()) for g in graphs)
    assert all(offsets[o] <= leaf < offsets[o + 1]
               for leaf, o in zip(leaves.tolist(), owner.tolist()))
    forest = dgl.graph(([0], [1]), num_nodes=3)
    with pytest.raises(ValueError, match="2 graphs has 3 roots"):
        G.batch_roots(dgl.batch([forest, dgl.graph(([0], [1]))]))


def test_batch_roots_finds_the_roots_of_a_graph_of_several_trees_by_structure():
    from gnn_treelstm.cells import build_cell

    forest = dgl.graph(([0, 1, 3], [2, 2, 4]), num_nodes=6)  # trees at 2, 4 and 5
    assert forest.batch_size == 1
    assert G.batch_roots(forest).tolist() == [2, 4, 5]
    G.validate_tree(forest)
    h, _ = build_cell("childsum", 4, 3)(forest, torch.randn(6, 4))  # as the cells accept it
    assert h[G.batch_roots(forest)].shape == (3, 3)


@pytest.mark.parametrize("kw, match", [
    ({"parents": [1, -1], "words": [1, 2], "rels": [1.7, 0]}, r"rels must be integers, got 1.7"),
    ({"parents": [2.9, 2, -1], "words": [1, 2, 3]}, r"parents must be integers, got 2.9"),
    ({"parents": [1, -1], "words": ["a", "b"]}, r"words must be integers, got 'a'.*vocabulary"),
    ({"parents": [1, -1], "words": [1, 2], "labels": [0.5, 1]}, "labels must be integers"),
    ({"parents": [1, -1], "words": [1, 2], "rels": [-3, 0]}, "node 0 has relation id -3"),
])
def test_make_tree_refuses_non_integer_ids_instead_of_truncating(kw, match):
    with pytest.raises(ValueError, match=match):
        G.make_tree(**kw)


def test_make_tree_ignores_the_roots_relation_entry():
    g = G.make_tree([1, -1], [1, 2], rels=[4, -1])
    assert g.edata[G.REL].tolist() == [4]


# ------------------------------------------------------------------ edge direction
DOCS = (Path(__file__).resolve().parents[2] / "docs" / "trees.md").read_text()

#: graph -> the beginning of its message (docs/trees.md, "Edge direction", shows the same)
REVERSED_TREE = ("edges must point child -> parent; this graph looks reversed: node 0 has 3 "
                 "outgoing edges and no incoming")
SELF_LOOPS = "every node has an edge to itself, as dgl.add_self_loop adds"
BOTH_WAYS = "nodes 0 and 3 are joined by edges both ways (a cycle of two)"
MARKED_ROOT = "this graph looks reversed: node 4 is marked root (ndata['root'])"


def _star():
    """Node 0 is the root of three leaves."""
    return G.make_tree([-1, 0, 0, 0], [1, 2, 3, 4])


def _reversed(g):
    return dgl.reverse(g, copy_ndata=True, copy_edata=True)


def _cases():
    return {
        "reversed tree": (_reversed(_star()), REVERSED_TREE),
        "dgl.add_self_loop": (dgl.add_self_loop(G.make_tree([3, 3, 3, -1], [1, 2, 3, 4])),
                              SELF_LOOPS),
        "dgl.add_reverse_edges": (dgl.add_reverse_edges(
            G.make_tree([3, 3, 3, -1], [1, 2, 3, 4]), copy_edata=True), BOTH_WAYS),
        "reversed chain, marked": (_reversed(G.make_tree([1, 2, 3, 4, -1], [1, 2, 3, 4, 5])),
                                   MARKED_ROOT),
    }


@pytest.mark.parametrize("case", ["reversed tree", "dgl.add_self_loop",
                                  "dgl.add_reverse_edges", "reversed chain, marked"])
def test_direction_mistakes_get_their_own_message(case):
    g, message = _cases()[case]
    with pytest.raises(ValueError) as err:
        G.validate_tree(g)
    assert message in str(err.value)
    assert "more than one parent" not in str(err.value)
    assert message in DOCS, f"docs/trees.md does not show {message!r}"


@pytest.mark.parametrize("engine", ["dgl", "level"])
@pytest.mark.parametrize("name", ["childsum", "nary", "lstm"])
def test_cells_name_a_reversed_tree_and_self_loops(name, engine):
    """Each mistake reaches its own message through a cell, before the cell's own checks
    (N-ary's n_ary, the chain's one child per node)."""
    from gnn_treelstm.cells import build_cell

    cell = build_cell(name, 4, 3, engine=engine)
    for case in ("reversed tree", "dgl.add_self_loop"):
        g, message = _cases()[case]
        with pytest.raises(ValueError, match=re.escape(message)):
            cell(g, torch.randn(g.num_nodes(), 4))


def test_a_marked_leaf_with_an_incoming_edge_is_named():
    g = _reversed(G.make_tree([1, 2, 3, 4, -1], [1, 2, 3, 4, 5]))
    del g.ndata[G.ROOT]
    with pytest.raises(ValueError, match=re.escape(
            "looks reversed: node 0 is marked leaf (ndata['leaf']) but has 1 incoming edge")):
        G.validate_tree(g)


def test_marks_that_disagree_with_the_edges_are_named():
    g = G.make_tree([1, 2, -1], [1, 2, 3])
    g.ndata[G.ROOT] = torch.tensor([False, True, False])
    with pytest.raises(ValueError, match="node 1 is marked root .* the marks do not match"):
        G.validate_tree(g)


def test_a_bare_reversed_chain_is_taken_as_given():
    """Without marks a chain's direction cannot be told from its shape (docs/trees.md)."""
    g = _reversed(G.make_tree([1, 2, -1], [1, 2, 3]))
    for field in (G.ROOT, G.LEAF):
        del g.ndata[field]
    G.validate_tree(g)
    assert "taken as given" in DOCS


def test_make_tree_graphs_pass_the_direction_check():
    rng = random.Random(3)
    for _ in range(20):
        G.check_direction(random_dependency_tree(rng, rng.randint(1, 9)))
    G.check_direction(dgl.batch(random_batch(2, 8)))


def test_validate_tree_checks_the_structure_always_and_a_field_when_asked():
    from gnn_treelstm.cells import build_cell

    bare = dgl.graph(([1, 2], [0, 0]))  # a valid tree of dgl.graph, no fields
    G.validate_tree(bare)
    build_cell("childsum", 4, 3)(bare, torch.randn(3, 4))  # which Child-Sum accepts
    with pytest.raises(ValueError) as err:
        G.validate_tree(bare, fields=(G.POS, G.WORD))
    assert str(err.value).startswith(
        "validate_tree: graph has no edge field 'pos', which fields= asks for; set ")
    bare.edata[G.POS] = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="^validate_tree: graph has no node field 'word'"):
        G.validate_tree(bare, fields=(G.POS, G.WORD))
    G.validate_tree(bare, fields=build_cell("nary", 4, 3).edge_fields)
    with pytest.raises(ValueError, match="'heads', not a field of the schema"):
        G.validate_tree(bare, fields=("heads",))
    G.validate_tree(bare, edge_fields=(G.POS,))


@pytest.mark.parametrize("fields", [(), (G.POS,), (G.REL, G.WORD)])
def test_a_reversed_graph_without_fields_is_named_reversed(fields):
    g = dgl.graph(([0, 0], [1, 2]))  # the tree above, parent -> child
    with pytest.raises(ValueError) as err:
        G.validate_tree(g, fields=fields)
    msg = str(err.value)
    assert msg.startswith("validate_tree: edges must point child -> parent; this graph looks "
                          "reversed: node 0 has 2 outgoing edges and no incoming")
    assert "cell" not in msg


def test_no_cell_is_named_where_none_is_involved():
    cases = [dgl.graph(([0, 1, 2], [1, 2, 0])), dgl.graph(([0, 0, 1], [1, 1, 2])),
             dgl.graph(([0, 1], [0, 2])), dgl.add_reverse_edges(dgl.graph(([1], [0])))]
    for g in cases:
        with pytest.raises(ValueError) as err:
            G.validate_tree(g)
        assert str(err.value).startswith("validate_tree: ") and "cell:" not in str(err.value)
    with pytest.raises(ValueError, match="^check_direction: "):
        G.check_direction(cases[-1])


@pytest.mark.parametrize("name", ["lex", "topdown", "bitree"])
def test_binary_cells_do_not_suggest_an_option_they_lack(name):
    from gnn_treelstm.cells import build_cell

    three = G.make_tree([3, 3, 3, -1], [0, 1, 2, 3])  # a node with 3 children
    cell = build_cell(name, 4, 3)
    with pytest.raises(ValueError) as err:
        cell(three, torch.randn(4, 4))
    msg = str(err.value)
    assert "3 children but the cell is 2-ary" in msg
    assert "larger n_ary" not in msg and "n_ary=" not in msg
    wide = G.make_tree([2, 2, -1], [0, 1, 2], positions=[0, 2, 0])  # position 2 of 2 children
    with pytest.raises(ValueError) as err:
        cell(wide, torch.randn(3, 4))
    assert "child position 2" in str(err.value) and "n_ary" not in str(err.value)


def test_reversed_edges_from_the_parents_are_the_set_lookups():
    """The both-ways check reads each node's one parent where no node has two outgoing
    edges, and falls back to a lookup of the reversed pairs where one has: the same edges
    either way, on forests, forests with one or more edges reversed beside them, and
    graphs with nodes of several parents."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(2, 40))
        parent = [int(rng.integers(0, i)) if i else -1 for i in range(n)]
        src = np.arange(1, n)
        dst = np.array(parent[1:], dtype=np.int64)
        extra = rng.integers(0, n - 1, size=int(rng.integers(0, 4)))
        src = np.concatenate([src, dst[extra] if trial % 2 else rng.integers(0, n, len(extra))])
        dst = np.concatenate([dst, src[extra]])
        keep = src != dst
        src, dst = src[keep], dst[keep]
        want = np.isin(dst * n + src, src * n + dst)
        assert np.array_equal(G._reversed_edges(n, src, dst), want), trial


def test_two_nodes_each_others_parent_are_named():
    """Edges 0 -> 1 and 1 -> 0: one outgoing edge each, found from the parents."""
    g = dgl.graph((torch.tensor([0, 1, 2]), torch.tensor([1, 0, 1])), num_nodes=3)
    with pytest.raises(ValueError, match="nodes 0 and 1 are joined by edges both ways"):
        G.validate_tree(g)


def test_distinct_positions_are_checked_where_asked():
    g = G.make_tree([2, 2, -1], [1, 2, 3])
    g.edata[G.POS] = torch.tensor([0, 0])
    G.validate_tree(g, max_children=2)  # not asked: positions may repeat
    with pytest.raises(ValueError, match="two children of one node share a child position"):
        G.validate_tree(g, max_children=2, distinct_positions=True)
    g.edata[G.POS] = torch.tensor([1, 0])
    G.validate_tree(g, max_children=2, distinct_positions=True)
    g.edata[G.POS] = torch.tensor([-1, 0])
    with pytest.raises(ValueError, match="negative child position -1"):
        G.validate_tree(g, distinct_positions=True)


def test_host_edges_are_the_graphs_and_follow_its_edges():
    """Read once per graph structure, read-only; edges added in place (DGL replaces the
    structure object) are read again."""
    g = G.make_tree([2, 2, -1], [1, 2, 3])
    src, dst = G.host_edges(g)
    want = [t.numpy() for t in g.edges()]
    assert np.array_equal(src, want[0]) and np.array_equal(dst, want[1])
    assert G.host_edges(g)[0] is src  # remembered
    with pytest.raises(ValueError, match="read-only"):
        src[0] = 1
    g.add_nodes(1)
    g.add_edges(torch.tensor([3]), torch.tensor([2]))
    src2, dst2 = G.host_edges(g)
    assert src2.tolist() == [0, 1, 3] and dst2.tolist() == [2, 2, 2]
    for _ in range(6):  # the last four structures are remembered, no more
        G.host_edges(G.make_tree([1, -1], [1, 2]))
    assert len(G._HOST_EDGES) == 4


def test_a_proven_forest_skips_the_proofs_and_keeps_the_other_checks(monkeypatch):
    """A graph whose maker proved its edges a forest (``remember_edges(forest=True)``) is
    not proven again (no parent, direction or cycle proof runs), and its marks, children
    per node, positions and fields are checked as for any graph; an unproven graph runs
    the proofs."""
    g = G.make_tree([2, 2, -1], [1, 2, -1])
    proofs = []
    for name in ("_reversed_edges", "_check_forest_acyclic", "_check_direction"):
        real = getattr(G, name)
        monkeypatch.setattr(G, name, lambda *a, real=real, name=name: (proofs.append(name),
                                                                        real(*a))[1])
    G.validate_tree(g)
    assert set(proofs) == {"_reversed_edges", "_check_forest_acyclic", "_check_direction"}
    proofs.clear()
    with pytest.raises(ValueError, match="src must be the graph's 2 edges as an int64 CPU "
                                         "tensor, got torch.int32"):
        G.remember_edges(g, g.edges()[0].int(), g.edges()[1], forest=True)
    with pytest.raises(ValueError, match="dst must be the graph's 2 edges"):
        G.remember_edges(g, g.edges()[0], g.edges()[1][:1], forest=True)
    assert not G.made_forest(g)
    G.remember_edges(g, *g.edges(), forest=True)
    assert G.made_forest(g)
    G.validate_tree(g, max_children=2, distinct_positions=True, fields=("word",))
    assert proofs == []
    with pytest.raises(ValueError, match="node 2 has 2 children but the cell is 1-ary"):
        G.validate_tree(g, max_children=1)
    with pytest.raises(ValueError, match="no edge field 'kind'"):
        G.validate_tree(g, edge_fields=("kind",))
    g.edata[G.POS] = torch.tensor([0, 0])
    with pytest.raises(ValueError, match="share a child position"):
        G.validate_tree(g, distinct_positions=True)
    g.edata[G.POS] = torch.tensor([0.0, 1.0])
    with pytest.raises(ValueError, match="1-d integer tensor of child positions"):
        G.validate_tree(g, max_children=2)
    g.edata[G.POS] = torch.tensor([0, 1])
    g.ndata[G.LEAF] = torch.tensor([True, True, True])
    with pytest.raises(ValueError, match="node 2 is marked leaf"):
        G.validate_tree(g)
    assert proofs == []
