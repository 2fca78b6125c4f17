"""Shared assertion of the engine tests: two runs' node states and gradients agree."""

from __future__ import annotations

import torch


def assert_same_run(got: tuple, want: tuple, *, tol: float = 1e-5) -> None:
    """``got``/``want`` are ``(h, c, grads)`` with ``grads`` a dict name -> gradient; each
    gradient is compared relative to its largest entry (at least 1)."""
    (h2, c2, g2), (h1, c1, g1) = got, want
    torch.testing.assert_close(h2, h1, rtol=tol, atol=tol)
    torch.testing.assert_close(c2, c1, rtol=tol, atol=tol)
    assert set(g1) == set(g2)
    for name in g1:
        scale = max(1.0, float(g1[name].abs().max()))
        torch.testing.assert_close(g2[name] / scale, g1[name] / scale, rtol=tol, atol=tol,
                                   msg=lambda m, name=name: f"gradient of {name}: {m}")
