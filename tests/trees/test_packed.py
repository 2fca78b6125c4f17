"""Packed trees (gnn_treelstm/trees/packed.py): the batches built from the memory-mapped
arrays are the batches ``dgl.batch`` makes of the graphs the builder made (node and edge
order, every node and edge field, the batch sizes) with the same level schedule."""

from __future__ import annotations

import dataclasses

import dgl
import numpy as np
import pytest
import torch

from gnn_treelstm.datasets import build as B
from gnn_treelstm.datasets.example import sentence_graph
from gnn_treelstm.datasets.jsonl import read_jsonl
from gnn_treelstm.training.batching import make_loader
from gnn_treelstm.training.data import SAMPLE_SRC
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees import packed as P
from gnn_treelstm.trees.packed import PackedTrees
from gnn_treelstm.trees.schedule import LevelSchedule
from tests.handbuilt import random_batch
from tests.tiny_data import build_tiny

SAMPLE = SAMPLE_SRC


def assert_graphs_equal(a: dgl.DGLGraph, b: dgl.DGLGraph) -> None:
    assert a.num_nodes() == b.num_nodes() and a.num_edges() == b.num_edges()
    for x, y in zip(a.edges(), b.edges()):
        assert torch.equal(x, y)
    assert torch.equal(a.batch_num_nodes(), b.batch_num_nodes())
    assert torch.equal(a.batch_num_edges(), b.batch_num_edges())
    for da, db in ((a.ndata, b.ndata), (a.edata, b.edata)):
        assert sorted(da.keys()) == sorted(db.keys())
        for k in da.keys():
            assert da[k].dtype == db[k].dtype and torch.equal(da[k], db[k]), k


def assert_schedules_equal(a: LevelSchedule, b: LevelSchedule) -> None:
    for f in dataclasses.fields(a):
        if not f.compare:  # not the schedule's content: the host it was moved from, its mark
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name in ("up", "down"):
            for g in dataclasses.fields(x):
                u, v = getattr(x, g.name), getattr(y, g.name)
                assert torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v, g.name
        else:
            assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y, f.name


