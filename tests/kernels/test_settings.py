"""``GNN_TREELSTM_BACKEND``: one variable for the level engine's paths, the former three
still read with a warning."""

from __future__ import annotations

import logging

import pytest
import torch

from gnn_treelstm.kernels import backend, fused_triton, gemm, native, settings

OLD = ("GNN_TREELSTM_KERNELS", "GNN_TREELSTM_NATIVE", "GNN_TREELSTM_GEMM")


@pytest.fixture
def env(monkeypatch):
    for var in (settings.ENV, *OLD):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(settings, "_warned", set())
    yield monkeypatch
    fused_triton.set_choice(None)
    native.set_choice(None)
    gemm.set_backend(None)


@pytest.mark.parametrize("value, want", [
    ("auto", {"kernels": "auto", "native": "auto", "gemm": "auto"}),
    ("Triton", {"kernels": "triton", "native": "auto", "gemm": "auto"}),
    ("loops,mm=torch", {"kernels": "native", "native": "on", "gemm": "torch"}),
    ("general", {"kernels": "native", "native": "off", "gemm": "auto"}),
])
def test_one_variable_sets_the_three(env, value, want):
    env.setenv(settings.ENV, value)
    assert {k: settings.requested(k) for k in want} == want


def test_the_paths_a_tensor_takes(env):
    env.setenv(settings.ENV, "general")
    native.set_choice(None)
    fused_triton.set_choice(None)
    assert backend.path(torch.zeros(1)) == "general"
    env.setenv(settings.ENV, "loops")
    native.set_choice(None)
    fused_triton.set_choice(None)
    want = "loops" if native.available(torch.zeros(1)) else "general"
    assert backend.path(torch.zeros(1)) == want
    assert backend.path(torch.zeros(1, dtype=torch.float64)) == "general"


def test_former_names_are_read_with_a_warning(env, caplog):
    env.setenv("GNN_TREELSTM_NATIVE", "off")
    with caplog.at_level(logging.WARNING, logger="gnn_treelstm.kernels.settings"):
        assert settings.requested("native") == "off"
        assert settings.requested("native") == "off"
    assert caplog.text.count("GNN_TREELSTM_NATIVE is read for now but replaced by "
                             "GNN_TREELSTM_BACKEND") == 1


def test_bad_values_and_both_set_are_errors(env):
    env.setenv(settings.ENV, "cuda")
    with pytest.raises(ValueError, match="unknown path 'cuda'; use one of auto, triton"):
        settings.requested("kernels")
    env.setenv(settings.ENV, "loops,mm=blas")
    with pytest.raises(ValueError, match="'mm=blas' is not mm=auto"):
        settings.requested("gemm")
    env.setenv(settings.ENV, "loops")
    env.setenv("GNN_TREELSTM_GEMM", "torch")
    with pytest.raises(ValueError, match="both set.*unset GNN_TREELSTM_GEMM"):
        settings.requested("gemm")


def test_only_the_backend_module_chooses_a_path():
    """Every cell runs the path ``backend.path`` chose once per forward
    (``TreeCell.kernel_path``): no cell asks Triton or the C++ loops whether they run."""
    import re
    from pathlib import Path

    import gnn_treelstm.cells as cells_pkg

    asks = re.compile(r"\b(fused_triton|fused|native|backend)\.(selected|available|path)\(")
    found = {p.name: asks.findall(p.read_text())
             for p in Path(cells_pkg.__file__).parent.glob("*.py")}
    assert {name: hits for name, hits in found.items() if hits} == {
        "base.py": [("backend", "path")]}
