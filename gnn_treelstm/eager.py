"""Host-side functions that ``torch.compile`` must run eagerly, without importing Dynamo.

``torch.compiler.disable`` imports ``torch._dynamo`` (and with it ``torch._inductor``: some
800 modules, about a second, and ``TORCHINDUCTOR_CACHE_DIR`` set in ``os.environ``) the
moment it decorates a function. Applied at module level that would happen on importing the
package, in every process, compiling or not. :func:`eager` defers it: until something has
imported Dynamo nothing can be compiling, and the function is called as it is; once Dynamo
is loaded the call goes through ``torch.compiler.disable(fn)``, made on first use. The
wrapper carries the marks Dynamo reads off a disabled function, so a trace that reaches it
breaks the graph there and calls it, rather than tracing into it
(``tests/engine/test_compile.py`` holds the compiled cells equal to the eager ones).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["eager"]


def eager(fn: F | None = None, *, reason: str | None = None) -> Any:
    """``torch.compiler.disable(fn, reason=reason)`` made on the first call after Dynamo
    was imported; before that, ``fn`` itself. Use as ``@eager`` or ``@eager(reason=...)``."""
    if fn is None:
        return functools.partial(eager, reason=reason)
    disabled: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" not in sys.modules:   # nothing compiles without Dynamo loaded
            return fn(*args, **kwargs)
        if not disabled:
            import torch

            # ``reason`` is torch 2.6+'s; torch 2.4 and 2.5 take the function alone
            takes_reason = "reason" in inspect.signature(torch.compiler.disable).parameters
            extra = {"reason": reason} if takes_reason else {}
            disabled.append(torch.compiler.disable(fn, **extra))
        return disabled[0](*args, **kwargs)

    # what torch.compiler.disable marks its wrapper with: Dynamo skips such a function
    # (a graph break) instead of inlining it
    wrapper._torchdynamo_disable = True  # type: ignore[attr-defined]
    wrapper._torchdynamo_disable_msg = reason  # type: ignore[attr-defined]
    wrapper._torchdynamo_disable_recursive = True  # type: ignore[attr-defined]
    wrapper._torchdynamo_orig_callable = fn  # type: ignore[attr-defined]
    return wrapper
