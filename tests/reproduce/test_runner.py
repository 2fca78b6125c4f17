"""The runner: quick mode end to end, resume (in process and after a real SIGKILL), the CLI."""

import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gnn_treelstm.commands import reproduce as cli
from gnn_treelstm.commands import train
from gnn_treelstm.reproduce import report, runner
from gnn_treelstm.reproduce import rows as R
from gnn_treelstm.reproduce.runner import RunRowsOptions

REPO = Path(__file__).resolve().parents[2]
SICK_E = "tran-t3/treelstm-d"
SST_5 = "tai-t2/const-treelstm-sst5"


def _mtimes(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.glob("*/seed-*/results.json")}


def test_quick_end_to_end_and_rerun_does_not_retrain(tmp_path, monkeypatch):
    rows = [R.get(SICK_E), R.get(SST_5)]
    out = runner.run_rows(rows, root=tmp_path, options=RunRowsOptions(quick=True))
    assert [r.status for r in out] == ["ran", "ran"], [r.reason for r in out]
    for r in out:
        assert r.seeds == [1]
        res = json.loads((r.dir / "seed-1" / "results.json").read_text())
        assert "accuracy" in res["test"]
        info = json.loads((r.dir / "row.json").read_text())
        assert info["status"] == "done" and info["quick"] is True
        assert info["row"]["key"] == r.row.key
        assert info["config"]["hidden"] == 16 and info["config"]["max_train"] == 40
        assert info["command"].startswith("gnn-treelstm train --task ")
    assert (tmp_path / "tran-t3__treelstm-d" / "seed-1" / "best.pt").is_file()
    doc = tmp_path / "RESULTS.md"
    report.write_results(tmp_path, doc, rows)
    text = doc.read_text()
    assert "n=1" in text and "TreeLSTM (D)" in text and "Constituency Tree-LSTM" in text
    before = _mtimes(tmp_path)
    assert len(before) == 2

    calls = []
    monkeypatch.setattr(runner, "run", lambda *a, **k: calls.append(a))
    again = runner.run_rows(rows, root=tmp_path, options=RunRowsOptions(quick=True))
    assert [r.status for r in again] == ["done", "done"] and calls == []
    assert _mtimes(tmp_path) == before


def _fake_run(calls, resumed=None):
    def fake(cfg, hooks=None, resume=False):
        calls.append(cfg.seed)
        if resume:
            resumed.append(cfg.seed)
        d = Path(cfg.runs_dir) / cfg.name
        d.mkdir(parents=True, exist_ok=True)
        (d / "results.json").write_text(json.dumps({
            "test": {"accuracy": {"mean": 0.5 + cfg.seed / 100}}, "seconds_per_epoch": 1.0}))
        (d / "config.json").write_text(json.dumps({"run_config": cfg.resolved().to_dict()}))
        return {}
    return fake


def _finished_seed(rdir, row, seed, **change):
    """A seed directory as a finished run of ``row`` (quick mode) leaves it."""
    cfg = dataclasses.replace(runner.row_config(row, quick=True), seed=seed, **change)
    d = rdir / f"seed-{seed}"
    d.mkdir(parents=True)
    (d / "results.json").write_text('{"test": {}}')
    (d / "config.json").write_text(json.dumps({"run_config": cfg.resolved().to_dict()}))


def test_resume_reruns_only_unfinished_seeds(tmp_path, monkeypatch):
    row = R.get(SICK_E)
    rdir = runner.row_dir(tmp_path, row)
    _finished_seed(rdir, row, 1)
    (rdir / "seed-2").mkdir()
    (rdir / "seed-2" / "metrics.jsonl").write_text("partial\n")  # a killed run
    calls: list[int] = []
    monkeypatch.setattr(runner, "run", _fake_run(calls))
    out = runner.run_rows([row], root=tmp_path, options=RunRowsOptions(quick=True, seeds=3))
    assert calls == [2, 3]
    assert out[0].status == "ran" and out[0].seeds == [1, 2, 3]
    assert not (rdir / "seed-2" / "metrics.jsonl").exists()
    assert (rdir / "seed-1" / "results.json").read_text() == '{"test": {}}'
    calls.clear()
    out = runner.run_rows([row], root=tmp_path,
                          options=RunRowsOptions(quick=True, seeds=3, force=True))
    assert calls == [1, 2, 3]


def _unfinished_seed(rdir, row, seed, state=True, **change):
    """A seed directory as a run of ``row`` (quick mode) killed after a saved epoch leaves
    it (``state``: False = killed before its first save, "damaged" = a cut state file)."""
    from gnn_treelstm.training.resume import STATE_NAME, TrainState

    cfg = dataclasses.replace(runner.row_config(row, quick=True), seed=seed, seeds=1,
                              runs_dir=str(rdir), name=f"seed-{seed}", **change)
    d = rdir / f"seed-{seed}"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"run_config": cfg.resolved().to_dict()}))
    (d / "metrics.jsonl").write_text(json.dumps({"seed": seed, "epoch": 1}) + "\n")
    if state == "damaged":
        (d / STATE_NAME).write_bytes(b"cut")
    elif state:
        TrainState(seed=seed, epoch=2).save(d)


