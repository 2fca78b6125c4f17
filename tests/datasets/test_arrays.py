"""Trees straight to arrays (gnn_treelstm/datasets/arrays.py): the packed arrays of
parent-vector records are the arrays ``pack_graphs`` makes of their ``make_tree`` graphs,
field by field, and the build makes no ``DGLGraph``."""

from __future__ import annotations

import json

import dgl
import numpy as np
import pytest

from gnn_treelstm.datasets import build as B
from gnn_treelstm.datasets.arrays import DTYPES, SUBTREE, Packer, TreeRecord, record_graph
from gnn_treelstm.datasets.dependency import subtree_spans
from gnn_treelstm.trees.packed import pack_graphs

#: hand-built trees: a chain, a dependency tree with subtree spans and relations, a
#: binary tree with given positions, labels and spans, a lone word
TREES = [
    TreeRecord([1, 2, -1], [5, 6, 7]),
    TreeRecord([2, 2, 4, 4, -1, 4], [1, 2, 3, 4, 5, 6], rels=[1, 2, 3, 0, 0, 1],
               spans=SUBTREE, labels=[-1, 0, -1, 2, 4, -1]),
    TreeRecord([3, 3, 4, 4, -1], [8, 9, 3, -1, -1], rels=[1, 0, 1, 0, 0],
               positions=[1, 0, 1, 0, 0], spans=[(0, 1), (1, 2), (2, 3), (0, 2), (0, 3)],
               labels=[1, 1, 2, 3, 4]),
    TreeRecord([-1], [0]),
]


def test_packed_records_are_the_arrays_of_their_graphs():
    packer = Packer()
    for rec in TREES:
        packer.add(rec, "hand-built")
    got = packer.arrays()
    want, dtypes = pack_graphs([record_graph(rec) for rec in TREES])
    assert list(got) == list(want)  # the same fields, in the same order
    for key in want:
        assert got[key].dtype == want[key].dtype and np.array_equal(got[key], want[key]), key
    assert dtypes == DTYPES
    # the dependency tree: node i's span is its subtree's extent, edges in child order
    lo, hi = 3, 9
    assert [tuple(s) for s in got["n.span"][lo:hi].tolist()] == subtree_spans(TREES[1].parents)
    assert got["src"][2:7].tolist() == [0, 1, 2, 3, 5] and got["dst"][2:7].tolist() == [2, 2, 4,
                                                                                         4, 4]
    assert got["e.pos"][2:7].tolist() == [0, 1, 0, 1, 2]  # siblings in node order


@pytest.mark.parametrize("rec, message", [
    (TreeRecord([-1, -1], [0, 0]), "exactly one root"),
    (TreeRecord([1, 2, 0, -1], [0, 0, 0, 0]), "node 0 never reaches the root"),
    (TreeRecord([2, 2, -1], [0, 0, 0], positions=[0, 0, 0]), "node 0 has a duplicate position"),
    (TreeRecord([1, 5, -1], [0, 0, 0]), "node 1 has invalid parent 5"),
    (TreeRecord([1, -1], [0, 0], rels=[-2, 0]), "node 0 has a negative relation"),
    (TreeRecord([1, -1], [0]), "words has 1 entries but the tree has 2 nodes"),
])
def test_a_bad_tree_is_named(rec, message):
    packer = Packer()
    packer.add(TREES[0], "file:1")
    with pytest.raises(ValueError, match=message) as err:
        packer.add(rec, "file:2")
        packer.arrays()
    assert str(err.value).startswith("file:2: ")


def test_the_build_makes_no_graph(sample_data, tmp_path, monkeypatch):
    """No tree of a build is a ``DGLGraph``: ``dgl.graph`` refused, every data set builds
    (one process, so the refusal holds in the shards too)."""

    def refused(*args, **kwargs):
        raise AssertionError("the build made a DGLGraph")

    monkeypatch.setattr(dgl, "graph", refused)
    B.build("sst", sample_data, tmp_path / "sst", trees=["constituency", "chain"])
    B.build("sick", sample_data, tmp_path / "sick", trees=["dependency", "constituency"])
    meta = B.build("jsonl", [sample_data / "sick_amr"], tmp_path / "amr", name="sick")
    assert meta["trees"] == ["dependency", "constituency", "chain", "amr"]
    with pytest.raises(AssertionError, match="DGLGraph"):
        record_graph(TREES[0])


def test_jsonl_rows_are_read_a_shard_at_a_time(sample_data, tmp_path, monkeypatch):
    """The rows of a JSONL data set reach the shard builder a shard at a time, never all
    at once, and a killed build reuses the JSONL shards it finished."""
    monkeypatch.setattr(B, "PACK_SHARD", 5)
    src = [sample_data / "sick_amr" / f"{s}.jsonl" for s in ("train", "dev", "test")]
    ref = B.build("jsonl", src, tmp_path / "ref", name="sick", workers=2)
    real, sizes, kill = B.shard_arrays, [], [True]

    def counted(job, task):
        sizes.append((task.split, task.start, len(task.rows)))
        if kill[0] and len(sizes) == 4:
            raise KeyboardInterrupt  # as a kill while the fourth shard is built
        return real(job, task)

    monkeypatch.setattr(B, "shard_arrays", counted)
    with pytest.raises(KeyboardInterrupt):
        B.build("jsonl", src, tmp_path / "run", name="sick")
    assert sizes[:3] == [("train", 0, 5), ("train", 5, 5), ("train", 10, 5)]
    sizes.clear()
    kill[0] = False
    got = B.build("jsonl", src, tmp_path / "run", name="sick")
    assert sizes[0] == ("train", 15, 5) and max(n for _, _, n in sizes) == 5
    assert got["splits"] == ref["splits"] == {"train": 24, "dev": 6, "test": 6}
    for f in sorted(p.relative_to(tmp_path / "ref") for p in (tmp_path / "ref").rglob("*")
                    if p.is_file() and p.name != "meta.json"):
        assert (tmp_path / "ref" / f).read_bytes() == (tmp_path / "run" / f).read_bytes(), f
    text = [json.loads(line) for line in (tmp_path / "run" / "text" / "train.jsonl")
            .read_text(encoding="utf-8").splitlines()]
    assert len(text) == 24 and {"id", "a", "b", "label", "score"} <= set(text[0])
