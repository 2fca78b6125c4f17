"""``gnn-treelstm COMMAND [ARGS]``: the one entry point of the installed command lines.

=============  =========================================  ==================================
command        what it does                               also runs as
=============  =========================================  ==================================
``train``      train a model on a task of the papers      ``python -m gnn_treelstm train``
``evaluate``   score checkpoints, tabulate or plot runs   ``python -m gnn_treelstm evaluate``
``predict``    label raw sentences with a checkpoint      ``python -m gnn_treelstm predict``
``serve``      a tree explorer web page for a checkpoint  ``python -m gnn_treelstm serve``
``analyze``    the papers' analyses as pictures           ``python -m gnn_treelstm analyze``
``build``      parse a data set into DGL graphs           ``python -m gnn_treelstm build``
``fetch``      lay out or verify the raw data mirror      ``python -m gnn_treelstm fetch``
``bench``      time the engines                           ``python -m gnn_treelstm bench``
``demo``       the whole pipeline on the embedded sample  ``python -m gnn_treelstm demo``
``reproduce``  rerun the papers' table rows               ``python -m gnn_treelstm reproduce``
=============  =========================================  ==================================

``gnn-treelstm COMMAND --help`` lists a command's options. This module imports neither
torch nor dgl: it sets the process-wide OpenMP wait policy first (torch's libgomp reads it
when it loads) and points ``torch.compile``'s cache into the project's cache directory, then
imports the command. These are the command lines' settings: importing the library or running
a cell sets nothing process-wide (``tests/test_side_effects.py``).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "main", "set_openmp_wait_policy", "set_compile_cache", "progress_bar",
           "description"]

#: command -> (module with ``main(argv) -> int``, one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("gnn_treelstm.commands.train", "train a model on a task of the papers"),
    "evaluate": ("gnn_treelstm.commands.evaluate", "score checkpoints, tabulate or plot runs"),
    "predict": ("gnn_treelstm.commands.predict", "label raw sentences with a checkpoint"),
    "serve": ("gnn_treelstm.commands.serve", "a tree explorer web page for a checkpoint"),
    "analyze": ("gnn_treelstm.commands.analyze", "the papers' analyses as pictures and tables"),
    "build": ("gnn_treelstm.commands.build", "parse a data set into DGL graphs"),
    "fetch": ("gnn_treelstm.commands.fetch", "lay out or verify the raw data mirror"),
    "bench": ("gnn_treelstm.commands.bench", "time the engines"),
    "demo": ("gnn_treelstm.commands.demo", "the whole pipeline on the embedded sample"),
    "reproduce": ("gnn_treelstm.commands.reproduce", "rerun the papers' table rows"),
}


def set_openmp_wait_policy() -> None:
    """A short OpenMP spin before a waiting thread sleeps, unless the user set one.

    Read by libgomp when torch loads, so it must run before any torch import. With 2
    threads each tensor op hands half its work to a second thread; how that thread waits
    between ops decides the speed of small ops (SST-5 nary --engine level, 2 cores):
    idle machine: ``GOMP_SPINCOUNT=300`` ~4.3 s/epoch, ``OMP_WAIT_POLICY=PASSIVE``
    5.0-6.4 s, ``--threads 1`` ~5.7 s; one core busy: ``GOMP_SPINCOUNT=300`` ~9 s,
    ``PASSIVE`` ~6.5 s, ``--threads 1`` ~5.6 s, libgomp's default (long spin) 17-45 s.
    On a shared, busy machine use ``--threads 1`` or ``OMP_WAIT_POLICY=PASSIVE``.
    """
    if not any(k in os.environ for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")):
        os.environ["GOMP_SPINCOUNT"] = "300"


def set_compile_cache() -> None:
    """``torch.compile``'s cache (``TORCHINDUCTOR_CACHE_DIR``) under the project's cache
    directory (``$GNN_TREELSTM_CACHE/inductor``), unless the user set one. Without it,
    Inductor picks ``/tmp/torchinductor_$USER`` and writes that into ``os.environ`` itself
    when it loads; the library never imports Inductor unless something compiles."""
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        from gnn_treelstm.files import cache_dir

        try:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir("inductor"))
        except OSError:  # an unwritable HOME: Inductor's own default, if it ever loads
            pass


def set_dgl_backend() -> None:
    """DGL's backend (PyTorch, the only one the package runs on) in ``DGLBACKEND``, unless
    the user set one: without it DGL's first import writes ``~/.dgl/config.json``, and an
    unwritable ``HOME`` made every command fail importing DGL."""
    os.environ.setdefault("DGLBACKEND", "pytorch")


def progress_bar(quiet: bool = False, unit: str = "batch"):
    """The commands' progress callback ``f(iterable, total, desc)``: a tqdm bar that
    disappears when done, or ``None`` when ``quiet`` or when standard error is not a
    terminal (``2> log`` gets log lines, never bar frames; the library shows none itself)."""
    if quiet or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    def progress(it, total, desc):
        return tqdm(it, total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True)

    return progress


def description(doc: str | None) -> str:
    """A command's ``--help`` description: the first paragraph of its module docstring as
    plain text (the docs' ``literal`` marks dropped)."""
    return (doc or "").split("\n\n")[0].strip().replace("``", "")


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {desc}" for name, (_, desc) in COMMANDS.items()]
    return ("usage: gnn-treelstm COMMAND [ARGS...]   (gnn-treelstm COMMAND --help)\n\n"
            "commands:\n" + "\n".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from gnn_treelstm import __version__

        print(f"gnn-treelstm {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"gnn-treelstm: unknown command {command!r}; choose one of: "
              f"{', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    set_openmp_wait_policy()
    set_compile_cache()
    set_dgl_backend()
    module = importlib.import_module(COMMANDS[command][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
