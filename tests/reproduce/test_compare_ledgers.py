"""``scripts/compare_ledgers.py``: the rerun check of "a change does not move a number"."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location(
        "compare_ledgers", ROOT / "scripts" / "compare_ledgers.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass resolves annotations through it
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


def _record(accuracies: list[float]) -> dict:
    return {"seeds": {str(i + 1): {"test": {"accuracy": a}, "seconds_per_epoch": 5.0}
                      for i, a in enumerate(accuracies)}}


def _write(path: Path, ledger: dict) -> Path:
    path.write_text(json.dumps(ledger), encoding="utf-8")
    return path


def test_a_rerun_within_a_std_agrees_and_one_outside_does_not(compare, tmp_path, capsys):
    key = "tai-t2/const-treelstm-sst5"
    old = _write(tmp_path / "old.json", {key: _record([0.47, 0.48, 0.49])})  # std 0.01
    near = _write(tmp_path / "near.json", {key: _record([0.475, 0.485, 0.495])})
    far = _write(tmp_path / "far.json", {key: _record([0.50, 0.51, 0.52])})
    assert compare.main([str(old), str(near)]) == 0
    out = capsys.readouterr().out
    assert f"| {key} | accuracy | 48.0 (1.0), 3 | 48.5 (1.0), 3 | +0.5 | yes |" in out
    assert "1 of 1 metrics agree" in out
    assert compare.main([str(old), str(far)]) == 1
    out = capsys.readouterr().out
    assert "| +3.0 | NO |" in out and f"not: {key} accuracy" in out


def test_summary_only_records_compare_and_every_paper_metric_is_checked(compare):
    key = "tai-t3/dep-treelstm"
    old = {key: {"summary": {"n": 5, "metrics": {
        "pearson": {"mean": 0.866, "std": 0.002}, "spearman": {"mean": 0.806, "std": 0.003},
        "mse": {"mean": 0.257, "std": 0.004}}}}}
    seeds = {str(s): {"test": {"pearson": p, "spearman": 0.806, "mse": 0.257},
                      "seconds_per_epoch": 5.0} for s, p in ((1, 0.8650), (2, 0.8660))}
    found = compare.compare(old, {key: {"seeds": seeds}})
    assert [f.metric for f in found] == ["pearson", "spearman", "mse"]
    pearson = found[0]
    assert pearson.old == (0.866, 0.002, 5) and pearson.new[2] == 2
    assert pearson.agrees  # -0.0005 within max(0.002, 0.0007)


def test_bad_input_exits_2_with_the_file_named(compare, tmp_path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    good = _write(tmp_path / "good.json", {"tai-t2/const-treelstm-sst5": _record([0.5, 0.5])})
    assert compare.main([str(broken), str(good)]) == 2
    assert "broken.json" in capsys.readouterr().err
    assert compare.main([str(good), str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
    other = _write(tmp_path / "other.json", {"tai-t3/dep-treelstm": _record([0.5, 0.5])})
    assert compare.main([str(good), str(other)]) == 2
    assert "no row is in both" in capsys.readouterr().err
