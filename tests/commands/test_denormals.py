"""Denormal floats flushed to zero by the training command lines (commands/denormals.py)."""

import pytest
import torch

from gnn_treelstm.commands import denormals
from gnn_treelstm.commands import train as train_cmd

TINY = torch.finfo(torch.float32).tiny  # the smallest normal float32, 1.18e-38


def _untouched_row_moment(steps: int) -> float:
    """Adam's first moment of a weight whose gradient was 1e-2 at step 1 and zero since:
    an embedding row no later batch contains."""
    w = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.Adam([w], lr=1e-3)
    for step in range(steps):
        w.grad = torch.full_like(w, 1e-2 if step == 0 else 0.0)
        opt.step()
    return float(opt.state[w]["exp_avg"].abs().max())


def test_adam_makes_denormals_and_flushing_zeroes_them():
    kept = _untouched_row_moment(900)  # 1e-3 * 0.9**899 = 1.2e-44
    assert 0 < kept < TINY, kept  # denormal: what runs through the CPU's slow path
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    assert _untouched_row_moment(900) == 0.0
    assert _untouched_row_moment(10) > TINY  # normal values are untouched


def test_the_variable_chooses_and_a_bad_value_names_itself(monkeypatch):
    tiny = torch.tensor([TINY / 100])
    monkeypatch.setenv("GNN_TREELSTM_DENORMALS", "keep")
    assert denormals.flush_denormals() is False
    assert float(tiny * 1.0) > 0
    monkeypatch.delenv("GNN_TREELSTM_DENORMALS")
    if denormals.flush_denormals():  # x86: flushed, in this thread and torch's workers
        assert float(tiny * 1.0) == 0.0
        big = torch.full((1 << 20,), TINY / 100)
        assert torch.count_nonzero(big * 1.0) == 0
    monkeypatch.setenv("GNN_TREELSTM_DENORMALS", "sometimes")
    with pytest.raises(ValueError, match="GNN_TREELSTM_DENORMALS='sometimes'.*flush, keep"):
        denormals.flush_denormals()


def test_train_sets_it_and_exits_2_on_a_bad_value(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("GNN_TREELSTM_DENORMALS", "sometimes")
    assert train_cmd.main(["--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "GNN_TREELSTM_DENORMALS='sometimes'" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # refused before anything is written
