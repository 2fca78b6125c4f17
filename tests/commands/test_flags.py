"""Every numeric flag of the command lines refuses 0, a negative value and a non-number with
exit status 2 and a message naming the flag, unless the table below says it takes 0 or
negatives; and the path and input refusals of ``fetch`` and ``evaluate``.

The flags are found by walking each command's ``build_parser()`` (subcommands included): a
flag whose ``type=`` turns ``"1"`` into a number is numeric, so a new numeric flag is swept
without touching this file.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from gnn_treelstm.commands import cli

NOT_SWEPT: tuple[str, ...] = ()
SWEPT = [c for c in cli.COMMANDS if c not in NOT_SWEPT]

#: (command, flag) -> the values of the sweep it accepts, and why
ACCEPTS: dict[tuple[str, str], set[str]] = {
    ("serve", "--port"): {"0"},                      # any free port
    ("evaluate", "--min-count"): {"0"},              # keep every length window
    ("analyze length", "--min-count"): {"0"},
    ("analyze tree", "--index"): {"0"},              # the first sentence
    ("analyze heads", "--index"): {"0"},
    ("analyze neighbours", "--seed"): {"0", "-1"},   # any integer seeds random.Random
    ("bench", "--seed"): {"0", "-1"},
    ("bench", "--warmup"): {"0"},                    # no untimed batches
    ("build", "--score-range"): {"0", "-1"},         # any finite score range
    ("train", "--seed"): {"0", "-1"},
    ("demo", "--seed"): {"0", "-1"},
    ("train", "--dropout"): {"0"},                   # no dropout
    ("train", "--emb-dropout"): {"0"},
    ("train", "--l2"): {"0"},                        # no weight decay
    ("train", "--emb-l2"): {"0"},
    ("train", "--lr-warmup-epochs"): {"0"},          # no warm-up
    ("train", "--lr-plateau-patience"): {"0"},       # decay after one epoch without gain
    ("train", "--checkpoint-every"): {"0"},          # no mid-epoch checkpoints
    ("train", "--workers"): {"0"},                   # batches built in the training process
}
SWEEP = ("0", "-1", "abc")


def _parsers() -> list[tuple[str, object, list[str], argparse.ArgumentParser]]:
    """``(name, module, argv prefix, parser)`` of every swept command and subcommand."""
    out = []
    for command in SWEPT:
        module = importlib.import_module(cli.COMMANDS[command][0])
        assert hasattr(module, "build_parser"), f"{command}: no build_parser() to sweep"
        parser = module.build_parser()
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            out.append((command, module, [], parser))
        for action in subs:
            for name, sub in action.choices.items():
                out.append((f"{command} {name}", module, [name], sub))
    return out


PARSERS = _parsers()


def _is_numeric(action: argparse.Action) -> bool:
    if not action.option_strings or action.type is None:
        return False
    try:
        value = action.type("1")
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False
    return isinstance(value, int | float) and not isinstance(value, bool)


def _values(action: argparse.Action, value: str) -> list[str]:
    return [value] * (action.nargs if isinstance(action.nargs, int) else 1)


def _required(parser: argparse.ArgumentParser) -> list[str]:
    """Placeholder values for what the parser requires (positionals, required flags)."""
    argv: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.option_strings and not action.required:
            continue
        if not action.option_strings and action.nargs in ("?", "*"):
            continue
        value = str(next(iter(action.choices))) if action.choices else "placeholder"
        argv += action.option_strings[:1] + _values(action, value)
    return argv


def _flag(action: argparse.Action) -> str:
    return next((o for o in action.option_strings if o.startswith("--")),
                action.option_strings[0])


FLAGS = [(name, module, prefix, parser, action) for name, module, prefix, parser in PARSERS
         for action in parser._actions if _is_numeric(action)]
CASES = [pytest.param(name, module, prefix, parser, action, value,
                      id=f"{name} {_flag(action)} {value}")
         for name, module, prefix, parser, action in FLAGS for value in SWEEP]


def run_main(module, argv: list[str], capsys) -> tuple[int, str]:
    """(exit status, standard error) of a command's ``main(argv)``."""
    try:
        code = module.main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def test_the_sweep_sees_every_command_and_its_table():
    names = {name for name, *_ in PARSERS}
    assert {"evaluate", "predict", "serve", "bench", "build", "fetch", "analyze tree",
            "analyze heads", "analyze relations", "analyze neighbours", "analyze length",
            "analyze curves"} <= names
    found = {(name, _flag(action)) for name, _, _, _, action in FLAGS}
    assert set(ACCEPTS) <= found, f"the table names flags that are gone: {set(ACCEPTS) - found}"
    assert {("evaluate", "--batch-size"), ("predict", "--batch-size"), ("serve", "--timeout"),
            ("serve", "--max-connections"), ("build", "--workers"), ("bench", "--trees"),
            ("analyze neighbours", "-k")} <= found
    # every command's defaults pass its own checks
    for _, _, _, _, action in FLAGS:
        if action.default is not None:
            for v in action.default if isinstance(action.default, list) else [action.default]:
                action.type(str(v))