def assert_batches_equal(old: D.Split, new: D.Split, seed: int = 0) -> None:
    """Every batch of a shuffled epoch (batch 5, schedules on) is the same both ways."""
    assert new.packed and not old.packed and len(old) == len(new)
    for k in old.targets:
        assert torch.equal(old.targets[k], new.targets[k])
    batches = 0
    for bo, bn in zip(make_loader(old, 5, shuffle=True, seed=seed, schedule=True),
                      make_loader(new, 5, shuffle=True, seed=seed, schedule=True)):
        assert torch.equal(bo.index, bn.index)
        assert_graphs_equal(bo.graph, bn.graph)
        if bo.graph_b is not None:
            assert_graphs_equal(bo.graph_b, bn.graph_b)
        assert bn.graph_b is None or bo.graph_b is not None
        for k in bo.targets:
            assert torch.equal(bo.targets[k], bn.targets[k])
        assert_schedules_equal(bo.schedule, bn.schedule)
        batches += 1
    assert batches == -(-len(old) // 5)
    for i in (0, len(old) - 1):  # one tree at a time too
        assert_graphs_equal(old.graphs[i], new.graphs[i])


def _capture_build(monkeypatch, dataset, src, out, trees, **kw):
    """Build, and the graphs the format before packed trees saved (``make_tree`` of each
    tree, :func:`sentence_graph`, with the built vocabulary and relations): per (tree,
    split) the graphs of each side."""
    monkeypatch.setattr(B, "PACK_SHARD", 64)  # several shards a split
    meta = B.build(dataset, src, out, trees=trees, **kw)
    monkeypatch.undo()
    data = read_jsonl(src).splits if dataset == "jsonl" else B.LOADERS[dataset](src)
    vocab = D.load_vocab(out)
    made: dict = {}
    for tree in trees:
        relations = D.load_relations(out, tree)
        for split, exs in data.items():
            sides = made[(tree, split)] = [[] for _ in exs[0].sents]
            for ex in exs:
                for side, sent in enumerate(ex.sents):
                    sides[side].append(sentence_graph(tree, ex, side, vocab.lookup(sent),
                                                      relations, None, vocab))
    return meta, made


def _old_split(made, out, tree, split, pair, meta):
    sides = made[(tree, split)]
    targets = D.load_split(out, split, tree).targets  # the builder's, as before
    return D.Split(sides[0], sides[1] if pair else None, targets, split, tree, meta)


@pytest.mark.parametrize("dataset,src,trees,kw", [
    ("sst", SAMPLE, ["constituency", "chain"], {}),
    ("sick", SAMPLE, ["dependency", "constituency"], {}),
    ("trec", SAMPLE, ["chain"], {}),
    ("jsonl", [SAMPLE / "sick_amr" / f"{s}.jsonl" for s in ("train", "dev", "test")],
     ["amr"], {"name": "sick"}),
])
def test_sample_batches_old_path_equal_packed(tmp_path, monkeypatch, dataset, src, trees, kw):
    out = tmp_path / dataset
    meta, made = _capture_build(monkeypatch, dataset, src, out, trees, **kw)
    for tree in trees:
        for split in meta["splits"]:
            old = _old_split(made, out, tree, split, meta["pair"], meta)
            new = D.load_split(out, split, tree)
            assert isinstance(new.graphs, PackedTrees)
            assert isinstance(new.graphs.arrays["src"], np.memmap)
            assert_batches_equal(old, new)
    if dataset == "sst":  # the SST-2 view: labels mapped as batches are built
        for neutral in (False, True):
            old = D.to_sst2(_old_split(made, out, "constituency", "train", False, meta),
                            neutral_class=neutral)
            new = D.to_sst2(D.load_split(out, "train", "constituency"), neutral_class=neutral)
            assert_batches_equal(old, new, seed=3)


@pytest.mark.parametrize("dataset", ["sst", "sick", "trec", "snli"])
def test_old_directories_converted_on_load(tmp_path, dataset):
    """A directory of ``.bin`` files (the format before packed trees) loads as packed
    trees, in memory, with the same batches; writing it packed maps the same batches."""
    out = build_tiny(tmp_path, dataset)
    meta = D.load_meta(out)
    for tree in meta["trees"]:
        paths = D.split_paths(out, tree, "train", meta["pair"])
        sides = [D.load_graphs(p.with_suffix(".bin")) for p in paths]
        old = D.Split(sides[0][0], sides[1][0] if meta["pair"] else None,
                      dict(sides[0][1]), "train", tree, meta)
        converted = D.load_split(out, "train", tree)
        assert_batches_equal(old, converted)
        for p, (graphs, labels) in zip(paths, sides):
            P.write_packed(p, *P.pack_graphs(graphs), labels or None)
        mapped = D.load_split(out, "train", tree)
        assert isinstance(mapped.graphs.arrays["src"], np.memmap)
        assert_batches_equal(old, mapped, seed=1)
        sub = [5, 0, 7, 7]  # a view: take, remap, subset
        assert_batches_equal(old.subset(sub), mapped.subset(sub))


def test_remap_and_statistics(tmp_path):
    out = build_tiny(tmp_path, "sst")
    old = D.load_split(out, "train", "dependency")
    graphs = [old.graphs[i] for i in range(len(old))]
    table = torch.arange(100) * 3
    new = D.remap_split(old, table, torch.arange(10) + 1)
    g = new.graphs[2]
    w = graphs[2].ndata["word"]
    assert torch.equal(g.ndata["word"], torch.where(w >= 0, w * 3, w))
    assert torch.equal(g.edata["rel"], graphs[2].edata["rel"] + 1)
    deg = max(int(x.in_degrees().max()) for x in graphs if x.num_edges())
    first = next(i for i, x in enumerate(graphs) if x.num_edges()
                 and int(x.in_degrees().max()) == deg)
    assert old.graphs.max_children() == (deg, first)
    nn, ne = old.graphs.sizes()
    assert nn.tolist() == [x.num_nodes() for x in graphs]
    assert ne.tolist() == [x.num_edges() for x in graphs]


def test_damaged_packed_directory_names_the_rebuild(tmp_path):
    out = build_tiny(tmp_path, "trec")
    graphs, labels = D.load_graphs(out / "chain" / "dev.bin")
    path = out / "chain" / "dev.packed"
    P.write_packed(path, *P.pack_graphs(graphs), labels)
    (path / "n.word.npy").write_bytes((path / "n.word.npy").read_bytes()[:90])
    with pytest.raises(ValueError, match="damaged packed trees.*gnn-treelstm build"):
        D.load_split(out, "dev", "chain")
    (path / "n.word.npy").unlink()
    with pytest.raises(FileNotFoundError, match="n.word.npy missing.*gnn-treelstm build"):
        D.load_split(out, "dev", "chain")


def _lists(split: D.Split) -> D.Split:
    return D.Split(list(split.graphs), None, split.targets, split.name, split.tree, split.meta)


@pytest.fixture(scope="module")
def sst_sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("phrases") / "sst"
    B.build("sst", SAMPLE, out, trees=["constituency", "chain"])
    return out


@pytest.mark.parametrize("sst2", [False, True])
def test_phrase_chains_from_packed_trees(sst_sample, sst2):
    """Phrase sequences of packed trees (sentence, span, label per phrase) batch as the
    chains ``phrase_chain`` builds, SST's sample and a view of its first sentences."""
    from gnn_treelstm.trees.phrases import PhraseChains, phrase_sequences

    out = sst_sample
    for split, limit in (("train", None), ("dev", 37)):
        chains, cons = (D.load_split(out, split, t).head(limit)
                        for t in ("chain", "constituency"))
        if sst2:
            chains, cons = D.to_sst2(chains), D.to_sst2(cons)
        new = phrase_sequences(chains, cons)
        old = phrase_sequences(_lists(chains), _lists(cons))
        assert isinstance(new.graphs, PhraseChains) and len(new) > len(chains)
        assert new.graphs.nbytes < 16 * len(new)
        assert torch.equal(old.targets["sentence"], new.targets["sentence"])
        assert_batches_equal(old, new)
        assert new.graphs.max_children() == (1, next(
            i for i, g in enumerate(old.graphs) if g.num_edges()))


def test_phrase_chains_refuse_other_sentences(sst_sample):
    from gnn_treelstm.trees.phrases import phrase_sequences

    chains, cons = (D.load_split(sst_sample, "dev", t) for t in ("chain", "constituency"))
    with pytest.raises(ValueError, match="example 0 of split 'dev'.*not the chain's"):
        phrase_sequences(chains.subset([1, 0, 2]), cons.subset([0, 1, 2]))


# ------------------------------------------------------- the C++ gather of a batch
def _native_builder():
    from gnn_treelstm.kernels import native

    made = native.batch_builder()
    if made is None:
        pytest.skip("the native library is not available here (no C++ compiler?)")
    return made


def _assert_arrays_equal(want: dict, got: dict) -> None:
    assert want["n"] == got["n"]
    for key in ("src", "dst", "nn", "ne"):
        x, y = want[key], np.asarray(got[key])
        assert x.dtype == y.dtype and np.array_equal(x, y), key
    assert list(want["values"]) == list(got["values"])
    for key, x in want["values"].items():
        y = np.asarray(got["values"][key])
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), key


