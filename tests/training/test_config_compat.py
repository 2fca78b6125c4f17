"""The training options beyond the papers leave the papers' rows as they were: their
commands and resolved configurations do not change, and runs recorded before the options
existed compare equal to today's rows (nothing is retrained, ``--resume`` accepts them)."""

import dataclasses
import json
from pathlib import Path

import pytest

from gnn_treelstm.reproduce import ledger, runner
from gnn_treelstm.reproduce.rows import ROWS
from gnn_treelstm.training.config import RunConfig, config_changes, run_options
from gnn_treelstm.training.resume import resumed_run_id

#: the options added beside the papers' settings, at their defaults
NEW = {"clip_grad_norm": None, "patience": None, "lr_schedule": "constant",
       "lr_warmup_epochs": 0, "lr_step_size": 5, "lr_gamma": 0.1, "lr_plateau_patience": 1,
       "tensorboard": False}
NEW_FLAGS = [o.flag for o in run_options() if o.name in NEW]


def test_the_new_options_are_off_by_default():
    cfg = RunConfig()
    assert {k: getattr(cfg, k) for k in NEW} == NEW
    assert {k: getattr(cfg.resolved(), k) for k in NEW} == NEW


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.key)
def test_the_papers_rows_are_unchanged(row):
    """No row's command carries a new flag; its resolved configuration, less the new
    fields (at their defaults), is what it was, and a record of it made before they
    existed is neither stale nor changed."""
    cfg = runner.row_config(row, data="/tmp/built")
    words = runner.command(cfg).split()
    assert not set(words) & set(NEW_FLAGS)
    resolved = cfg.resolved().to_dict()
    assert {k: resolved[k] for k in NEW} == NEW
    before = {k: v for k, v in resolved.items() if k not in NEW}  # recorded without them
    assert config_changes(before, cfg.resolved()) == []
    assert ledger.stale({"config": before}, cfg) == ""


def test_every_ledger_record_still_matches_its_configuration():
    """docs/results.json's records, made before the options existed (without their fields)
    or after (with them at their defaults), each compare equal to their own configuration
    read back with today's fields."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    records = json.loads((docs / "results.json").read_text())
    before = 0
    for record in records.values():
        had = ledger.record_config(record)
        if not had:
            continue
        recorded = set(NEW) & set(had)
        assert recorded in (set(), set(NEW)), sorted(recorded)
        assert {k: had[k] for k in recorded} == {k: NEW[k] for k in recorded}
        assert ledger.stale(record, ledger._run_config(had)) == ""
        before += not recorded
    assert before > 10


def test_a_finished_seed_recorded_before_the_options_is_done(tmp_path):
    """The runner's check of a finished seed and ``--resume``'s accept a config.json
    without the new fields; one that used an option is a change."""
    cfg = RunConfig(task="sick-r", model="childsum", tree="dependency", epochs=3)
    had = {k: v for k, v in cfg.resolved().to_dict().items() if k not in NEW}
    sdir = tmp_path / "seed-1"
    sdir.mkdir()
    (sdir / "config.json").write_text(json.dumps({"run_id": "old", "run_config": had}))
    assert runner.seed_changes(sdir, cfg) == ""
    assert resumed_run_id(sdir, cfg.resolved()) == "old"
    (sdir / "config.json").write_text(json.dumps(
        {"run_id": "old", "run_config": {**had, "patience": 3}}))
    assert runner.seed_changes(sdir, cfg) == "patience: 3 -> None"
    changed = dataclasses.replace(cfg, lr_schedule="cosine")
    (sdir / "config.json").write_text(json.dumps({"run_id": "old", "run_config": had}))
    assert runner.seed_changes(sdir, changed) == "lr_schedule: 'constant' -> 'cosine'"
