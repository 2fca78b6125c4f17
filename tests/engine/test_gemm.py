"""The level engine's matrix products (gnn_treelstm/kernels/gemm.py) and CPU tanh."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from gnn_treelstm.kernels import gemm


@pytest.fixture(autouse=True)
def _fresh_backend(monkeypatch):
    monkeypatch.delenv("GNN_TREELSTM_GEMM", raising=False)
    monkeypatch.delenv("GNN_TREELSTM_BACKEND", raising=False)  # the former name is tested
    gemm.set_backend(None)
    yield
    gemm.set_backend(None)


def _close(got, want):
    scale = want.abs().max().item() + 1.0
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= 1e-5 * scale


def _use(backend: str) -> None:
    """Products on ``backend`` (``onednn`` skips where this PyTorch has no usable op)."""
    gemm.set_backend(backend)
    if backend == "onednn":
        try:
            gemm.backend()
        except RuntimeError as exc:
            pytest.skip(str(exc))


@pytest.mark.parametrize("m", [1, 3, 4, 5, 16, 17, 129, 300])
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("backend", ["auto", "onednn"])
def test_mm_nt_matches_torch_mm(m, packed, backend):
    _use(backend)
    g = torch.Generator().manual_seed(m)
    a = torch.randn(m, 37, generator=g)
    w = torch.randn(23, 37, generator=g)
    b = torch.randn(23, generator=g)
    ww = gemm.pack(w) if packed else w
    _close(gemm.mm_nt(a, ww), a @ w.t())
    _close(gemm.mm_nt(a, ww, b), a @ w.t() + b)
    other = torch.randn(m, 23, generator=g)
    _close(gemm.mm_nt_add(a, ww, other), a @ w.t() + other)


@pytest.mark.parametrize("backend", ["auto", "onednn"])
def test_mm_nt_strided_inputs_and_varying_k(backend):
    _use(backend)
    g = torch.Generator().manual_seed(0)
    big = torch.randn(70, 90, generator=g)
    a, w = big[5:40, 10:50], torch.randn(50, 40, generator=g).t()  # column slice, transpose
    _close(gemm.mm_nt(a, w.t().contiguous()), a @ w)
    # weight-gradient shape: the reduction dim is a number of nodes (padded with zeros)
    dy, x = torch.randn(131, 12, generator=g), torch.randn(131, 9, generator=g)
    _close(gemm.mm_nt(dy.t(), x.t(), vary_k=True), dy.t() @ x)


def test_float64_and_torch_backend_are_exact():
    g = torch.Generator().manual_seed(1)
    a, w = torch.randn(20, 8, generator=g), torch.randn(6, 8, generator=g)
    assert torch.equal(gemm.mm_nt(a.double(), w.double()), a.double() @ w.double().t())
    assert gemm.backend(a.double()) == "torch"
    gemm.set_backend("torch")
    assert gemm.backend() == "torch"
    assert torch.equal(gemm.mm_nt(a, gemm.pack(w)), a @ w.t())


@pytest.mark.parametrize("packed", [False, True])
def test_auto_gives_small_products_to_torch_and_onednn_keeps_them(monkeypatch, packed):
    """Under ``auto`` a product of fewer than ``SMALL_PRODUCT`` multiply-adds is
    ``torch.addmm``'s (bit for bit) and one of more is oneDNN's; ``onednn`` keeps the small
    ones on oneDNN too (its path runs at the tests' sizes)."""
    _use("onednn")  # skips where this PyTorch has no usable oneDNN op
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(gemm, "cpu_vendor", lambda: "AuthenticAMD")
    real = torch.ops.mkldnn._linear_pointwise
    calls = []

    class Spy:  # the op and its overloads (``.binary``), each call counted
        def __call__(self, *args):
            calls.append("default")
            return real(*args)

        def binary(self, *args):
            calls.append("binary")
            return real.binary(*args)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", Spy())
    g = torch.Generator().manual_seed(0)
    k, n = 16, 48
    rows = (gemm.SMALL_PRODUCT - 1) // (k * n)  # the largest small product's rows
    for backend, m, onednn in [("auto", rows, False), ("auto", rows + 1, True),
                               ("onednn", 8, True), ("auto", 8, False)]:
        gemm.set_backend(backend)
        gemm.backend()  # its self-test calls the op once
        a, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
        b, other = torch.randn(n, generator=g), torch.randn(m, n, generator=g)
        ww = gemm.pack(w) if packed else w
        calls.clear()
        got, got_add = gemm.mm_nt(a, ww, b), gemm.mm_nt_add(a, ww, other)
        if onednn:
            assert calls == (["default", "binary"] if packed else ["default"]), (backend, m, calls)
            _close(got, torch.addmm(b, a, w.t()))
            _close(got_add, torch.addmm(other, a, w.t()))
        else:
            assert calls == []
            assert torch.equal(got, torch.addmm(b, a, w.t()))
            assert torch.equal(got_add, torch.addmm(other, a, w.t()))


def test_bucket_bounds_the_shapes():
    sizes = {gemm._bucket(m) for m in range(1, 2000)}
    assert len(sizes) < 64  # a few dozen oneDNN kernels per product, not one per size
    assert all(gemm._bucket(m) >= m for m in range(1, 2000))


def test_bad_backend_names(monkeypatch):
    with pytest.raises(ValueError, match="auto, onednn, torch"):
        monkeypatch.setenv("GNN_TREELSTM_GEMM", "mkl")
        gemm.set_backend(None)
        gemm.backend()
    with pytest.raises(ValueError, match="unknown matrix-product backend"):
        gemm.set_backend("blas")


def test_unusable_onednn_warns_in_auto_and_fails_when_asked(monkeypatch, caplog):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(gemm, "cpu_vendor", lambda: "AuthenticAMD")
    gemm.set_backend("auto")
    with caplog.at_level(logging.WARNING, logger="gnn_treelstm.kernels.gemm"):
        assert gemm.backend() == "torch"
    assert "oneDNN unusable" in caplog.text
    a, w = torch.randn(9, 4), torch.randn(3, 4)
    assert torch.equal(gemm.mm_nt(a, w), a @ w.t())
    gemm.set_backend("onednn")
    with pytest.raises(RuntimeError, match="GNN_TREELSTM_GEMM=onednn"):
        gemm.backend()


def test_auto_takes_onednn_only_on_a_cpu_with_avx512(monkeypatch, caplog):
    """oneDNN's gain over ``torch.mm`` is its AVX-512 kernels (MKL runs AVX2 on AMD); on an
    AVX2 CPU ``auto`` takes ``torch.mm``, and ``onednn`` still forces oneDNN."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    gemm.set_backend("auto")
    with caplog.at_level(logging.INFO, logger="gnn_treelstm.kernels.gemm"):
        assert gemm.backend() == "torch"
    assert "this one runs AVX2" in caplog.text
    gemm.set_backend("onednn")
    assert gemm.backend() == "onednn"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(gemm, "cpu_vendor", lambda: "AuthenticAMD")
    gemm.set_backend("auto")
    assert gemm.backend() == "onednn"


def test_auto_takes_torch_mm_on_an_intel_cpu(monkeypatch, caplog):
    """On an Intel CPU MKL runs its own AVX-512 kernels, so ``auto`` takes ``torch.mm``
    there; ``onednn`` still forces oneDNN."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(gemm, "cpu_vendor", lambda: gemm.INTEL)
    gemm.set_backend("auto")
    with caplog.at_level(logging.INFO, logger="gnn_treelstm.kernels.gemm"):
        assert gemm.backend() == "torch"
    assert "Intel CPU" in caplog.text
    gemm.set_backend("onednn")
    assert gemm.backend() == "onednn"


def test_the_cpu_vendor_is_read():
    """The vendor is /proc/cpuinfo's ``vendor_id`` where it names one (x86 Linux; ARM's
    names none), else a string, maybe empty."""
    vendor = gemm.cpu_vendor()
    assert isinstance(vendor, str)
    info = Path("/proc/cpuinfo")
    named = [line.partition(":")[2].strip() for line in
             (info.read_text(errors="replace").splitlines() if info.exists() else [])
             if line.startswith("vendor_id")]
    if named:
        assert vendor == named[0]