@pytest.mark.parametrize("seed", range(4))
def test_the_cpp_gather_takes_the_arrays_numpy_takes(seed):
    """``batch_arrays`` with the C++ routines takes every array numpy takes, in the same
    types: random trees, views of some trees (``take``), mapped fields (``remap``, -1
    kept), pair batches, repeated and single trees, with and without schedules."""
    builder = _native_builder()
    trees = PackedTrees(*P.pack_graphs(random_batch(seed=seed, count=17)))
    rng = np.random.default_rng(seed)
    view = trees.take(rng.permutation(17)[:11]).remap("n.word", torch.arange(500) * 7 + 1)
    view = view.remap("e.rel", torch.arange(50) + 2)
    for parts in ([(trees, rng.integers(0, 17, 9))], [(view, [3])],
                  [(view, rng.integers(0, 11, 6))], [(view, [0, 1, 2]), (trees, [5, 5, 16])]):
        for schedule in (False, True):
            want, ws = P.batch_arrays(parts, schedule=schedule)
            got, gs = P.batch_arrays(parts, schedule=schedule, builder=builder)
            _assert_arrays_equal(want, got)
            assert (ws is None) == (gs is None)
            if ws is not None:
                assert_schedules_equal(ws, gs)
            assert_graphs_equal(P.arrays_graph(want), P.arrays_graph(got))


@pytest.mark.parametrize("damage,message", [
    ("edge", "names node 40 of its"), ("offsets", "packed trees name row"),
    ("tree", "out of range"), ("map", "outside its map")])
def test_the_cpp_gather_refuses_damaged_trees(damage, message):
    """An index the C++ routine would read through outside the arrays is an error naming
    the damage, never a stray read."""
    builder = _native_builder()
    arrays, dtypes = P.pack_graphs(random_batch(seed=3, count=5))
    arrays = {k: np.array(v) for k, v in arrays.items()}
    maps = None
    pick = [0, 2, 4]
    if damage == "edge":
        first = int(arrays["edge_offsets"][2])  # an edge of tree 2 to a node it lacks
        arrays["src"] = arrays["src"].astype(np.int64)
        arrays["src"][first] = 40
    elif damage == "offsets":
        arrays["node_offsets"][-1] += 3
    elif damage == "map":
        maps = {"n.word": torch.arange(2)}
    trees = PackedTrees(arrays, dtypes, maps=maps)
    if damage == "tree":
        trees._tensors["node_offsets"] = torch.from_numpy(arrays["node_offsets"][:3].copy())
        trees._tensors["edge_offsets"] = torch.from_numpy(arrays["edge_offsets"][:3].copy())
    with pytest.raises(ValueError, match=message):
        P.batch_arrays([(trees, pick)], builder=builder)


def test_the_cpp_gather_reads_every_type_a_field_may_be_read_as():
    """Each type code of ``native.TYPES`` is the type ``csrc/batch.cpp`` gives (the two
    lists are one fact, written in each language): a field read as each type, mapped and
    not, equals numpy's reading."""
    from gnn_treelstm.kernels import native

    builder = _native_builder()
    arrays, dtypes = P.pack_graphs(random_batch(seed=5, count=6))
    for dtype in native.TYPES:
        name = str(dtype).removeprefix("torch.")
        for maps in (None, {"n.label": torch.arange(-1, 40) % 7}):
            if maps and dtype in (torch.float32, torch.float64):
                continue
            trees = PackedTrees(arrays, {**dtypes, "n.label": name}, maps=maps)
            want, _ = P.batch_arrays([(trees, [4, 0, 2])])
            got, _ = P.batch_arrays([(trees, [4, 0, 2])], builder=builder)
            assert got["values"]["n.label"].dtype == dtype
            _assert_arrays_equal(want, got)
