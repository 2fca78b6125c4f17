"""``gnn-treelstm train --config``: a run's config.yaml trains the same run again."""

import json
import re

import pytest
import yaml

from gnn_treelstm.commands import train

TINY = ["--epochs", "2", "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
        "-q"]


def test_config_yaml_reproduces_the_recorded_run(tmp_path, monkeypatch):
    """On the embedded sample (no --data, no $GNN_TREELSTM_DATA)."""
    monkeypatch.delenv("GNN_TREELSTM_DATA", raising=False)
    runs = tmp_path / "runs"
    assert train.main(["--runs-dir", str(runs), "--name", "a", "--max-train", "60",
                       "--max-eval", "40",
                       "--model", "childsum", "--tree", "dependency", "--lr", "0.07",
                       "--cell-arg", "output_gate=false", *TINY]) == 0
    cfg = yaml.safe_load((runs / "a" / "config.yaml").read_text())
    assert "name" not in cfg and cfg["lr"] == 0.07 and cfg["optimizer"] == "adagrad"
    assert cfg["cell_kwargs"] == {"output_gate": False}
    assert train.main(["--config", str(runs / "a" / "config.yaml"), "--name", "b", "-q"]) == 0
    first, again = (json.loads((runs / n / "results.json").read_text()) for n in "ab")
    assert again["test"] == first["test"] and again["dev"] == first["dev"]
    recorded = json.loads((runs / "b" / "config.json").read_text())["run_config"]
    assert recorded == {**json.loads((runs / "a" / "config.json").read_text())["run_config"],
                        "name": "b"}


def test_command_line_flags_override_the_file(tmp_path):
    conf = tmp_path / "run.yaml"
    conf.write_text("task: sst-5\nembeddings-mode: random\nhidden: 7\nemb_dim: 6\n"
                    "epochs: 1\ncell_kwargs: {}\n")
    a = train.parse_args(["--config", str(conf), "--hidden", "9"])
    assert (a.hidden, a.embeddings_mode, a.emb_dim, a.epochs) == (9, "random", 6, 1)
    assert train.parse_args(["--config", str(conf)]).hidden == 7


