"""The ``gnn-treelstm train`` options: the parser, ``--config`` files, and the
:class:`~gnn_treelstm.training.config.RunConfig` they make, all derived from the run options
the :class:`~gnn_treelstm.training.config.RunConfig` fields declare
(:func:`~gnn_treelstm.training.config.run_options`) and the command's own options
(:class:`CommandOptions`: ``--config``, ``--resume``, ``--threads``, ...), which a run's
configuration does not record and ``--help`` lists in their own group. Both are declared
the same way, a :class:`~gnn_treelstm.training.flags.RunOption` on a dataclass field
(:func:`all_options`): the parser's flags and the ``--config`` file's keys are read from
them, and a file's value goes through the same
:meth:`~gnn_treelstm.training.flags.RunOption.parse` as the flag's argument.

Library code (the reproduction runner's command strings, tests) reads train commands
through :func:`parse_args` and :func:`config_from_args`, the same way the CLI does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gnn_treelstm.argtypes import LOG_LEVELS
from gnn_treelstm.cells.registry import CELL_MODULE_HELP
from gnn_treelstm.training.config import RunConfig, run_options
from gnn_treelstm.training.flags import RunOption, option, options_of

__all__ = ["build_parser", "config_file_defaults", "parse_args", "config_from_args",
           "CommandOptions", "all_options", "add_run_flags", "COMMAND"]

#: the command's one-line description (``--help``)
DESCRIPTION = "train a Tree-LSTM on a task of the papers"

#: the ``--help`` group of the options of the command itself
COMMAND = "the command (not part of the run's configuration)"


class _DefaultsOnce(argparse.HelpFormatter):
    """Appends ``(default: X)`` to a flag's help unless the help already says its default
    or there is none to say (no default, a switch, an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if "default" in text or d is None or d is argparse.SUPPRESS or d == [] \
                or isinstance(d, bool) or action.nargs == 0:
            return text
        return f"{text} (default: %(default)s)".strip()


@dataclass
class CommandOptions:
    """The options of the ``train`` command itself, not run options (they do not change
    what a run trains, and a run's configuration does not record them), in their order in
    ``--help``."""

    config: str | None = option(
        None, "--config", COMMAND,
        "a run config (YAML or JSON; every flag below may be a key, with - or _; a run's "
        "config.yaml reproduces it); flags given on the command line override it",
        metavar="YAML", in_file=False)
    resume: str | None = option(
        None, "--resume", COMMAND,
        "continue a stopped run (its config.yaml, its saved states) where it stopped; no "
        "other option changes the run", metavar="RUN_DIR", in_file=False)
    overwrite: bool = option(False, "--overwrite", COMMAND,
                             "replace the run already in runs/NAME (default: refuse it)")
    threads: int | None = option(
        None, "--threads", COMMAND,
        "torch CPU threads (default: torch's; 1 avoids slow-downs when other jobs share the "
        "cores)", type=int)
    log_level: str = option("WARNING", "--log-level", COMMAND,
                            "console log level (train.log in the run directory gets INFO)",
                            choices=LOG_LEVELS, shorthand=(("-v", "--verbose"), "INFO"))
    quiet: bool = option(False, "--quiet", COMMAND, "no progress bars", aliases=("-q",))
    cell_module: list[str] = option([], "--cell-module", COMMAND, CELL_MODULE_HELP,
                                    metavar="MODULE")


def all_options() -> list[RunOption]:
    """Every ``train`` option in the order of ``--help``: the command's own
    (:class:`CommandOptions`), then the run options (:func:`run_options`)."""
    return options_of(CommandOptions) + run_options()


def _add(group: argparse._ActionsContainer, o: RunOption) -> None:
    """The flag (and its shorthand) of option ``o`` in ``group``."""
    names, help_text = (*o.aliases, o.flag), o.help_text()
    if o.kind in ("switch", "negated"):
        group.add_argument(*names, dest=o.name, default=o.default, help=help_text,
                           action="store_false" if o.kind == "negated" else "store_true")
    elif o.kind in ("pairs", "list"):
        group.add_argument(*names, dest=o.name, action="append", default=[], help=help_text,
                           metavar=o.metavar or ("KEY=VALUE" if o.kind == "pairs" else None),
                           type=None if o.kind == "pairs" else o.parse)
    else:
        group.add_argument(*names, dest=o.name, default=o.default, type=o.parse,
                           choices=o.choices, metavar=o.metavar, help=help_text)
    if o.shorthand is not None:
        short, const = o.shorthand
        group.add_argument(*short, dest=o.name, action="store_const", const=const,
                           help=f"= {o.flag} {const}")


def add_run_flags(ap: argparse._ActionsContainer, names: Sequence[str], **defaults: Any
                  ) -> None:
    """Add the flags of the run options ``names`` (:class:`RunConfig` fields) to another
    command's parser ``ap`` as ``train`` has them (the demo's ``--epochs``, ``--hidden``,
    ...); ``defaults`` sets that command's own default of an option (``epochs=5``)."""
    declared = {o.name: o for o in run_options()}
    for name in names:
        o = declared[name]
        _add(ap, dataclasses.replace(o, default=defaults[name]) if name in defaults else o)


def build_parser() -> argparse.ArgumentParser:
    """The ``gnn-treelstm train`` parser: the options of the command itself (``--config``,
    ``--resume``, ``--threads``, ...) in their group, then a flag per run option in its
    ``--help`` group (:func:`all_options`)."""
    ap = argparse.ArgumentParser(
        prog="gnn-treelstm train", description=DESCRIPTION,
        formatter_class=_DefaultsOnce)
    groups: dict[str, argparse._ArgumentGroup] = {}
    for o in all_options():
        if o.group not in groups:
            groups[o.group] = ap.add_argument_group(o.group)
        _add(groups[o.group], o)
    return ap


def _file_keys() -> dict[str, tuple[RunOption, bool]]:
    """The keys a ``--config`` file may hold (``-`` written ``_``): each option's field
    name and its flag's name, with the option and whether the key is the flag's."""
    keys: dict[str, tuple[RunOption, bool]] = {}
    for o in all_options():
        if o.in_file:
            keys[o.flag_key] = (o, True)
            keys[o.name] = (o, False)  # a field named like its flag: the field's key
    return keys


def _read_mapping(path: str) -> dict:
    """The mapping a ``--config`` file holds (``ValueError`` naming the file)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ValueError(f"--config {path}: cannot read it ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"--config {path}: not valid YAML ({exc})") from exc
    except RecursionError:
        raise ValueError(f"--config {path}: nested too deeply to read; a run config is a "
                         "mapping of options to numbers, strings and short lists") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of options, got "
                         f"{type(data).__name__}")
    return data


def _fix(o: RunOption, key: str) -> str:
    """How to write a good value of option ``o`` under ``key``."""
    if o.kind in ("switch", "negated"):
        return f"write `{key}: true` or `{key}: false`"
    if o.kind == "pairs":
        return f"write e.g. `{o.name}: {{name: value}}` or `{o.flag.lstrip('-')}: [name=value]`"
    example = o.default if o.default not in (None, [], "") else \
        (o.choices[0] if o.choices else None)
    shown = "" if example is None else \
        f"write e.g. `{key}: {example if isinstance(example, str) else json.dumps(example)}`, or "
    return f"{shown}leave the key out for the default (as {o.flag} on the command line)"


def config_file_defaults(path: str) -> dict:
    """The parser defaults a ``--config`` file sets: each value read as its flag's
    argument is (:meth:`~gnn_treelstm.training.flags.RunOption.from_file`).

    A key is an option's :class:`RunConfig` field name (``cell_kwargs: {n_ary: 3}``,
    ``test: false``) or the name of its flag (``cell-arg: [n_ary=3]``, ``no-test: true``,
    ``threads: 1``), with ``-`` or ``_``.

    Raises:
        ValueError: unreadable file, not a mapping, an unknown key, or a value of the wrong
            type or outside the flag's choices; the message names the file, the key, the
            value and how to write it.
    """
    keys = _file_keys()
    out: dict = {}
    for key, value in _read_mapping(path).items():
        found = keys.get(str(key).replace("-", "_"))
        if found is None:
            known = sorted({o.name for o, _ in keys.values()})
            raise ValueError(f"--config {path}: unknown key {key!r}; known keys: "
                             f"{', '.join(known)}")
        o, as_flag = found
        try:
            out[o.name] = o.from_file(value, as_flag)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"--config {path}: {key} must be "
                             f"{str(exc).removeprefix('expected ')}; {_fix(o, key)}"
                             ) from None
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed ``train`` command line ``argv``: a ``--config`` file's keys (or, with
    ``--resume``, the run's ``config.yaml``) as the defaults of the flags given; exit 2
    with the message on a bad flag, file, key or value."""
    ap = build_parser()
    known, _ = ap.parse_known_args(argv)  # --config and --resume, before the file is read
    if known.resume is not None:
        if known.config is not None:
            ap.error("--resume takes the run's own config.yaml; drop --config")
        run_dir = Path(known.resume)
        if not (run_dir / "config.yaml").is_file():
            ap.error(f"--resume {run_dir}: no config.yaml there; is it a run directory "
                     "(runs/NAME)?")
        known.config = str(run_dir / "config.yaml")
    if known.config is not None:
        try:
            ap.set_defaults(**config_file_defaults(known.config))
        except ValueError as exc:
            ap.error(str(exc))  # exit 2 with the message
    a = ap.parse_args(argv)
    if a.resume is not None:  # the run's own directory, wherever it is now
        a.name, a.runs_dir = Path(a.resume).name, str(Path(a.resume).parent)
        a.threads = _resumed_threads(ap, Path(a.resume), a.threads)
    return a


def _resumed_threads(ap: argparse.ArgumentParser, run_dir: Path, given: int | None
                     ) -> int | None:
    """The torch threads a resumed run runs with: those it was started with (its
    ``config.json``'s ``torch_threads``), so that it ends as if it had never stopped; a
    ``--threads`` that differs is refused (exit 2)."""
    try:
        had = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
        threads = had.get("torch_threads") if isinstance(had, dict) else None
    except (OSError, ValueError):
        threads = None  # the resume's own check names an unreadable config.json
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        return given
    if given is not None and given != threads:
        ap.error(f"--threads {given}: the run {run_dir} was started with {threads} torch "
                 f"thread(s), and a resumed run keeps the settings it was started with "
                 f"(other threads sum in another order); drop --threads")
    return threads


def config_from_args(a: argparse.Namespace) -> RunConfig:
    """The :class:`RunConfig` of parsed ``train`` arguments (:func:`parse_args`).

    Raises:
        ValueError: a ``--cell-arg`` / ``--head-arg`` that is not ``KEY=VALUE``.
    """
    return RunConfig(**{o.name: o.value_of(getattr(a, o.name)) for o in run_options()})
