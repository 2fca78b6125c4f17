"""``gnn-treelstm analyze``: hand-built checks of each analysis's numbers, and every
subcommand end to end on tiny checkpoints (a picture and a table each, exit 2 on bad input).
"""

from __future__ import annotations

import json

import dgl
import pytest
import torch

from gnn_treelstm.analyze.curves import read_metrics
from gnn_treelstm.analyze.heads import agreement, model_heads, rule_heads
from gnn_treelstm.analyze.neighbours import mean_vectors, nearest
from gnn_treelstm.analyze.relations import relation_counts, relation_norms
from gnn_treelstm.cells.multiplicative import (
    AddTreeLSTM,
    FullTreeLSTM,
    MTreeLSTM,
    mult_transform,
)
from gnn_treelstm.commands import analyze as A
from gnn_treelstm.commands import train
from gnn_treelstm.models.checkpoint import Checkpoint
from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel
from gnn_treelstm.trees.graph import make_tree
from gnn_treelstm.trees.vocab import Vocab
from tests.tiny_data import build_tiny

PNG = b"\x89PNG\r\n\x1a\n"
TINY = ["--epochs", "2", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
        "-q", "--threads", "1"]


# ---------------------------------------------------------------- hand-built cases
#: "the film is good": tokens 0-3; dependency parents (copula: "good" is the root)
DEP_PARENTS = [1, 3, 3, -1]


def _constituency():
    """((the film) (is good)): leaves 0-3, internal 4 = [0,2), 5 = [2,4), 6 = root."""
    return make_tree([4, 4, 5, 5, 6, 6, -1], [1, 2, 3, 4, -1, -1, -1],
                     spans=[[0, 1], [1, 2], [2, 3], [3, 4], [0, 2], [2, 4], [0, 4]],
                     labels=[2, 2, 2, 3, 2, 3, 3])


def _dependency():
    return make_tree(DEP_PARENTS, [1, 2, 3, 4])


def _lex_checkpoint(head: str) -> Checkpoint:
    cfg = ModelConfig(task="sst-5", cell="lex", vocab_size=6, emb_dim=4, hidden=3,
                      cell_kwargs={"head": head})
    model = TreeLSTMModel(cfg).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        model.embedding.weight.normal_()
    vocab = Vocab()
    vocab.update(["the", "film", "is", "good", "x"])
    return Checkpoint(model, vocab, ["left", "right"], None)


def test_rule_heads_take_the_span_token_whose_head_is_outside():
    spans = [(0, 2), (2, 4), (0, 4), (1, 3), (0, 1)]
    # [0,2): film (the -> film inside); [2,4): good; [0,4): good (the root);
    # [1,3) is no subtree: film and is both point outside, same depth -> leftmost, film;
    # a one-word span is its word
    assert rule_heads(DEP_PARENTS, spans) == [1, 3, 3, 1, 0]
    # nearest the root wins over leftmost: "the" (depth 2) and "is" (depth 1) point outside
    assert rule_heads([1, 3, 3, -1], [(0, 1), (2, 3)]) == [0, 2]
    assert rule_heads([2, 2, -1, 2], [(0, 4)]) == [2]


def test_model_heads_follow_the_picked_child_down_to_a_word():
    g = _constituency()
    left = model_heads(_lex_checkpoint("left"), g, "cosine").tolist()
    right = model_heads(_lex_checkpoint("right"), g, "cosine").tolist()
    assert left == [0, 1, 2, 3, 0, 2, 0]   # x_t = x^L: cosine 1 with the left child
    assert right == [0, 1, 2, 3, 1, 3, 3]


def test_gate_rule_reads_the_mean_gate():
    ck = _lex_checkpoint("gate")
    mod = ck.model.cell.head_lexicon_module
    g = _constituency()
    with torch.no_grad():
        mod.W_z.zero_()
        mod.b_z.fill_(5.0)   # z ~ 1: the left child
        assert model_heads(ck, g, "gate").tolist() == [0, 1, 2, 3, 0, 2, 0]
        mod.b_z.fill_(-5.0)  # z ~ 0: the right child
        assert model_heads(ck, g, "gate").tolist() == [0, 1, 2, 3, 1, 3, 3]
        # the cosine reading agrees with a saturated gate
        assert model_heads(ck, g, "cosine").tolist() == [0, 1, 2, 3, 1, 3, 3]


