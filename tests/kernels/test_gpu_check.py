"""scripts/gpu_check.py: its code paths on the CPU (``--device cpu``, small sizes), so that the
prepared GPU check does not fail on its first GPU contact for a reason a CPU can show."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gnn_treelstm.training.options import parse_args

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _dry(out: Path, *more: str) -> list[str]:
    """The arguments of a dry run on the CPU at small sizes, without epochs, writing ``out``;
    then ``more``."""
    return ["--device", "cpu", "--cpu-threads", "1", "--trees", "25", "--repeats", "1",
            "--x-size", "8", "--h-size", "6", "--no-epochs", "--json", str(out), *more]


def test_the_dry_run_measures_every_asked_cell_and_writes_json(tmp_path):
    gpu_check = _load()
    out = tmp_path / "cuda.json"
    assert gpu_check.main(_dry(out, "--cells", "nary", "childsum", "lstm")) == 0
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
        gpu_check.main(_dry(out, "--cells", "nary", "childsum", "lstm"))
    data = json.loads(out.read_text())
    assert [r["cell"] for r in data["cells"]] == ["nary", "childsum"]


def test_the_preflight_stops_with_one_line(tmp_path, capsys):
    gpu_check = _load()
    assert gpu_check.main(["--device", "cpu", "--src", str(tmp_path), "--no-epochs",
                           "--json", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu_check: missing data:") and "\n" not in err
    assert not (tmp_path / "c.json").exists()


def test_a_failing_cell_is_a_row_with_its_error_and_the_next_cells_run(tmp_path, monkeypatch):
    gpu_check = _load()
    real = gpu_check.build_cell

    def build(name, *a, **k):
        if name == "childsum":
            raise RuntimeError("out of resources: shared memory")
        return real(name, *a, **k)

    monkeypatch.setattr(gpu_check, "build_cell", build)
    out = tmp_path / "cuda.json"
    assert gpu_check.main(_dry(out, "--cells", "nary", "childsum", "lstm")) == 0
    rows = json.loads(out.read_text())["cells"]
    assert [r["cell"] for r in rows] == ["nary", "childsum", "lstm"]
    assert rows[1]["error"] == "RuntimeError: out of resources: shared memory"
    assert rows[0]["device_fwdbwd_trees_s"] > 0 and rows[2]["device_fwdbwd_trees_s"] > 0


def test_cells_past_the_time_limit_are_rows_saying_so(tmp_path):
    gpu_check = _load()
    out = tmp_path / "cuda.json"
    assert gpu_check.main(_dry(out, "--cells", "nary", "lstm", "--cells-timeout", "0")) == 0
    rows = json.loads(out.read_text())["cells"]
    assert rows == [{"cell": c, "skipped": "past --cells-timeout 0 s"} for c in ("nary", "lstm")]


def test_the_device_epochs_follow_an_untimed_warm_up_and_the_cpu_epoch(monkeypatch):
    gpu_check = _load()
    seen = []
    monkeypatch.setattr(gpu_check, "epoch_row", lambda args, cmd, where, batch, run_dir, warmup:
                        seen.append((where, batch, warmup, "--max-train" in cmd)) or {})
    args = gpu_check.build_parser().parse_args([])
    list(gpu_check.epochs(args, gpu_check.torch.device("cuda")))
    assert seen == [("cpu", 25, False, False), ("cuda", 25, True, True),
                    ("cuda", 25, False, False), ("cuda", 256, False, False)]


@pytest.mark.parametrize("missing", ["sst/trees/dev.txt", "sick/stanford_parsed"])
def test_the_preflight_names_each_missing_input(tmp_path, capsys, missing):
    gpu_check = _load()
    src = tmp_path / "data"
    for f in ("sst/trees/train.txt", "sst/trees/dev.txt", "sst/trees/test.txt",
              "sick/stanford_parsed"):
        if f != missing:
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            (src / f).touch()
    assert gpu_check.main(_dry(tmp_path / "c.json", "--src", str(src))) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"gpu_check: missing data: {src / missing}"


def test_the_preflight_says_when_dgl_does_not_import(tmp_path):
    """In a process where ``import dgl`` fails, as in a CUDA image without DGL: one line,
    exit 2 (not a traceback from the script's imports)."""
    script = ROOT / "scripts" / "gpu_check.py"
    code = ("import runpy, sys; sys.modules['dgl'] = None; "
            f"sys.argv = ['gpu_check.py', *{_dry(tmp_path / 'c.json')!r}]; "
            f"runpy.run_path({str(script)!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert err.startswith("gpu_check: DGL or penman does not import (ModuleNotFoundError")
    assert "gpu_bundle.sh" in err and "\n" not in err


def test_the_shell_check_stops_in_one_line_without_cuda_and_logs_to_out(tmp_path):
    """On a CPU torch: exit 2 and one line, also in the log of ``--out``."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the shell check would run")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PY": sys.executable})
    assert proc.returncode == 2
    lines = (tmp_path / "gpu_check.log").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: torch ")
    assert lines[0].endswith("sees no CUDA device (a CPU build of torch, or no driver); "
                             "stopping")
    assert not (tmp_path / "cuda.json").exists()
