"""train.py -> best.pt -> evaluate.py round trips on tiny built data, and the refusals."""

import json
import math

import pytest
import torch

from gnn_treelstm.cells import cells
from gnn_treelstm.commands import evaluate, train
from gnn_treelstm.training.batching import make_loader
from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.data import DataError, resolve_data_dir
from gnn_treelstm.training.optim import batch_objective, build_optimizer
from gnn_treelstm.training.provenance import PYTHON, model_sources
from gnn_treelstm.trees import data as D
from tests.tiny_data import build_tiny

TINY = ["--epochs", "1", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
        "-q"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    for ds in ("sst", "sick", "trec", "snli"):
        build_tiny(root, ds)
    return root


@pytest.mark.parametrize("task,model,tree", [
    ("sst-5", "nary", "constituency"),
    ("sst-2", "lstm", "chain"),
    ("sick-r", "childsum", "dependency"),
    ("sick-e", "mtree", "dependency"),
    ("snli", "childsum", "dependency"),
    ("trec", "bitree", "constituency"),
])
def test_round_trip_every_task(tiny, tmp_path, capsys, task, model, tree):
    runs = tmp_path / "runs"
    rc = train.main(["--data", str(tiny), "--task", task, "--model", model, "--tree", tree,
                     "--runs-dir", str(runs), "--name", "r", *TINY])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "epoch   1: loss" in out and "checkpoint:" in out
    run = runs / "r"
    assert {p.name for p in run.iterdir()} >= {"best.pt", "config.json", "config.yaml",
                                                "metrics.jsonl", "metrics.csv",
                                                "results.json", "train.log"}
    res = json.loads((run / "results.json").read_text())
    code = json.loads((run / "config.json").read_text())["code"]  # what the ledger compares
    assert code["modules"] == model_sources(model, task) and code["python"] == PYTHON
    epochs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(epochs) == 1 and epochs[0]["best"] and epochs[0]["trees_per_second"] > 0
    import csv

    with open(run / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    sel = res["selection_metric"]
    assert len(rows) == 1 and float(rows[0]["train_loss"]) == epochs[0]["train_loss"]
    dev_sel = epochs[0]["dev"][sel]
    assert (rows[0][f"dev_{sel}"] == "") if dev_sel is None else \
        float(rows[0][f"dev_{sel}"]) == pytest.approx(dev_sel)
    ck, metrics, gathered = evaluate.evaluate_checkpoint(run / "best.pt", split="test")
    for k, v in res["seeds"][0]["test"].items():           # rebuilt from the file alone
        assert metrics[k] == pytest.approx(v, nan_ok=True) or (v is None and math.isnan(
            metrics[k]))
    for k in ck.model.task.metric_names:
        assert k in metrics
    assert len(gathered["length"]) == metrics["count"]
    rc = evaluate.main([str(run / "best.pt"), "--split", "dev", "--json"])
    line = json.loads(capsys.readouterr().out.strip())
    dev = ck.model.task.prepare_split(D.load_split(tiny / ck.model.task.dataset, "dev", tree))
    assert rc == 0 and line["split"] == "dev" and line["count"] == len(dev) > 0
    assert task != "sst-2" or len(dev) < 8          # neutral roots dropped


def test_seeds_table_and_length_plot(tiny, tmp_path, capsys):
    runs = tmp_path / "runs"
    common = ["--data", str(tiny), "--runs-dir", str(runs), *TINY]
    assert train.main(["--task", "sick-r", "--model", "childsum", "--tree", "dependency",
                       "--name", "a", "--seeds", "2", *common]) == 0
    assert train.main(["--task", "sick-r", "--model", "mtree", "--tree", "dependency",
                       "--name", "b", *common]) == 0
    capsys.readouterr()
    res = json.loads((runs / "a" / "results.json").read_text())
    assert [s["seed"] for s in res["seeds"]] == [1, 2]
    vals = res["test"]["pearson"]["values"]
    assert res["test"]["pearson"]["mean"] == pytest.approx(sum(vals) / 2)
    assert (runs / "a" / "seed-1" / "best.pt").exists() and (runs / "a" / "best.pt").exists()
    assert evaluate.main(["--table", str(runs / "a"), str(runs / "b")]) == 0
    table = capsys.readouterr().out.strip().splitlines()
    assert table[0].startswith("| model | tree | task | seeds | pearson | spearman | mse |")
    assert table[2].startswith("| childsum (a) | dependency | sick-r | 2 |")
    m = res["test"]["mse"]
    assert f"{m['mean']:.4f} ({m['std']:.4f})" in table[2]
    png = tmp_path / "len.png"
    assert evaluate.main([str(runs / "a"), str(runs / "b" / "best.pt"),
                          "--plot-length", str(png), "--min-count", "1"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args,message", [
    (["--task", "sst-9"], "unknown task 'sst-9'; choose one of: classify, pair-classify"),
    (["--model", "treelstm"], "unknown cell 'treelstm'; choose one of: bilstm"),
    (["--tree", "ccg"], "unknown tree 'ccg'; choose one of: constituency, dependency"),
    (["--task", "sst-5", "--model", "nary", "--tree", "dependency"],
     "at most 2 children per node, but the dependency trees"),
    (["--task", "sick-r", "--model", "mtree", "--tree", "chain"],
     "reads edge relations, but the chain graphs"),
    (["--task", "sick-r", "--model", "lstm", "--tree", "dependency"],
     "sequential LSTMs run on chains: use --tree chain"),
    (["--task", "trec", "--supervision", "phrase"], "supports --supervision root"),
])
def test_refusals_before_training(tiny, tmp_path, capsys, args, message):
    rc = train.main(["--data", str(tiny), "--runs-dir", str(tmp_path), "--name", "x",
                     *args, *TINY])
    err = capsys.readouterr().err
    assert rc == 2 and message in err
    assert not (tmp_path / "x" / "metrics.jsonl").exists()


def test_missing_data_names_the_build_command(tmp_path, capsys):
    rc = train.main(["--data", str(tmp_path / "nope"), "--runs-dir", str(tmp_path), *TINY])
    assert rc == 2
    assert "gnn-treelstm build --dataset sst" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="gnn-treelstm build --dataset sick"):
        resolve_data_dir(empty, "sick", "dependency")


def test_data_resolution(tiny, monkeypatch):
    assert resolve_data_dir(tiny / "sick", "sick", "dependency") == tiny / "sick"
    monkeypatch.setenv("GNN_TREELSTM_DATA", str(tiny))
    assert resolve_data_dir(None, "trec", "chain") == tiny / "trec"
    with pytest.raises(DataError, match="holds the 'sick' data set"):
        resolve_data_dir(tiny / "sick", "sst", "constituency")
    with pytest.raises(ValueError, match="the sst data has no 'amr' trees; choose one of"):
        resolve_data_dir(tiny / "sst", "sst", "amr")
    (tiny / "sst" / "meta.json").write_text((tiny / "sst" / "meta.json").read_text()
                                            .replace('"chain"', '"chain-x"'))
    try:
        with pytest.raises(DataError, match="--trees chain"):
            resolve_data_dir(tiny / "sst", "sst", "chain")
    finally:
        (tiny / "sst" / "meta.json").write_text((tiny / "sst" / "meta.json").read_text()
                                                .replace('"chain-x"', '"chain"'))


def test_optimizer_groups_follow_tai():
    from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel

    m = TreeLSTMModel(ModelConfig(vocab_size=20, emb_dim=4, hidden=3))
    opt = build_optimizer(m, RunConfig().resolved())
    rest, emb = opt.param_groups
    assert isinstance(opt, torch.optim.Adagrad)
    assert (rest["lr"], rest["weight_decay"]) == (0.05, 1e-4)   # Tai §5.3
    assert (emb["lr"], emb["weight_decay"]) == (0.1, 0.0)
    assert emb["params"] == [m.embedding.weight]
    adam = build_optimizer(m, RunConfig(optimizer="adam").resolved())
    assert adam.param_groups[0]["lr"] == 1e-3 and adam.param_groups[1]["lr"] == 1e-3
    with pytest.raises(ValueError, match="optimizer, lr, emb_lr, emb_l2 unset; pass the resolved"):
        build_optimizer(m, RunConfig())  # the paper defaults are filled in by resolved()


def test_demo_runs_on_the_sample(tmp_path, capsys):
    from gnn_treelstm.commands import demo

    assert demo.main(["--runs-dir", str(tmp_path), "--epochs", "1", "--hidden", "8"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "demo" / "tree.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "demo" / "best.pt").exists()
    assert "root accuracy" in out and f"tree PNG:     {tmp_path / 'demo' / 'tree.png'}" in out


@pytest.mark.parametrize("args", [[], ["--task", "sick-e", "--model", "mtree",
                                         "--tree", "dependency"]])
def test_engine_flag_reaches_the_cell(tiny, tmp_path, capsys, args):
    rc = train.main(["--data", str(tiny), "--runs-dir", str(tmp_path), "--name", "lv",
                     "--engine", "level", *args, *TINY])
    err = capsys.readouterr().err
    if rc == 0:  # the cell has a level engine: the checkpoint records it
        from gnn_treelstm.models.checkpoint import load_model

        assert load_model(tmp_path / "lv" / "best.pt").model.config.engine == "level"
    else:        # not yet: the cell's own refusal, cleanly reported
        assert rc == 2 and "level" in err and "Traceback" not in err


def test_resolved_config_follows_the_papers():
    r = RunConfig().resolved()
    assert (r.optimizer, r.lr, r.emb_lr, r.dropout, r.emb_dropout, r.supervision,
            r.embeddings_mode) == ("adagrad", 0.05, 0.1, 0.5, 0.0, "phrase", "tuned")  # Tai
    r = RunConfig(task="sick-r", model="childsum").resolved()
    assert (r.optimizer, r.dropout, r.supervision, r.embeddings_mode) == (
        "adagrad", 0.0, "root", "fixed")                        # Tai §5.3
    r = RunConfig(task="sick-e", model="childsum").resolved()
    assert (r.optimizer, r.lr, r.emb_lr) == ("adam", 1e-3, 1e-3)  # Tran §6.1 (NLI)
    assert r.head_kwargs == {"features": "abs"}                   # Tran's code: |h_P - h_H|
    assert (r.sentence_state, r.loss_reduction, r.emb_l2) == ("h", "mean", 0.0)
    # mTreeLSTM: the code's Adam on the summed loss everywhere (the paper's text zeroes
    # its relation path), unless asked otherwise
    for task in ("sick-r", "sick-e", "sst-5"):
        r = RunConfig(task=task, model="mtree").resolved()
        assert (r.optimizer, r.lr, r.loss_reduction, r.l2) == ("adam", 1e-3, "sum", 1e-4)
    r = RunConfig(task="sick-r", model="mtree", optimizer="adagrad",
                    loss_reduction="mean").resolved()
    assert (r.optimizer, r.lr, r.loss_reduction) == ("adagrad", 0.05, "mean")
    r = RunConfig(task="sick-r", model="mtree-full").resolved()
    assert (r.optimizer, r.loss_reduction) == ("adagrad", "mean")
    r = RunConfig(task="sick-e", head_kwargs={"features": "paper"}).resolved()
    assert r.head_kwargs == {"features": "paper"}
    r = RunConfig(model="bitree").resolved()
    assert (r.optimizer, r.emb_dropout) == ("adam", 0.5)          # Teng §6


def test_batch_objective_and_embedding_l2():
    from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel

    loss = torch.tensor(0.5)
    assert float(batch_objective(loss, 25, "mean")) == 0.5
    assert float(batch_objective(loss, 25, "sum")) == 12.5      # Tran's code
    with pytest.raises(ValueError, match="choose one of: mean, sum"):
        batch_objective(loss, 25, "max")
    m = TreeLSTMModel(ModelConfig(vocab_size=20, emb_dim=4, hidden=3))
    opt = build_optimizer(m, RunConfig(emb_l2=1e-4).resolved())
    assert opt.param_groups[1]["weight_decay"] == 1e-4
    assert not m.sparse_embedding_grad        # sparse AdaGrad takes no weight decay
    with pytest.raises(ValueError, match="--emb-l2 -1.0: must be a finite number >= 0"):
        RunConfig(emb_l2=-1.0).check()
    with pytest.raises(ValueError, match="unknown loss reduction"):
        RunConfig(loss_reduction="max").check()


def test_relation_embeddings_at_their_own_rate(tiny):
    """--rel-lr: mtree's relation embeddings in their own group without L2 (Tran §6.1: 0.1);
    by default they train with the other weights. One step works with the word embedding's
    sparse gradient beside them."""
    from gnn_treelstm.models.treelstm import ModelConfig, TreeLSTMModel

    def model(mode):
        return TreeLSTMModel(ModelConfig(task="sick-r", cell="mtree", vocab_size=400,
                                         emb_dim=4, hidden=3, num_relations=40,
                                         embeddings_mode=mode))

    m = model("tuned")
    rest = build_optimizer(m, RunConfig(task="sick-r", model="mtree").resolved()).param_groups[0]
    assert any(p is m.cell.rel_emb.weight for p in rest["params"])
    for mode in ("fixed", "tuned"):
        m = model(mode)
        opt = build_optimizer(m, RunConfig(task="sick-r", model="mtree", rel_lr=0.1,
                                           optimizer="adagrad").resolved())  # sparse path
        rest, rel = opt.param_groups[0], opt.param_groups[-1]
        assert rel["params"] == [m.cell.rel_emb.weight]
        assert (rel["lr"], rel["weight_decay"]) == (0.1, 0.0)
        assert all(p is not m.cell.rel_emb.weight for p in rest["params"])
        assert len(opt.param_groups) == (3 if mode == "tuned" else 2)
    assert m.sparse_embedding_grad                      # tuned: sparse word gradient
    split = D.load_split(tiny / "sick", "train", "dependency")
    batch = next(iter(make_loader(split, 4, shuffle=False)))
    before = m.cell.rel_emb.weight.detach().clone()
    m.task.loss(m(batch.graph, batch.graph_b, num_a=batch.num_a), batch).backward()
    assert m.embedding.weight.grad.is_sparse
    opt.step()
    assert not torch.equal(before, m.cell.rel_emb.weight)
    with pytest.raises(ValueError, match="--rel-lr .*: a learning rate must be in"):
        RunConfig(rel_lr=0.0).check()
    cs = TreeLSTMModel(ModelConfig(task="sick-r", cell="childsum", vocab_size=40, emb_dim=4,
                                   hidden=3))
    with pytest.raises(ValueError, match="has no relation embeddings"):
        build_optimizer(cs, RunConfig(task="sick-r", model="childsum", rel_lr=0.1).resolved())
    with pytest.raises(ValueError, match="word embeddings are fixed"):
        build_optimizer(model("fixed"), RunConfig(task="sick-r", emb_l2=1e-4).resolved())


def test_trainer_runs_its_steps_and_calls_the_hooks(tiny, tmp_path):
    """Trainer: resolved once in the constructor; per epoch the progress hook wraps the
    batches, release_heap runs before the training and the dev windows, on_epoch_end gets
    the record metrics.jsonl gets; the state saved at each epoch's end is TrainState."""
    from gnn_treelstm.training.resume import TrainState
    from gnn_treelstm.training.trainer import Trainer, TrainHooks

    calls: dict[str, list] = {"progress": [], "epoch": [], "heap": []}

    def progress(batches, total, desc):
        calls["progress"].append((total, desc))
        return batches

    hooks = TrainHooks(progress=progress, on_epoch_end=calls["epoch"].append,
                       release_heap=lambda: calls["heap"].append(1))
    cfg = RunConfig(task="sst-5", data=str(tiny), runs_dir=str(tmp_path), name="t",
                    epochs=2, batch_size=5, embeddings_mode="random", emb_dim=6, hidden=5,
                    test=False)
    trainer = Trainer(cfg, hooks=hooks)
    assert trainer.cfg == cfg.resolved() and trainer.cfg.optimizer == "adagrad"
    assert not (tmp_path / "t").exists()          # nothing written before fit
    res = trainer.fit()
    n = len(trainer.data.splits["train"])
    assert calls["progress"] == [(-(-n // 5), f"seed 1 epoch {e}/2") for e in (1, 2)]
    assert len(calls["heap"]) == 4                # training + dev window, per epoch
    lines = (tmp_path / "t" / "metrics.jsonl").read_text().splitlines()
    assert calls["epoch"] == [json.loads(x) for x in lines]
    assert [r["epoch"] for r in calls["epoch"]] == [1, 2]
    assert res["seeds"][0]["best_epoch"] == trainer.state.best["epoch"]
    assert trainer.state.epoch == 3 and trainer.state.step == 0
    assert trainer.state.epochs == calls["epoch"]
    assert TrainState.load(tmp_path / "t") is None  # a finished seed drops its state


#: registry name -> (task, tree) of the one-epoch CUDA run
CUDA_RUNS = {"childsum": ("sick-r", "dependency"), "mtree": ("sick-r", "dependency"),
             "mtree-add": ("sick-e", "dependency"), "mtree-full": ("sick-r", "dependency"),
             "mean": ("sick-e", "dependency"), "nary": ("sst-5", "constituency"),
             "lex": ("sst-5", "constituency"), "topdown": ("sst-2", "constituency"),
             "bitree": ("trec", "constituency"), "lstm": ("sst-5", "chain"),
             "bilstm": ("sst-2", "chain"), "lstm2": ("sick-r", "chain"),
             "bilstm2": ("trec", "chain")}


def test_every_registry_name_has_a_cuda_run():
    assert set(CUDA_RUNS) == set(cells.names())


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("optimizer", ["adagrad", "adam"])
@pytest.mark.parametrize("model", sorted(CUDA_RUNS))
def test_one_epoch_on_cuda(tiny, tmp_path, model, optimizer):
    """Every registry model trains and scores on the GPU with both optimizers (the level
    engine; the graphs stay on the CPU with DGL's CPU-only build)."""
    from gnn_treelstm.training.trainer import Trainer

    task, tree = CUDA_RUNS[model]
    cfg = RunConfig(task=task, model=model, tree=tree, data=str(tiny), device="cuda",
                    engine="level", optimizer=optimizer, epochs=1, batch_size=4,
                    embeddings_mode="random", emb_dim=6, hidden=5, runs_dir=str(tmp_path),
                    name="t")
    trainer = Trainer(cfg)
    res = trainer.fit()
    assert all(p.is_cuda for p in trainer.model.parameters())
    epoch = json.loads((tmp_path / "t" / "metrics.jsonl").read_text().splitlines()[0])
    assert math.isfinite(epoch["train_loss"]) and epoch["skipped_nonfinite"] == 0
    assert res["seeds"][0]["test"]


def test_each_seed_builds_its_model_once(tiny_sst, tmp_path, monkeypatch):
    from gnn_treelstm.models.treelstm import TreeLSTMModel
    from gnn_treelstm.training import trainer as T
    from tests.training.helpers import tiny_config

    built = []

    class Counted(TreeLSTMModel):
        def __init__(self, config):
            super().__init__(config)
            built.append(torch.get_rng_state())

    monkeypatch.setattr(T, "TreeLSTMModel", Counted)
    trainer = T.Trainer(tiny_config(tiny_sst, tmp_path, seeds=2, epochs=1))
    assert len(built) == 1  # the first seed's, checked before anything is written
    trainer.fit()
    assert len(built) == 2  # one model per seed, none thrown away
    torch.manual_seed(1)  # seed 1 (cfg.seed), as start_seed seeds it
    TreeLSTMModel(trainer.model_config)
    assert torch.equal(built[0], torch.get_rng_state())  # built from seed 1's generators
