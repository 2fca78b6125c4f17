"""LevelSchedule: frontiers, gather/scatter indices, padded slots, top-down levels."""

from __future__ import annotations

import random

import dgl
import numpy as np
import pytest
import torch

from gnn_treelstm.trees.graph import make_tree, topological_levels
from gnn_treelstm.trees.schedule import LevelSchedule
from tests.handbuilt import chain, random_batch, random_dependency_tree


def _batches():
    rng = random.Random(3)
    yield dgl.batch(random_batch(0, 20, max_children=2, exact_children=True, words="leaves"))
    yield dgl.batch(random_batch(1, 20, max_children=4))
    yield dgl.batch([random_dependency_tree(rng, rng.randint(1, 25)) for _ in range(20)])
    yield dgl.batch([chain(n, seed=n) for n in (1, 2, 7, 30)])


def _depth_of(g: dgl.DGLGraph) -> np.ndarray:
    src, dst = (t.numpy() for t in g.edges())
    par = np.full(g.num_nodes(), -1)
    par[src] = dst
    out = np.zeros(g.num_nodes(), dtype=np.int64)
    for v in range(g.num_nodes()):
        u = v
        while par[u] >= 0:
            out[v] += 1
            u = par[u]
    return out


@pytest.mark.parametrize("g", list(_batches()))
def test_up_levels_match_prop_nodes_topo_frontiers(g):
    s = LevelSchedule.from_graph(g)
    up = s.up
    lv = topological_levels(g)
    order, rank = up.order.numpy(), up.rank.numpy()
    assert sorted(order.tolist()) == list(range(g.num_nodes()))
    assert (rank[order] == np.arange(g.num_nodes())).all()
    assert up.num_levels == lv.max() + 1
    for level in range(up.num_levels):
        a, b = up.level_nodes(level)
        assert sorted(order[a:b].tolist()) == np.flatnonzero(lv == level).tolist()
    # level 0 holds exactly the leaves
    a, b = up.level_nodes(0)
    assert sorted(order[a:b].tolist()) == torch.nonzero(g.in_degrees() == 0).flatten().tolist()


@pytest.mark.parametrize("g", list(_batches()))
def test_up_edges_gather_scatter_and_slots(g):
    s = LevelSchedule.from_graph(g)
    up = s.up
    order = up.order.numpy()
    src, dst = (t.numpy() for t in g.edges())
    pos, rel = g.edata["pos"].numpy(), g.edata["rel"].numpy()
    assert up.edge_src.shape[0] == g.num_edges()
    seen = set()
    for level in range(up.num_levels):
        a, b = up.level_nodes(level)
        ea, eb = up.level_edges(level)
        for k in range(ea, eb):
            e = int(up.edge_id[k])
            seen.add(e)
            assert order[int(up.edge_src[k])] == src[e]  # child row
            assert order[int(up.edge_dst[k])] == dst[e]  # parent row
            assert a <= int(up.edge_dst[k]) < b  # parent in this level
            assert int(up.edge_src[k]) < a  # child in an earlier level
            assert int(up.edge_seg[k]) == int(up.edge_dst[k]) - a
            assert int(up.edge_pos[k]) == pos[e] and int(up.edge_rel[k]) == rel[e]
    assert seen == set(range(g.num_edges()))
    # edges of a parent are contiguous and ordered by position
    d, p = up.edge_dst.numpy(), up.edge_pos.numpy()
    assert (np.diff(d) >= 0).all()
    same = np.diff(d) == 0
    assert (np.diff(p)[same] > 0).all()
    # padded slots: child of position k in column k, padding = N
    n = g.num_nodes()
    width = int(pos.max()) + 1 if g.num_edges() else 1
    assert up.width == width
    expect = np.full((n, width), n)
    r = up.rank.numpy()
    expect[r[dst], pos] = r[src]
    assert (up.slots.numpy() == expect).all()
    assert (up.slot_mask.numpy() == (expect != n)).all()


