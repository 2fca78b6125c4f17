"""Finding, on the CPU, the operations of a step that would make the host wait for a GPU.

On CUDA the host queues kernels and runs ahead, unless an operation needs a value the GPU
computes: a tensor's value read on the host (``item``, ``bool(tensor)``, ``int(tensor)``,
``tolist``, ``numpy``), an output whose size depends on values (``nonzero``, boolean-mask
indexing, ``masked_select``, ``unique``, sparse ``coalesce``, ``repeat_interleave``
without its output size), or a blocking copy (``.to(device)`` without ``non_blocking``;
only seen where it crosses devices, so a CPU run cannot show the batch's copy to a GPU:
the CUDA test under ``torch.cuda.set_sync_debug_mode("error")`` does).
:class:`SyncWatch` records these while active, but only on the tensors
that live on the device in a GPU run: the *seeds* given (a model's parameters, the batch's
tensors that are moved to the device) and every tensor computed from one (tracked through
every dispatched operation, backward included). Host-side work on the graph's own CPU
tensors (validation, the level schedule) is not flagged: it waits for nothing.

A device value the host reads later without waiting goes through a :func:`host_buffer`:
the watch takes it for the host's tensor, flags a blocking ``copy_`` into it and lets a
``copy_(..., non_blocking=True)`` pass (the reader then waits for the copy's event, not
for the device's queue).
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["SYNC_OPS", "SyncWatch", "host_buffer"]

_A = torch.ops.aten
#: operations that read a device value on the host, or whose output size depends on one
SYNC_OPS = {
    _A._local_scalar_dense.default: "reads a value on the host (item / bool / int / float)",
    _A.is_nonzero.default: "bool(tensor)",
    _A.nonzero.default: "nonzero: output size depends on the values",
    _A.masked_select.default: "masked_select: output size depends on the values",
    _A.equal.default: "torch.equal: a host bool",
    _A._unique2.default: "unique: output size depends on the values",
    _A.unique_dim.default: "unique: output size depends on the values",
    _A.unique_consecutive.default: "unique: output size depends on the values",
    _A._coalesce.default: "sparse coalesce: output size depends on the values",
    _A.repeat_interleave.Tensor: "repeat_interleave without output_size",
}
#: host reads that do not dispatch an operation (``item`` and ``bool`` do: above)
_HOST_READS = {"tolist", "numpy"}
#: the tensors of :func:`host_buffer`
_HOST_BUFFERS: WeakIdKeyDictionary = WeakIdKeyDictionary()


def host_buffer(shape: tuple[int, ...], dtype: torch.dtype,
                device: torch.device) -> torch.Tensor:
    """An empty host tensor that values of ``device`` are copied into without waiting
    (``buf.copy_(t, non_blocking=True)``): pinned memory where ``device`` is a CUDA
    device, so that the copy runs in the device's queue. Its values are there once the
    copy has run: after an event recorded behind it, or at once on the CPU."""
    buf = torch.empty(shape, dtype=dtype, pin_memory=torch.device(device).type == "cuda")
    _HOST_BUFFERS[buf] = True
    return buf


def _where() -> str:
    """The innermost frame of this package that led here (file:line function)."""
    for frame in reversed(traceback.extract_stack()[:-3]):
        if "gnn_treelstm" in frame.filename and "kernels/syncs.py" not in frame.filename:
            return f"{frame.filename.split('gnn_treelstm/')[-1]}:{frame.lineno} {frame.name}"
    return "(outside gnn_treelstm)"


def _crosses(t: torch.Tensor, name: str, args: tuple, kwargs: dict) -> bool:
    """Whether ``t.to(...)`` / ``t.cuda()`` copies between devices (so a blocking copy
    waits): a CPU run sees only copies to another device, and the CUDA test the rest."""
    if name == "cuda":
        return True
    dev = kwargs.get("device", next((a for a in args[1:] if isinstance(a, (str, torch.device))),
                                    None))
    return dev is not None and torch.device(dev).type != t.device.type


class _Functions(TorchFunctionMode):
    """The Python-level host reads and blocking copies (they do not all dispatch)."""

    def __init__(self, watch: SyncWatch) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if args and isinstance(args[0], torch.Tensor):
            t = args[0]
            if name in _HOST_READS and self.watch.on_device(t):
                self.watch.flag(f"Tensor.{name}")
            elif name in ("to", "cuda") and not kwargs.get("non_blocking", False) \
                    and _crosses(t, name, args, kwargs):
                self.watch.flag(f"Tensor.{name}(device) without non_blocking")
        return func(*args, **kwargs)


class SyncWatch(TorchDispatchMode):
    """Records (``found``: list of ``(what, where)``) the synchronising operations on the
    device tensors of a step, seeded with ``seeds``; use as a context manager."""

    def __init__(self, seeds: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self._device: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.found: list[tuple[str, str]] = []
        self._functions = _Functions(self)
        self.seed(seeds)

    def seed(self, tensors: Iterable[torch.Tensor]) -> None:
        """Mark ``tensors`` as living on the device."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self._device[t] = True

    def on_device(self, t: object) -> bool:
        return isinstance(t, torch.Tensor) and t in self._device

    def flag(self, what: str) -> None:
        self.found.append((what, _where()))

    def __enter__(self):
        self._functions.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        self._functions.__exit__(*exc)
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _A.copy_.default and args[0] in _HOST_BUFFERS:
            if not (args[2] if len(args) > 2 else kwargs.get("non_blocking", False)):
                self.flag("a blocking copy to the host")
            return func(*args, **kwargs)  # the host's tensor, read on the host
        flat, _ = tree_flatten((args, kwargs))
        device = any(self.on_device(a) for a in flat)
        if device:
            if func in SYNC_OPS:
                self.flag(SYNC_OPS[func])
            elif func in (_A.index.Tensor, _A.index_put.default, _A.index_put_.default,
                          _A._index_put_impl_.default) and any(
                    isinstance(i, torch.Tensor) and i.dtype == torch.bool
                    for i in (args[1] if len(args) > 1 else ()) if i is not None):
                self.flag("boolean-mask indexing: output size depends on the values")
        out = func(*args, **kwargs)
        if device:
            self.seed(o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor))
        return out
