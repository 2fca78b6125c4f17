"""``datasets.sources``' trees read straight into graphs (``sst_graphs``, ``sick_graphs``),
as the benchmarks and tests take them: the first trees of a split, words numbered in order
of first appearance, SICK's sides in turn with its relation count."""

from __future__ import annotations

import pytest

from gnn_treelstm.datasets.preparsed import read_preparsed
from gnn_treelstm.datasets.sources import sick_graphs, sst_graphs
from gnn_treelstm.trees import graph as G


def _words(graphs) -> list[list[int]]:
    return [g.ndata[G.WORD][g.ndata[G.WORD] != G.NO_WORD].tolist() for g in graphs]


def test_sst_graphs_are_the_first_trees_numbered_by_first_appearance(sample_data):
    every = sst_graphs(sample_data)
    first = sst_graphs(sample_data, limit=3)
    assert len(first) == 3 < len(every)
    assert _words(first) == _words(every[:3])  # the same numbering, whatever follows
    seen: list[int] = []
    for w in (w for ws in _words(every) for w in ws):
        if w not in seen:
            seen.append(w)
    assert seen == list(range(len(seen)))
    assert all(g.num_nodes() == 2 * len(w) - 1 for g, w in zip(every, _words(every)))


def test_sick_graphs_take_the_sides_in_turn_with_the_relation_count(sample_data):
    base = sample_data / "sick" / "stanford_parsed"
    rels = len((base / "rels_set.txt").read_text(encoding="utf-8").split())
    both, nrel = sick_graphs(sample_data)
    side_a, nrel_a = sick_graphs(sample_data, sides=("a",), limit=2)
    assert nrel == nrel_a == rels
    n = len(read_preparsed(base / "train", "a"))
    assert len(both) == 2 * n and len(side_a) == 2
    assert _words(side_a) == _words(both[:2])
    assert [g.num_nodes() for g in both[n:]] == [
        len(s.tokens) for s in read_preparsed(base / "train", "b")]
    assert all(int(g.edata[G.REL].max()) < nrel for g in both if g.num_edges())


def test_a_folder_without_the_data_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no sst/trees"):
        sst_graphs(tmp_path)
    with pytest.raises(FileNotFoundError, match="no sick/stanford_parsed"):
        sick_graphs(tmp_path)
