"""Make ``import dgl`` work on every torch of the declared range (dgl 2.1.0 wheel, torch 2.4-2.15).

``gnn_treelstm`` imports this module before anything imports :mod:`dgl`. It fixes
exactly two import-time problems of the PyPI ``dgl==2.1.0`` wheel, and chooses DGL's backend
where none is chosen, and nothing else:

1. ``dgl/__init__.py`` imports :mod:`dgl.graphbolt`, which loads
   ``libgraphbolt_pytorch_<torch version>.so``. The wheel ships that library only for
   torch 2.0-2.2, so on torch 2.13 the import raises (graphbolt also imports
   ``torchdata.datapipes``, which torchdata >= 0.10 removed). Tree-LSTMs never use
   graphbolt (it is DGL's out-of-core sampling stack), so when the native library for
   the running torch is missing, or ``torchdata.datapipes`` cannot be imported, we
   register a stand-in module under ``dgl.graphbolt`` whose every attribute access
   raises :class:`GraphboltUnavailableError` (an ``AttributeError``) explaining why.
   Nothing fails unless graphbolt is used.
2. ``dgl.utils`` falls back to ``setuptools.extern.packaging`` when ``packaging`` is
   not importable; setuptools >= 71 removed that vendored copy. If
   ``setuptools.extern.packaging`` is missing and ``packaging`` is importable, we alias
   it (``packaging`` is a declared dependency of this project).
3. With neither ``DGLBACKEND`` nor a ``config.json`` in ``DGLDEFAULTDIR`` (else ``~/.dgl``)
   naming a backend, DGL prints "DGL backend not selected ... mxnet, tensorflow" at its first
   import, guesses PyTorch and writes ``~/.dgl/config.json``. We set ``DGLBACKEND=pytorch``
   first (patch ``"DGLBACKEND"``): the same choice, without the message or the file. A
   backend the user chose, in either place, is kept.

Once ``dgl`` is imported, ``dgl.graphbolt`` as an attribute is the stand-in too: a finder
wraps DGL's own loader for that one import (a look-up with ``importlib.util.find_spec``, as
:func:`graphbolt_library_path` makes, does not use it up), then leaves no trace.

When DGL works natively (graphbolt library present for this torch, torchdata intact,
setuptools still vendoring packaging, a backend chosen) :func:`apply` changes nothing. The
function is idempotent and reports what it did, so the tests can check both paths.

A program that imports ``dgl`` before ``gnn_treelstm`` gets the same fixes from the start-up
hook (:mod:`gnn_treelstm._dgl_hook`), which calls :func:`apply` on the first look-up of
``dgl``; :func:`apply` takes that hook out of :data:`sys.meta_path` whichever way it runs.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
import types
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["apply", "attach", "graphbolt_library_path", "GraphboltUnavailable", "PATCHES"]

#: Names of the patches applied in this process (filled by :func:`apply`).
PATCHES: list[str] = []


class GraphboltUnavailableError(AttributeError):
    """Raised by the stand-in on any use, with the reason. An ``AttributeError`` (what a
    module raises for a name it lacks), so probes of every loaded module, such as
    ``pickle.whichmodule`` inside ``torch.compile``'s cache key, skip the stand-in;
    ``from dgl.graphbolt import X`` becomes Python's ``ImportError``."""


class GraphboltUnavailable(types.ModuleType):
    """Stand-in for ``dgl.graphbolt``: importable, but unusable with a clear error."""

    def __init__(self, reason: str) -> None:
        super().__init__("dgl.graphbolt")
        self.__dict__["_reason"] = reason
        self.__dict__["__file__"] = __file__
        self.__dict__["__path__"] = []

    def __getattr__(self, name: str):  # noqa: ANN204 - module protocol
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise GraphboltUnavailableError(
            f"dgl.graphbolt.{name} is unavailable: {self._reason}. gnn_treelstm replaced "
            "dgl.graphbolt with a stand-in (see gnn_treelstm/_dgl_compat.py); install a DGL "
            "build matching your torch version to use graphbolt."
        )


def _torch_version() -> str:
    """The installed torch's version, read from its metadata: importing torch here would
    load it (and libgomp) before a command line can set its process-wide options."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        import torch

        version = torch.__version__
    return version.split("+", maxsplit=1)[0]


def graphbolt_library_path() -> Path | None:
    """Where DGL would look for its graphbolt library for the running torch.

    Returns ``None`` when dgl is not installed. Does not import dgl.
    """
    spec = importlib.util.find_spec("dgl")
    if spec is None or spec.origin is None:
        return None
    ext = {"darwin": "dylib", "win32": "dll"}.get(sys.platform, "so")
    prefix = "" if sys.platform == "win32" else "lib"
    name = f"{prefix}graphbolt_pytorch_{_torch_version()}.{ext}"
    return Path(spec.origin).parent / "graphbolt" / name


def _graphbolt_problem() -> str | None:
    """Why the real dgl.graphbolt cannot import here, or None if it can."""
    path = graphbolt_library_path()
    if path is None:
        return None
    if not path.exists():
        return f"DGL has no graphbolt library for torch {_torch_version()} ({path.name} missing)"
    try:
        importlib.import_module("torchdata.datapipes")
    except ImportError as exc:
        return f"graphbolt needs torchdata.datapipes, which is not importable ({exc})"
    return None


def _setuptools_packaging_missing() -> bool:
    try:
        return importlib.util.find_spec("setuptools.extern.packaging") is None
    except (ImportError, ValueError):  # setuptools or setuptools.extern missing
        return True


#: the attribute that marks :class:`gnn_treelstm._dgl_hook.DglImportHook` instances (read
#: here by name: the hook module imports this one)
_HOOK_MARKER = "is_gnn_treelstm_dgl_hook"


def _remove_import_hooks() -> None:
    """Take the start-up hook out of :data:`sys.meta_path`: the fixes are being applied now,
    and the hook must not fire on this module's own look-up of ``dgl``."""
    for finder in [f for f in sys.meta_path if getattr(f, _HOOK_MARKER, False) is True]:
        try:
            sys.meta_path.remove(finder)
        except ValueError:  # another thread removed it first
            pass


