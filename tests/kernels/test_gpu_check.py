"""scripts/gpu_check.py: its code paths on the CPU (``--device cpu``, small sizes), so that the
prepared GPU check does not fail on its first GPU contact for a reason a CPU can show."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

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
