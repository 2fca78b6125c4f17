from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gnn_treelstm.tasks import Encoded, build_task
from gnn_treelstm.tasks.inference import InferenceHead, subset_masks


def _enc(h_p, h_h):
    b = h_p.shape[0]
    return Encoded(graph=None, h=torch.cat([h_p, h_h]), sent=torch.cat([h_p, h_h]),
                   roots=torch.arange(2 * b), num_a=b)


def test_features_hidden_layer_and_softmax():
    head = InferenceHead(2, hidden=3, dropout=0.0)
    h_p, h_h = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, -1.0]])
    out = head(_enc(h_p, h_h))
    x_c = torch.tensor([[1.0, 2.0, 0.5, -1.0, 0.5, 3.0, 0.5, -2.0]])  # [P; H; P-H; P⊙H]
    expected = head.W_p(torch.sigmoid(head.W_c(x_c)))
    torch.testing.assert_close(out["logits"], expected)


def test_subsets_of_tran_table3():
    tokens = [
        ("a man is playing a guitar".split(), "a man is not playing a guitar".split()),
        ("there is no man playing".split(), "a man is not playing".split()),  # in both
        (["w"] * 18, "a man plays".split()),                                  # long premise
        ("a dog runs".split(), "the dog does n't run".split()),
        ("a dog runs".split(), "No dog runs".split()),                        # case-insensitive
    ]
    m = subset_masks(tokens)
    assert m["ls"].tolist() == [False, False, True, False, False]
    assert m["negation"].tolist() == [True, False, False, True, True]


def test_sick_e_metrics_with_subsets():
    task = build_task("sick-e")
    gathered = {"pred": np.array([0, 1, 2, 1]), "gold": np.array([0, 1, 1, 2])}
    tokens = [(["w"] * 20, ["x"]), (["a"], ["not"]), (["w"] * 18, ["not"]), (["a"], ["b"])]
    m = task.metrics(gathered, tokens)
    assert m["accuracy"] == 0.5
    assert m["accuracy_ls"] == 0.5 and m["count_ls"] == 2            # examples 0, 2
    assert m["accuracy_negation"] == 0.5 and m["count_negation"] == 2  # examples 1, 2
    assert "accuracy_ls" not in build_task("snli").metrics(gathered, tokens)


def test_loss_and_describe():
    task = build_task("snli")
    head = task.build_head(4, 4, hidden=task.head_hidden(None), dropout=0.5)
    assert head.W_c.out_features == 50  # Tran §6.1
    out = head(_enc(torch.randn(2, 4), torch.randn(2, 4)))
    batch = SimpleNamespace(targets={"label": torch.tensor([0, 2])})
    loss = task.loss(out, batch)
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(out["logits"],
                                                                       batch.targets["label"]))
    assert task.describe(out, 0, ["entailment", "neutral", "contradiction"]).split()[0] in {
        "entailment", "neutral", "contradiction"}
    with pytest.raises(ValueError, match="hidden layer"):
        task.head_hidden(0)


def test_code_features_and_relu_hidden_layer():
    head = InferenceHead(2, hidden=3, dropout=0.0, features="abs", activation="relu")
    h_p, h_h = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, -1.0]])
    out = head(_enc(h_p, h_h))
    x_c = torch.tensor([[1.0, 2.0, 0.5, -1.0, 0.5, -2.0, 0.5, 3.0]])  # [P; H; P⊙H; |P-H|]
    expected = head.W_p(torch.relu(head.W_c(x_c)))
    torch.testing.assert_close(out["logits"], expected)
    from gnn_treelstm.tasks.inference import pair_features

    # |P-H| is the same for the swapped pair, P-H changes sign
    assert torch.equal(pair_features(h_p, h_h, "abs")[:, 6:], pair_features(h_h, h_p, "abs")[:, 6:])
    assert torch.equal(pair_features(h_p, h_h)[:, 4:6], -pair_features(h_h, h_p)[:, 4:6])


def test_bad_head_options_name_the_choices():
    with pytest.raises(ValueError, match="choose one of: paper, abs"):
        InferenceHead(2, features="concat")
    with pytest.raises(ValueError, match="choose one of: sigmoid, relu, tanh"):
        InferenceHead(2, activation="gelu")


def test_record_names_the_pair_label():
    task = build_task("sick-e")
    out = {"logits": torch.tensor([[0.0, 2.0, 0.0]])}
    rec = task.record(out, 0, ["entailment", "neutral", "contradiction"])
    assert rec["label"] == "neutral" and sum(rec["probabilities"].values()) == pytest.approx(1)
    with pytest.raises(ValueError, match="one label per pair"):
        task.node_records(out, slice(0, 1), None)
