import dataclasses
import pickle

import pytest
import torch
from torch.utils.data import DataLoader

from gnn_treelstm.datasets.build import build
from gnn_treelstm.trees.data import (
    SST2_MAP,
    Batch,
    Split,
    TreeDataset,
    collate,
    label_order,
    load_meta,
    load_relations,
    load_split,
    load_text,
    load_vocab,
    sst2_labels,
    to_sst2,
)
from gnn_treelstm.trees.graph import IGNORE, batch_roots


@pytest.fixture(scope="module")
def sst_dir(sample_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("sst")
    build("sst", sample_data, out, trees=["constituency", "chain"])
    return out


@pytest.fixture(scope="module")
def sick_dir(sample_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("sick")
    build("sick", sample_data, out, trees=["dependency", "constituency"])
    return out


def test_sst2_map():
    assert SST2_MAP.tolist() == [0, 0, IGNORE, 1, 1]
    assert sst2_labels(torch.tensor([0, 1, 2, 3, 4, IGNORE])).tolist() == \
        [0, 0, IGNORE, 1, 1, IGNORE]
    with pytest.raises(ValueError, match="0-4"):
        sst2_labels(torch.tensor([5]))
    assert sst2_labels(torch.tensor([0, 1, 2, 3, 4, IGNORE]), neutral_class=True).tolist() \
        == [0, 0, 2, 1, 1, IGNORE]


def test_a_batch_orders_its_labelled_nodes_first_once(sst_dir):
    """``collate`` sorts the nodes with a label first, in their order, once per batch (the
    phrase loss reads the order), whichever way the batch is made or sent."""
    s = to_sst2(load_split(sst_dir, "train", "constituency"))
    ds, ignored = TreeDataset(s), 0
    for lo in range(0, len(s), 8):
        pick = list(range(lo, min(lo + 8, len(s))))
        batch = collate(ds.__getitems__(pick))
        labels = batch.graph.ndata["label"]
        order = batch.label_order
        assert torch.equal(order, torch.argsort((labels == IGNORE).to(torch.int8), stable=True))
        assert torch.equal(order, label_order(labels))
        k = int((labels != IGNORE).sum())
        assert torch.equal(labels[order[:k]], labels[labels != IGNORE])
        assert bool((labels[order[k:]] == IGNORE).all())
        assert torch.equal(order.sort().values, torch.arange(len(labels)))
        ignored += len(labels) - k
        sent = pickle.loads(pickle.dumps(collate(ds.__getitems__(pick), wire=True)))
        assert torch.equal(sent.label_order, order)
        one_by_one = collate([ds[i] for i in pick])
        assert torch.equal(one_by_one.label_order, order)
    assert ignored  # SST-2's neutral phrases


def test_load_split_and_meta(sst_dir):
    meta = load_meta(sst_dir)
    s = load_split(sst_dir, "dev", "constituency")
    assert isinstance(s, Split) and len(s) == meta["splits"]["dev"] == 100
    assert s.graphs_b is None and not s.pair and s.targets["label"].dtype == torch.int64
    assert len(load_text(sst_dir, "dev")) == 100
    assert load_relations(sst_dir, "constituency").names == ["left", "right"]
    assert len(load_vocab(sst_dir)) == meta["vocab_size"]
    with pytest.raises(ValueError, match="not built"):
        load_split(sst_dir, "dev", "dependency")
    with pytest.raises(ValueError, match="no split"):
        load_split(sst_dir, "nope", "chain")
    with pytest.raises(FileNotFoundError, match="build the data first"):
        load_meta(sst_dir / "missing")


def test_head_takes_the_first_examples(sst_dir):
    s = load_split(sst_dir, "dev", "constituency")
    first = s.head(3)
    assert len(first) == 3
    for a, b in zip(first.graphs, [s.graphs[i] for i in range(3)]):
        assert torch.equal(a.ndata["word"], b.ndata["word"])
        assert all(torch.equal(x, y) for x, y in zip(a.edges(), b.edges()))
    assert torch.equal(first.targets["label"], s.targets["label"][:3])
    assert s.head(None) is s and s.head(len(s)) is s and s.head(10_000) is s


def test_to_sst2(sst_dir):
    s = load_split(sst_dir, "dev", "constituency")
    b = to_sst2(s)
    assert len(b) == load_meta(sst_dir)["sst2_splits"]["dev"]
    assert set(b.targets["label"].tolist()) <= {0, 1}
    labels = torch.cat([g.ndata["label"] for g in b.graphs])
    assert set(labels.tolist()) <= {0, 1, IGNORE}
    # the caller's split is untouched
    assert int(torch.cat([g.ndata["label"] for g in s.graphs]).max()) > 1


def test_dataloader_batches(sst_dir):
    s = load_split(sst_dir, "train", "chain")
    loader = DataLoader(TreeDataset(s), batch_size=16, shuffle=True, collate_fn=collate,
                        generator=torch.Generator().manual_seed(0))
    seen = []
    for batch in loader:
        assert isinstance(batch, Batch) and batch.graph_b is None
        assert batch.graph.batch_size == len(batch) <= 16
        roots = batch_roots(batch.graph)
        assert torch.equal(batch.graph.ndata["label"][roots], batch.targets["label"])
        assert torch.equal(batch.targets["label"], s.targets["label"][batch.index])
        seen += batch.index.tolist()
    assert sorted(seen) == list(range(len(s)))


def test_pairs(sick_dir):
    s = load_split(sick_dir, "dev", "dependency")
    assert s.pair and len(s.graphs_b) == len(s) == 50
    batch = collate([TreeDataset(s)[i] for i in (3, 1)])
    # batched once: the A sentences, then the B sentences
    assert batch.graph_b is None and batch.num_a == 2 and batch.pair
    assert batch.graph.batch_size == batch.num_trees == 4 and batch.index.tolist() == [3, 1]
    assert batch.targets["score"].dtype == torch.float32
    assert batch.to("cpu").targets["label"].tolist() == s.targets["label"][[3, 1]].tolist()
    assert batch.to("cpu").num_a == 2
    text = load_text(sick_dir, "dev")
    assert batch.graph.batch_num_nodes().tolist() == [
        len(text[3]["a"]), len(text[1]["a"]), len(text[3]["b"]), len(text[1]["b"])]
    fetched = collate(TreeDataset(s).__getitems__([3, 1]))  # from the packed arrays
    assert fetched.num_a == 2 and fetched.graph_b is None
    assert fetched.graph.batch_num_nodes().tolist() == batch.graph.batch_num_nodes().tolist()
    with pytest.raises(ValueError, match="empty batch"):
        collate([])


def test_split_checks_lengths():
    with pytest.raises(ValueError, match="target 'label'"):
        Split([], None, {"label": torch.zeros(2)})


@pytest.mark.parametrize("which", ["sst", "sick"])
def test_a_batch_crosses_processes_as_one_tensor(which, sst_dir, sick_dir):
    """A loader process sends a batch as one byte tensor (``Batch.__reduce__``): what the
    training process unpickles is the same batch, graph, fields, targets and schedule,
    single sentences and pairs, bottom-up only and both ways."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (the tensor reductions a loader uses)

    from tests.trees.test_packed import assert_graphs_equal, assert_schedules_equal

    sp = load_split(sst_dir if which == "sst" else sick_dir, "train",
                    "constituency" if which == "sst" else "dependency")
    ds = TreeDataset(sp)
    for pick, top_down in (([0], True), ([3, 1, 2], False), (list(range(len(sp))), True)):
        batch = collate(ds.__getitems__(pick), schedule=True, top_down=top_down)
        for got in (pickle.loads(pickle.dumps(batch)),
                    pickle.loads(ForkingPickler.dumps(batch))):
            assert (got.num_a, got.global_size, got.graph_b) == (batch.num_a, None, None)
            assert_graphs_equal(got.graph, batch.graph)
            assert (got.schedule.down is None) == (not top_down)
            assert_schedules_equal(*(dataclasses.replace(s, down=s.down or s.up)
                                     for s in (got.schedule, batch.schedule)))
            assert torch.equal(got.index, batch.index)
            assert got.targets.keys() == batch.targets.keys()
            for k, v in batch.targets.items():
                assert got.targets[k].dtype == v.dtype and torch.equal(got.targets[k], v)


def test_a_batch_of_other_graphs_pickles_field_by_field(sst_dir):
    """Graphs that are not plain CPU graphs (here int32 ids) are pickled as they are."""
    sp = load_split(sst_dir, "train", "constituency")
    batch = collate(TreeDataset(sp).__getitems__([0, 1]), schedule=True)
    batch.graph = batch.graph.int()
    got = pickle.loads(pickle.dumps(batch))
    assert got.graph.idtype == torch.int32
    assert torch.equal(got.graph.edges()[0], batch.graph.edges()[0])
    assert torch.equal(got.schedule.up.order, batch.schedule.up.order)


def _assert_same(got, want, where="batch"):
    """Every field of two batches (graphs, targets, ids, schedules, offsets, counts) equal,
    tensors bit for bit with the same type and shape."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), where
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        assert torch.equal(got, want), where
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            _assert_same(a, b, f"{where}[{i}]")
    elif isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for k in want:
            _assert_same(got[k], want[k], f"{where}.{k}")
    elif dataclasses.is_dataclass(want):
        assert type(got) is type(want), where
        for f in dataclasses.fields(want):
            if f.name == "made":  # each made schedule its own mark: both marked, or neither
                assert (got.made is None) == (want.made is None), where
                continue
            _assert_same(getattr(got, f.name), getattr(want, f.name), f"{where}.{f.name}")
    elif hasattr(want, "ndata"):  # a graph: structure, fields, tree sizes
        for a, b, what in ((got.edges(), want.edges(), "edges"),
                           (got.batch_num_nodes(), want.batch_num_nodes(), "nodes"),
                           (got.batch_num_edges(), want.batch_num_edges(), "tree edges")):
            _assert_same(a, b, f"{where}.{what}")
        _assert_same(dict(got.ndata), dict(want.ndata), f"{where}.ndata")
        _assert_same(dict(got.edata), dict(want.edata), f"{where}.edata")
    else:
        assert got == want, where


@pytest.mark.parametrize("which", ["sst", "sick"])
def test_a_batch_from_a_loader_process_is_the_batch_made_here(which, sst_dir, sick_dir):
    """The batches a loader process sends are, field for field and bit for bit, those the
    training process makes itself (graph, fields, targets, ids, both schedules)."""
    from gnn_treelstm.training.batching import make_loader

    sp = load_split(sst_dir if which == "sst" else sick_dir, "train",
                    "constituency" if which == "sst" else "dependency")
    here, there = (list(make_loader(sp, 7, shuffle=True, seed=2, schedule=True, workers=w))
                   for w in (0, 1))
    assert len(here) == len(there) > 1
    for got, want in zip(there, here, strict=True):
        _assert_same(got, want)


def test_a_batch_crosses_as_views_of_one_array_grouped_by_type(sst_dir):
    """Unpickled, every tensor of a batch is a view of one array (nothing copied one by
    one), tensors of every type come back exactly (float16, bool, a non-contiguous one),
    and a batch holding a tensor numpy lacks (bfloat16) still crosses, field by field."""
    sp = load_split(sst_dir, "train", "constituency")
    batch = collate(TreeDataset(sp).__getitems__([4, 0, 2]), schedule=True)
    batch.targets["half"] = torch.arange(3, dtype=torch.float16) / 3
    batch.targets["flag"] = torch.tensor([True, False, True])
    batch.targets["strided"] = torch.arange(12).view(3, 4)[:, ::2]
    data = batch.__reduce__()[1][-1]  # the one array the bytes travel in
    got = pickle.loads(pickle.dumps(batch))
    _assert_same(got, batch)
    views = (got.index, got.graph.ndata["word"], got.schedule.up.slots,
             got.schedule.down.slot_mask, got.targets["half"], got.targets["flag"])
    first = min(t.data_ptr() for t in views)
    assert max(t.data_ptr() + t.nbytes for t in views) - first <= data.nbytes
    batch.targets["brain"] = torch.ones(3, dtype=torch.bfloat16)
    _assert_same(pickle.loads(pickle.dumps(batch)), batch)


def test_a_made_graph_gives_its_edges_and_proof_until_its_edges_change(sst_dir):
    """A batch's graph gives the edges it was made of (``made_edges``) without reading them
    back from DGL; made of trees the store proved (their levels), it is a proven forest
    made with its schedule, and stays so pickled (as a batch, or as a loader process's
    arrays); once its edges change it is none of these."""
    from multiprocessing.reduction import ForkingPickler

    from gnn_treelstm.trees import graph as G

    sp = load_split(sst_dir, "train", "constituency")
    plain = collate(TreeDataset(sp).__getitems__([1, 3])).graph  # levels not computed
    src, dst = G.made_edges(plain)
    assert torch.equal(src, plain.edges()[0]) and torch.equal(dst, plain.edges()[1])
    assert G.made_edges(plain)[0] is src and G.host_edges(plain)[0].base is not None
    assert not G.made_forest(plain)
    batch = collate(TreeDataset(sp).__getitems__([1, 3]), schedule=True)
    assert sp.graphs.proven and G.made_forest(batch.graph)
    assert G.made_with(batch.graph, batch.schedule)
    assert not G.made_with(batch.graph, collate(TreeDataset(sp).__getitems__([1, 3]),
                                                schedule=True).schedule)
    copied = dataclasses.replace(batch.schedule, up=batch.schedule.up)  # as to / pin_memory
    assert G.made_with(batch.graph, copied)
    moved = batch.to("cpu")  # DGL copies the structure: the graph keeps what it was told
    assert moved.graph._graph is not batch.graph._graph
    assert G.made_forest(moved.graph) and G.made_with(moved.graph, moved.schedule)
    assert G.made_edges(moved.graph)[0] is G.made_edges(batch.graph)[0]  # the host's
    for back in (pickle.loads(pickle.dumps(batch)),
                 pickle.loads(ForkingPickler.dumps(collate(
                     TreeDataset(sp).__getitems__([1, 3]), schedule=True, wire=True)))):
        assert G.made_forest(back.graph) and G.made_with(back.graph, back.schedule)
    g = batch.graph
    g.add_edges(torch.tensor([0]), torch.tensor([1]))
    src2, dst2 = G.made_edges(g)
    assert len(src2) == len(src) + 1 and (int(src2[-1]), int(dst2[-1])) == (0, 1)
    assert not G.made_forest(g) and not G.made_with(g, batch.schedule)
    with pytest.raises(ValueError, match="outgoing edges|do not match the edges"):
        G.validate_tree(g)  # checked again: node 0 has two parents, node 1 a child


@pytest.mark.parametrize("which", ["sst", "sick"])
def test_a_batch_sent_as_its_arrays_unpickles_as_the_batch(which, sst_dir, sick_dir):
    """What a loader process sends (``collate(wire=True)``: the arrays, no graph made)
    unpickles as the batch ``collate`` makes, every field, both schedules or one, a share's
    global size set after collate, and a target numpy lacks (bfloat16)."""
    from multiprocessing.reduction import ForkingPickler

    sp = load_split(sst_dir if which == "sst" else sick_dir, "train",
                    "constituency" if which == "sst" else "dependency")
    ds = TreeDataset(sp)
    for pick, top_down in (([0], True), ([3, 1, 2], False), (list(range(len(sp))), True)):
        sent = collate(ds.__getitems__(pick), schedule=True, top_down=top_down, wire=True)
        want = collate(ds.__getitems__(pick), schedule=True, top_down=top_down)
        assert not isinstance(sent, Batch)
        sent.global_size = want.global_size = 2 * len(pick)
        _assert_same(pickle.loads(ForkingPickler.dumps(sent)), want)
    sent.targets["brain"] = want.targets["brain"] = torch.ones(len(pick), dtype=torch.bfloat16)
    _assert_same(pickle.loads(pickle.dumps(sent)), want)