def test_agreement_counts_internal_nodes_only():
    const, dep = [_constituency()] * 2, [_dependency()] * 2
    # rule heads of the internal nodes [0,2), [2,4), [0,4): film, good, good
    left = agreement(_lex_checkpoint("left"), const, dep, batch=1)
    assert left == {"constituents": 6, "model": 0, "leftmost": 0, "rightmost": 6}
    right = agreement(_lex_checkpoint("right"), const, dep)
    assert right == {"constituents": 6, "model": 6, "leftmost": 0, "rightmost": 6}


def test_agreement_refuses_trees_of_different_sentences():
    with pytest.raises(ValueError, match="3 tokens, its dependency tree 4"):
        agreement(_lex_checkpoint("left"),
                  [make_tree([3, 3, 4, 4, -1], [1, 2, 3, -1, -1],
                             spans=[[0, 1], [1, 2], [2, 3], [0, 2], [0, 3]])],
                  [_dependency()])


def test_relation_norms_equal_the_direct_frobenius_norm():
    torch.manual_seed(1)
    cell = MTreeLSTM(5, 4, num_relations=3, rel_size=2, m_size=6)
    with torch.no_grad():
        cell.rel_emb.weight.normal_()
    norms = relation_norms(cell)
    for r in range(3):
        e = cell.rel_emb.weight[r]
        W = cell.W_hm.weight @ torch.diag(cell.W_mr.weight @ e) @ cell.W_mh.weight
        assert torch.allclose(norms[r], torch.sqrt((W ** 2).sum()), atol=1e-6)
        h = torch.randn(7, 4)  # the matrix is the one eq 4 applies
        assert torch.allclose(h @ W.T, mult_transform(
            h, e.expand(7, -1), cell.W_mr.weight, cell.W_mh.weight, cell.W_hm.weight),
            atol=1e-5)
    full = FullTreeLSTM(5, 4, num_relations=2)
    with torch.no_grad():
        full.W_hh.copy_(torch.stack([torch.eye(4), 3 * torch.eye(4)]))
    assert relation_norms(full).tolist() == pytest.approx([2.0, 6.0])
    with pytest.raises(ValueError, match="no relation matrices"):
        relation_norms(AddTreeLSTM(5, 4, num_relations=2))


def test_relation_counts():
    g = make_tree([2, 2, -1], [1, 2, 3], rels=[1, 1, 0])
    assert relation_counts([g, g], 3) == [0, 4, 0]


def test_nearest_neighbours_on_hand_made_vectors():
    v = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0], [1.0, 0.0]])
    v = torch.nn.functional.normalize(v, dim=-1)
    best = nearest(v @ v[0], 0, 3)
    assert [i for i, _ in best] == [4, 1, 2]    # the query itself is left out
    assert best[0][1] == pytest.approx(1.0)
    assert [i for i, _ in nearest(torch.tensor([0.5, 0.5, 0.5]), 1, 5)] == [0, 2]
    emb = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [4.0, 4.0]])
    g = make_tree([2, 2, -1], [1, 2, -1])    # a word-less node is not averaged
    assert mean_vectors(emb, [g]).tolist() == [[0.5, 1.0]]


def test_read_metrics_takes_the_selection_metric(tmp_path):
    (tmp_path / "metrics.csv").write_text(
        "run_id,seed,epoch,train_loss,dev_accuracy,dev_phrase_accuracy,dev_count,best\n"
        "a,1,1,2.5,0.30,0.70,10,True\n"
        "a,1,2,2.0,0.25,0.72,10,False\n")
    (tmp_path / "results.json").write_text(json.dumps({"selection_metric": "accuracy"}))
    m = read_metrics(tmp_path / "metrics.csv")
    assert m["metric"] == "dev_accuracy" and m["dev"] == [0.30, 0.25]
    assert m["loss"] == [2.5, 2.0] and m["best"] == [True, False]
    assert read_metrics(tmp_path / "metrics.csv", "phrase_accuracy")["dev"] == [0.70, 0.72]
    with pytest.raises(ValueError, match="no column 'dev_pearson'"):
        read_metrics(tmp_path / "metrics.csv", "pearson")
    # runs before metrics.csv: metrics.jsonl, dev as an object
    (tmp_path / "x" / "old").mkdir(parents=True)
    (tmp_path / "x" / "old" / "metrics.jsonl").write_text("".join(json.dumps(
        {"seed": 1, "epoch": e, "train_loss": 1.0 / e, "dev": {"pearson": 0.5 + e / 10},
         "best": e == 2}) + "\n" for e in (1, 2)))
    m = read_metrics(tmp_path / "x" / "old" / "metrics.jsonl")
    assert m["metric"] == "dev_pearson" and m["dev"] == [0.6, 0.7]
    assert m["loss"] == [1.0, 0.5] and m["best"] == [False, True]


