import random

import dgl
import pytest
import torch

from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel
from gnn_treelstm.trees.graph import NO_WORD, WORD
from tests.handbuilt import chain, random_batch, random_dependency_tree


def _cfg(**kw):
    base = dict(task="sst-5", cell="nary", vocab_size=50, emb_dim=6, hidden=5)
    base.update(kw)
    return ModelConfig(**base)


def test_no_word_rows_are_masked():
    g = dgl.batch(random_batch(0, 4, words="leaves", exact_children=True))
    m = TreeLSTMModel(_cfg())
    x = m.embed(g)
    no_word = g.ndata[WORD] == NO_WORD
    assert no_word.any() and (x[no_word] == 0).all() and (x[~no_word] != 0).any()
    torch.testing.assert_close(x[~no_word], m.embedding.weight[g.ndata[WORD][~no_word]])
    out = m(g)
    out["root_logits"].sum().backward()
    # row 0 ("<unk>") gets no gradient from NO_WORD nodes unless a real word 0 occurs
    if not (g.ndata[WORD] == 0).any():
        assert m.embedding.weight.grad[0].abs().sum() == 0


def test_embedding_modes_and_pretrained_vectors():
    fixed = TreeLSTMModel(_cfg(embeddings_mode="fixed"))
    emb, rest = fixed.parameter_groups()
    assert emb == [] and not fixed.embedding.weight.requires_grad and rest
    tuned = TreeLSTMModel(_cfg())
    emb, rest = tuned.parameter_groups()
    assert len(emb) == 1 and emb[0] is tuned.embedding.weight
    assert all(p is not tuned.embedding.weight for p in rest)
    w = torch.randn(50, 6)
    tuned.load_embeddings(w)
    torch.testing.assert_close(tuned.embedding.weight.detach(), w)
    with pytest.raises(ValueError, match="--emb-dim 7"):
        tuned.load_embeddings(torch.randn(50, 7))
    rnd = TreeLSTMModel(_cfg(embeddings_mode="random"))
    assert rnd.embedding.weight.abs().max() <= 0.05


def test_config_round_trip_and_validation():
    cfg = _cfg(cell="mtree", num_relations=7, cell_kwargs={"rel_size": 3}, task="sick-r")
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown fields"):
        ModelConfig.from_dict({**cfg.to_dict(), "bogus": 1})
    with pytest.raises(ValueError, match="embeddings mode"):
        TreeLSTMModel(_cfg(embeddings_mode="glove"))
    with pytest.raises(ValueError, match="engine"):
        TreeLSTMModel(_cfg(engine="cuda"))
    with pytest.raises(KeyError, match="unknown cell 'tree'"):
        TreeLSTMModel(_cfg(cell="tree"))
    m = TreeLSTMModel(cfg)
    assert m.cell.num_relations == 7       # passed because the factory takes it


def test_pairs_are_encoded_together_with_shared_weights():
    rng = random.Random(1)
    a = [random_dependency_tree(rng, rng.randint(2, 7)) for _ in range(3)]
    b = [random_dependency_tree(rng, rng.randint(2, 7)) for _ in range(3)]
    m = TreeLSTMModel(_cfg(task="sick-e", cell="childsum", dropout=0.0)).eval()
    enc = m.encode(dgl.batch(a), dgl.batch(b))
    assert enc.num_a == 3 and enc.sent.shape == (6, 5)
    alone_a = m.encode(dgl.batch(a)).sent
    alone_b = m.encode(dgl.batch(b)).sent
    torch.testing.assert_close(enc.sent, torch.cat([alone_a, alone_b]))
    out = m(dgl.batch(a), dgl.batch(b))
    assert out["logits"].shape == (3, 3)
    with pytest.raises(ValueError, match="needs sentence pairs"):
        m(dgl.batch(a))
    single = TreeLSTMModel(_cfg())
    with pytest.raises(ValueError, match="single sentences"):
        single(dgl.batch(a), dgl.batch(b))


def test_word_ids_outside_vocab_are_refused():
    m = TreeLSTMModel(_cfg(vocab_size=10))
    g = chain(4, vocab_size=50, seed=3)
    g.ndata[WORD] = torch.tensor([1, 2, 30, 4])
    with pytest.raises(ValueError, match="outside the vocabulary of 10"):
        m.embed(g)


