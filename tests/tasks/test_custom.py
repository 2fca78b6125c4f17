"""The tasks for users' own data sets (classify, pair-classify, pair-score), and AMR runs on
the shipped SICK-AMR sample, end to end through ``train`` and ``evaluate``."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gnn_treelstm.commands import evaluate, train
from gnn_treelstm.commands.build import main as build_main
from gnn_treelstm.datasets import build as B
from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel
from gnn_treelstm.tasks import Encoded, build_task
from gnn_treelstm.tasks.relatedness import RelatednessHead, kl_loss, sparse_target
from gnn_treelstm.trees import data as D

TINY = ["--epochs", "2", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
        "--threads", "1", "-q"]
AMRS = ["(d / dog)", "(r / run-02 :ARG0 (d / dog))", "(r / run-02 :polarity - :ARG0 (c / cat))",
        "(a / and :op1 (s / sit-01 :ARG1 (c / cat)) :op2 (s2 / sleep-01 :ARG0 c))",
        "(e / eat-01 :ARG0 (c / cat) :ARG1 (f / fish :ARG1-of (r / red-02)))"]
TEXTS = ["a dog", "the dog runs", "no cat runs", "the cat sits and sleeps", "cats eat red fish"]


def write_own(root, kind):
    """A tiny data set of one's own, every sentence with its AMR (train/dev/test)."""
    rows = []
    for i in range(10):
        a, b = i % 5, (i * 3 + 1) % 5
        sa = {"text": TEXTS[a], "amr": AMRS[a]}
        sb = {"text": TEXTS[b], "amr": AMRS[b]}
        if kind == "classify":
            rows.append({**sa, "label": ["short", "long", "mid"][len(TEXTS[a].split()) % 3]})
        elif kind == "pair-classify":
            rows.append({"a": sa, "b": sb, "label": "same" if a == b else "other"})
        else:
            rows.append({"a": sa, "b": sb, "score": round(10 - 2 * abs(a - b) - 0.5, 1)})
    root.mkdir(parents=True, exist_ok=True)
    for split, part in (("train", rows[:6]), ("dev", rows[6:8] + rows[:1]),
                        ("test", rows[8:] + rows[1:2])):
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part),
                                             encoding="utf-8")
    return root


def _enc(h_l, h_r):
    b = h_l.shape[0]
    return Encoded(graph=None, h=torch.cat([h_l, h_r]), sent=torch.cat([h_l, h_r]),
                   roots=torch.arange(2 * b), num_a=b)


def test_head_sizes_come_from_the_data():
    meta = {"dataset": "mine", "label_names": ["a", "b", "c", "d"], "score_range": [0, 3]}
    assert build_task("classify").head_kwargs_from_data(meta) == {"num_classes": 4}
    assert build_task("pair-classify").head_kwargs_from_data(meta) == {"num_classes": 4}
    assert build_task("pair-score").head_kwargs_from_data(meta) == {"score_min": 0,
                                                                    "score_max": 3}
    train_split = SimpleNamespace(targets={"score": torch.tensor([1.2, 4.5])})
    assert build_task("pair-score").head_kwargs_from_data({}, train_split) == {
        "score_min": 1, "score_max": 5}  # built-in SICK: no score_range, the scores' span
    with pytest.raises(ValueError, match=r"needs a data set with at least 2 classes"):
        build_task("classify").head_kwargs_from_data({"label_names": None})
    with pytest.raises(ValueError, match=r"needs num_classes: .*--head-arg num_classes=K"):
        build_task("classify").build_head(4, 4, hidden=0, dropout=0.0)
    task = build_task("pair-classify")
    head = task.build_head(4, 4, hidden=7, dropout=0.0, num_classes=4, features="abs")
    assert head.W_p.out_features == 4 and task.num_classes == 4
    assert build_task("classify").build_head(4, 6, hidden=0, dropout=0.0,
                                             num_classes=3).node_in.out_features == 3


