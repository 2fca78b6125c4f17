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
