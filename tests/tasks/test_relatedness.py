import math
from types import SimpleNamespace

import pytest
import torch

from gnn_treelstm.tasks import Encoded, build_task
from gnn_treelstm.tasks.relatedness import RelatednessHead, kl_loss, sparse_target


def test_sparse_target_by_hand():
    p = sparse_target(torch.tensor([3.6, 1.0, 5.0, 2.0, 4.25]))
    expected = torch.tensor([
        [0.0, 0.0, 0.4, 0.6, 0.0],    # y = 3.6: p_3 = 4 - 3.6 = 0.4, p_4 = 3.6 - 3 = 0.6
        [1.0, 0.0, 0.0, 0.0, 0.0],    # y = 1
        [0.0, 0.0, 0.0, 0.0, 1.0],    # y = 5 = K (no class 6)
        [0.0, 1.0, 0.0, 0.0, 0.0],    # y = 2
        [0.0, 0.0, 0.0, 0.75, 0.25],  # y = 4.25
    ])
    torch.testing.assert_close(p, expected)
    r = torch.arange(1.0, 6.0)
    torch.testing.assert_close(p @ r, torch.tensor([3.6, 1.0, 5.0, 2.0, 4.25]))  # y = rᵀp


def test_sparse_target_rejects_out_of_range_scores():
    with pytest.raises(ValueError, match=r"\[1, 5\]"):
        sparse_target(torch.tensor([0.5, 3.0]))
    with pytest.raises(ValueError, match=r"\[1, 5\]"):
        sparse_target(torch.tensor([5.5]))


def _enc(h_l: torch.Tensor, h_r: torch.Tensor) -> Encoded:
    b = h_l.shape[0]
    return Encoded(graph=None, h=torch.cat([h_l, h_r]), sent=torch.cat([h_l, h_r]),
                   roots=torch.arange(2 * b), num_a=b)


def test_expected_score_and_kl_by_hand():
    head = RelatednessHead(3, hidden=2)
    q = torch.tensor([0.1, 0.2, 0.3, 0.2, 0.2])
    with torch.no_grad():
        head.W_p.weight.zero_()
        head.W_p.bias.copy_(q.log())             # p̂ = softmax(log q) = q for any input
    out = head(_enc(torch.randn(2, 3), torch.randn(2, 3)))
    # ŷ = rᵀp̂ = 1(0.1) + 2(0.2) + 3(0.3) + 4(0.2) + 5(0.2) = 3.2
    torch.testing.assert_close(out["score"], torch.tensor([3.2, 3.2]))
    target = sparse_target(torch.tensor([3.6, 1.0]))
    # KL(p‖q): 0.4 ln(0.4/0.3) + 0.6 ln(0.6/0.2) and 1 ln(1/0.1); batch mean
    kl = ((0.4 * math.log(0.4 / 0.3) + 0.6 * math.log(0.6 / 0.2)) + math.log(1 / 0.1)) / 2
    assert float(kl_loss(out["log_probs"], target).detach()) == pytest.approx(kl, rel=1e-5)
    torch.testing.assert_close(
        kl_loss(out["log_probs"], target),
        torch.nn.functional.kl_div(out["log_probs"], target, reduction="batchmean"))


def test_distance_and_angle_features_eq15():
    head = RelatednessHead(2, hidden=2)
    with torch.no_grad():
        head.W_mul.weight.copy_(torch.eye(2))      # W^(×) = I
        head.W_abs.weight.copy_(2 * torch.eye(2))  # W^(+) = 2I
        head.W_abs.bias.fill_(0.5)
        head.W_p.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0, 0], [0, 0], [0, 0]]))
        head.W_p.bias.zero_()
    h_l, h_r = torch.tensor([[1.0, -2.0]]), torch.tensor([[3.0, 0.5]])
    out = head(_enc(h_l, h_r))
    h_s = torch.sigmoid(h_l * h_r + 2 * (h_l - h_r).abs() + 0.5)  # [σ(3+4.5), σ(-1+5+.5)]
    logits = torch.cat([h_s, torch.zeros(1, 3)], dim=1)
    torch.testing.assert_close(out["log_probs"], torch.log_softmax(logits, -1))
    torch.testing.assert_close(out["score"], torch.softmax(logits, -1) @ torch.arange(1.0, 6))


def test_task_loss_metrics_and_defaults():
    task = build_task("sick-r")
    assert task.pair and task.dataset == "sick" and task.selection_metric == "pearson"
    assert task.default_dropout == 0.0 and task.head_hidden(None) == 50   # Tai §5.2-5.3
    with pytest.raises(ValueError, match="hidden layer"):
        task.head_hidden(0)
    head = task.build_head(4, 4, hidden=50, dropout=0.0)
    out = head(_enc(torch.randn(3, 4), torch.randn(3, 4)))
    batch = SimpleNamespace(targets={"score": torch.tensor([1.5, 4.0, 2.2])})
    loss = task.loss(out, batch)
    assert loss.ndim == 0 and float(loss.detach()) > 0
    gathered = task.gather(out, batch)
    m = task.metrics(gathered)
    assert set(m) >= {"pearson", "spearman", "mse"} and m["count"] == 3
    assert task.better(0.8, 0.7) and not task.better(0.6, 0.7) and task.better(0.1, None)


def test_record_is_the_expected_score_and_its_distribution():
    task = build_task("sick-r")
    p = torch.tensor([[0.0, 0.0, 0.4, 0.6, 0.0]])
    out = {"log_probs": p.clamp_min(1e-30).log(), "score": p @ torch.arange(1.0, 6.0)}
    rec = task.record(out, 0, None)
    assert list(rec) == ["score", "probabilities"]
    assert rec["score"] == pytest.approx(3.6, abs=1e-6)
    assert rec["probabilities"] == pytest.approx({"1": 0, "2": 0, "3": 0.4, "4": 0.6, "5": 0})