def test_a_killed_seed_resumes_at_its_saved_state_of_the_rows_configuration(tmp_path,
                                                                            monkeypatch):
    row = R.get(SICK_E)
    rdir = runner.row_dir(tmp_path, row)
    data = str(runner.SAMPLE_SRC)
    _unfinished_seed(rdir, row, 1, data=data)                  # resumes
    _unfinished_seed(rdir, row, 2, data=data, epochs=7)        # another configuration
    _unfinished_seed(rdir, row, 3, data=data, state="damaged")  # an unreadable state
    _unfinished_seed(rdir, row, 4, data=data, state=False)     # killed before its first save
    calls: list[int] = []
    resumed: list[int] = []
    monkeypatch.setattr(runner, "run", _fake_run(calls, resumed))
    monkeypatch.setattr(runner, "resolve_data_dir", lambda *a, **k: data)
    out = runner.run_rows([row], root=tmp_path, options=RunRowsOptions(quick=True, seeds=4))
    assert calls == [1, 2, 3, 4] and resumed == [1]
    assert out[0].seeds == [1, 2, 3, 4]
    assert (rdir / "seed-1" / "metrics.jsonl").is_file()       # kept: the run continues in it
    for s in (2, 3, 4):                                         # removed, trained afresh
        assert not (rdir / f"seed-{s}" / "metrics.jsonl").exists()
    # --force never resumes
    for s in (1, 2):
        (rdir / f"seed-{s}" / "results.json").unlink()
    calls.clear()
    resumed.clear()
    assert (rdir / "seed-1" / "state.pt").is_file()             # resumable, but forced
    runner.run_rows([row], root=tmp_path, options=RunRowsOptions(quick=True, seeds=2, force=True))
    assert calls == [1, 2] and resumed == []


def _sigkill_when(cmd: list[str], path: Path, what: str) -> int:
    """Start the runner ``cmd``, SIGKILL it as soon as ``path`` exists (``what`` names the
    moment), and return its exit status."""
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 180
        while not path.exists():
            if proc.poll() is not None:
                pytest.fail(f"run ended (rc {proc.returncode}) before {what}: "
                            f"{proc.stdout.read().decode()}")
            if time.monotonic() > deadline:
                pytest.fail(f"not at {what} within 180 s")
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        proc.stdout.close()
    return proc.returncode