def _backend_unselected() -> bool:
    """True where DGL would find no backend chosen: no ``DGLBACKEND`` and no valid
    ``config.json`` in ``DGLDEFAULTDIR`` (else ``~/.dgl``), DGL's own order of look-up."""
    if "DGLBACKEND" in os.environ:
        return False
    config = Path(os.environ.get("DGLDEFAULTDIR") or Path.home() / ".dgl") / "config.json"
    try:
        chosen = json.loads(config.read_text(encoding="utf-8")).get("backend", "")
    except (OSError, ValueError, AttributeError):
        return True
    return str(chosen).lower() not in ("pytorch", "mxnet", "tensorflow")


def apply() -> list[str]:
    """Install the workarounds this environment needs; return the names of those applied."""
    _remove_import_hooks()
    if "dgl" in sys.modules and "dgl.graphbolt" in sys.modules:
        return list(PATCHES)  # dgl already imported (natively or after us): nothing to do
    if "dgl" not in sys.modules and "DGLBACKEND" not in PATCHES and _backend_unselected():
        # DGL would print two lines, guess PyTorch and write ~/.dgl/config.json; choose
        # PyTorch here, the one backend this package runs on (a user's choice is kept)
        os.environ["DGLBACKEND"] = "pytorch"
        PATCHES.append("DGLBACKEND")
    problem = None if "graphbolt" in PATCHES else _graphbolt_problem()
    if problem is not None:
        sys.modules["dgl.graphbolt"] = GraphboltUnavailable(problem)
        PATCHES.append("graphbolt")
        logger.debug("dgl.graphbolt replaced by a stand-in: %s", problem)
        _attach_when_dgl_loads()
    if _setuptools_packaging_missing() and "setuptools.extern.packaging" not in PATCHES:
        try:
            packaging = importlib.import_module("packaging")
            importlib.import_module("packaging.version")
        except ImportError:
            pass  # dgl then fails with its own ImportError naming packaging
        else:
            extern = sys.modules.get("setuptools.extern") or types.ModuleType("setuptools.extern")
            extern.packaging = packaging  # type: ignore[attr-defined]
            sys.modules.setdefault("setuptools.extern", extern)
            sys.modules["setuptools.extern.packaging"] = packaging
            sys.modules["setuptools.extern.packaging.version"] = sys.modules["packaging.version"]
            PATCHES.append("setuptools.extern.packaging")
    return list(PATCHES)


def attach() -> None:
    """After ``import dgl``: expose the stand-in as ``dgl.graphbolt`` too (attribute access)."""
    stub = sys.modules.get("dgl.graphbolt")
    dgl = sys.modules.get("dgl")
    if isinstance(stub, GraphboltUnavailable) and dgl is not None:
        dgl.graphbolt = stub  # type: ignore[attr-defined]


class _AttachLoader:
    """DGL's own loader, then :func:`attach` once ``dgl/__init__`` has run, so that
    ``dgl.graphbolt`` reached as an attribute is the stand-in with its reason, not a bare
    ``AttributeError``. Anything else is the wrapped loader's."""

    def __init__(self, inner) -> None:  # noqa: ANN001 - any importlib loader
        self._inner = inner

    def create_module(self, spec):  # noqa: ANN001, ANN201 - importlib's loader protocol
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:  # noqa: ANN001
        _remove_attach_finders()  # dgl is loading: the finder's work is done
        self._inner.exec_module(module)
        module.__loader__ = self._inner  # no trace of the wrapper is left on dgl
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._inner
        attach()

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._inner, name)


class _AttachAfterDglImport:
    """A finder for ``dgl``: the spec the other finders give, its loader wrapped in
    :class:`_AttachLoader`. It leaves :data:`sys.meta_path` when dgl is loaded, not on a
    mere look-up (``importlib.util.find_spec("dgl")``, which this module makes too)."""

    def find_spec(self, fullname: str, path=None, target=None):  # noqa: ANN001, ANN201
        if fullname != "dgl":
            return None
        for finder in list(sys.meta_path):
            if isinstance(finder, _AttachAfterDglImport) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _AttachLoader(spec.loader)
                return spec
        return None


def _remove_attach_finders() -> None:
    for finder in [f for f in sys.meta_path if isinstance(f, _AttachAfterDglImport)]:
        try:
            sys.meta_path.remove(finder)
        except ValueError:  # another thread removed it first
            pass


def _attach_when_dgl_loads() -> None:
    if "dgl" in sys.modules:
        attach()
    elif not any(isinstance(f, _AttachAfterDglImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AttachAfterDglImport())


apply()
