"""Matrix products of the level engine: oneDNN's AVX-512 kernels where MKL does not run its own.

PyTorch's CPU ``torch.mm`` / ``F.linear`` call MKL's sgemm. On AMD CPUs MKL takes its
AVX2 path even where the CPU has AVX-512, so on this project's 2-core EPYC (Zen 5) it
reaches about 230 GFLOP/s, while oneDNN (also inside every PyTorch CPU wheel, reached
through ``torch.ops.mkldnn._linear_pointwise``, the op Inductor uses for CPU linear
layers) reaches about 490 GFLOP/s on the same product and 1.5-2x MKL at the level sizes
of a batch of 25 SST trees (``python -m gnn_treelstm bench`` prints both peaks). Both are
IEEE float32 products (no reduced-precision mode is involved); they differ only in the
order of the additions, by about one float32 ulp of the result.

The N-ary C++ loops call :func:`mm_nt` (``a @ w.T``) for their input and ``dx`` products,
and the weight-gradient products (``fused.grad_matmul``) where the backend is not oneDNN;
``gnn-treelstm bench`` packs weights (:func:`pack`). The backend is chosen once, by
``GNN_TREELSTM_GEMM``:

* ``auto`` (default): oneDNN for float32 CPU tensors on a CPU with AVX-512 (PyTorch's
  ``torch.backends.cpu.get_cpu_capability()``) that is not Intel's, when the op exists and
  passes a self-test against ``torch.mm``; ``torch.mm`` otherwise: other dtypes, CUDA, a
  PyTorch without the op (logged once as a warning), a CPU without AVX-512, where MKL's
  AVX2 path is oneDNN's own (on a 2-core AMD EPYC Zen 3 oneDNN took 3.5x torch.mm's time
  for the 941 x 8 @ 8 x 40 input product of x 8 h 8 and 0.97-1.4x for h 150's, one
  thread), and an Intel CPU, where MKL runs its own AVX-512 kernels (on a 2-core Intel
  Xeon with AVX-512 ``torch.mm`` took 0.20-0.92 of oneDNN's time at a step's shapes, about
  that of oneDNN with a packed weight at h 150's 960-row input product:
  ``scripts/gemm_bench.py``, docs/speed.md, *Matrix products*). The
  vendor is read from ``/proc/cpuinfo`` (Linux) or
  ``platform.processor()``; an unknown one counts as not Intel's.
* ``onednn``: as ``auto``, but an unusable oneDNN op is an error.
* ``torch``: always ``torch.mm`` (for comparisons).

The Triton path's products are ``torch.mm`` on every device (:func:`products`), as on
CUDA: run on the CPU under triton's interpreter, it then issues what it issues on a GPU.

Tiny products (fewer than :data:`MIN_ROWS` rows) go to ``torch.mm``: there oneDNN's
per-call cost is larger than the arithmetic (a packed weight's products excepted). Under
``auto`` so do small ones (fewer than :data:`SMALL_PRODUCT` multiply-adds, ``m k n``: a
model at x 8, h 8, or one short sentence at h 150), packed weight or not: oneDNN's call
costs some 15-20 µs of one Zen 5 core however small the product, 1.03-5 times
``torch.addmm``'s below a million multiply-adds, and about half of it above two million
(``scripts/gemm_bench.py --small``; docs/speed.md, *Small products*). ``onednn`` keeps
oneDNN for them (the tests run its path at tiny sizes).

Under ``torch.compile`` every product is ``torch.mm`` / ``torch.addmm``, whatever the
setting: Inductor lowers ``mkldnn._linear_pointwise`` only for a weight that is a
constant of the graph (the op comes out of its own weight-freezing pass, which packs
frozen parameters), so a product with a trained weight, a graph input, fails to compile
(``LoweringException ... mkldnn._linear_pointwise.default``); given ``torch.mm``,
Inductor chooses its own CPU product.
"""

from __future__ import annotations

import contextlib
import logging
import platform
from collections.abc import Iterator

import torch

from gnn_treelstm.kernels.settings import requested

logger = logging.getLogger(__name__)

__all__ = ["mm_nt", "mm_nt_add", "pack", "Packed", "backend", "BACKENDS", "MIN_ROWS",
           "SMALL_PRODUCT", "set_backend", "products", "cpu_vendor", "INTEL"]

