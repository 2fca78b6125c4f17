"""The scale scripts under ``scripts/`` run: the synthetic SNLI-shaped corpus builds into a
data set whose trees are the dev set's shapes, and the load/collate measurement reports."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gnn_treelstm.datasets import build as B
from gnn_treelstm.trees import data as D
from tests.scripts import load_script
from tests.tiny_data import build_tiny


def _shapes(trees) -> set:
    out = set()
    for g in trees:
        par = np.full(g.num_nodes(), -1)
        par[g.edges()[0].numpy()] = g.edges()[1].numpy()
        out.add(tuple(par.tolist()))
    return out


def test_synthetic_snli_has_the_dev_shapes_and_builds(tmp_path, capsys):
    dev = build_tiny(tmp_path, "snli")
    synth = load_script("synthetic_snli")
    assert synth.main([str(dev), str(tmp_path / "synth"), "--pairs", "60",
                       "--eval-pairs", "7", "--seed", "2"]) == 0
    rows = [json.loads(x) for x in (tmp_path / "synth" / "train.jsonl").open()]
    assert len(rows) == 60 and {r["label"] for r in rows} <= set(synth.LABELS)
    out = tmp_path / "built"
    meta = B.build("jsonl", [tmp_path / "synth" / f"{s}.jsonl" for s in ("train", "dev", "test")],
                   out, trees=["dependency"], name="snli", labels=synth.LABELS, workers=2)
    assert meta["dataset"] == "snli" and meta["splits"] == {"train": 60, "dev": 7, "test": 7}
    real = D.load_split(dev, "dev", "dependency")
    made = D.load_split(out, "train", "dependency")
    assert _shapes(made.graphs) <= _shapes(real.graphs)
    assert _shapes(made.graphs_b) <= _shapes(real.graphs_b)
    assert len(_shapes(made.graphs)) > 1


def test_packed_bench_reports(tmp_path, capsys):
    data = build_tiny(tmp_path, "sst")
    bench = load_script("packed_bench")
    assert bench.main(["load", str(data), "--tree", "dependency"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["trees"] == 16 and got["nodes"] > 16 and got["load_s"] >= 0
    assert bench.main(["collate", str(data), "--batch-size", "5", "--schedule"]) == 0
    assert json.loads(capsys.readouterr().out)["trees_per_s"] > 0
    # dgl.batch of ready graphs too, the passes of each alternating
    assert bench.main(["collate", str(data), "--batch-size", "5", "--schedule", "--ready",
                       "--passes", "2"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["passes"] == 2 and got["trees_per_cpu_s"] > 0
    assert got["ready_dgl_batch_trees_per_cpu_s"] > 0 and got["ready_dgl_topo_trees_per_cpu_s"] > 0
    # the bottom-up levels alone too: a batch without top-down levels sends fewer bytes
    assert bench.main(["collate", str(data), "--batch-size", "5", "--schedule", "--up-only"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["up_only_trees_per_cpu_s"] > 0
    assert 0 < got["up_only_wire_bytes_per_batch"] < got["wire_bytes_per_batch"]
    assert bench.main(["collate", str(data), "--up-only"]) == 2
    assert bench.main(["load", str(tmp_path / "none")]) == 2


@pytest.mark.parametrize("ahead", [[], ["--ahead", "--between-ms", "5"]])
def test_packed_bench_loader_reports_each_epochs_start(tmp_path, capsys, ahead):
    data = build_tiny(tmp_path, "sst")
    bench = load_script("packed_bench")
    assert bench.main(["loader", str(data), "--tree", "dependency", "--batch-size", "5",
                       "--workers", "1", "--step-ms", "0.1", "--epochs", "3", *ahead]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["ahead"] == bool(ahead) and got["between_ms"] == (5 if ahead else 0)
    for part in ("alone", "with_step"):
        assert len(got[part]["epoch_start_ms"]) == 3
        assert all(ms > 0 for ms in got[part]["epoch_start_ms"])
        assert all(0 <= it <= ms for it, ms in zip(got[part]["epoch_iter_ms"],
                                                    got[part]["epoch_start_ms"]))
        assert got[part]["steps"] == 3 * (4 - 1)  # 16 trees, 4 batches an epoch, the first not
        # the loader's receiving thread tells which batches it holds ready
        assert 0 <= got[part]["arrived_before_next"] <= got[part]["steps"]
