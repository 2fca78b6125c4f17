"""The speed benchmark (:mod:`gnn_treelstm.commands.bench`): its roofline ceiling and a smoke run on
the embedded sample, so the benchmark cannot rot (its timings are not tested)."""

from __future__ import annotations

import json
import logging
import math

import pytest
import torch

from gnn_treelstm.commands import bench
from gnn_treelstm.training.data import SAMPLE_SRC


def _row(engine: str, trees_s: float, gflops: float) -> dict:
    return {"cell": "nary", "data": "sst", "batch": 25, "engine": engine, "trees": 100,
            "fwd_trees_s": 2 * trees_s, "fwdbwd_trees_s": trees_s, "fwd_gflops": gflops,
            "fwdbwd_gflops": gflops, "sched_ms_per_batch": None}


def test_ceiling_is_the_speed_at_the_matmul_peak_over_the_reference():
    # 1000 trees/s at 50 GFLOP/s: at a 200 GFLOP/s peak, 4000 trees/s; a reference at 500
    # trees/s can be beaten by 8x at most
    row = _row("level", 1000.0, 50.0)
    assert math.isclose(bench.ceiling(row, 500.0, 200.0), 8.0)
    assert math.isnan(bench.ceiling(_row("level", 1000.0, float("nan")), 500.0, 200.0))


def test_markdown_reports_the_ceiling_for_the_level_engine_only():
    rows = [_row("dgl", 250.0, 12.5), _row("level", 1000.0, 50.0), _row("anchor", 500.0, 25.0)]
    lines = bench.markdown(rows, 200.0).splitlines()
    assert "ceiling × anchor / dgl" in lines[0]
    level = next(ln for ln in lines if "| level |" in ln)
    assert "| 8.0 / 16.0 |" in level  # 4000 / 500 and 4000 / 250
    assert "| – |" in next(ln for ln in lines if "| dgl |" in ln)


def test_markdown_reports_the_best_of_repeats_ratio_beside_the_median_one():
    dgl_row, level = _row("dgl", 250.0, 12.5), _row("level", 1000.0, 50.0)
    dgl_row["fwdbwd_trees_s_best"], level["fwdbwd_trees_s_best"] = 300.0, 1500.0
    lines = bench.markdown([dgl_row, level], 200.0).splitlines()
    assert "× dgl, best of repeats" in lines[0]
    row = next(ln for ln in lines if "| level |" in ln)
    assert "| 4.0 | 5.0 |" in row  # median 1000 / 250, best 1500 / 300
    older = bench.markdown([_row("dgl", 250.0, 12.5), _row("level", 1000.0, 50.0)], 200.0)
    assert "| 4.0 | – |" in older  # rows of a run before the best was recorded


def test_bench_runs_on_the_embedded_sample(tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO)
    out = tmp_path / "bench.json"
    threads = torch.get_num_threads()  # the benchmark sets the process's thread count
    try:
        rc = bench.main(["--src", str(SAMPLE_SRC), "--cells", "nary", "mtree", "--batch-sizes",
                         "4", "--trees", "8", "--repeats", "1", "--warmup", "0", "--threads",
                         "1", "--x-size", "8", "--h-size", "6", "--json", str(out)])
    finally:
        torch.set_num_threads(threads)
    assert rc == 0
    res = json.loads(out.read_text())
    engines = {(r["cell"], r["engine"]) for r in res["rows"]}
    assert engines == {("nary", "dgl"), ("nary", "level"), ("nary", "anchor"),
                       ("mtree", "dgl"), ("mtree", "level")}
    assert all(r["fwdbwd_trees_s"] > 0 for r in res["rows"])
    assert "ceiling × anchor / dgl" in capsys.readouterr().out
    progress = [r.getMessage() for r in caplog.records if "trees/s forward" in r.getMessage()]
    assert len(progress) == len(res["rows"])  # one sentence per row, not a dict's repr
    assert progress[0].startswith("nary, dgl engine, batch 4: ")


@pytest.mark.parametrize("argv, match", [
    (["--src", str(SAMPLE_SRC), "--cells", "nary", "foo"], "--cells: no workload for foo"),
    (["--data", "/nonexistent/sst", "--cells", "nary"], "/nonexistent/sst: no meta.json"),
    (["--sick-data", "/nonexistent/sick", "--cells", "childsum"],
     "/nonexistent/sick: no meta.json"),  # SST is not asked for: only SICK is checked
    (["--data", "/nonexistent/sst", "--cells", "mtree"], "need --sick-data"),
])
def test_bad_arguments_exit_2_naming_them(argv, match, capsys, monkeypatch):
    monkeypatch.delenv("GNN_TREELSTM_DATA", raising=False)  # the default --src: none
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2 and match in capsys.readouterr().err
