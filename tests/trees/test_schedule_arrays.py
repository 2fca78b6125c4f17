"""The level schedule ``collate`` builds from the packed trees' arrays
(:func:`gnn_treelstm.trees.packed.batch_trees`, :meth:`LevelSchedule.from_arrays`) is the
schedule the graph-reading version of ``LevelSchedule.from_graph`` computed before it
(kept below as the reference: per-depth height passes, a lexicographic edge sort), for
every batch of the SST, SICK, TREC and AMR samples (and of the real data where it is
present); a pair batch is one graph, A sentences then B sentences, equal to ``dgl.batch``
of the same trees. The checks run with both builds of a schedule (``builder``): the C++
routine the data loader passes to ``collate`` where the native library is
(``csrc/schedule.cpp``) and the numpy one."""

from __future__ import annotations

import os

import dgl
import numpy as np
import pytest
import torch

from gnn_treelstm.datasets.build import build
from gnn_treelstm.kernels import native
from gnn_treelstm.trees import graph as G
from gnn_treelstm.trees.data import TreeDataset, collate, label_order, load_meta, load_split
from gnn_treelstm.trees.graph import make_tree
from gnn_treelstm.trees.packed import PackedTrees, batch_trees, pack_graphs
from gnn_treelstm.trees.schedule import LevelSchedule
from tests.trees.test_packed import assert_graphs_equal, assert_schedules_equal


@pytest.fixture(params=["native", "numpy"])
def builder(request):
    """The schedule built by the C++ routine the data loader passes to ``collate``, then by
    numpy (``builder=None``)."""
    if request.param == "numpy":
        return None
    made = native.batch_builder()
    if made is None:
        pytest.skip("the native library is not available here (no C++ compiler?)")
    return made


def _ref_depths(par: np.ndarray) -> np.ndarray:
    n = len(par)
    idx = np.arange(n, dtype=np.int64)
    has = par >= 0
    anc = np.where(has, par, idx)
    depth = has.astype(np.int64)
    for _ in range(max(1, int(n).bit_length()) + 1):
        nxt = anc[anc]
        if np.array_equal(nxt, anc):
            break
        depth = depth + depth[anc]
        anc = nxt
    return depth


def _ref_heights(par: np.ndarray, depth: np.ndarray) -> np.ndarray:
    height = np.zeros(len(par), dtype=np.int64)
    for d in range(int(depth.max(initial=0)), 0, -1):
        v = np.flatnonzero(depth == d)
        np.maximum.at(height, par[v], height[v] + 1)
    return height


