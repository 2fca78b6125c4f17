"""A command-line option declared once, on a dataclass field.

A field made by :func:`option` carries a :class:`RunOption` in its ``metadata``: the flag,
its ``--help`` group and text, the value's type and choices, the checks of its values.
:func:`options_of` reads them back with the field's name, default and kind. Everything
else is derived from these declarations: the ``train`` parser, the keys and values of
``--config`` files (:mod:`gnn_treelstm.training.options`), the checks of
:meth:`~gnn_treelstm.training.config.RunConfig.check` and the train commands the
reproduction runner writes (:meth:`RunOption.words`).

A value is read by one function whether it was typed on the command line or written in a
``--config`` file: :meth:`RunOption.parse` (the parser's ``type=``), and for ``KEY=VALUE``
options :meth:`RunOption.value_of`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunOption", "Check", "option", "options_of", "KINDS"]

#: how a flag sets its field (:attr:`RunOption.kind`)
KINDS = ("value", "switch", "negated", "pairs", "list")

#: what the error of a plain ``int`` or ``float`` type calls the value it expected
_EXPECTED = {int: "an integer", float: "a number"}


@dataclass(frozen=True)
class Check:
    """A condition a run option's value meets
    (:meth:`~gnn_treelstm.training.config.RunConfig.check`), and the error when it does not:
    ``error`` is formatted with ``flag``, ``name`` (the field) and ``value``."""

    holds: Callable[[Any], bool]
    error: str

    def verify(self, flag: str, name: str, value: Any) -> None:
        """``ValueError`` with :attr:`error` unless ``value`` meets the condition."""
        if not self.holds(value):
            raise ValueError(self.error.format(flag=flag, name=name, value=value))


@dataclass(frozen=True)
class RunOption:
    """A dataclass field as a command-line option: declared in the field's metadata by
    :func:`option`, read back (with ``name``, ``kind`` and ``default``) by
    :func:`options_of`.

    Attributes:
        flag: the flag (``--task``), whose parsed value is the attribute ``name``.
        group: the ``--help`` group it is listed under.
        help: the help text (a callable for texts listing a registry's names), or None.
        type: the argument's type (``int``, ``float``, ``positive_int``; None: a string).
        choices: the accepted values, or None for any.
        metavar: the argument's name in ``--help`` (None: argparse's).
        in_command: whether :func:`gnn_treelstm.reproduce.runner.command` writes the option
            in a row's train command (False for where and how a run reports, which does not
            change what it trains).
        path: the value names a file or directory: a run records it absolute
            (:meth:`~gnn_treelstm.training.config.RunConfig.with_absolute_paths`) and
            :func:`~gnn_treelstm.training.config.config_changes` compares it by the file it
            names.
        checks: the conditions :meth:`~gnn_treelstm.training.config.RunConfig.check` holds
            its value to (ranges, known names), each with its error.
        aliases: other names of the flag (``-q`` of ``--quiet``).
        shorthand: flags that set a fixed value, and the value (``-v``, ``--verbose``:
            ``--log-level INFO``).
        in_file: whether a ``--config`` file may set it (not ``--config`` itself).
        name: the field's name: the parsed command line's attribute and the ``--config``
            key (the flag's name is a key too).
        kind: how the flag sets the field: ``value`` (the flag's argument, of ``type``),
            ``switch`` (a flag without argument sets a ``bool`` field), ``negated``
            (``--no-X`` sets the ``bool`` field ``X`` to false), ``pairs`` (repeated
            ``KEY=VALUE`` arguments, JSON values, make a ``dict`` field) or ``list``
            (repeated arguments make a list).
        default: the field's default.
    """

    flag: str
    group: str
    help: str | Callable[[], str] | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    in_command: bool = True
    path: bool = False
    checks: tuple[Check, ...] = ()
    aliases: tuple[str, ...] = ()
    shorthand: tuple[tuple[str, ...], Any] | None = None
    in_file: bool = True
    name: str = ""
    kind: str = "value"
    default: Any = None

    @property
    def dest(self) -> str:
        """The attribute the parsed command line holds the value in: the field's name."""
        return self.name

    @property
    def flag_key(self) -> str:
        """The flag's name as a ``--config`` key (``cell_arg``, ``no_test``)."""
        return self.flag.lstrip("-").replace("-", "_")

    def help_text(self) -> str | None:
        return self.help() if callable(self.help) else self.help

    def parse(self, text: str) -> Any:
        """The value of the flag's argument ``text``: of :attr:`type`, one of
        :attr:`choices`. The parser's ``type=``, and what a ``--config`` file's value goes
        through (:meth:`from_file`).

        Raises:
            argparse.ArgumentTypeError: ``expected WHAT, got VALUE``.
        """
        try:
            value = text if self.type is None else self.type(text)
        except (ValueError, OverflowError):  # int, float
            what = _EXPECTED.get(self.type, f"a value of {self.flag}")
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if self.choices is not None and value not in self.choices:
            raise argparse.ArgumentTypeError(
                f"expected one of {', '.join(map(str, self.choices))}, got {text!r}")
        return value

    def value_of(self, parsed: Any) -> Any:
        """The field's value of what the parser holds for it: a ``pairs`` option's
        ``KEY=VALUE`` strings as a mapping (JSON values), anything else as it is.

        Raises:
            ValueError: an item that is not ``KEY=VALUE``, or a value nested too deeply.
        """
        if self.kind != "pairs":
            return parsed
        out = {}
        for item in parsed:
            if "=" not in item:
                raise ValueError(f"{self.flag} {item!r}: expected KEY=VALUE")
            k, v = item.split("=", 1)
            try:
                out[k.strip()] = _json_value(v)
            except ValueError as exc:
                raise ValueError(f"{self.flag} {k.strip()}={exc}") from None
        return out

    def from_file(self, value: Any, as_flag: bool) -> Any:
        """What the parser holds for a ``--config`` file's ``value`` of this option (keyed
        by the flag's name where ``as_flag``, else by the field's): a field's value, the
        strings of a repeated flag; read by :meth:`parse` as the flag's argument is.

        Raises:
            argparse.ArgumentTypeError: ``expected WHAT, got VALUE``.
        """
        if self.kind in ("switch", "negated"):
            if not isinstance(value, bool):
                raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")
            return (not value) if self.kind == "negated" and as_flag else value
        if self.kind == "pairs" and not as_flag:
            if not isinstance(value, dict):
                raise argparse.ArgumentTypeError(f"expected a mapping, got {value!r}")
            return [f"{k}={json.dumps(v)}" for k, v in value.items()]
        if self.kind in ("pairs", "list"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                what = "KEY=VALUE strings" if self.kind == "pairs" else "strings"
                raise argparse.ArgumentTypeError(f"expected a list of {what}, got {value!r}")
            return value if self.kind == "pairs" else [self.parse(v) for v in value]
        if value is None and self.default is None:
            return None  # the default asked for
        if value is None or isinstance(value, bool | list | dict):
            what = "a string" if self.type is None else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")
        return self.parse(str(value))

    def words(self, value: Any) -> list[str]:
        """The command-line words that set the field to ``value`` (none for its
        default of a switch)."""
        if self.kind == "pairs":
            return [w for k, v in value.items()
                    for w in (self.flag, f"{k}={v if isinstance(v, str) else json.dumps(v)}")]
        if self.kind == "list":
            return [w for v in value for w in (self.flag, str(v))]
        if self.kind == "switch":
            return [self.flag] if value else []
        if self.kind == "negated":
            return [] if value else [self.flag]
        return [] if value is None else [self.flag, str(value)]


def _json_value(text: str) -> Any:
    """A ``KEY=VALUE`` argument's value: JSON, else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
    except RecursionError:
        raise ValueError(f"{text[:40]!r}...: nested too deeply to read (a cell or head "
                         "option is a number, a string, or a shallow list or mapping)"
                         ) from None


def option(default: Any, flag: str, group: str, help: str | Callable[[], str] | None = None,
           **declared: Any) -> Any:
    """A dataclass field declared with its command-line option: ``declared`` holds the
    other :class:`RunOption` attributes (``type``, ``choices``, ``checks``, ...). A ``dict``
    default makes a ``KEY=VALUE`` option, a ``list`` a repeated one, a ``bool`` a switch
    (``--no-X``: set to false)."""
    for key in ("choices", "checks", "aliases"):
        if declared.get(key) is not None:
            declared[key] = tuple(declared[key])
    metadata = {"option": RunOption(flag, group, help, **declared)}
    if isinstance(default, dict | list):
        return field(default_factory=type(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _kind(f: dataclasses.Field) -> str:
    if f.default_factory is dict:
        return "pairs"
    if f.default_factory is list:
        return "list"
    if isinstance(f.default, bool):
        return "negated" if f.metadata["option"].flag.startswith("--no-") else "switch"
    return "value"


def options_of(cls: type) -> list[RunOption]:
    """The options of the dataclass ``cls``, one per field (each declared by
    :func:`option`), in the fields' order."""
    out = []
    for f in dataclasses.fields(cls):
        declared: RunOption = f.metadata["option"]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
            else f.default
        out.append(dataclasses.replace(declared, name=f.name, kind=_kind(f), default=default))
    return out