def test_pair_score_is_sick_r_shifted_to_the_range():
    torch.manual_seed(0)
    h_l, h_r, y = torch.randn(3, 4), torch.randn(3, 4), torch.tensor([0.0, 0.25, 1.0])
    task = build_task("pair-score")
    head = task.build_head(4, 4, hidden=5, dropout=0.0, score_min=0, score_max=1)
    ref = RelatednessHead(4, hidden=5, num_classes=2)
    ref.load_state_dict(head.state_dict())
    out, want = head(_enc(h_l, h_r)), ref(_enc(h_l, h_r))
    p = want["log_probs"].exp()
    # scores in [0, 1]: two classes r = [0, 1], y = p_1 (the sick-r head has r = [1, 2])
    torch.testing.assert_close(out["score"], p[:, 1])
    torch.testing.assert_close(out["score"], want["score"] - 1)
    batch = SimpleNamespace(targets={"score": y})
    torch.testing.assert_close(task.loss(out, batch),
                               kl_loss(want["log_probs"], sparse_target(y + 1, 2)))
    with pytest.raises(ValueError, match=r"outside the model's range \[0, 1\]"):
        task.loss(out, SimpleNamespace(targets={"score": torch.tensor([1.5, 0.0, 0.0])}))
    # with LO=1, HI=5 it is sick-r exactly
    sick_r, mine = build_task("sick-r"), build_task("pair-score")
    h1 = sick_r.build_head(4, 4, hidden=5, dropout=0.0)
    h2 = mine.build_head(4, 4, hidden=5, dropout=0.0, score_min=1, score_max=5)
    h2.load_state_dict(h1.state_dict())
    y5 = torch.tensor([1.0, 3.6, 5.0])
    o1, o2 = h1(_enc(h_l, h_r)), h2(_enc(h_l, h_r))
    torch.testing.assert_close(o1["score"], o2["score"])
    b5 = SimpleNamespace(targets={"score": y5})
    torch.testing.assert_close(sick_r.loss(o1, b5), mine.loss(o2, b5))


