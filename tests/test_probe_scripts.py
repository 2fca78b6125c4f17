"""The probe scripts under ``scripts/`` run (they are not part of the package; see their
docstrings for what they measure)."""

from __future__ import annotations

import json

import torch

from gnn_treelstm.cells import build_cell
from gnn_treelstm.cells.sequential import SequentialLSTM
from tests.scripts import load_script


def test_bilstm_prefix_probe_zeroes_the_backward_half_of_the_phrase_input(tiny_sst, tmp_path,
                                                                          monkeypatch):
    probe = load_script("probe_bilstm_prefix_labels")
    bi, uni = build_cell("bilstm", 4, 3), build_cell("lstm", 4, 3)
    h = torch.randn(5, 6)
    out = probe._forward_half(bi, None, h)
    assert torch.equal(out[:, :3], h[:, :3]) and not out[:, 3:].any()
    assert torch.equal(probe._forward_half(uni, None, h[:, :3]), h[:, :3])  # unidirectional
    # the probe patches the class; the test's monkeypatch removes it again afterwards
    monkeypatch.setattr(SequentialLSTM, "node_vectors", None, raising=False)
    rc = probe.main(["--data", str(tiny_sst), "--runs-dir", str(tmp_path), "--name", "p",
                     "--task", "sst-5", "--model", "bilstm", "--tree", "chain",
                     "--supervision", "phrase", "--hidden", "6", "--epochs", "1",
                     "--threads", "1", "--embeddings-mode", "random", "-q"])
    assert rc == 0
    assert SequentialLSTM.node_vectors is probe._forward_half  # what the run trained with
    res = json.loads((tmp_path / "p" / "results.json").read_text())
    assert "accuracy" in res["test"]
