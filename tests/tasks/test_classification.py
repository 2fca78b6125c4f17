import random
from types import SimpleNamespace

import dgl
import pytest
import torch
from torch.nn import functional as F

from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel
from gnn_treelstm.tasks import Encoded, build_task, tasks
from gnn_treelstm.tasks.classification import ClassifierHead
from gnn_treelstm.trees.data import Split
from gnn_treelstm.trees.graph import IGNORE, LABEL, batch_roots, make_tree
from tests.handbuilt import random_batch


def test_registry_has_the_papers_tasks_and_the_custom_ones():
    assert tasks.names() == ["classify", "pair-classify", "pair-score", "sick-e", "sick-r",
                             "snli", "sst-2", "sst-5", "trec"]
    with pytest.raises(KeyError, match="unknown task 'sst-3'; choose one of: classify"):
        build_task("sst-3")
    with pytest.raises(ValueError, match="--supervision phrase or root"):
        build_task("sst-5", supervision="nodes")
    with pytest.raises(ValueError, match="--supervision root"):
        build_task("trec", supervision="phrase")
    assert build_task("sst-5").supervision == "phrase"   # Tai: every labelled node


def _batch(seed=0, count=4):
    g = dgl.batch(random_batch(seed, count, words="leaves", exact_children=True))
    roots = batch_roots(g)
    return SimpleNamespace(graph=g, graph_b=None, targets={"label": g.ndata[LABEL][roots]})


def test_phrase_loss_sums_labelled_nodes_per_tree():
    batch = _batch()
    g = batch.graph
    lab = g.ndata[LABEL].clone()
    lab[::3] = IGNORE                      # some unlabelled nodes
    lab[batch_roots(g)] = batch.targets["label"]
    g.ndata[LABEL] = lab
    task = build_task("sst-5", supervision="phrase")
    logits = torch.randn(g.num_nodes(), 5)
    out = {"root_logits": logits[batch_roots(g)], "node_logits": logits}
    mask = lab != IGNORE
    manual = sum(F.cross_entropy(logits[i:i + 1], lab[i:i + 1]) for i in range(len(lab))
                 if mask[i]) / g.batch_size
    torch.testing.assert_close(task.loss(out, batch), manual)
    root_task = build_task("sst-5", supervision="root")
    torch.testing.assert_close(root_task.loss(out, batch),
                               F.cross_entropy(out["root_logits"], batch.targets["label"]))


@pytest.mark.parametrize("seed", range(4))
def test_phrase_loss_equals_the_masked_loss_to_the_bit(seed):
    """The unlabelled nodes are ignored in place (no boolean mask, whose size a GPU must
    be asked for): the loss and its gradient are bitwise those of the labelled rows'."""
    gen = torch.Generator().manual_seed(seed)
    n = 300 + 97 * seed
    lab = torch.randint(0, 5, (n,), generator=gen)
    lab[torch.rand(n, generator=gen) < 0.2 * (seed + 1)] = IGNORE
    logits = torch.randn(n, 5, generator=gen, requires_grad=True)
    batch = SimpleNamespace(graph=SimpleNamespace(ndata={LABEL: lab}))
    _assert_phrase_loss_is_the_masked_loss(batch, lab, logits, roots=7)


def _assert_phrase_loss_is_the_masked_loss(batch, lab: torch.Tensor, logits: torch.Tensor,
                                           roots: int) -> None:
    """The SST-5 phrase loss of ``batch`` (its first ``roots`` rows the roots) and its
    gradient are bitwise those of the labelled rows' summed cross-entropy over ``roots``."""
    out = {"root_logits": logits[:roots], "node_logits": logits}
    got = build_task("sst-5", supervision="phrase").loss(out, batch)
    g_got, = torch.autograd.grad(got, logits)
    mask = lab != IGNORE
    want = F.cross_entropy(logits[mask], lab[mask], reduction="sum") / roots
    g_want, = torch.autograd.grad(want, logits)
    assert torch.equal(got, want) and torch.equal(g_got, g_want)


