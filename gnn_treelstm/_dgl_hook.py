"""Apply :mod:`gnn_treelstm._dgl_compat` when ``dgl`` is imported first.

``import gnn_treelstm`` fixes DGL's import on the pinned stack (see ``_dgl_compat``), but
import sorters put ``import dgl`` first. So the wheel ships a start-up file,
:data:`PTH_FILE`, in site-packages; Python's :mod:`site` runs its one line,
:data:`PTH_LINE`, at every interpreter start. That line finds this file without importing
the ``gnn_treelstm`` package, runs it, and calls :func:`install`, which puts
:class:`DglImportHook` at the front of :data:`sys.meta_path`. The hook costs one call and
one string comparison per module import until the first look-up of ``dgl`` (``import dgl``,
or ``importlib.util.find_spec("dgl")``); then it removes itself, runs
:func:`gnn_treelstm._dgl_compat.apply` (which changes nothing where DGL works natively), and
hands the look-up on to the usual finders, before any of dgl's code runs. Importing
``gnn_treelstm`` first runs the same :func:`~gnn_treelstm._dgl_compat.apply`, which removes
the hook too.

At start-up this module imports only :mod:`sys` (and the start-up line
:mod:`importlib.machinery`): no torch, no dgl, no ``gnn_treelstm``; docs/dgl-import.md has
the measured cost.
"""

import sys

__all__ = ["PTH_FILE", "PTH_LINE", "DglImportHook", "install", "installed", "uninstall"]

#: the start-up file's name in site-packages (``site`` reads ``*.pth`` files in name order;
#: this one sorts after setuptools' ``__editable__.*`` finder, which an editable install
#: of this package needs to be found)
PTH_FILE = "gnn_treelstm_dgl_import.pth"

#: the start-up file's one line (``site`` executes a ``.pth`` line that starts with
#: ``import``): find the ``gnn_treelstm`` package as an import would (the finders of
#: :data:`sys.meta_path`, so an editable install's finder too) without importing it, since its
#: ``__init__`` would run ``_dgl_compat`` at every interpreter start; run its ``_dgl_hook.py``
#: (from the bytecode cache) as a module that is not registered in :data:`sys.modules`; and
#: call :func:`install`. ``importlib.machinery`` rather than ``importlib.util``: the latter
#: imports ``contextlib``, ``functools`` and ``collections``, a few milliseconds at start-up.
PTH_LINE = (
    "import sys, importlib.machinery as _m; "
    "_s = next(filter(None, (_f.find_spec('gnn_treelstm', None) for _f in sys.meta_path "
    "if hasattr(_f, 'find_spec'))), None); "
    "_h = _s and _s.submodule_search_locations and type(sys)('gnn_treelstm._dgl_hook'); "
    "_h and (_m.SourceFileLoader(_h.__name__, _s.submodule_search_locations[0] "
    "+ '/_dgl_hook.py').exec_module(_h) or _h.install())"
)


class DglImportHook:
    """A :data:`sys.meta_path` finder that fires once, on the first import of ``dgl``.

    It finds nothing itself: on ``dgl`` (or ``dgl.<name>``) it removes itself from
    :data:`sys.meta_path`, applies the compat fixes, and returns the spec the remaining
    finders give, so the import goes on as if the hook had never been there.
    """

    #: how :func:`installed` recognises a hook (this module may be loaded twice: once by the
    #: start-up file, once as ``gnn_treelstm._dgl_hook``)
    is_gnn_treelstm_dgl_hook = True

    def find_spec(self, fullname: str, path=None, target=None):  # noqa: ANN001, ANN201
        """The importlib finder protocol; see the class docstring."""
        if fullname != "dgl" and not fullname.startswith("dgl."):
            return None
        uninstall()
        _apply_compat()
        import importlib.util

        # the remaining finders' answer: returning it ends the import system's walk over
        # sys.meta_path, which this call has just shortened
        return importlib.util.find_spec(fullname)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of gnn_treelstm: applies its dgl fixes on import dgl>"


def _apply_compat() -> None:
    """Run the compat fixes; a no-op if the ``gnn_treelstm`` package has gone."""
    try:
        from gnn_treelstm import _dgl_compat
    except ModuleNotFoundError as exc:
        if exc.name != "gnn_treelstm":
            raise
        return  # the start-up file outlived its package: import dgl untouched
    patches = _dgl_compat.apply()
    import logging

    logging.getLogger(__name__).debug("import dgl: compat patches %s", patches or "none")


def installed() -> list[object]:
    """The hooks now in :data:`sys.meta_path` (at most one after :func:`install`)."""
    return [f for f in sys.meta_path if getattr(f, "is_gnn_treelstm_dgl_hook", False) is True]


def install() -> None:
    """Put the hook first in :data:`sys.meta_path`, unless one is there or dgl is imported."""
    if "dgl" in sys.modules or installed():
        return
    sys.meta_path.insert(0, DglImportHook())


def uninstall() -> None:
    """Remove every hook from :data:`sys.meta_path` (idempotent)."""
    for hook in installed():
        try:
            sys.meta_path.remove(hook)
        except ValueError:  # another thread removed it first
            pass