@pytest.mark.parametrize("text,message", [
    ("hiden: 5\n", "unknown key 'hiden'"),
    ("hidden: five\n", "hidden must be a positive integer, got 'five'"),
    ("hidden: 0\n", "hidden must be a positive integer, got 0"),
    ("epochs: true\n", "epochs must be a number, got True"),
    ("optimizer: sgd\n", "optimizer must be one of adagrad, adam"),
    ("lr-schedule: linear\n", "lr-schedule must be one of constant, cosine, step, plateau"),
    ("patience: many\n", "patience must be an integer"),
    ("cell_kwargs: [1]\n", "cell_kwargs must be a mapping"),
    ("log_level: LOUD\n", "log_level must be one of DEBUG, INFO, WARNING, ERROR, got 'LOUD'"),
    ("threads: two\n", "threads must be an integer"),
    ("- a\n- b\n", "expected a mapping"),
    ("a: [\n", "not valid YAML"),
])
def test_bad_config_files_exit_2_naming_file_and_key(tmp_path, capsys, text, message):
    conf = tmp_path / "bad.yaml"
    conf.write_text(text)
    with pytest.raises(SystemExit) as exc:
        train.parse_args(["--config", str(conf)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--config {conf}" in err and message in err


# ---------------------------------------------------------------- family defaults
#: every field resolved() fills in, for each cell family on SST-5, SICK-R and SICK-E
_FILLED = ("optimizer", "lr", "emb_lr", "loss_reduction", "emb_dropout", "dropout", "emb_l2",
           "sentence_state", "embeddings_mode", "supervision", "head_kwargs")
_ADAM = ("adam", 1e-3, 1e-3)
_ADAGRAD = ("adagrad", 0.05, 0.1)
_SST = (0.5, 0.0, "h", "tuned", "phrase", {})
_SICK_R = (0.0, 0.0, "h", "fixed", "root", {})
_SICK_E = (0.5, 0.0, "h", "tuned", "root", {"features": "abs"})
RESOLVED = {  # (cell, task): the values of _FILLED
    ("lex", "sst-5"): (*_ADAM, "mean", 0.5, *_SST),            # Teng §6: Adam, dropout 0.5
    ("lex", "sick-r"): (*_ADAM, "mean", 0.5, *_SICK_R),
    ("lex", "sick-e"): (*_ADAM, "mean", 0.5, *_SICK_E),
    ("mtree", "sst-5"): (*_ADAM, "sum", 0.0, *_SST),           # Tran's code: Adam, sum
    ("mtree", "sick-r"): (*_ADAM, "sum", 0.0, *_SICK_R),
    ("mtree", "sick-e"): (*_ADAM, "sum", 0.0, *_SICK_E),
    ("mtree-add", "sst-5"): (*_ADAGRAD, "mean", 0.0, *_SST),   # the task's defaults
    ("mtree-add", "sick-r"): (*_ADAGRAD, "mean", 0.0, *_SICK_R),
    ("mtree-add", "sick-e"): (*_ADAM, "mean", 0.0, *_SICK_E),
    ("childsum", "sst-5"): (*_ADAGRAD, "mean", 0.0, *_SST),    # Tai §5.3
    ("childsum", "sick-r"): (*_ADAGRAD, "mean", 0.0, *_SICK_R),
    ("childsum", "sick-e"): (*_ADAM, "mean", 0.0, *_SICK_E),   # Tran §6.1 (inference)
}


@pytest.mark.parametrize("cell,task", sorted(RESOLVED))
def test_family_defaults_resolve_from_the_cells(cell, task):
    """The cells' ``run_defaults`` fill what a run leaves unset; every value set wins."""
    from gnn_treelstm.training.config import RunConfig, build_model_config

    r = RunConfig(task=task, model=cell).resolved()
    assert tuple(getattr(r, k) for k in _FILLED) == RESOLVED[cell, task]
    assert r.resolved() == r                                       # resolving is done once
    mc = build_model_config(r, vocab_size=5, num_relations=2, embeddings=None,
                            emb_info={"mode": r.embeddings_mode})
    assert mc.teng_head is (cell == "lex")                         # Teng's eq 17 head
    mine = RunConfig(task=task, model=cell, optimizer="adagrad", emb_dropout=0.0,
                     loss_reduction="mean").resolved()
    assert (mine.optimizer, mine.lr, mine.emb_dropout, mine.loss_reduction) == (
        "adagrad", 0.05, 0.0, "mean")
    assert RunConfig(task=task, model=cell, optimizer="adam").resolved().lr == 1e-3


# ---------------------------------------------------------------- one declaration
def test_every_run_option_is_a_field_with_its_flag():
    """The parser, config_from_args, --config keys and the runner's commands all come
    from the RunConfig fields' metadata."""
    import dataclasses

    from gnn_treelstm.training.config import RunConfig, run_options
    from gnn_treelstm.training.options import build_parser, config_from_args

    opts = run_options()
    assert [o.name for o in opts] == [f.name for f in dataclasses.fields(RunConfig)]
    flags = {s: a for a in build_parser()._actions for s in a.option_strings}
    for o in opts:
        action = flags[o.flag]
        assert action.dest == o.dest and action.choices == o.choices
        assert action.help == o.help_text()
    assert {o.name: o.kind for o in opts if o.kind != "value"} == {
        "cell_kwargs": "pairs", "head_kwargs": "pairs", "distributed": "switch",
        "test": "negated", "skip_nonfinite": "switch", "tensorboard": "switch"}
    assert {o.name for o in opts if o.path} == {"data", "embeddings"}
    # defaults: the parser's are RunConfig's
    assert config_from_args(train.parse_args([])) == RunConfig()
    # every option set on the command line reaches its field
    argv = ["--task", "sick-e", "--model", "childsum", "--tree", "dependency",
            "--supervision", "root", "--data", "D", "--embeddings", "V",
            "--embeddings-mode", "fixed", "--emb-dim", "7", "--hidden", "8",
            "--head-hidden", "9", "--dropout", "0.1", "--emb-dropout", "0.2",
            "--cell-arg", "n_ary=3", "--head-arg", "features=abs", "--sentence-state", "c",
            "--engine", "level", "--optimizer", "adam", "--lr", "0.3", "--emb-lr", "0.4",
            "--l2", "0.5", "--emb-l2", "0.6", "--rel-lr", "0.7", "--clip-grad-norm", "2.5",
            "--loss-reduction", "sum",
            "--batch-size", "11", "--eval-batch-size", "12", "--epochs", "13", "--seed", "14",
            "--seeds", "15", "--device", "cuda", "--distributed", "--lr-schedule", "step",
            "--lr-warmup-epochs", "2", "--lr-step-size", "3", "--lr-gamma", "0.25",
            "--lr-plateau-patience", "4", "--patience", "5", "--runs-dir", "R",
            "--name", "N", "--max-train", "16", "--max-eval", "17", "--no-test",
            "--checkpoint-every", "18", "--skip-nonfinite", "--tensorboard", "--workers", "19",
            "--embeddings-sha256", "ab" * 32]
    cfg = config_from_args(train.parse_args(argv))
    assert cfg == RunConfig(
        task="sick-e", model="childsum", tree="dependency", supervision="root", data="D",
        embeddings="V", embeddings_mode="fixed", emb_dim=7, hidden=8, head_hidden=9,
        dropout=0.1, emb_dropout=0.2, cell_kwargs={"n_ary": 3},
        head_kwargs={"features": "abs"}, sentence_state="c", engine="level",
        optimizer="adam", lr=0.3, emb_lr=0.4, l2=0.5, emb_l2=0.6, rel_lr=0.7,
        clip_grad_norm=2.5, loss_reduction="sum", batch_size=11, eval_batch_size=12,
        epochs=13, seed=14, seeds=15, device="cuda", distributed=True, lr_schedule="step",
        lr_warmup_epochs=2, lr_step_size=3, lr_gamma=0.25, lr_plateau_patience=4,
        patience=5, runs_dir="R", name="N", max_train=16, max_eval=17, test=False,
        checkpoint_every=18, skip_nonfinite=True, tensorboard=True, workers=19,
        embeddings_sha256="ab" * 32)
    assert all(getattr(cfg, o.name) != o.default for o in opts)  # none left out above


def test_the_command_options_have_their_own_group_in_a_fixed_order():
    """--help lists the command's own options (not recorded in a run's configuration)
    together, in the order COMMAND_FLAGS declares, before the run options' groups."""
    from gnn_treelstm.training.options import COMMAND, build_parser

    text = build_parser().format_help()
    start = text.index(f"\n{COMMAND}:\n")
    section = text[start:text.index("\n\n", start + 2)]
    shown = [line.split()[0].rstrip(",") for line in section.splitlines()[2:]
             if line.startswith("  -")]
    assert shown == ["--config", "--resume", "--overwrite", "--threads", "--log-level", "-v",
                     "-q", "--cell-module"]
    assert start < text.index("\nwhat to train:\n")
    assert text.count("--threads THREADS  ") == 1 and text.count("--resume RUN_DIR  ") == 1


@pytest.mark.parametrize("field,value,message", [
    ("workers", -1, "--workers -1: must be >= 0"),
    ("lr_step_size", 0, "--lr-step-size 0: must be >= 1"),
    ("lr", 20.0, "--lr 20.0: a learning rate must be in (0, 10]"),
    ("dropout", 1.0, "--dropout 1.0: must be in [0, 1)"),
    ("emb_dim", 70000, "--emb-dim 70000: at most 65536"),
    ("tree", "forest", "unknown tree 'forest'; choose one of: constituency"),
    ("device", "tpu:0", "unknown device 'tpu:0'; choose one of: cpu, cuda"),
    ("batch_size", 0, "batch_size must be positive, got 0"),
])
def test_check_holds_each_field_to_the_checks_it_declares(field, value, message):
    """RunConfig.check runs the checks each field declares beside its flag; a None where
    the default is None asks for the default and passes them."""
    import dataclasses

    from gnn_treelstm.training.config import RunConfig, run_options

    opt = next(o for o in run_options() if o.name == field)
    assert opt.checks, f"{field} declares no check"
    with pytest.raises(ValueError, match=re.escape(message)):
        dataclasses.replace(RunConfig(), **{field: value}).check()
    optional = [o.name for o in run_options() if o.default is None and o.checks]
    assert "lr" in optional and "emb_dim" in optional
    RunConfig(**{name: None for name in optional}).check()


def test_config_file_keys_are_the_fields_and_the_flags(tmp_path):
    """A run's config.yaml (field names, every field) and flag-named keys both load."""
    import dataclasses

    from gnn_treelstm.training.config import RunConfig, run_config_yaml
    from gnn_treelstm.training.options import config_from_args

    cfg = RunConfig(task="sick-r", model="mtree", cell_kwargs={"x": 1}, test=False,
                    skip_nonfinite=True, lr=0.2, clip_grad_norm=1.5, lr_schedule="plateau",
                    lr_gamma=0.5, patience=3, tensorboard=True)
    conf = tmp_path / "config.yaml"
    conf.write_text(run_config_yaml(cfg))
    assert config_from_args(train.parse_args(["--config", str(conf)])) == \
        dataclasses.replace(cfg, name=None)
    conf.write_text("no-test: true\ncell-arg: [n_ary=2]\nthreads: 1\nskip_nonfinite: true\n"
                    "clip-grad-norm: 1\nlr-schedule: cosine\nlr_warmup_epochs: 2\n"
                    "patience: 4\ntensorboard: true\n")
    a = train.parse_args(["--config", str(conf), "--cell-arg", "x=1"])
    got = config_from_args(a)
    assert (got.test, got.cell_kwargs, got.skip_nonfinite, a.threads) == (
        False, {"n_ary": 2, "x": 1}, True, 1)
    assert (got.clip_grad_norm, got.lr_schedule, got.lr_warmup_epochs, got.patience,
            got.tensorboard) == (1, "cosine", 2, 4, True)


@pytest.mark.parametrize("model", ["nary", "childsum", "mtree-full", "bitree", "lstm"])
def test_estimate_memory_counts_the_weights_of_any_hidden(model):
    """The weights counted at hidden 2-8 and extrapolated are those of the model built."""
    from gnn_treelstm.models.treelstm import TreeLSTMModel
    from gnn_treelstm.training.config import RunConfig, build_model_config, estimate_memory

    cfg = RunConfig(model=model, hidden=37, emb_dim=11)
    weights, need = estimate_memory(cfg)
    r = cfg.resolved()
    built = TreeLSTMModel(build_model_config(r, vocab_size=1, num_relations=1, embeddings=None,
                                             emb_info={"mode": r.embeddings_mode}))
    assert weights == sum(p.numel() for p in built.parameters())
    assert need > 4 * weights * 3


def test_train_defaults_to_the_fastest_engine_the_cell_runs_on(monkeypatch):
    from gnn_treelstm.cells import build_cell, cells
    from gnn_treelstm.cells.childsum import ChildSumTreeLSTM
    from gnn_treelstm.models.checkpoint import FASTEST, FASTEST_ENGINE, fastest_engine
    from gnn_treelstm.training.config import RunConfig

    assert train.parse_args([]).engine is None
    for name in cells.names():
        assert RunConfig(model=name).resolved().engine == FASTEST_ENGINE == "level", name
        assert fastest_engine(name) == (FASTEST_ENGINE, ""), name
    assert RunConfig(engine="dgl").resolved().engine == "dgl"  # a chosen engine stays

    class DglOnly(ChildSumTreeLSTM):
        def __init__(self, x_size: int, h_size: int, *, engine: str = "dgl"):
            if engine != "dgl":
                raise ValueError("runs on the dgl engine only")
            super().__init__(x_size, h_size, engine=engine)

    monkeypatch.setitem(cells._items, "dgl-only", DglOnly)
    assert RunConfig(model="dgl-only").resolved().engine == "dgl"
    engine, why = fastest_engine("dgl-only")
    assert engine == "dgl" and "runs on the dgl engine only" in why
    assert build_cell("dgl-only", 3, 2).engine == "dgl"
    # predict and serve default to the same choice (load_model(engine=FASTEST))
    from gnn_treelstm.commands import predict, serve

    for command in (predict, serve):
        ap = command.build_parser()
        assert ap.get_default("engine") == FASTEST, command.__name__


def test_the_default_engine_trains_the_model_of_the_reference_engine(tmp_path):
    import torch

    from tests.tiny_data import build_tiny

    data = build_tiny(tmp_path, "sst")
    common = ["--data", str(data), "--runs-dir", str(tmp_path / "runs"), "--epochs", "1",
              "--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5",
              "--dropout", "0", "--no-test", "-q", "--threads", "1"]
    assert train.main([*common, "--name", "default"]) == 0
    assert train.main([*common, "--name", "dgl", "--engine", "dgl"]) == 0
    run = json.loads((tmp_path / "runs" / "default" / "config.json").read_text())["run_config"]
    assert run["engine"] == "level"
    a, b = (torch.load(tmp_path / "runs" / n / "best.pt", weights_only=True)["state_dict"]
            for n in ("default", "dgl"))
    for k, v in a.items():
        torch.testing.assert_close(b[k], v, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("hidden", [5, 23])
def test_estimate_memory_counts_every_cell_exactly_without_building_on_the_cpu(monkeypatch,
                                                                               hidden):
    """Every registry cell's counted weights are those of the model built, and the count
    builds no model with weights in memory (only on the ``meta`` device)."""
    from gnn_treelstm.cells import cell_names
    from gnn_treelstm.models.treelstm import TreeLSTMModel
    from gnn_treelstm.training.config import RunConfig, build_model_config, estimate_memory

    built_on = []
    init = TreeLSTMModel.__init__

    def counting_init(self, config):
        init(self, config)
        built_on.append(next(self.parameters()).device.type)

    for name in cell_names():
        cfg = RunConfig(model=name, hidden=hidden, emb_dim=7)
        built_on.clear()
        with monkeypatch.context() as m:
            m.setattr(TreeLSTMModel, "__init__", counting_init)
            weights, _ = estimate_memory(cfg)
        assert built_on == ["meta"], name
        r = cfg.resolved()
        real = TreeLSTMModel(build_model_config(r, vocab_size=1, num_relations=1,
                                                embeddings=None,
                                                emb_info={"mode": r.embeddings_mode}))
        assert weights == sum(p.numel() for p in real.parameters()), name
