"""``scripts/host_instructions.py``: the callgrind dumps read, one step's count taken from
the two windows, and the counted run's windows around the steps of ``bench --host-cost``
(callgrind's controls recorded, not run: the counted run itself takes minutes)."""

from __future__ import annotations

import pytest

from gnn_treelstm.trees import graph as G
from tests.scripts import load_script

hi = load_script("host_instructions")


def test_a_dump_is_read_and_a_step_is_the_difference_of_the_windows(tmp_path):
    dump = tmp_path / "cg.out.1"
    dump.write_text("# callgrind format\nversion: 1\nevents: Ir\nsummary: 1234567\n"
                    "fn=main\n0 5\ntotals: 1234567\n")
    assert hi.totals(dump) == 1234567
    assert hi.per_step(1_000_000, 1_900_000, 10) == 90_000.0
    (tmp_path / "other").write_text("not a dump\n")
    with pytest.raises(ValueError, match="not a callgrind dump"):
        hi.totals(tmp_path / "other")


def test_each_step_is_counted_in_two_windows(monkeypatch, sample_data):
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(hi, "_control", lambda *flags: calls.append(flags))
    args = hi.parse_args(["--src", str(sample_data), "--cells", "nary", "childsum", "--path",
                          "general", "--train", "--steps", "1", "--trees", "3", "--inner",
                          "unused"])
    hi._inner(args)
    window = [("-z",), ("-d",), ("-d",)]
    assert calls == [("-i", "on"), *window * 4, ("-i", "off")]  # cell and training steps


def test_the_mtree_cells_are_counted_on_sick_trees_without_a_training_step(monkeypatch,
                                                                           sample_data):
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(hi, "_control", lambda *flags: calls.append(flags))
    args = hi.parse_args(["--src", str(sample_data), "--cells", "nary", "mtree", "--path",
                          "general", "--train", "--steps", "1", "--trees", "3", "--inner",
                          "unused"])
    assert hi._labels(args) == [("nary", "cell"), ("nary", "train"), ("mtree", "cell")]
    graphs, kw = hi._trees(hi._kind("mtree"), sample_data, 3)
    assert len(graphs) == 3 and kw["num_relations"] > 1
    assert all(G.REL in g.edata for g in graphs)
    hi._inner(args)
    window = [("-z",), ("-d",), ("-d",)]
    assert calls == [("-i", "on"), *window * 3, ("-i", "off")]


def test_a_missing_sick_folder_is_named(tmp_path):
    (tmp_path / "sst" / "trees").mkdir(parents=True)
    (tmp_path / "sst" / "trees" / "train.txt").write_text("(1 (1 a))\n")
    with pytest.raises(SystemExit, match="sick/stanford_parsed/rels_set.txt not found"):
        hi.main(["--src", str(tmp_path), "--cells", "mtree"])


def test_the_sequential_cells_are_counted_on_the_sst_words_as_chains(monkeypatch,
                                                                     sample_data):
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(hi, "_control", lambda *flags: calls.append(flags))
    args = hi.parse_args(["--src", str(sample_data), "--cells", "lstm", "bilstm2", "--path",
                          "general", "--train", "--steps", "1", "--trees", "3", "--inner",
                          "unused"])
    assert hi._labels(args) == [("lstm", "cell"), ("bilstm2", "cell")]  # no training step
    trees, _ = hi._trees("sst", sample_data, 3)
    chains, kw = hi._trees(hi._kind("lstm"), sample_data, 3)
    assert kw == {} and [g.num_nodes() for g in chains] == [
        int((g.ndata[G.WORD] >= 0).sum()) for g in trees]  # each tree's words, one a node
    assert all(g.in_degrees().max() <= 1 for g in chains)
    hi._inner(args)
    assert calls == [("-i", "on"), *[("-z",), ("-d",), ("-d",)] * 2, ("-i", "off")]


def test_new_batches_add_a_training_step_on_batches_in_turn(monkeypatch, sample_data):
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(hi, "_control", lambda *flags: calls.append(flags))
    args = hi.parse_args(["--src", str(sample_data), "--cells", "nary", "mtree", "--path",
                          "general", "--new-batches", "5", "--steps", "5", "--trees", "1",
                          "--inner", "unused"])
    assert hi._labels(args) == [("nary", "cell"), ("nary", "train-new"), ("mtree", "cell")]
    hi._inner(args)
    window = [("-z",), ("-d",), ("-d",)]
    assert calls == [("-i", "on"), *window * 3, ("-i", "off")]
    for bad in (["--new-batches", "4"], ["--new-batches", "6", "--steps", "10"]):
        with pytest.raises(SystemExit):
            hi.parse_args(["--src", str(sample_data), *bad])