@pytest.mark.parametrize("name, module, prefix, parser, action, value", CASES)
def test_numeric_flag(name, module, prefix, parser, action, value, capsys, tmp_path,
                      monkeypatch):
    monkeypatch.chdir(tmp_path)  # placeholders are relative paths: nothing lands in the repo
    flag = _flag(action)
    argv = prefix + [flag, *_values(action, value)] + _required(parser)
    if value in ACCEPTS.get((name, flag), ()):
        parsed = parser.parse_args(argv[len(prefix):])
        got = getattr(parsed, action.dest)
        assert got == (type(got)(value) if not isinstance(got, list) else got)
        return
    code, err = run_main(module, argv, capsys)
    assert code == 2, f"{name} {flag} {value}: exit {code}"
    assert flag in err, f"{name} {flag} {value}: the message does not name the flag: {err}"
    assert "Traceback" not in err


# ---------------------------------------------------------------------------- fetch
def test_fetch_from_a_missing_folder_is_2_naming_it(tmp_path, capsys):
    missing = tmp_path / "nonexistent"
    code, err = run_main(cli, ["fetch", "--from", str(missing), "--dest", str(tmp_path / "d")],
                         capsys)
    assert code == 2 and f"--from {missing}: no such folder" in err
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    code, err = run_main(cli, ["fetch", "--from", str(a_file)], capsys)
    assert code == 2 and f"--from {a_file}: not a folder" in err
    code, err = run_main(cli, ["fetch", "--from", str(tmp_path), "--dest", str(tmp_path)],
                         capsys)
    assert code == 2 and "the same folder" in err


@pytest.mark.parametrize("files", [[], ["notes.txt", "other/readme.md"]])
def test_fetch_from_a_folder_without_a_mirror_is_2_saying_what_it_expects(tmp_path, capsys,
                                                                          files):
    src = tmp_path / "mirror"
    src.mkdir()
    for f in files:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_text("x")
    dest = tmp_path / "data"
    code, err = run_main(cli, ["fetch", "--from", str(src), "--dest", str(dest), "--quiet"],
                         capsys)
    assert code == 2
    assert f"--from {src}: nothing of a data mirror there ({len(files)} files" in err
    assert "sst/trees/train.txt" in err and "trainDevTestTrees_PTB.zip" in err
    assert not dest.exists()
    # one file where a mirror keeps it is enough
    (src / "trec").mkdir()
    (src / "trec" / "TREC_10.label").write_text("NUM:date When ?\n")
    code, _ = run_main(cli, ["fetch", "--from", str(src), "--dest", str(dest), "--quiet"],
                       capsys)
    assert code == 0 and (dest / "trec" / "TREC_10.label").is_file()


def test_fetch_unknown_or_no_data_sets_are_2(capsys):
    code, err = run_main(cli, ["fetch", "--datasets", "sst,nope"], capsys)
    assert code == 2 and "'nope'" in err and "--datasets" in err
    code, err = run_main(cli, ["fetch", "--datasets", " , "], capsys)
    assert code == 2 and "--datasets" in err


def test_the_installed_command_exits_2_too(tmp_path):
    res = subprocess.run([sys.executable, "-m", "gnn_treelstm", "fetch", "--from",
                          str(tmp_path / "nonexistent")], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert res.returncode == 2 and "nonexistent: no such folder" in res.stderr


# ---------------------------------------------------------------------------- evaluate
def test_evaluate_batch_size_0_names_the_flag(capsys):
    code, err = run_main(cli, ["evaluate", "runs/x/best.pt", "--batch-size", "0"], capsys)
    assert code == 2 and "argument --batch-size: expected a positive integer, got 0" in err
    assert "DataLoader" not in err


@pytest.mark.parametrize("argv", [["--predict", "a witty film"], ["--predict"],
                                  ["--predict", "sentences.txt", "--json"]])
def test_evaluate_predict_points_to_the_predict_command(capsys, argv):
    code, err = run_main(cli, ["evaluate", "runs/x/best.pt", *argv], capsys)
    assert code == 2 and "--predict is not an evaluate option" in err
    assert "gnn-treelstm predict RUN TEXT" in err
    code, err = run_main(cli, ["evaluate", "runs/x/best.pt", "--spacy-model", "x"], capsys)
    assert code == 2 and "--spacy-model" in err