# ---------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny SST-5 lexicalized model and a tiny SICK-R mTreeLSTM, 2 epochs each."""
    root = tmp_path_factory.mktemp("analyze")
    for ds in ("sst", "sick"):
        build_tiny(root / "data", ds)
    common = ["--data", str(root / "data"), "--runs-dir", str(root / "runs"), *TINY]
    assert train.main(["--task", "sst-5", "--model", "lex", "--name", "lex", *common]) == 0
    assert train.main(["--task", "sick-r", "--model", "mtree", "--tree", "dependency",
                       "--name", "mtree", *common]) == 0
    return root / "runs"


def _wrote(out, table=None):
    assert out.read_bytes()[:8] == PNG
    text = (table or out.with_suffix(".md")).read_text()
    assert text.count("|---") >= 1
    return text


def test_tree(runs, tmp_path, capsys):
    out = tmp_path / "tree.png"
    assert A.main(["tree", str(runs / "lex"), "--split", "dev", "--index", "1",
                   "--out", str(out)]) == 0
    text = _wrote(out)
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "node" not in ln]
    g = dgl.load_graphs(str(runs.parent / "data" / "sst" / "constituency" / "dev.bin"))[0][1]
    assert len(rows) == g.num_nodes()
    right = sum(r.rstrip(" |").endswith("yes") for r in rows)
    assert f"right: {right}" in text
    assert "labelled nodes right" in capsys.readouterr().out


def test_tree_html(runs, tmp_path):
    pytest.importorskip("gnn_treelstm.trees.treesvg")
    assert A.main(["tree", str(runs / "lex"), "--out", str(tmp_path / "t.png"),
                   "--html", str(tmp_path / "t.html")]) == 0
    assert "<svg" in (tmp_path / "t.html").read_text()


def test_heads(runs, tmp_path):
    out, table = tmp_path / "heads.png", tmp_path / "h" / "table.md"
    assert A.main(["heads", str(runs / "lex"), "--out", str(out), "--table", str(table)]) == 0
    text = _wrote(out, table)
    assert "| dev | " in text and "| test | " in text and "30.68" in text


def test_relations(runs, tmp_path):
    out = tmp_path / "rel.png"
    assert A.main(["relations", str(runs / "mtree"), "--top", "3", "--out", str(out)]) == 0
    text = _wrote(out)
    for name in ("nsubj", "dobj", "amod", "det", "neg"):  # every relation is ranked
        assert f"| {name} |" in text


def test_neighbours(runs, tmp_path):
    out = tmp_path / "nn.png"
    rec = json.loads((runs.parent / "data" / "sick" / "text" / "test.jsonl")
                     .read_text().splitlines()[0])
    query = " ".join(rec["a"])
    assert A.main(["neighbours", str(runs / "mtree"), "--query", query, "-k", "2",
                   "--sample", "5", "--out", str(out)]) == 0
    text = _wrote(out)
    assert text.count(f"| {query} |") == 1


def test_length_and_curves(runs, tmp_path):
    assert A.main(["length", str(runs / "lex"), "--min-count", "1",
                   "--out", str(tmp_path / "len.png")]) == 0
    _wrote(tmp_path / "len.png")
    assert A.main(["curves", str(runs / "lex"), str(runs / "mtree"),
                   "--out", str(tmp_path / "c.png")]) == 0
    text = _wrote(tmp_path / "c.png")
    assert text.count("| lex | ") == 2 and "best" in text


@pytest.mark.parametrize("argv, message", [
    (["relations", "{lex}"], "needs one of: mtree, mtree-full"),
    (["heads", "{mtree}"], "has no head lexicon"),
    (["tree", "{lex}", "--index", "99"], "--index 99"),
    (["tree", "{mtree}"], "a sick-r model does not classify sentences"),
    (["neighbours", "{lex}"], "needs one of: sick-r"),
    (["neighbours", "{mtree}", "--query", "not a sentence"], "is not a sentence"),
    (["curves", "{data}"], "no metrics.csv or metrics.jsonl"),
])
def test_bad_input_exits_2(runs, tmp_path, capsys, argv, message):
    paths = {"lex": runs / "lex", "mtree": runs / "mtree", "data": runs.parent / "data"}
    argv = [a.format(**paths) for a in argv] + ["--out", str(tmp_path / "x.png")]
    assert A.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_picture_suffix_is_checked(runs, tmp_path, capsys):
    assert A.main(["curves", str(runs / "lex"), "--out", str(tmp_path / "x.txt")]) == 2
    assert ".png, .svg, .pdf" in capsys.readouterr().err
