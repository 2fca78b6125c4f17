"""The ``gnn-treelstm train`` options: the parser, ``--config`` files, and the
:class:`~gnn_treelstm.training.config.RunConfig` they make, all derived from the run options
the :class:`~gnn_treelstm.training.config.RunConfig` fields declare
(:func:`~gnn_treelstm.training.config.run_options`) and the command's own options
(:data:`COMMAND_FLAGS`: ``--config``, ``--resume``, ``--threads``, ...), which a run's
configuration does not record and ``--help`` lists in their own group. Each flag is a
:class:`Flag` (its names and ``add_argument`` keywords, :func:`flags`): the parser and the
checks of ``--config`` keys read the same declarations.

Library code (the reproduction runner's command strings, tests) reads train commands
through :func:`parse_args` and :func:`config_from_args`, the same way the CLI does.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gnn_treelstm.cells.registry import CELL_MODULE_HELP
from gnn_treelstm.training.config import RunConfig, RunOption, run_options

__all__ = ["build_parser", "config_file_defaults", "parse_args", "config_from_args", "Flag",
           "flags", "COMMAND", "COMMAND_FLAGS"]

#: the command's one-line description (``--help``)
DESCRIPTION = "train a Tree-LSTM on a task of the papers"


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
    except RecursionError:
        raise ValueError(f"{text[:40]!r}...: nested too deeply to read (a cell or head "
                         "option is a number, a string, or a shallow list or mapping)"
                         ) from None


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


@dataclass(frozen=True)
class Flag:
    """A flag of the ``train`` parser: its names and the keywords of
    :meth:`argparse.ArgumentParser.add_argument` (``action``, ``type``, ``choices``, ...),
    which the ``--config`` keys' checks read too."""

    names: tuple[str, ...]
    options: dict[str, Any]

    @property
    def dest(self) -> str:
        """The attribute of the parsed command line (and the ``--config`` key) it sets."""
        return self.options.get("dest") or self.names[-1].lstrip("-").replace("-", "_")


#: the ``--help`` group of the options of the command itself
COMMAND = "the command (not part of the run's configuration)"

#: the options of the command itself, not run options (they do not change what a run
#: trains), in their order in ``--help``
COMMAND_FLAGS = (
    Flag(("--config",), {"default": None, "metavar": "YAML", "help":
         "a run config (YAML or JSON; every flag below may be a key, with - or _; a run's "
         "config.yaml reproduces it); flags given on the command line override it"}),
    Flag(("--resume",), {"default": None, "metavar": "RUN_DIR", "help":
         "continue a stopped run (its config.yaml, its saved states) where it stopped; no "
         "other option changes the run"}),
    Flag(("--overwrite",), {"action": "store_true", "help":
         "replace the run already in runs/NAME (default: refuse it)"}),
    Flag(("--threads",), {"type": int, "default": None, "help":
         "torch CPU threads (default: torch's; 1 avoids slow-downs when other jobs share "
         "the cores)"}),
    Flag(("--log-level",), {"default": "WARNING", "choices": ("DEBUG", "INFO", "WARNING",
                                                              "ERROR"),
                            "help": "console log level (train.log in the run directory gets "
                                    "INFO)"}),
    Flag(("-v", "--verbose"), {"dest": "log_level", "action": "store_const", "const": "INFO",
                               "help": "= --log-level INFO"}),
    Flag(("-q", "--quiet"), {"action": "store_true", "help": "no progress bars"}),
    Flag(("--cell-module",), {"action": "append", "default": [], "metavar": "MODULE",
                              "help": CELL_MODULE_HELP}),
)


def _run_flag(opt: RunOption) -> Flag:
    """The flag of one run option (:func:`~gnn_treelstm.training.config.run_options`)."""
    if opt.kind in ("switch", "negated"):
        return Flag((opt.flag,), {"action": "store_true", "help": opt.help_text()})
    if opt.kind == "pairs":
        return Flag((opt.flag,), {"action": "append", "default": [], "metavar": "KEY=VALUE",
                                  "help": opt.help_text()})
    return Flag((opt.flag,), {"default": opt.default, "type": opt.type,
                              "choices": opt.choices, "metavar": opt.metavar,
                              "help": opt.help_text()})


def flags() -> list[tuple[str, Flag]]:
    """``(group, flag)`` of every ``train`` flag in the order of ``--help``: the command's
    own (:data:`COMMAND_FLAGS`), then a flag per run option in its group."""
    return [(COMMAND, f) for f in COMMAND_FLAGS] + \
        [(o.group, _run_flag(o)) for o in run_options()]


