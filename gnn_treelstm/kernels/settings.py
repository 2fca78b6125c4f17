"""The one switch of the level engine's fast paths, ``GNN_TREELSTM_BACKEND``, and the
reading of environment-variable choices.

``GNN_TREELSTM_BACKEND`` is a path, optionally followed by ``,mm=`` and a matrix-product
backend:

* ``auto`` (default): the Triton level kernels for CUDA tensors when triton imports, the
  C++ level loops for float32 CPU tensors (a failed build of the loops: the general level
  driver, with one logged warning), else the general level driver;
* ``triton``: the Triton kernels also for CPU tensors, which triton's interpreter runs
  (``TRITON_INTERPRET=1`` set before Python starts; slow, for tests);
* ``loops``: never Triton; the C++ loops where they run (float32 CPU), a failed build an
  error;
* ``general``: always the general level driver (every cell's declared recurrence, no
  kernel);
* ``mm=auto|onednn|torch``: the matrix products of the C++ path
  (:mod:`gnn_treelstm.kernels.gemm`; default ``auto``).

E.g. ``GNN_TREELSTM_BACKEND=triton`` or ``GNN_TREELSTM_BACKEND=loops,mm=torch``. The
former variables are still read, each with one logged warning naming its replacement,
where ``GNN_TREELSTM_BACKEND`` is unset: ``GNN_TREELSTM_KERNELS=auto|triton|native``,
``GNN_TREELSTM_NATIVE=auto|on|off``, ``GNN_TREELSTM_GEMM=auto|onednn|torch``.
:func:`requested` gives each of the three settings (``kernels``, ``native``, ``gemm``) the
modules read; :mod:`gnn_treelstm.kernels.backend` decides the path a tensor takes.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

__all__ = ["ENV", "PATHS", "MM", "LEGACY", "env_choice", "requested"]

ENV = "GNN_TREELSTM_BACKEND"
#: path -> the (kernels, native) settings it stands for
PATHS = {"auto": ("auto", "auto"), "triton": ("triton", "auto"), "loops": ("native", "on"),
         "general": ("native", "off")}
MM = ("auto", "onednn", "torch")
#: setting -> (former variable, its values, its noun in errors, its replacement)
LEGACY = {
    "kernels": ("GNN_TREELSTM_KERNELS", ("auto", "triton", "native"), "level-kernel choice",
                "GNN_TREELSTM_BACKEND=auto|triton|loops"),
    "native": ("GNN_TREELSTM_NATIVE", ("auto", "on", "off"), "choice",
               "GNN_TREELSTM_BACKEND=auto|loops|general"),
    "gemm": ("GNN_TREELSTM_GEMM", ("auto", "onednn", "torch"), "matrix-product backend",
             "GNN_TREELSTM_BACKEND=PATH,mm=auto|onednn|torch"),
}
_warned: set[str] = set()


def env_choice(var: str, choices: tuple[str, ...], noun: str, default: str = "auto") -> str:
    """``$var`` (trimmed, lower-cased; unset or empty: ``default``), which must be one of
    ``choices``; else a ``ValueError`` naming the value and the choices."""
    value = os.environ.get(var, default).strip().lower() or default
    if value not in choices:
        raise ValueError(f"{var}={value!r} is not a {noun}; use one of {', '.join(choices)}")
    return value


def _parse(value: str) -> dict[str, str]:
    """``GNN_TREELSTM_BACKEND``'s value as the three settings (``ValueError`` naming it)."""
    parts = [p.strip() for p in value.split(",")]
    path, extra = parts[0], parts[1:]
    if path not in PATHS:
        raise ValueError(f"{ENV}={value!r}: unknown path {path!r}; use one of "
                         f"{', '.join(PATHS)} (optionally ',mm=auto|onednn|torch')")
    mm = "auto"
    for p in extra:
        key, _, val = p.partition("=")
        if key.strip() != "mm" or val.strip() not in MM:
            raise ValueError(f"{ENV}={value!r}: {p!r} is not mm=auto|onednn|torch")
        mm = val.strip()
    kernels, native = PATHS[path]
    return {"kernels": kernels, "native": native, "gemm": mm}


def requested(setting: str) -> str:
    """The environment's value of ``setting`` (``kernels``, ``native`` or ``gemm``): from
    ``GNN_TREELSTM_BACKEND`` when set (a former variable set beside it is a
    ``ValueError``), else from the former variable (a warning, once), else ``auto``."""
    var, choices, noun, instead = LEGACY[setting]
    new = os.environ.get(ENV, "").strip().lower()
    old = os.environ.get(var, "").strip()
    if new:
        if old:
            raise ValueError(f"{ENV} and {var} are both set; {ENV} replaces {var}: unset "
                             f"{var}")
        return _parse(new)[setting]
    if old and var not in _warned:
        _warned.add(var)
        logger.warning("%s is read for now but replaced by %s (%s); see "
                       "gnn_treelstm.kernels.settings", var, ENV, instead)
    return env_choice(var, choices, noun)