def _ref_levels(direction, n, level, read, comp, rel, pos) -> dict:
    order = np.argsort(level, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    num_levels = int(level.max()) + 1 if n else 0
    node_offsets = np.zeros(num_levels + 1, dtype=np.int64)
    np.cumsum(np.bincount(level, minlength=num_levels), out=node_offsets[1:])
    comp_r = rank[comp]
    eorder = np.lexsort((pos, comp_r))
    e_dst, e_src, e_pos = comp_r[eorder], rank[read][eorder], pos[eorder]
    e_level = level[comp][eorder]
    edge_offsets = np.searchsorted(e_level, np.arange(num_levels + 1), side="left")
    width = (int(e_pos.max()) + 1) if len(e_pos) and direction == "up" else 1
    slots = np.full((n, width), n, dtype=np.int64)
    slots[e_dst, e_pos if direction == "up" else 0] = e_src
    return {"node_offsets": node_offsets.tolist(), "edge_offsets": edge_offsets.tolist(),
            "order": order, "rank": rank, "edge_src": e_src, "edge_dst": e_dst,
            "edge_seg": e_dst - node_offsets[e_level], "edge_rel": rel[eorder],
            "edge_pos": e_pos, "edge_id": eorder, "slots": slots, "slot_mask": slots != n}


def reference(g: dgl.DGLGraph) -> dict:
    """The schedule of ``g`` as the graph-reading ``from_graph`` computed it."""
    n = g.num_nodes()
    src, dst = (t.numpy().astype(np.int64) for t in g.edges())
    e = len(src)
    zeros = np.zeros(e, dtype=np.int64)
    rel = g.edata[G.REL].numpy().astype(np.int64) if e and G.REL in g.edata else zeros
    pos = g.edata[G.POS].numpy().astype(np.int64) if e and G.POS in g.edata else zeros
    par = np.full(n, -1, dtype=np.int64)
    par[src] = dst
    depth = _ref_depths(par)
    up = _ref_levels("up", n, _ref_heights(par, depth), src, dst, rel, pos)
    down = _ref_levels("down", n, depth, dst, src, rel, pos)
    has_word = g.ndata[G.WORD].numpy() != G.NO_WORD
    rows = np.sort(up["rank"][has_word])
    return {"up": up, "down": down, "word_ids": up["order"][rows],
            "num_leaf_words": int(np.searchsorted(rows, up["node_offsets"][1] if n else 0)),
            "contiguous": len(rows) == 0 or int(rows[-1]) == len(rows) - 1,
            "num_nodes": n, "batch_size": int(g.batch_size),
            "roots": np.flatnonzero(g.out_degrees().numpy() == 0)}


def assert_same(s: LevelSchedule, ref: dict) -> None:
    assert (s.num_nodes, s.batch_size) == (ref["num_nodes"], ref["batch_size"])
    for name in ("up", "down"):
        lv, want = getattr(s, name), ref[name]
        for key, value in want.items():
            got = getattr(lv, key)
            if isinstance(value, list):
                assert got == value, (name, key)
            else:
                assert got.dtype == torch.from_numpy(np.asarray(value)).dtype, (name, key)
                assert np.array_equal(got.numpy(), value), (name, key)
    assert np.array_equal(s.word_ids.numpy(), ref["word_ids"])
    assert s.num_leaf_words == ref["num_leaf_words"]
    assert s.word_rows_contiguous == ref["contiguous"]
    assert s.roots.dtype == torch.int64 and np.array_equal(s.roots.numpy(), ref["roots"])
    assert_next_edges(s)


def assert_next_edges(s: LevelSchedule) -> None:
    """The up levels' edge to each row's parent and first edge into each row are those of
    the edge arrays (as the level kernels computed them on every step); none for down."""
    up, n = s.up, s.num_nodes
    e = len(up.edge_src)
    par = torch.full((n,), n, dtype=torch.int64).index_put_((up.edge_src,), up.edge_dst)
    pos = torch.zeros(n, dtype=torch.int64).index_put_((up.edge_src,), up.edge_pos)
    pe = torch.full((n,), e, dtype=torch.int64).index_put_((up.edge_src,), torch.arange(e))
    assert torch.equal(up.next_row, par) and torch.equal(up.next_pos, pos)
    assert torch.equal(up.next_edge, pe)
    assert torch.equal(up.edge_start, torch.searchsorted(up.edge_dst, torch.arange(n + 1)))
    assert s.down is None or s.down.next_row is None and s.down.edge_start is None


def check_every_batch(data_dir, tree: str, batch_size: int = 25,
                      splits: tuple[str, ...] | None = None, builder=None) -> int:
    """Every batch of every split (or of ``splits``; shuffled order): collate's schedule
    equals the reference of ``dgl.batch`` of the same trees, and so do its graph and label
    order."""
    checked = 0
    for split in splits or load_meta(data_dir)["splits"]:
        sp = load_split(data_dir, split, tree)
        ds = TreeDataset(sp)
        order = torch.randperm(len(sp), generator=torch.Generator().manual_seed(1)).tolist()
        for lo in range(0, len(order), batch_size):
            pick = order[lo:lo + batch_size]
            batch = collate(ds.__getitems__(pick), schedule=True, builder=builder)
            trees = [sp.graphs[i] for i in pick]
            if sp.graphs_b is not None:
                trees += [sp.graphs_b[i] for i in pick]
                assert batch.num_a == len(pick) and batch.graph_b is None
            ready = dgl.batch(trees)
            assert_graphs_equal(batch.graph, ready)
            labels = ready.ndata.get(G.LABEL)
            assert (batch.label_order is None) == (labels is None)
            if labels is not None:
                assert torch.equal(batch.label_order, label_order(labels))
            assert_same(batch.schedule, reference(ready))
            assert_same(LevelSchedule.from_graph(ready), reference(ready))
            checked += 1
    return checked


# ----------------------------------------------------------------- the samples


@pytest.fixture(scope="module")
def samples(sample_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("sched")
    build("sst", sample_data, root / "sst", trees=["constituency", "chain"])
    build("sick", sample_data, root / "sick", trees=["dependency", "constituency"])
    build("trec", sample_data, root / "trec", trees=["chain"])
    build("jsonl", [sample_data / "sick_amr"], root / "amr", trees=["amr"])
    return root


@pytest.mark.parametrize("name, tree", [
    ("sst", "constituency"), ("sst", "chain"), ("sick", "dependency"),
    ("sick", "constituency"), ("trec", "chain"), ("amr", "amr")])
def test_every_sample_batch_has_the_reference_schedule(samples, name, tree, builder):
    assert check_every_batch(samples / name, tree, builder=builder) > 0


def test_small_and_single_tree_batches(samples, builder):
    sp = load_split(samples / "sick", "dev", "dependency")
    ds = TreeDataset(sp)
    for pick in ([0], [3, 1], list(range(7))):
        batch = collate(ds.__getitems__(pick), schedule=True, top_down=False, builder=builder)
        assert batch.schedule.down is None
        ref = reference(dgl.batch([sp.graphs[i] for i in pick] + [sp.graphs_b[i] for i in pick]))
        ref_up = {**ref, "down": {}}
        assert_same(batch.schedule, ref_up)


def test_from_arrays_refuses_what_from_graph_refuses():
    with pytest.raises(ValueError, match="more than one parent"):
        LevelSchedule.from_arrays(3, np.array([0, 0]), np.array([1, 2]))
    with pytest.raises(ValueError, match="cycle"):
        LevelSchedule.from_arrays(2, np.array([0, 1]), np.array([1, 0]))
    with pytest.raises(ValueError, match="own parent"):
        LevelSchedule.from_arrays(2, np.array([0]), np.array([0]))
    with pytest.raises(ValueError, match="negative child position"):
        LevelSchedule.from_arrays(2, np.array([0]), np.array([1]), pos=np.array([-1]))


# ----------------------------------------------------------------- the real data


@pytest.mark.skipif(os.environ.get("GNN_TREELSTM_LONG_CHECKS") != "1",
                    reason="builds SST and SICK whole (about 90 s): .ci/run runs it with "
                           "GNN_TREELSTM_LONG_CHECKS=1")
def test_every_real_batch_has_the_reference_schedule(shared_data, tmp_path):
    """SST's gold constituency trees and SICK's Stanford parses (their dev and test
    splits, to keep the test short; with ``splits=None`` every split was checked too),
    TREC's chains and the Little Prince AMR bank, every batch (skipped without the
    data)."""
    evaluation = ("dev", "test")
    builder = native.batch_builder()  # what the data loader gives collate (None: numpy)
    build("sst", shared_data, tmp_path / "sst", trees=["constituency"], workers=2)
    assert check_every_batch(tmp_path / "sst", "constituency", splits=evaluation,
                             builder=builder) > 120
    build("sick", shared_data, tmp_path / "sick", trees=["dependency", "constituency"],
          workers=2)
    for tree in ("dependency", "constituency"):
        assert check_every_batch(tmp_path / "sick", tree, splits=evaluation,
                                 builder=builder) > 200
    build("trec", shared_data, tmp_path / "trec", trees=["chain"])
    assert check_every_batch(tmp_path / "trec", "chain", builder=builder) > 200
    build("amr", shared_data / "amr" / "little_prince", tmp_path / "amr")
    assert check_every_batch(tmp_path / "amr", "amr", builder=builder) > 50


@pytest.mark.parametrize("seed", range(6))
def test_random_forests_with_shared_and_wide_positions(seed, builder):
    """Every way the edges are ordered (a table of distinct positions, radix sorts where
    siblings share a position or a node has many children, the general sort of a large
    forest) gives the reference's order."""
    rng = np.random.default_rng(seed)
    n = [40, 300, 2000, 40000, 700, 90][seed]
    par = np.array([-1] + [int(rng.integers(0, i)) if rng.random() > 0.05 else -1
                           for i in range(1, n)])
    child = np.flatnonzero(par >= 0)
    if seed % 2:  # positions shared by siblings
        pos = rng.integers(0, 3, len(child))
    else:  # wide: positions up to the node count
        pos = rng.integers(0, max(2, n // (5 if seed == 4 else 2)), len(child))
    g = dgl.graph((torch.from_numpy(child), torch.from_numpy(par[child])), num_nodes=n)
    g.edata[G.POS] = torch.from_numpy(pos)
    g.edata[G.REL] = torch.from_numpy(rng.integers(0, 5, len(child)))
    g.ndata[G.WORD] = torch.from_numpy(rng.integers(-1, 9, n))
    rel, word = g.edata[G.REL].numpy(), g.ndata[G.WORD].numpy()
    s = LevelSchedule.from_arrays(n, child, par[child], rel=rel, pos=pos, word=word)
    assert_same(s, reference(g))
    depth = _ref_depths(par)
    s = LevelSchedule.from_levels(n, (child, par[child], rel, pos),
                                  (depth, _ref_heights(par, depth)), word=word, builder=builder)
    assert_same(s, reference(g))


# ----------------------------------------------------------------- edge cases


def _hand_trees() -> PackedTrees:
    """Single-node trees (no edge at all), a chain, a tree with a word-less inner node."""
    graphs = [make_tree([-1], [4]),
              make_tree([2, 2, -1], [1, 2, G.NO_WORD], rels=[1, 2, 0]),
              make_tree([-1], [G.NO_WORD]),
              make_tree([1, 2, 3, -1], [5, 6, 7, 8]),
              make_tree([-1], [9])]
    return PackedTrees(*pack_graphs(graphs))


@pytest.mark.parametrize("pick", [[0], [2], [0, 2, 4], [1], [3, 0], [4, 3, 2, 1, 0]])
def test_single_node_trees_and_a_batch_of_one(pick, builder):
    """Batches of one tree, of single-node trees only (no edge), and mixed: the graph of
    ``dgl.batch`` and the reference schedule, top-down levels with and without."""
    trees = _hand_trees()
    ready = dgl.batch([trees[i] for i in pick])
    for top_down in (True, False):
        graph, sched = batch_trees([(trees, pick)], schedule=True, top_down=top_down,
                                   builder=builder)
        assert_graphs_equal(graph, ready)
        ref = reference(ready)
        assert_same(sched, ref if top_down else {**ref, "down": {}})
        assert (sched.down is None) == (not top_down)


def test_pair_batch_of_single_node_trees(builder):
    """A pair batch (A trees, then B trees) whose sides have single-node trees."""
    a, b = _hand_trees(), _hand_trees().take([2, 0, 4, 1, 3])
    for pick in ([0], [0, 2], [1, 3, 4]):
        graph, sched = batch_trees([(a, pick), (b, pick)], schedule=True, builder=builder)
        ready = dgl.batch([a[i] for i in pick] + [b[i] for i in pick])
        assert_graphs_equal(graph, ready)
        assert_same(sched, reference(ready))


def test_stored_levels_are_computed_once_for_every_view():
    trees = _hand_trees()
    depth, height = trees.node_levels()
    assert depth.tolist() == [0, 1, 1, 0, 0, 3, 2, 1, 0, 0]
    assert height.tolist() == [0, 0, 0, 1, 0, 0, 1, 2, 3, 0]
    view = trees.take([3, 1]).remap("n." + G.WORD, torch.arange(10) * 2)
    assert view.node_levels()[0] is depth  # shared, not computed again


@pytest.mark.parametrize("src, dst, message", [
    ([0, 0], [1, 2], "more than one parent"),
    ([0, 1], [1, 0], "cycle"),
    ([1], [1], "own parent"),
    ([0], [5], "outside its tree"),
])
def test_damaged_stored_trees_are_refused_naming_them(src, dst, message):
    arrays = {"node_offsets": np.array([0, 1, 4]), "edge_offsets": np.array([0, 0, len(src)]),
              "src": np.array(src), "dst": np.array(dst)}
    with pytest.raises(ValueError, match=f"packed trees 0-1 .*{message}|{message}"):
        PackedTrees(arrays, {}).node_levels()


@pytest.mark.parametrize("seed", range(3))
def test_from_levels_is_from_arrays(seed, builder):
    """The schedule made from known levels is the one made by walking the forest."""
    rng = np.random.default_rng(seed)
    n = [30, 500, 3000][seed]
    par = np.array([-1] + [int(rng.integers(0, i)) if rng.random() > 0.1 else -1
                           for i in range(1, n)])
    child = np.flatnonzero(par >= 0)
    pos = rng.integers(0, 3, len(child))
    rel = rng.integers(0, 4, len(child))
    word = rng.integers(-1, 5, n)
    depth = _ref_depths(par)
    height = _ref_heights(par, depth)
    got = LevelSchedule.from_levels(n, (child, par[child], rel, pos), (depth, height),
                                    word=word, batch_size=3, builder=builder)
    want = LevelSchedule.from_arrays(n, child, par[child], rel=rel, pos=pos, word=word,
                                     batch_size=3)
    assert_schedules_equal(got, want)


@pytest.mark.parametrize("case, message", [
    ("level", "has level"), ("edge", "outside"), ("pos", "negative child position"),
    ("root", "a root"), ("parents", "two parents")])
def test_the_native_build_refuses_what_would_write_out_of_bounds(case, message):
    """The C++ routine checks every index it writes through (the numpy build's callers
    check the trees, but a bad call must be an error, never a stray write)."""
    if not native.available():
        pytest.skip("the native library is not available here (no C++ compiler?)")
    t = lambda *v: torch.tensor(v, dtype=torch.int64)  # noqa: E731
    src, dst, pos, depth, height = t(0, 1), t(2, 2), t(0, 1), t(1, 1, 0), t(0, 0, 1)
    if case == "level":
        height = t(0, 0, 3)
    elif case == "edge":
        dst = t(2, 3)
    elif case == "pos":
        pos = t(0, -1)
    elif case == "root":
        depth = t(0, 1, 1)
        src, dst = t(0, 1), t(1, 2)
        height = t(1, 0, 0)
    else:
        depth = t(1, 1, 0)
        src, dst, pos = t(0, 1, 0), t(2, 2, 2), t(0, 1, 2)
    with pytest.raises(RuntimeError, match=message):
        torch.ops.gnn_treelstm.level_schedule(3, src, dst, torch.zeros_like(src), pos, depth,
                                              height, None, G.NO_WORD, True)


def test_the_native_outputs_are_disjoint_slices_that_outlive_each_other(samples):
    """The C++ routines return their outputs as slices of one allocation (``csrc/arena.h``):
    each a contiguous tensor of its own shape and type, no two overlapping, and any one of
    them alone keeps its values when the batch's other tensors are gone. The gather's label
    order is :func:`label_order`'s."""
    builder = native.batch_builder()
    if builder is None:
        pytest.skip("the native library is not available here (no C++ compiler?)")
    sp = load_split(samples / "sst", "train", "constituency")
    store = sp.graphs
    arrays_out = store._gather_trees(np.arange(min(5, len(sp))), 0, True, builder, True)
    nn, ne, src, dst, values, depth, height, order = arrays_out
    assert torch.equal(order, label_order(values["n." + G.LABEL]))
    sched = LevelSchedule.from_levels(
        int(nn.sum()), (src, dst, values["e." + G.REL], values["e." + G.POS]),
        (depth, height), word=values["n." + G.WORD], batch_size=len(nn), builder=builder)
    for made in ([nn, ne, src, dst, *values.values(), depth, height, order],
                 [v for lv in (sched.up, sched.down) for v in vars(lv).values()
                  if isinstance(v, torch.Tensor)] + [sched.roots, sched.word_ids]):
        spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
                       for t in made if t.numel())
        assert all(t.is_contiguous() for t in made)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "outputs overlap"
        assert len({t.untyped_storage().data_ptr() for t in made}) == 1  # one allocation
    want = sched.up.order.clone()
    kept = sched.up.order
    del sched, made, arrays_out, nn, ne, src, dst, values, depth, height, order
    torch.zeros(1 << 16, dtype=torch.int64).fill_(-7)  # reuse of freed memory would show
    assert torch.equal(kept, want)
    kept.add_(1)  # an ordinary tensor: written in place
    assert torch.equal(kept, want + 1)
