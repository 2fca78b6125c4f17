"""Each ``train`` option is declared once (a field of RunConfig or of the command's own
options): the parser's flags and the ``--config`` keys come from those declarations, and a
file's value is read by the code that reads the flag's argument."""

import argparse
import ast
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from gnn_treelstm.training.config import RunConfig, run_options
from gnn_treelstm.training.options import (
    CommandOptions,
    all_options,
    build_parser,
    config_from_args,
    parse_args,
)

PACKAGE = Path(__file__).resolve().parents[2] / "gnn_treelstm"


def test_every_flag_is_one_declared_option_and_every_option_one_flag():
    """Parser flags <-> declared fields, one to one (the -v shorthand sets log_level)."""
    opts = all_options()
    names = [o.name for o in opts]
    assert len(names) == len(set(names)), "an option declared twice"
    assert names == [f.name for f in dataclasses.fields(CommandOptions)] + \
        [f.name for f in dataclasses.fields(RunConfig)]
    by_name = {o.name: o for o in opts}
    actions = [a for a in build_parser()._actions if not isinstance(a, argparse._HelpAction)]
    strings = [s for a in actions for s in a.option_strings]
    assert len(strings) == len(set(strings)), "a flag name given twice"
    main = {}
    for a in actions:
        o = by_name[a.dest]                           # every flag sets a declared field
        if o.flag in a.option_strings:
            assert a.dest not in main, f"{o.flag}: two flags"
            main[a.dest] = a
            assert tuple(a.option_strings) == (*o.aliases, o.flag)
            assert a.help == o.help_text()
        else:                                         # a shorthand of a declared option
            assert o.shorthand is not None and tuple(a.option_strings) == o.shorthand[0]
    assert set(main) == set(names)                    # every declared field has its flag
    keys = [k for o in opts if o.in_file for k in {o.name, o.flag_key}]
    assert len(keys) == len(set(keys)), "a --config key of two options"


def test_no_module_of_the_training_package_adds_a_flag_of_its_own():
    """The parser's add_argument calls are the one loop over the declarations."""
    calls = []
    for path in (PACKAGE / "training").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                calls.append(path.name)
    assert set(calls) == {"options.py"}
    text = (PACKAGE / "training" / "options.py").read_text()
    assert not re.search(r"add_argument\(\s*\"-", text), "a flag spelled out in options.py"


def _sample(o):
    """A value of option ``o`` other than its default, valid for the parser."""
    if o.kind == "pairs":
        return {"n_ary": 3, "word": "abs"}
    if o.kind == "list":
        return ["one", "two"]
    if o.kind in ("switch", "negated"):
        return not o.default
    if o.choices:
        return next(c for c in reversed(list(o.choices)) if c != o.default)
    if o.type is float:
        return 0.25
    if o.type is not None:
        return 3 if o.default != 3 else 4
    return "a" * 64 if o.name == "embeddings_sha256" else f"some-{o.name}"


def _as_flag(o, value):
    """The value of ``o`` as its flag-named --config key holds it."""
    if o.kind == "negated":
        return not value
    if o.kind == "pairs":
        return [f"{k}={v}" for k, v in value.items()]
    return value


@pytest.mark.parametrize("o", [o for o in all_options() if o.in_file], ids=lambda o: o.name)
def test_a_config_key_and_its_flag_give_the_same_value(o, tmp_path):
    """The field's key, the flag's key and the flag on the command line set the same."""
    value = _sample(o)
    on_line = parse_args(o.words(value))
    assert getattr(on_line, o.name) != getattr(parse_args([]), o.name)
    field_key, flag_key = tmp_path / "field.yaml", tmp_path / "flag.yaml"
    field_key.write_text(yaml.safe_dump({o.name: value}))
    flag_key.write_text(yaml.safe_dump({o.flag.lstrip("-"): _as_flag(o, value)}))
    for conf in (field_key, flag_key):
        from_file = parse_args(["--config", str(conf)])
        assert o.value_of(getattr(from_file, o.name)) == \
            o.value_of(getattr(on_line, o.name)), conf.name
        assert config_from_args(from_file) == config_from_args(on_line)


def test_a_whole_run_config_from_a_file_is_the_one_from_the_flags(tmp_path):
    """Every run option at once: the file of field keys, the file of flag keys and the
    command line make one RunConfig, none of its fields at the default."""
    values = {o.name: _sample(o) for o in run_options()}
    words = [w for o in run_options() for w in o.words(values[o.name])]
    want = config_from_args(parse_args(words))
    assert all(getattr(want, o.name) != o.default for o in run_options())
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(values))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(
        {o.flag.lstrip("-"): _as_flag(o, values[o.name]) for o in run_options()}))
    for name in ("a.yaml", "b.yaml"):
        assert config_from_args(parse_args(["--config", str(tmp_path / name)])) == want


@pytest.mark.parametrize("o", [o for o in all_options() if o.kind == "value" and o.in_file
                               and (o.type is not None or o.choices)], ids=lambda o: o.name)
def test_a_bad_value_is_refused_in_the_same_words_on_the_line_and_in_a_file(
        o, tmp_path, capsys):
    """The flag's reader (its type and choices) words both errors; the file's error also
    names the file, the key, the value and how to write it."""
    with pytest.raises(SystemExit):
        parse_args([o.flag, "zz"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    expected = re.search(rf"argument {o.flag}: expected (.*), got 'zz'$", line)
    assert expected, line
    conf = tmp_path / "bad.yaml"
    conf.write_text(f"{o.name}: zz\n")
    with pytest.raises(SystemExit) as exc:
        parse_args(["--config", str(conf)])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert f"--config {conf}: {o.name} must be {expected.group(1)}, got 'zz'; " in err
    assert f"leave the key out for the default (as {o.flag} on the command line)" in err


def test_a_float_written_as_yaml_reads_1e_3_as_the_command_line_does(tmp_path):
    """YAML 1.1 reads 1e-3 as a string; the flag's reader makes it the number."""
    conf = tmp_path / "lr.yaml"
    conf.write_text("lr: 1e-3\nhidden: 7\n")
    a = parse_args(["--config", str(conf)])
    assert (a.lr, a.hidden) == (0.001, 7) == (parse_args(["--lr", "1e-3"]).lr, 7)


def test_an_option_whose_default_is_not_none_refuses_null(tmp_path, capsys):
    conf = tmp_path / "null.yaml"
    conf.write_text("hidden: null\nlr: null\n")
    with pytest.raises(SystemExit):
        parse_args(["--config", str(conf)])
    assert "hidden must be a number, got None; write e.g. `hidden: 150`" in \
        capsys.readouterr().err


def test_the_demo_takes_its_run_flags_from_the_declarations():
    """demo's --runs-dir, --epochs, --hidden, --seed are train's (only --epochs' default is
    the demo's own)."""
    from gnn_treelstm.commands import demo

    train = {a.dest: a for a in build_parser()._actions}
    shown = [a for a in demo.build_parser()._actions if a.dest != "help"]
    assert [a.dest for a in shown] == ["runs_dir", "epochs", "hidden", "seed"]
    for a in shown:
        t = train[a.dest]
        assert (a.option_strings, a.help, a.metavar) == (t.option_strings, t.help, t.metavar)
        assert a.type.__func__ is t.type.__func__ and a.type("3") == t.type("3")
        assert a.default == (5 if a.dest == "epochs" else t.default)
