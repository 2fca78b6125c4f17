"""``gnn-treelstm train --config``: a run's config.yaml trains the same run again."""

import json

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
    ("hidden: five\n", "hidden must be an integer"),
    ("optimizer: sgd\n", "optimizer must be one of adagrad, adam"),
    ("cell_kwargs: [1]\n", "cell_kwargs must be a mapping"),
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