def build_parser() -> argparse.ArgumentParser:
    """The ``gnn-treelstm train`` parser: the options of the command itself (``--config``,
    ``--resume``, ``--threads``, ...) in their group, then a flag per run option in its
    ``--help`` group (:func:`flags`)."""
    ap = argparse.ArgumentParser(
        prog="gnn-treelstm train", description=DESCRIPTION,
        formatter_class=_DefaultsOnce)
    groups = {}
    for group, flag in flags():
        if group not in groups:
            groups[group] = ap.add_argument_group(group)
        groups[group].add_argument(*flag.names, **flag.options)
    return ap


def _cli_value(opt: RunOption, value: Any, path: str, key: str) -> Any:
    """A config file's value of run option ``opt`` (the :class:`RunConfig` field's shape)
    as its flag's parsed value."""
    if opt.kind == "negated":  # test: false = --no-test
        return (not value) if isinstance(value, bool) else value
    if opt.kind == "pairs":
        if not isinstance(value, dict):
            raise ValueError(f"--config {path}: {key} must be a mapping, got {value!r}")
        return [f"{k}={json.dumps(v)}" for k, v in value.items()]
    return value


def config_file_defaults(path: str) -> dict:
    """The parser defaults a ``--config`` file sets (keys checked, values type-checked).

    A key is a run option's :class:`RunConfig` field name (``cell_kwargs: {n_ary: 3}``,
    ``test: false``) or the name of a flag (:func:`flags`: ``cell-arg: [n_ary=3]``,
    ``no-test: true``, ``threads: 1``), with ``-`` or ``_``.

    Raises:
        ValueError: unreadable file, not a mapping, an unknown key, or a value of the wrong
            type or outside the flag's choices; the message names the file and the key.
    """
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
    actions: dict[str, Flag] = {}
    for _, flag in flags():  # -v sets log_level too: the key is --log-level's
        if flag.dest != "config":
            actions.setdefault(flag.dest, flag)
    # run options whose field is not named like its flag (cell_kwargs: --cell-arg)
    renamed = {o.name: o for o in run_options() if o.name != o.dest}
    out: dict = {}
    for key, value in data.items():
        dest = str(key).replace("-", "_")
        if dest in renamed:
            dest, value = renamed[dest].dest, _cli_value(renamed[dest], value, path, key)
        action = actions.get(dest)
        if action is None:
            known = sorted({*actions, *renamed} - {o.dest for o in renamed.values()})
            raise ValueError(f"--config {path}: unknown key {key!r}; known keys: "
                             f"{', '.join(known)}")
        _check_value(path, key, value, action)
        out[dest] = value
    return out


def _check_value(path: str, key: str, value: Any, flag: Flag) -> None:
    o = flag.options
    action, kind, choices = o.get("action"), o.get("type"), o.get("choices")
    bad = None
    if action == "store_true":
        bad = None if isinstance(value, bool) else "true or false"
    elif kind is int:
        ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
        bad = None if ok else "an integer"
    elif kind is float:
        ok = value is None or (isinstance(value, int | float) and not isinstance(value, bool))
        bad = None if ok else "a number"
    elif kind not in (None, str) and callable(kind):  # e.g. positive_int
        bad = None
        if value is not None:
            try:
                if isinstance(value, bool | list | dict):
                    raise argparse.ArgumentTypeError("expected a number")
                kind(str(value))
            except (argparse.ArgumentTypeError, ValueError) as exc:
                bad = str(exc).removeprefix("expected ").split(", got")[0]
    elif action == "append":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        bad = None if ok else "a list of KEY=VALUE strings"
    elif value is not None and not isinstance(value, str):
        bad = "a string"
    if bad is None and choices is not None and value is not None and value not in choices:
        bad = f"one of {', '.join(map(str, choices))}"
    if bad:
        raise ValueError(f"--config {path}: {key} must be {bad}, got {value!r}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = build_parser()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    pre.add_argument("--resume", default=None)
    known, _ = pre.parse_known_args(argv)
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


def _kwargs(items: list[str], flag: str) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"{flag} {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = _value(v)
        except ValueError as exc:
            raise ValueError(f"{flag} {k.strip()}={exc}") from None
    return out


def _field_value(opt: RunOption, value: Any) -> Any:
    """The :class:`RunConfig` value of run option ``opt`` whose flag parsed to ``value``."""
    if opt.kind == "negated":
        return not value
    if opt.kind == "pairs":
        return _kwargs(value, opt.flag)
    return value


def config_from_args(a: argparse.Namespace) -> RunConfig:
    """The :class:`RunConfig` of parsed ``train`` arguments (:func:`parse_args`).

    Raises:
        ValueError: a ``--cell-arg`` / ``--head-arg`` that is not ``KEY=VALUE``.
    """
    return RunConfig(**{o.name: _field_value(o, getattr(a, o.dest)) for o in run_options()})
