"""scripts/gpu_check.py: its code paths on the CPU (``--device cpu``, small sizes), so that the
prepared GPU check does not fail on its first GPU contact for a reason a CPU can show."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from gnn_treelstm.training.options import parse_args

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_dry_run_measures_every_asked_cell_and_writes_json(tmp_path):
    gpu_check = _load()
    out = tmp_path / "cuda.json"
    assert gpu_check.main(["--device", "cpu", "--cpu-threads", "1", "--trees", "25",
                           "--repeats", "1", "--x-size", "8", "--h-size", "6", "--no-epochs",
                           "--cells", "nary", "childsum", "lstm", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [r["cell"] for r in data["cells"]] == ["nary", "childsum", "lstm"]
    assert all(r["cpu_fwdbwd_trees_s"] > 0 and r["device_fwdbwd_trees_s"] > 0
               for r in data["cells"])
    assert "cores" in data["machine"]["cpu"] and data["epochs"] == []


def test_the_epoch_commands_parse_as_train_commands(tmp_path):
    gpu_check = _load()
    args = gpu_check.build_parser().parse_args(["--max-train", "30", "--embeddings", "g.txt"])
    cmd = gpu_check.epoch_command(args, "cuda", 256, 16, str(tmp_path), 2)
    assert cmd[1:4] == ["-m", "gnn_treelstm", "train"]
    a = parse_args(cmd[4:])
    assert (a.device, a.batch_size, a.threads, a.max_train) == ("cuda", 256, 16, 30)


def test_a_check_cut_short_keeps_its_finished_rows(tmp_path, monkeypatch):
    """Stopped in the middle of its third cell, the dry run has written the two finished
    rows."""
    gpu_check = _load()
    out = tmp_path / "cuda.json"
    passes = []
    real = gpu_check.one_pass

    def stop_in_third_cell(*a, **k):
        passes.append(1)
        if len(passes) > 2 * (1 + 1) * 2:  # (warm-up + 1 repeat) x (CPU, device), 2 cells
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(gpu_check, "one_pass", stop_in_third_cell)
    with pytest.raises(KeyboardInterrupt):
        gpu_check.main(["--device", "cpu", "--cpu-threads", "1", "--trees", "25",
                        "--repeats", "1", "--x-size", "8", "--h-size", "6", "--no-epochs",
                        "--cells", "nary", "childsum", "lstm", "--json", str(out)])
    data = json.loads(out.read_text())
    assert [r["cell"] for r in data["cells"]] == ["nary", "childsum"]


def test_the_preflight_stops_with_one_line(tmp_path, capsys):
    gpu_check = _load()
    assert gpu_check.main(["--device", "cpu", "--src", str(tmp_path), "--no-epochs",
                           "--json", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu_check: missing data:") and "\n" not in err
    assert not (tmp_path / "c.json").exists()
