"""The process settings of the training commands, made in one place (commands/process.py)."""

import pytest
import torch

from gnn_treelstm.commands import denormals, heap, process
from gnn_treelstm.commands import train as train_cmd


@pytest.fixture
def calls(monkeypatch):
    made: list[str] = []
    monkeypatch.setattr(denormals, "flush_denormals", lambda: made.append("denormals") or True)
    monkeypatch.setattr(heap, "keep_heap_pages", lambda: made.append("heap") or True)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: made.append(f"threads {n}"))
    return made


def test_denormals_first_then_threads_then_heap(calls):
    process.setup_training(3)
    assert calls == ["denormals", "threads 3", "heap"]
    calls.clear()
    process.setup_training()  # torch's default thread count is left alone
    assert calls == ["denormals", "heap"]


@pytest.mark.parametrize("threads", [0, -2])
def test_a_bad_thread_count_is_refused_before_anything_is_set(calls, threads):
    with pytest.raises(ValueError, match=f"--threads must be positive, got {threads}"):
        process.setup_training(threads)
    assert calls == []


def test_train_exits_2_on_a_bad_thread_count(calls, capsys, tmp_path):
    assert train_cmd.main(["--runs-dir", str(tmp_path), "--threads", "0"]) == 2
    err = capsys.readouterr().err
    assert "--threads must be positive, got 0" in err and "Traceback" not in err
    assert calls == [] and not any(tmp_path.iterdir())