def test_a_seed_killed_mid_run_resumes_at_its_last_epoch(tmp_path):
    """A real runner killed by SIGKILL inside a seed, after a saved epoch: the rerun
    continues that seed's run (same run id, the saved epochs not trained again)."""
    root = tmp_path / "q"
    sdir = root / "tran-t3__treelstm-d" / "seed-1"
    cmd = [sys.executable, "-m", "gnn_treelstm.reproduce", SICK_E, "--quick", "--epochs", "8",
           "--root", str(root), "-q"]
    assert _sigkill_when(cmd, sdir / "state.pt", "its first saved epoch") == -signal.SIGKILL
    assert not (sdir / "results.json").exists(), "the seed finished before the kill"
    run_id = json.loads((sdir / "config.json").read_text())["run_id"]
    before = [json.loads(line) for line in (sdir / "metrics.jsonl").read_text().splitlines()]
    assert before and all(r["run_id"] == run_id for r in before)

    out = runner.run_rows([R.get(SICK_E)], root=root, options=RunRowsOptions(quick=True, epochs=8))
    assert out[0].status == "ran" and out[0].seeds == [1]
    res = json.loads((sdir / "results.json").read_text())
    assert res["run_id"] == run_id          # the same run, continued (a restart: a new id)
    after = [json.loads(line) for line in (sdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in after] == list(range(1, 9))
    assert all(r["run_id"] == run_id for r in after)
    # the epochs up to the saved state are kept as they ran (the last line before the kill
    # may be an epoch after it, dropped and trained again)
    assert after[:len(before) - 1] == before[:-1]


def test_resume_after_sigkill(tmp_path):
    """A real run killed by SIGKILL after its first seed: the rerun keeps seed 1."""
    root = tmp_path / "q"
    seed1 = root / "tran-t3__treelstm-d" / "seed-1" / "results.json"
    cmd = [sys.executable, "-m", "gnn_treelstm.reproduce", SICK_E, "--quick", "--seeds", "2",
           "--epochs", "3", "--root", str(root), "-q"]
    assert _sigkill_when(cmd, seed1, "seed 1 finished") == -signal.SIGKILL
    mtime = seed1.stat().st_mtime_ns
    content = seed1.read_text()
    seed2 = root / "tran-t3__treelstm-d" / "seed-2"
    assert not (seed2 / "results.json").exists(), "seed 2 finished before the kill"

    out = runner.run_rows([R.get(SICK_E)], root=root,
                          options=RunRowsOptions(quick=True, seeds=2, epochs=3))
    assert out[0].status == "ran" and out[0].seeds == [1, 2]
    assert seed1.stat().st_mtime_ns == mtime and seed1.read_text() == content
    assert (seed2 / "results.json").is_file()


def test_unavailable_rows_are_skipped_with_the_reason(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(runner, "run", _fake_run(calls))
    rows = R.select(["tran-t4", "tran-t3/treelstm-a"])
    out = runner.run_rows(rows, root=tmp_path, options=RunRowsOptions(quick=True))
    assert {r.status for r in out} == {"skipped"} and calls == []
    info = json.loads((runner.row_dir(tmp_path, R.get("tran-t4/treelstm-d")) / "row.json")
                      .read_text())
    assert info["status"] == "unavailable" and "SNLI train split" in info["reason"]
    assert "AMR" in {r.row.key: r for r in out}["tran-t3/treelstm-a"].reason


def test_missing_vectors_is_a_clear_error_before_training(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(runner, "run", _fake_run(calls))
    rows = [R.get(SST_5), R.get(SICK_E)]
    (tmp_path / "glove.6B.50d.filtered.txt.gz").write_bytes(b"")
    with pytest.raises(ValueError, match=r"tran-t3/treelstm-d.*glove\.840B\.300d\*\.txt\.gz"
                                         r".*--vectors-dir"):
        runner.run_rows(rows, root=tmp_path / "runs", options=RunRowsOptions(vectors_dir=tmp_path))
    with pytest.raises(ValueError, match="no vectors directory"):
        runner.run_rows(rows, root=tmp_path / "runs", options=RunRowsOptions(vectors_dir=None))
    assert calls == []
    (tmp_path / "glove.840B.300d.sick-vocab.txt.gz").write_bytes(b"")
    assert runner.find_vectors(R.get(SICK_E), tmp_path).name == \
        "glove.840B.300d.sick-vocab.txt.gz"
    assert runner.find_vectors(R.get("tai-t2/const-treelstm-random-sst5"), None) is None


@pytest.mark.parametrize("row", [r for r in R.ROWS if not R.unavailable_reason(r)],
                         ids=lambda r: r.key)
def test_command_round_trips_through_train_py(row):
    cfg = runner.row_config(row, data="DATA", embeddings=Path("V/glove.txt.gz"))
    args = shlex.split(runner.command(cfg))
    assert args[:2] == ["gnn-treelstm", "train"]
    parsed = train.config_from_args(train.parse_args(args[2:]))
    assert parsed == cfg


def test_cli_bad_input_exits_2_without_traceback(tmp_path, capsys):
    assert cli.main(["nope", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no row matches 'nope'") and "Traceback" not in err
    assert cli.main([SICK_E, "--root", str(tmp_path), "--vectors-dir", str(tmp_path),
                     "--results", str(tmp_path / "R.md")]) == 2
    assert "error: row tran-t3/treelstm-d needs 840b vectors" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["--seeds", "0"])
    assert e.value.code == 2 and "positive integer" in capsys.readouterr().err


def test_cli_list_and_report_only(tmp_path, capsys):
    assert cli.main(["tran-t3", "tai-t3/mean", "--list", "--root", str(tmp_path),
                     "--results", str(tmp_path / "R.md")]) == 0
    out = capsys.readouterr().out
    assert "tran-t3/treelstm-d" in out and "0/5 seeds" in out
    assert "unavailable: " in out and "AMR" in out
    doc = tmp_path / "R.md"
    assert cli.main(["--report-only", "--root", str(tmp_path), "--results", str(doc)]) == 0
    assert "not run" in doc.read_text()


def test_command_carries_every_training_option():
    from gnn_treelstm.training.config import RunConfig

    cfg = RunConfig(task="sick-r", model="mtree", tree="dependency", rel_lr=0.1, emb_l2=1e-4,
                    loss_reduction="sum", sentence_state="c", cell_kwargs={"rel_init": "normal"},
                    head_kwargs={"activation": "relu"}, engine="level")
    args = shlex.split(runner.command(cfg))
    assert train.config_from_args(train.parse_args(args[2:])) == cfg


def test_a_finished_seed_of_a_changed_row_is_trained_again(tmp_path, monkeypatch):
    row = R.get(SICK_E)
    rdir = runner.row_dir(tmp_path, row)
    _finished_seed(rdir, row, 1)
    _finished_seed(rdir, row, 2, dropout=0.3)      # the row's settings changed since
    calls: list[int] = []
    monkeypatch.setattr(runner, "run", _fake_run(calls))
    runner.run_rows([row], root=tmp_path, options=RunRowsOptions(quick=True, seeds=2))
    assert calls == [2]


def test_rows_sharing_runs_train_once_even_with_force(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(runner, "run", _fake_run(calls))
    rows = [R.get("tran-t3/treelstm-d"), R.get("tran-t6/treelstm-d")]
    out = runner.run_rows(rows, root=tmp_path, options=RunRowsOptions(quick=True, force=True))
    assert calls == [1] and [r.status for r in out] == ["ran", "done"]