def test_library_route_trains_a_few_steps(tmp_path):
    """Build a set of one's own, load it with gnn_treelstm.trees.data and train the model
    directly: the loss goes down on a fixed batch."""
    out = tmp_path / "built"
    meta = B.build("jsonl", write_own(tmp_path / "src", "pair-classify"), out, trees=["amr"])
    task = build_task("pair-classify")
    sp = task.prepare_split(D.load_split(out, "train", "amr"))
    cfg = ModelConfig(task="pair-classify", cell="mtree", vocab_size=meta["vocab_size"],
                      emb_dim=6, hidden=5, num_relations=meta["num_relations"]["amr"],
                      dropout=0.0, head_kwargs=task.head_kwargs_from_data(meta))
    torch.manual_seed(0)
    model = TreeLSTMModel(cfg)
    batch = D.collate(D.TreeDataset(sp).__getitems__(list(range(len(sp)))))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = model.task.loss(model(batch.graph, batch.graph_b, num_a=batch.num_a), batch)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("kind, model, tree, metric", [
    ("classify", "mtree", "amr", "accuracy"),
    ("classify", "childsum", "chain", "accuracy"),
    ("pair-classify", "mtree", "amr", "accuracy"),
    ("pair-score", "mtree", "amr", "pearson"),
])
def test_train_and_evaluate_own_data(tmp_path, capsys, kind, model, tree, metric):
    src = write_own(tmp_path / "mine", kind)
    runs = tmp_path / "runs"
    # --data: the raw directory of train/dev/test.jsonl, built on the fly
    rc = train.main(["--data", str(src), "--task", kind, "--model", model, "--tree", tree,
                     "--runs-dir", str(runs), "--name", "r", *TINY])
    assert rc == 0, capsys.readouterr()
    cfg = json.loads((runs / "r" / "config.json").read_text())
    head = cfg["model_config"]["head_kwargs"]
    meta = json.loads((Path(cfg["data"]["dir"]) / "meta.json").read_text())
    assert meta["dataset"] == "jsonl"
    if kind == "pair-score":  # floor and ceiling of the scores
        assert [head["score_min"], head["score_max"]] == meta["score_range"] == [3, 10]
    else:
        assert head == {"num_classes": 3 if kind == "classify" else 2,
                        **({"features": "abs"} if kind == "pair-classify" else {})}
    capsys.readouterr()
    assert evaluate.main([str(runs / "r"), "--split", "test", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip())
    assert res["count"] == 3 and metric in res


def test_sick_e_mtree_amr_on_the_shipped_sample(tmp_path, capsys, sample_data):
    built = tmp_path / "sick_amr"
    rc = build_main(["--dataset", "jsonl", "--src", str(sample_data / "sick_amr"), "--out",
                 str(built), "--name", "sick", "--labels", "NEUTRAL", "ENTAILMENT",
                 "CONTRADICTION", "--score-range", "1", "5", "--trees", "amr", "-q"])
    assert rc == 0
    meta = json.loads((built / "meta.json").read_text())
    assert meta["splits"] == {"train": 24, "dev": 6, "test": 6}
    assert meta["amr"]["train"]["reentrancies"] == 5
    runs = tmp_path / "runs"
    for task in ("sick-e", "sick-r"):
        assert train.main(["--data", str(built), "--task", task, "--model", "mtree",
                           "--tree", "amr", "--runs-dir", str(runs), "--name", task,
                           *TINY]) == 0
        capsys.readouterr()
        assert evaluate.main([str(runs / task), "--split", "test", "--json"]) == 0
        res = json.loads(capsys.readouterr().out.strip())
        assert res["count"] == 6
        assert ("accuracy_negation" in res) if task == "sick-e" else ("pearson" in res)
    # the same sample as a data set of one's own, read raw
    assert train.main(["--data", str(sample_data / "sick_amr"), "--task", "pair-classify",
                       "--model", "mtree", "--tree", "amr", "--runs-dir", str(runs),
                       "--name", "own", *TINY]) == 0
    cfg = json.loads((runs / "own" / "config.json").read_text())
    assert cfg["model_config"]["head_kwargs"]["num_classes"] == 3


def test_refusals(tmp_path, capsys):
    src = write_own(tmp_path / "mine", "classify")
    runs = ["--runs-dir", str(tmp_path / "runs"), "--name", "x", *TINY]
    assert train.main(["--data", str(src), "--task", "pair-classify", "--tree", "chain",
                       "--model", "childsum", *runs]) == 2
    assert "pair=False but task pair-classify needs pair=True" in capsys.readouterr().err
    assert train.main(["--data", str(src), "--task", "pair-score", "--tree", "chain",
                       "--model", "childsum", *runs]) == 2
    capsys.readouterr()
    built = tmp_path / "b"
    B.build("jsonl", src, built, trees=["chain"])
    assert train.main(["--data", str(built), "--task", "classify", "--tree", "amr",
                       "--model", "mtree", *runs]) == 2
    err = capsys.readouterr().err
    assert "has no 'amr' trees" in err and "--dataset jsonl --src train.jsonl" in err


def test_own_data_without_vectors_is_an_error_unless_random_is_asked_for(tmp_path, capsys):
    """No --embeddings and no --embeddings-mode: a jsonl build's meta.json names its files
    (a dict), not a data root with GloVe beside it, so there are no pre-trained vectors:
    an error naming the fix, not a silent switch to random ones (it crashed on the dict)."""
    src = write_own(tmp_path / "mine", "classify")
    runs = tmp_path / "runs"
    tiny = [a for a in TINY if a not in ("--embeddings-mode", "random")]
    args = ["--data", str(src), "--task", "classify", "--model", "childsum", "--tree",
            "chain", "--runs-dir", str(runs), *tiny]
    assert train.main([*args, "--name", "r"]) == 2
    err = capsys.readouterr().err
    assert "built from your own files" in err and "--embeddings-mode random" in err
    assert train.main([*args, "--name", "r", "--embeddings-mode", "random"]) == 0
    cfg = json.loads((runs / "r" / "config.json").read_text())
    assert cfg["embeddings"]["mode"] == "random"


def test_a_model_config_of_python_is_told_what_to_set_in_python():
    from gnn_treelstm import ModelConfig, TreeLSTMModel

    base = {"task": "classify", "cell": "childsum", "vocab_size": 10, "emb_dim": 4, "hidden": 3}
    with pytest.raises(ValueError) as err:
        TreeLSTMModel(ModelConfig(**base))
    assert "ModelConfig(..., head_kwargs={'num_classes': K})" in str(err.value)
    model = TreeLSTMModel(ModelConfig(**base, head_kwargs={"num_classes": 3}))  # as it says
    assert model.task.num_classes == 3