@pytest.mark.parametrize("g", list(_batches()))
def test_down_levels_are_depths_and_read_the_parent(g):
    s = LevelSchedule.from_graph(g)
    down = s.down
    depth = _depth_of(g)
    order = down.order.numpy()
    assert down.num_levels == depth.max() + 1
    for level in range(down.num_levels):
        a, b = down.level_nodes(level)
        assert sorted(order[a:b].tolist()) == np.flatnonzero(depth == level).tolist()
    a, b = down.level_nodes(0)
    assert (g.out_degrees()[torch.as_tensor(order[a:b])] == 0).all()  # roots
    src, dst = (t.numpy() for t in g.edges())
    for k in range(down.edge_src.shape[0]):
        e = int(down.edge_id[k])
        assert order[int(down.edge_src[k])] == dst[e]  # reads the parent
        assert order[int(down.edge_dst[k])] == src[e]  # computes the child
    assert down.width == 1
    n = g.num_nodes()
    assert (down.slots[:, 0][down.slot_mask[:, 0]] < n).all()
    assert int((~down.slot_mask[:, 0]).sum()) == g.batch_size  # the roots have no parent


def test_no_binary_or_depth_assumption():
    # fan-out 40 (positions 0..39) and a chain of depth 300 in one batch
    star = make_tree([40] * 40 + [-1], list(range(41)))
    deep = chain(300)
    g = dgl.batch([star, deep])
    s = LevelSchedule.from_graph(g)
    assert s.up.width == 40
    assert s.up.num_levels == 300
    assert s.down.num_levels == 300
    a, b = s.up.level_nodes(1)
    assert b - a == 2  # the star's root and the chain's second node


def test_positions_with_gaps_keep_their_columns():
    # node 2 has only one child, at position 1: it must sit in column 1, column 0 is padding
    g = make_tree([2, 2, -1], [0, 1, -1], positions=[0, 1, 0])
    g2 = make_tree([1, -1], [0, -1], positions=[1, 0])
    s = LevelSchedule.from_graph(dgl.batch([g, g2]))
    n = 5
    slots = s.up.slots.numpy()
    row = s.up.rank.numpy()[4]  # root of g2
    assert slots[row].tolist() == [n, s.up.rank.numpy()[3]]


def test_single_nodes_and_without_top_down():
    g = dgl.batch([make_tree([-1], [0]) for _ in range(3)])
    s = LevelSchedule.from_graph(g, top_down=False)
    assert s.down is None and s.up.num_levels == 1 and s.up.edge_src.numel() == 0
    with pytest.raises(ValueError, match="top_down=True"):
        s.require_down()


def test_bad_graphs_raise():
    two_parents = dgl.graph((torch.tensor([0, 0]), torch.tensor([1, 2])), num_nodes=3)
    with pytest.raises(ValueError, match="more than one parent"):
        LevelSchedule.from_graph(two_parents)
    cycle = dgl.graph((torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 0])), num_nodes=5)
    with pytest.raises(ValueError, match="cycle"):
        LevelSchedule.from_graph(cycle)
    loop = dgl.graph((torch.tensor([0]), torch.tensor([0])), num_nodes=2)
    with pytest.raises(ValueError, match="own parent"):
        LevelSchedule.from_graph(loop)


def test_to_moves_index_tensors_only():
    s = LevelSchedule.from_graph(dgl.batch(random_batch(0, 5)))
    t = s.to("cpu")
    assert t.up.node_offsets == s.up.node_offsets
    assert isinstance(t.up.node_offsets[0], int)
    assert torch.equal(t.up.edge_src, s.up.edge_src)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_to_cuda():
    s = LevelSchedule.from_graph(dgl.batch(random_batch(0, 5))).pin_memory().to("cuda")
    assert s.up.edge_src.is_cuda and s.down.slots.is_cuda
    assert isinstance(s.up.node_offsets[-1], int)


def test_word_ids_sorted_leaves_first():
    g = dgl.batch(random_batch(2, 10, max_children=2, words="all"))
    s = LevelSchedule.from_graph(g)
    words = torch.nonzero(g.ndata["word"] != -1).flatten()
    assert sorted(s.word_ids.tolist()) == words.tolist()
    rows = s.up.rank[s.word_ids]
    assert (rows.diff() > 0).all()
    leaves = set(torch.nonzero(g.in_degrees() == 0).flatten().tolist())
    m0 = s.num_leaf_words
    assert set(s.word_ids[:m0].tolist()) == leaves
    assert not set(s.word_ids[m0:].tolist()) & leaves