BACKENDS = ("auto", "onednn", "torch")
#: products with fewer rows than this use torch.mm (measured crossover on 2 Zen 5 cores)
MIN_ROWS = 4
#: under ``auto``, products of fewer multiply-adds (``m k n``) than this use torch.mm: the
#: crossover measured on one Zen 5 core lies between 0.8 and 2 million, packed weight or
#: not (``scripts/gemm_bench.py --small``)
SMALL_PRODUCT = 1 << 20

_state: dict[str, object] = {"requested": None, "onednn": None, "within": None}


def _requested() -> str:
    if _state["requested"] is None:
        _state["requested"] = requested("gemm")
    return _state["requested"]  # type: ignore[return-value]


def set_backend(name: str | None) -> None:
    """Choose the backend in-process (``None``: back to ``$GNN_TREELSTM_GEMM``)."""
    if name is not None and name not in BACKENDS:
        raise ValueError(f"unknown matrix-product backend {name!r}; use one of {BACKENDS}")
    _state["requested"] = name
    _state["onednn"] = None


#: the vendor string of Intel's CPUs (``vendor_id`` in ``/proc/cpuinfo``)
INTEL = "GenuineIntel"


def cpu_vendor() -> str:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...): ``/proc/cpuinfo``'s
    ``vendor_id`` on Linux, else the one ``platform.processor()`` names; "" if unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    name = platform.processor()
    return next((v for v in (INTEL, "AuthenticAMD") if v in name), "")


def _onednn_usable() -> bool:
    """Whether ``torch.ops.mkldnn._linear_pointwise`` exists and agrees with torch.mm (and,
    under ``auto``, whether the CPU has AVX-512)."""
    if _state["onednn"] is None:
        cap = torch.backends.cpu.get_cpu_capability()  # e.g. "AVX2", "AVX512"
        if _requested() == "auto" and not cap.startswith("AVX512"):
            _state["onednn"] = False
            logger.info("level engine matrix products: torch.mm (GNN_TREELSTM_GEMM=auto; "
                        "oneDNN is chosen on CPUs with AVX-512, this one runs %s)", cap)
            return False
        if _requested() == "auto" and cpu_vendor() == INTEL:
            _state["onednn"] = False
            logger.info("level engine matrix products: torch.mm (GNN_TREELSTM_GEMM=auto; "
                        "MKL runs its own AVX-512 kernels on this Intel CPU)")
            return False
        ok, why = False, ""
        try:
            op = torch.ops.mkldnn._linear_pointwise
            if not torch.backends.mkldnn.is_available():
                why = "torch.backends.mkldnn is not available"
            else:
                g = torch.Generator().manual_seed(0)
                a = torch.randn(9, 33, generator=g)
                w = torch.randn(17, 33, generator=g)
                got = op(a, w, None, "none", [], "")
                ok = bool(torch.allclose(got, a @ w.t(), rtol=1e-5, atol=1e-5))
                why = "" if ok else "its result differs from torch.mm"
        except (AttributeError, RuntimeError) as exc:  # op missing or not built in
            why = f"{type(exc).__name__}: {exc}"
        _state["onednn"] = ok
        req = _requested()
        if ok:
            logger.info("level engine matrix products: oneDNN (GNN_TREELSTM_GEMM=%s)", req)
        elif req == "onednn":
            raise RuntimeError(
                f"GNN_TREELSTM_GEMM=onednn but oneDNN's linear op is unusable ({why}); "
                "unset it or use GNN_TREELSTM_GEMM=torch"
            )
        else:
            logger.warning("level engine matrix products: torch.mm, oneDNN unusable (%s)", why)
    return bool(_state["onednn"])


