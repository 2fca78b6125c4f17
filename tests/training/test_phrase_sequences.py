"""``--supervision phrase-sequences``: every labelled phrase of a sentence as its own chain
(Teng & Zhang's BiLSTM baseline), every copy of a repeated phrase its own chain, root
accuracy read on the sentences' own chains."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import dgl
import pytest
import torch

from gnn_treelstm.commands import analyze, evaluate, train
from gnn_treelstm.tasks import build_task
from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.data import prepare_data
from gnn_treelstm.trees import data as D
from gnn_treelstm.trees.graph import IGNORE, NO_WORD, make_tree
from gnn_treelstm.trees.phrases import phrase_sequences

ROOT = Path(__file__).resolve().parents[2]


def _sentence(words: list[int], labels: dict[tuple[int, int], int]) -> tuple:
    """A left-branching binary constituency tree over ``words`` (labels by span) and its
    chain (root labelled with the sentence's label)."""
    n = len(words)
    parents, spans, node_words = [-1] * n, [(i, i + 1) for i in range(n)], list(words)
    left = 0  # node covering [0, k)
    for k in range(2, n + 1):
        parents[left] = len(parents)
        parents[k - 1] = len(parents)
        left = len(parents)
        parents.append(-1)
        spans.append((0, k))
        node_words.append(NO_WORD)
    cons = make_tree(parents, node_words, spans=spans,
                     labels=[labels.get(tuple(s), IGNORE) for s in spans])
    chain = make_tree(list(range(1, n)) + [-1], words, spans=[(0, i + 1) for i in range(n)],
                      labels=[IGNORE] * (n - 1) + [labels[(0, n)]])
    return chain, cons


def _splits(sentences: list[tuple[list[int], dict]]) -> tuple[D.Split, D.Split]:
    pairs = [_sentence(w, lab) for w, lab in sentences]
    gold = torch.tensor([lab[(0, len(w))] for w, lab in sentences])
    return (D.Split([c for c, _ in pairs], None, {"label": gold}, "dev", "chain"),
            D.Split([t for _, t in pairs], None, {"label": gold}, "dev", "constituency"))


SENTENCES = [
    ([5, 6, 7], {(0, 1): 2, (1, 2): 3, (2, 3): 1, (0, 2): 3, (0, 3): 4}),
    ([6, 8], {(0, 1): 3, (1, 2): 2, (0, 2): 1}),      # (6,) again with label 3
    ([6], {(0, 1): 0}),                               # (6,) with another label
]


def test_each_labelled_phrase_is_a_chain_of_its_words_labelled_at_its_root():
    chains, cons = _splits(SENTENCES)
    out = phrase_sequences(chains, cons)
    got = sorted((tuple(g.ndata["word"].tolist()), int(g.ndata["label"][-1]), bool(s))
                 for g, s in zip(out.graphs, out.targets["sentence"]))
    assert got == sorted([((5,), 2, False), ((6,), 3, False), ((7,), 1, False),
                          ((5, 6), 3, False), ((5, 6, 7), 4, True), ((6,), 3, False),
                          ((8,), 2, False), ((6, 8), 1, True), ((6,), 0, True)])
    for g in out.graphs:  # a chain: word i -> word i+1, only the root labelled
        n = g.num_nodes()
        assert g.edges()[0].tolist() == list(range(n - 1))
        assert g.edges()[1].tolist() == list(range(1, n))
        assert (g.ndata["label"][:-1] == IGNORE).all()
    assert out.targets["label"].tolist() == [int(g.ndata["label"][-1]) for g in out.graphs]


def test_the_loss_is_the_mean_nll_of_the_chains_roots():
    """Every chain weighs the same, as every labelled node of a tree does: the loss of a
    batch holding a phrase twice is its two copies' NLL among the others'."""
    task = build_task("sst-5", supervision="phrase-sequences")
    logits = torch.randn(3, 5)
    gold = torch.tensor([1, 4, 1])

    class B:  # a batch as the task reads it
        def __init__(self, targets):
            self.targets = targets

    got = task.loss({"root_logits": logits[[0, 1, 0]]},
                    B({"label": gold[[0, 1, 0]], "sentence": torch.tensor([1, 0, 0]).bool()}))
    nll = torch.nn.functional.cross_entropy(logits, gold, reduction="none")
    torch.testing.assert_close(got, (2 * nll[0] + nll[1]) / 3)


def test_mismatched_chain_and_constituency_data_is_refused():
    chains, cons = _splits(SENTENCES)
    other, _ = _splits([([9, 6, 7], SENTENCES[0][1])] + SENTENCES[1:])
    with pytest.raises(ValueError, match="not the same sentences"):
        phrase_sequences(other, cons)
    with pytest.raises(ValueError, match="2 chains against 3"):
        phrase_sequences(D.Split(chains.graphs[:2], None,
                                 {"label": chains.targets["label"][:2]}), cons)


@pytest.fixture
def aligned_sst(tiny_sst, tmp_path) -> Path:
    """The tiny SST data with chains made from its constituency trees (the same words)."""
    data = tmp_path / "sst"
    shutil.copytree(tiny_sst / "sst", data)
    for split in ("train", "dev", "test"):
        cons = D.load_split(data, split, "constituency")
        chains = []
        for t in cons.graphs:
            spans, words = t.ndata["span"].tolist(), t.ndata["word"].tolist()
            leaves = sorted((a, w) for (a, b), w in zip(spans, words) if w != NO_WORD)
            n = len(leaves)
            chains.append(make_tree(list(range(1, n)) + [-1], [w for _, w in leaves],
                                    spans=[(0, i + 1) for i in range(n)],
                                    labels=[IGNORE] * (n - 1) + [int(t.ndata["label"][
                                        t.ndata["root"].bool()][0])]))
        dgl.save_graphs(str(data / "chain" / f"{split}.bin"), chains, dict(cons.targets))
    return data


def test_a_bilstm_trains_on_phrase_sequences_and_evaluates_as_it_trained(
        aligned_sst, tmp_path, capsys):
    args = ["--data", str(aligned_sst), "--runs-dir", str(tmp_path / "runs"), "--name", "p",
            "--task", "sst-5", "--model", "bilstm", "--tree", "chain", "--supervision",
            "phrase-sequences", "--epochs", "2", "--batch-size", "16", "--embeddings-mode",
            "random", "--emb-dim", "6", "--hidden", "5", "-q"]
    assert train.main(args) == 0
    res = json.loads((tmp_path / "runs" / "p" / "results.json").read_text())
    test = res["seeds"][0]["test"]
    assert test["count"] == 8  # root accuracy: the 8 test sentences
    assert set(test) >= {"accuracy", "phrase_accuracy"}
    capsys.readouterr()
    assert evaluate.main([str(tmp_path / "runs" / "p" / "best.pt"), "--split", "test",
                          "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    metrics = got.get("metrics", got)
    assert metrics["accuracy"] == pytest.approx(test["accuracy"])
    assert metrics["phrase_accuracy"] == pytest.approx(test["phrase_accuracy"])

    # root accuracy against sentence length: the sentences' chains, one point per length
    table = tmp_path / "length.md"
    assert analyze.main(["length", str(tmp_path / "runs" / "p"), "--split", "test",
                         "--min-count", "1", "--out", str(tmp_path / "length.png"),
                         "--table", str(table)]) == 0
    rows = [line.split("|") for line in table.read_text().splitlines()
            if line.startswith("| ") and line.split("|")[2].strip().isdigit()]
    assert rows and all(int(r[4]) <= 8 for r in rows)  # windows of the 8 test sentences

    # phrase accuracy by phrase length (scripts/phrase_length_accuracy.py): every phrase
    spec = importlib.util.spec_from_file_location(
        "phrase_length_accuracy", ROOT / "scripts" / "phrase_length_accuracy.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    by_len = probe.by_length(str(tmp_path / "runs" / "p" / "best.pt"), "test")
    cons = D.load_split(aligned_sst, "test", "constituency")
    labelled = sum(int((t.ndata["label"] != IGNORE).sum()) for t in cons.graphs)
    assert by_len["all"]["phrases"] == labelled
    assert by_len["all"]["accuracy"] == pytest.approx(test["phrase_accuracy"])
    assert sum(r["phrases"] for name, r in by_len.items() if name != "all") == labelled


def test_phrase_sequences_need_chain_trees(aligned_sst, tmp_path, capsys):
    rc = train.main(["--data", str(aligned_sst), "--runs-dir", str(tmp_path), "--task",
                     "sst-5", "--model", "bilstm", "--tree", "constituency", "--supervision",
                     "phrase-sequences", "--epochs", "1", "-q"])
    assert rc == 2 and "pass --tree chain" in capsys.readouterr().err


def test_training_reads_every_labelled_phrase_of_every_tree(aligned_sst):
    """The training split is one chain per labelled node of the constituency trees,
    repeated phrases included (a phrase and its copies weigh as the tree nodes do)."""
    cfg = RunConfig(task="sst-5", model="bilstm", tree="chain",
                    supervision="phrase-sequences", data=str(aligned_sst))
    task = build_task("sst-5", supervision="phrase-sequences")
    rd = prepare_data(cfg, task)
    for name, sp in rd.splits.items():
        cons = task.prepare_split(D.load_split(aligned_sst, name, "constituency"))
        labelled = sum(int((t.ndata["label"] != IGNORE).sum()) for t in cons.graphs)
        assert len(sp) == labelled, name
        assert int(sp.targets["sentence"].sum()) == len(cons), name
        phrases = [tuple(g.ndata["word"].tolist()) for g in sp.graphs]
        if name == "train":
            assert len(set(phrases)) < len(phrases)  # the tiny set repeats phrases
        assert "weight" not in sp.targets
