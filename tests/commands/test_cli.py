"""``gnn-treelstm``: the dispatcher, the ``python -m`` entry points and the checkout shims."""

import subprocess
import sys
from pathlib import Path

import pytest

from gnn_treelstm.commands import cli

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_usage_and_unknown_commands(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in cli.COMMANDS)
    assert cli.main([]) == 2
    assert cli.main(["trian"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'trian'" in err and "train, evaluate, predict" in err


def test_every_command_resolves_to_a_main():
    import importlib

    for name, (module, _) in cli.COMMANDS.items():
        assert callable(importlib.import_module(module).main), name


def test_importing_the_package_loads_neither_torch_nor_dgl():
    """The CLIs set OpenMP's wait policy before torch loads; importing the package (which
    every entry point does first) must not load torch behind their back."""
    code = ("import sys, gnn_treelstm, gnn_treelstm.commands.cli, gnn_treelstm.files; "
            "print('torch' in sys.modules, 'dgl' in sys.modules)")
    assert _run("-c", code).stdout.split() == ["False", "False"]


@pytest.mark.parametrize("args", [("-m", "gnn_treelstm", "train", "--help"),
                                  ("-m", "gnn_treelstm.commands.train", "--help"),
                                  ("train.py", "--help")])
def test_train_entry_points(args):
    res = _run(*args)
    assert res.returncode == 0, res.stderr
    assert "usage: gnn-treelstm train" in res.stdout


def test_evaluate_shim_and_module():
    for args in (("evaluate.py", "--help"), ("-m", "gnn_treelstm.commands.evaluate", "--help")):
        res = _run(*args)
        assert res.returncode == 0 and "usage: gnn-treelstm evaluate" in res.stdout


def test_train_sets_the_openmp_spin_unless_the_user_did(monkeypatch):
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    cli.set_openmp_wait_policy()
    import os

    assert os.environ["GOMP_SPINCOUNT"] == "300"
    monkeypatch.setenv("GOMP_SPINCOUNT", "7")
    cli.set_openmp_wait_policy()
    assert os.environ["GOMP_SPINCOUNT"] == "7"


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_help_shows_no_stray_literal_marks(name, capsys):
    import importlib

    with pytest.raises(SystemExit) as done:
        importlib.import_module(cli.COMMANDS[name][0]).main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert f"gnn-treelstm {name}" in out and "`" not in out, out[:600]