def test_sequential_cell_sentence_vector_size():
    m = TreeLSTMModel(_cfg(cell="bilstm", task="sick-r"))
    assert m.head.W_mul.in_features == 10   # final states of both directions
    g = dgl.batch([chain(3), chain(5)])
    out = m(g, dgl.batch([chain(4), chain(2)]))
    assert out["score"].shape == (2,)


def test_sentence_state_c_reads_the_root_memory_cell():
    rng = random.Random(2)
    a = [random_dependency_tree(rng, rng.randint(2, 6)) for _ in range(2)]
    b = [random_dependency_tree(rng, rng.randint(2, 6)) for _ in range(2)]
    m = TreeLSTMModel(_cfg(task="sick-e", cell="childsum", dropout=0.0,
                           sentence_state="c")).eval()
    g = dgl.batch(a + b)
    h, c = m.cell(g, m.embed(g))
    from gnn_treelstm.trees.graph import batch_roots

    enc = m.encode(dgl.batch(a), dgl.batch(b))
    torch.testing.assert_close(enc.sent, c[batch_roots(g)])
    assert not torch.allclose(enc.sent, h[batch_roots(g)])
    hm = TreeLSTMModel(_cfg(task="sick-e", cell="childsum", sentence_state="h"))
    assert hm.sentence_state == "h"
    with pytest.raises(ValueError, match="unknown sentence state 'x'"):
        TreeLSTMModel(_cfg(task="sick-e", cell="childsum", sentence_state="x"))
    with pytest.raises(ValueError, match="sentence_state 'h'"):
        TreeLSTMModel(_cfg(task="sst-5", cell="bitree", sentence_state="c"))


def test_head_kwargs_reach_the_head_and_bad_ones_are_named():
    m = TreeLSTMModel(_cfg(task="sick-e", cell="childsum",
                           head_kwargs={"features": "abs", "activation": "relu"}))
    assert m.head.features == "abs" and m.head.activation == "relu"
    with pytest.raises(ValueError, match="bad head option"):
        TreeLSTMModel(_cfg(task="sst-5", head_kwargs={"features": "abs"}))


def test_a_cell_whose_sentence_vector_width_is_not_declared_is_named():
    """A cell of one's own with a sentence vector wider than out_size, and no sentence_size:
    the model says what to override instead of a matrix-shape error from torch."""
    from gnn_treelstm.cells.childsum import ChildSumTreeLSTM
    from gnn_treelstm.trees.graph import batch_roots, make_tree

    class Wide(ChildSumTreeLSTM):
        def sentence_vector(self, graph, h):
            r = h[batch_roots(graph)]
            return torch.cat([r, r], dim=-1)

    model = TreeLSTMModel(ModelConfig(task="sst-5", cell="childsum", vocab_size=5, emb_dim=4,
                                      hidden=3))
    model.cell = Wide(4, 3)
    model.has_sentence_vector = True
    g = dgl.batch([make_tree([-1, 0], [1, 2])])
    with pytest.raises(ValueError, match="Wide.sentence_vector returns rows of 6 but its "
                                         "sentence_size is 3"):
        model(g)


def test_the_schedule_gives_the_roots_the_graph_has(monkeypatch):
    """With the batch's schedule the model reads the roots the schedule carries (not the
    graph's out-degrees on every forward): the same sentence vectors, logits and loss
    gradient; a batch whose graphs are not single trees is still refused."""
    from gnn_treelstm.trees import graph as G
    from gnn_treelstm.trees.graph import make_tree
    from gnn_treelstm.trees.schedule import LevelSchedule

    g = dgl.batch(random_batch(4, 6, words="leaves", exact_children=True))
    sched = LevelSchedule.from_graph(g)
    assert torch.equal(sched.roots, G.batch_roots(g))
    m = TreeLSTMModel(_cfg(engine="level")).eval()
    want = m.encode(g)
    monkeypatch.setattr(G, "batch_roots", lambda graph: pytest.fail("graph's roots read"))
    got = m.encode(g, schedule=sched)
    assert torch.equal(got.roots, want.roots) and torch.equal(got.sent, want.sent)
    monkeypatch.undo()
    # two graphs, the second holding two one-node trees
    forest = dgl.batch([make_tree([-1, 0, 0], [1, -1, 2]), make_tree([-1], [3]),
                        make_tree([-1], [4])])
    forest.set_batch_num_nodes(torch.tensor([3, 2]))
    forest.set_batch_num_edges(torch.tensor([2, 0]))
    with pytest.raises(ValueError, match="batch of 2 graphs has 3 roots"):
        m.encode(forest, schedule=LevelSchedule.from_graph(forest))