def test_phrase_loss_reads_the_batchs_label_order(monkeypatch):
    """The order of the labelled rows comes with the batch (``collate`` makes it once):
    the loss does not sort the labels, and is bitwise the masked loss."""
    from gnn_treelstm.tasks import classification
    from gnn_treelstm.trees.data import label_order

    gen = torch.Generator().manual_seed(7)
    lab = torch.randint(0, 5, (211,), generator=gen)
    lab[torch.rand(211, generator=gen) < 0.4] = IGNORE
    logits = torch.randn(211, 5, generator=gen, requires_grad=True)
    batch = SimpleNamespace(graph=SimpleNamespace(ndata={LABEL: lab}),
                            label_order=label_order(lab))

    def no_sort(labels):
        raise AssertionError("the loss sorted the labels")

    monkeypatch.setattr(classification, "label_order", no_sort)
    _assert_phrase_loss_is_the_masked_loss(batch, lab, logits, roots=5)


def test_metrics_root_and_all_phrase_accuracy():
    task = build_task("sst-5")
    batch = _batch(1, 3)
    g = batch.graph
    logits = F.one_hot(g.ndata[LABEL].clamp(min=0), 5).float()  # every node right
    roots = batch_roots(g)
    logits[roots[0]] = F.one_hot(torch.tensor((int(batch.targets["label"][0]) + 1) % 5), 5)
    out = {"root_logits": logits[roots], "node_logits": logits}
    m = task.metrics(task.gather(out, batch))
    assert m["accuracy"] == pytest.approx(2 / 3)
    assert m["phrase_accuracy"] == pytest.approx(1 - 1 / g.num_nodes())


def _enc(node_h, sent, roots, num_a):
    return Encoded(graph=None, h=node_h, sent=sent, roots=roots, num_a=num_a)


def test_classifier_head_roots_read_the_sentence_vector():
    head = ClassifierHead(4, 6, 5, hidden=7, dropout=0.0, node_outputs=True)
    assert head.sent_in is not None and head.out.in_features == 7   # eq 17 hidden layer
    h, sent, roots = torch.randn(5, 4), torch.randn(2, 6), torch.tensor([2, 4])
    out = head(_enc(h, sent, roots, 2))
    torch.testing.assert_close(out["node_logits"][roots], out["root_logits"])
    expected_root = head.out(F.relu(head.sent_in(sent)))
    torch.testing.assert_close(out["root_logits"], expected_root)
    torch.testing.assert_close(out["node_logits"][0], head.out(F.relu(head.node_in(h[0]))))
    plain = ClassifierHead(4, 4, 3, dropout=0.0)                     # Tai §4.1: linear
    assert plain.out is None and plain.sent_in is None
    o = plain(_enc(h, h[roots], roots, 2))
    torch.testing.assert_close(o["root_logits"], plain.node_in(h[roots]))


def test_teng_cells_get_the_eq17_hidden_layer():
    """Training gives Teng & Zhang's cells their head (the cells' ``run_defaults``); the
    model builds the head its config names."""
    from gnn_treelstm.training.config import RunConfig, build_model_config

    g = dgl.batch(random_batch(2, 3, words="leaves", exact_children=True))
    for cell, task, hidden in (("bitree", "sst-5", 128), ("bitree", "trec", 64),
                               ("nary", "sst-5", 0)):
        cfg = RunConfig(task=task, model=cell, emb_dim=6, hidden=4).resolved()
        mc = build_model_config(cfg, vocab_size=50, num_relations=1, embeddings=None,
                                emb_info={"mode": "random"})
        assert mc.teng_head == (cell == "bitree")
        m = TreeLSTMModel(mc)
        assert m.head.hidden == hidden
        out = m(g)
        assert out["root_logits"].shape == (3, m.task.num_classes)
    bi = TreeLSTMModel(ModelConfig(task="sst-5", cell="bitree", vocab_size=50, emb_dim=6,
                                   hidden=4))
    assert bi.head.node_in.in_features == 12   # node_vectors: eq 16's three parts (3h)
    assert bi.head.hidden == 0                 # a ModelConfig says which head it has
    nary = TreeLSTMModel(ModelConfig(task="sst-5", cell="nary", vocab_size=50, emb_dim=6,
                                     hidden=4, teng_head=True))
    assert nary.head.hidden == 128


