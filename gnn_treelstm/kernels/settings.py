"""Environment-variable settings of the engine (``GNN_TREELSTM_GEMM``, ``GNN_TREELSTM_NATIVE``,
``GNN_TREELSTM_KERNELS``)."""

from __future__ import annotations

import os

__all__ = ["env_choice"]


def env_choice(var: str, choices: tuple[str, ...], noun: str, default: str = "auto") -> str:
    """``$var`` (trimmed, lower-cased; unset or empty: ``default``), which must be one of
    ``choices``; else a ``ValueError`` naming the value and the choices."""
    value = os.environ.get(var, default).strip().lower() or default
    if value not in choices:
        raise ValueError(f"{var}={value!r} is not a {noun}; use one of {', '.join(choices)}")
    return value