@contextlib.contextmanager
def products(name: str) -> Iterator[None]:
    """The products of the block use backend ``name`` (``torch``: the Triton path's)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown matrix-product backend {name!r}; use one of {BACKENDS}")
    before, _state["within"] = _state["within"], name
    try:
        yield
    finally:
        _state["within"] = before


def backend(t: torch.Tensor | None = None) -> str:
    """The backend :func:`mm_nt` uses for float32 CPU tensors (or for tensor ``t``);
    ``torch`` while ``torch.compile`` traces (see the module docstring) and inside
    :func:`products` ``("torch")``."""
    if _state["within"] == "torch" or torch.compiler.is_compiling() \
            or _requested() == "torch":
        return "torch"
    if t is not None and (t.device.type != "cpu" or t.dtype != torch.float32):
        return "torch"
    return "onednn" if _onednn_usable() else "torch"


class Packed:
    """A weight ``w`` (n, k) used for many products ``a @ w.T`` in a row (one level loop):
    with oneDNN, also its copy in oneDNN's blocked layout, packed once (about 0.1 ms for
    750 x 300) instead of on every call (a level-sized product then takes 18-40 us instead
    of 40-65 us). Pack again after ``w`` changes."""

    __slots__ = ("dense", "packed")

    def __init__(self, w: torch.Tensor) -> None:
        self.dense = w
        self.packed = None
        if w.dtype == torch.float32 and backend(w) == "onednn":
            self.packed = torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), 32)


def pack(w: torch.Tensor) -> Packed:
    """:class:`Packed` weight for repeated :func:`mm_nt` calls (see there)."""
    return Packed(w)


def _bucket(m: int) -> int:
    """Rows padded up to a bucket: oneDNN builds (JIT-compiles and caches) one kernel per
    distinct shape, and level sizes take hundreds of values; buckets keep the number of
    kernels (and the memory of its cache) small."""
    # a level-sized product costs about 20 us + 1 us per row (2 Zen 5 cores): pad little
    if m <= 16:
        return -(-m // 2) * 2
    if m <= 128:
        return -(-m // 8) * 8
    if m <= 1024:
        return -(-m // 32) * 32
    return -(-m // 128) * 128


def _small(m: int, k: int, n: int) -> bool:
    """Whether ``auto`` gives an (m, k) by (k, n) product to ``torch.mm``: fewer than
    :data:`SMALL_PRODUCT` multiply-adds. Asked only once oneDNN is chosen (under
    ``torch.compile`` it never is, so the shapes get no guard from it)."""
    return _requested() == "auto" and m * k * n < SMALL_PRODUCT


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    return t if t.shape[0] == rows else torch.nn.functional.pad(t, (0, 0, 0, rows - t.shape[0]))


def mm_nt(a: torch.Tensor, w: torch.Tensor | Packed, bias: torch.Tensor | None = None,
          *, vary_k: bool = False, vary_m: bool = True) -> torch.Tensor:
    """``a @ w.T (+ bias)`` for ``a`` (m, k) and ``w`` (n, k) (any strides; or a
    :class:`Packed` weight) -> (m, n).

    With oneDNN, ``m`` is padded up to a bucket (zero rows, sliced off again) unless
    ``vary_m=False`` says it is fixed by the model (weight-gradient products, whose ``m``
    is a weight's size), and ``k`` is padded too (zero columns of both, which add nothing)
    when ``vary_k`` says that it changes from batch to batch (weight-gradient products,
    whose ``k`` is a number of nodes): the shapes oneDNN sees, and so the kernels it
    compiles and caches, stay a few dozen."""
    m = a.shape[0]
    if isinstance(w, Packed):
        if (w.packed is not None and a.dtype == torch.float32 and a.device.type == "cpu"
                and not _small(m, a.shape[1], w.dense.shape[0])):
            out = torch.ops.mkldnn._linear_pointwise(
                _pad_rows(a, _bucket(m)), w.packed, bias, "none", [], "")
            return out[:m]
        w = w.dense
    if (m >= MIN_ROWS and a.dtype == torch.float32 and w.dtype == torch.float32
            and backend(a) == "onednn" and not _small(m, a.shape[1], w.shape[0])):
        if vary_k:
            k = a.shape[1]
            kp = _bucket(k)
            if kp != k:
                a = torch.nn.functional.pad(a, (0, kp - k))
                w = torch.nn.functional.pad(w, (0, kp - k))
        out = torch.ops.mkldnn._linear_pointwise(_pad_rows(a, _bucket(m)) if vary_m else a,
                                                 w, bias, "none", [], "")
        return out[:m]
    return torch.mm(a, w.t()) if bias is None else torch.addmm(bias, a, w.t())


def mm_nt_add(a: torch.Tensor, w: torch.Tensor | Packed, other: torch.Tensor) -> torch.Tensor:
    """``a @ w.T + other`` (``other`` (m, n)) as one fused product -> (m, n)."""
    if isinstance(w, Packed):
        m = a.shape[0]
        if (w.packed is not None and a.dtype == torch.float32 and a.device.type == "cpu"
                and not _small(m, a.shape[1], w.dense.shape[0])):
            mp = _bucket(m)
            out = torch.ops.mkldnn._linear_pointwise.binary(
                _pad_rows(a, mp), _pad_rows(other, mp), w.packed, None, "add")
            return out[:m]
        w = w.dense
    return torch.addmm(other, a, w.t())