def test_sst2_relabels_and_drops_neutral_roots():
    rng = random.Random(0)
    graphs, roots = [], [0, 1, 2, 3, 4]
    for r in roots:
        labels = [rng.randrange(5) for _ in range(3)]
        labels[2] = r
        graphs.append(make_tree([2, 2, -1], [1, 2, -1], labels=labels))
    split = Split(graphs, None, {"label": torch.tensor(roots)})
    out = build_task("sst-2").prepare_split(split)
    assert out.targets["label"].tolist() == [0, 0, 1, 1]
    for g, orig in zip(out.graphs, [graphs[i] for i in (0, 1, 3, 4)]):
        want = torch.tensor([[0, 0, IGNORE, 1, 1][int(v)] for v in orig.ndata[LABEL]])
        assert g.ndata[LABEL].tolist() == want.tolist()
    assert graphs[0].ndata[LABEL].max() <= 4      # the caller's graphs are untouched
    assert build_task("sst-2").label_names(None) == ["negative", "positive"]


def test_sst2_phrase_neutral_trains_neutral_phrases_and_never_predicts_them():
    # Tai et al.'s code: neutral phrases are a third class of the softmax; a prediction is
    # the larger of the negative and positive outputs
    g = make_tree([3, 3, 4, 4, -1], [1, 2, 1, 2, -1], labels=[2, 0, 1, 4, 3])
    split = Split([g, make_tree([2, 2, -1], [1, 2, -1], labels=[2, 2, 2])], None,
                  {"label": torch.tensor([3, 2])})
    task = build_task("sst-2", supervision="phrase-neutral")
    assert task.num_classes == 3 and task.predicted_classes == 2
    assert task.label_names(None) == ["negative", "positive", "neutral"]
    out_split = task.prepare_split(split)
    assert out_split.targets["label"].tolist() == [1]            # the neutral root dropped
    labels = out_split.graphs[0].ndata[LABEL]
    assert labels.tolist() == [2, 0, 0, 1, 1]                    # neutral phrase -> class 2
    assert build_task("sst-2").prepare_split(split).graphs[0].ndata[LABEL].tolist() == \
        [IGNORE, 0, 0, 1, 1]                                     # phrase: neutral unlabelled
    batch = SimpleNamespace(graph=out_split.graphs[0], graph_b=None,
                            targets={"label": out_split.targets["label"]})
    logits = torch.tensor([[0.0, 0.0, 5.0]] * 5)                 # neutral largest everywhere
    logits[0, 0] = 1.0                                           # node 0: negative over positive
    logits[4, 1] = 1.0                                           # the root: positive
    out = {"root_logits": logits[4:5], "node_logits": logits}
    # the loss counts the neutral node: the NLL of all five nodes, one tree
    torch.testing.assert_close(task.loss(out, batch),
                               F.cross_entropy(logits, labels, reduction="sum"))
    got = task.gather(out, batch)
    assert got["pred"].tolist() == [1]                           # never 2
    assert got["node_gold"].tolist() == [0, 0, 1, 1]             # neutral not scored
    assert set(got["node_pred"].tolist()) <= {0, 1}
    assert task.metrics(got)["accuracy"] == 1.0
    assert task.describe(out, 0, task.label_names(None)).startswith("positive")
    m = TreeLSTMModel(ModelConfig(task="sst-2", cell="nary", vocab_size=50, emb_dim=6,
                                  hidden=4, supervision="phrase-neutral"))
    assert m.head.node_in.out_features == 3
    assert TreeLSTMModel(ModelConfig(task="sst-2", cell="nary", vocab_size=50, emb_dim=6,
                                     hidden=4)).head.node_in.out_features == 2


def test_records_name_the_root_and_node_labels():
    task = build_task("sst-5")
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.4, 0.2, 0.1], [0.6, 0.1, 0.1, 0.1, 0.1]]))
    names = ["vn", "n", "0", "p", "vp"]
    out = {"root_logits": logits, "node_logits": logits.flip(0)}
    rec = task.record(out, 1, names)
    assert rec["label"] == "vn" and list(rec["probabilities"]) == names
    assert rec["probabilities"]["vn"] == pytest.approx(0.6, abs=1e-6)
    assert task.record(out, 0, None)["label"] == "2"  # no names: the class ids
    nodes = task.node_records(out, slice(0, 2), names)
    assert [n["label"] for n in nodes] == ["vn", "0"]
    with pytest.raises(ValueError, match="names 2 labels .* predicts 5 classes"):
        task.record(out, 0, ["a", "b"])
    with pytest.raises(ValueError, match="root supervision"):
        task.node_records({"root_logits": logits}, slice(0, 2), names)
    with pytest.raises(ValueError, match="one label per sentence"):
        build_task("trec").node_records(out, slice(0, 2), names)
