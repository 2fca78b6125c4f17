"""The results ledger: merge with run directories, summary-only rows, atomic saves, the
importer of a results document, and the command line reading and writing it."""

import builtins
import io
import json
from pathlib import Path

import pytest

from gnn_treelstm.commands import denormals, heap
from gnn_treelstm.commands import reproduce as cli
from gnn_treelstm.reproduce import ledger, plot, report, runner
from gnn_treelstm.reproduce import rows as R
from gnn_treelstm.reproduce.runner import RunRowsOptions
from tests.reproduce.test_report import _fake, _line
from tests.scripts import load_script

SICK_E = R.get("tran-t3/treelstm-d")       # paper 82.9 (0.3), LS 81.0 (2.6), Neg 84.3 (1.2)
SICK_E_T6 = R.get("tran-t6/treelstm-d")    # shares tran-t3/treelstm-d's runs
SICK_R = R.get("tai-t3/dep-treelstm")
KEY = SICK_E.key


def _seed(acc, seconds=1.0, best_epoch=None, **extra):
    out = {"test": {"accuracy": acc, **extra}, "seconds_per_epoch": seconds}
    return out if best_epoch is None else {**out, "best_epoch": best_epoch}


def _summary(**kw):
    base = {"n": 4, "metrics": {"accuracy": {"mean": 0.831, "std": 0.002},
                                "accuracy_negation": {"mean": 0.85, "std": None}},
            "seconds_per_epoch": 3.5, "vectors": "glove.840B.300d.sick-vocab.txt.gz",
            "command": "gnn-treelstm train --task sick-e --from-the-summary",
            "source": "a test"}
    return {**base, **kw}


def _row_json(root, row, **info):
    d = runner.row_dir(root, row)
    d.mkdir(parents=True, exist_ok=True)
    (d / "row.json").write_text(json.dumps({"row": row.to_dict(), **info}))


def _cfg(row=SICK_E, **changes):
    """``row``'s resolved configuration as a row.json records it, with ``changes``."""
    cfg = runner.row_config(row, data="/somewhere", embeddings=Path("/v/glove.840B.x.txt.gz"))
    return {**json.loads(json.dumps(cfg.resolved().to_dict())), **changes}


def test_merge_keeps_ledger_only_seeds_and_run_dir_seeds_win(tmp_path):
    held = {KEY: {"seeds": {"1": _seed(0.50), "3": _seed(0.70, best_epoch=2)},
                  "command": "old command", "config": _cfg(data="/elsewhere", seed=3)},
            "tai-t3/mean": {"seeds": {"1": _seed(0.1)}}}
    before = json.dumps(held, sort_keys=True)
    _fake(tmp_path, SICK_E, 1, {"accuracy": 0.80}, seconds=2.0)
    _fake(tmp_path, SICK_E, 2, {"accuracy": 0.82}, seconds=4.0)
    (runner.row_dir(tmp_path, SICK_E) / "seed-4").mkdir()  # unfinished: not merged
    _row_json(tmp_path, SICK_E, command="new command", vectors="/v/glove.840B.x.txt.gz",
              config=_cfg(), status="done")
    merged = ledger.merge_runs(held, tmp_path, [SICK_E, SICK_E_T6, SICK_R])
    assert json.dumps(held, sort_keys=True) == before               # input untouched
    rec = merged[KEY]
    assert sorted(rec["seeds"], key=int) == ["1", "2", "3"]
    assert rec["seeds"]["1"]["test"]["accuracy"] == 0.80            # run directory wins
    assert rec["seeds"]["3"]["test"]["accuracy"] == 0.70            # ledger-only kept
    assert rec["seeds"]["3"]["best_epoch"] == 2
    assert rec["command"] == "new command" and rec["config"] == _cfg()
    assert rec["vectors"] == "/v/glove.840B.x.txt.gz"
    assert merged["tai-t3/mean"] == held["tai-t3/mean"]             # no run dir: as it was
    assert SICK_R.key not in merged                                 # nothing found, no record
    assert set(merged) == {KEY, "tai-t3/mean"}                      # t6 shares t3's record

    res = report.collect(tmp_path, SICK_E_T6, merged)
    assert res.values["accuracy"] == [0.80, 0.82, 0.70] and res.n == 3
    assert res.seconds_per_epoch == [2.0, 4.0, 1.0] and res.median_seconds() == 2.0
    assert res.stats("accuracy")[0] == pytest.approx((0.80 + 0.82 + 0.70) / 3)
    # without the ledger: the run directory only, as before the ledger existed
    assert report.collect(tmp_path, SICK_E).values["accuracy"] == [0.80, 0.82]
    assert runner.done_seeds(tmp_path, SICK_E) == [1, 2]
    assert ledger.done_seeds(tmp_path, SICK_E, merged) == [1, 2, 3]


def test_a_record_of_another_configuration_is_stale_and_replaced_not_mixed(tmp_path):
    cfg = runner.row_config(SICK_E, embeddings=Path("/mine/glove.840B.x.txt.gz"))
    same = {"config": _cfg(engine="dgl", data="/x", runs_dir="/y")}  # place, engine: same
    assert ledger.stale(same, cfg) == "" and ledger.stale({}, cfg) == ""
    assert ledger.stale({"summary": {"config": _cfg(epochs=3)}}, cfg) == "epochs: 3 -> 10"
    assert ledger.stale({"config": _cfg(embeddings="/v/glove.6B.50d.txt.gz")}, cfg) == \
        "embeddings: 'glove.6B.50d.txt.gz' -> 'glove.840B.x.txt.gz'"
    old = {"seeds": {"1": _seed(0.5), "4": _seed(0.6)}, "config": _cfg(optimizer="adagrad"),
           "summary": _summary()}
    assert "optimizer: 'adagrad' -> 'adam'" in ledger.stale(old, cfg)
    # the runner does not count a stale record's seeds as done
    assert ledger.done_seeds(tmp_path, SICK_E, {KEY: old}) == [1, 4]
    assert ledger.done_seeds(tmp_path, SICK_E, {KEY: old}, cfg) == []
    assert ledger.done_seeds(tmp_path, SICK_E, {KEY: same}, cfg) == []   # no seeds held
    # a run directory measured with today's configuration replaces the stale record
    _fake(tmp_path, SICK_E, 1, {"accuracy": 0.80})
    _row_json(tmp_path, SICK_E, command="new", config=_cfg())
    rec = ledger.merge_runs({KEY: old}, tmp_path, [SICK_E])[KEY]
    assert list(rec["seeds"]) == ["1"] and "summary" not in rec
    assert rec["seeds"]["1"]["test"]["accuracy"] == 0.80 and rec["config"] == _cfg()
    # a recorded field RunConfig no longer has is not a change (merged, not replaced)
    _row_json(tmp_path, SICK_E, command="newer", config=_cfg(gone_field=1))
    held = {KEY: {**rec, "seeds": {**rec["seeds"], "7": _seed(0.7)}}}
    assert sorted(ledger.merge_runs(held, tmp_path, [SICK_E])[KEY]["seeds"]) == ["1", "7"]


def test_a_stale_run_directory_does_not_replace_the_rows_seeds(tmp_path):
    """A run directory of another configuration than the row's today (old defaults, or
    --epochs) is not merged over a ledger record measured with the row's, in the ledger
    and in the document; one seed of another configuration is not recorded at all."""
    fresh = {KEY: {"seeds": {"1": _seed(0.83)}, "config": _cfg()}}
    _fake(tmp_path, SICK_E, 1, {"accuracy": 0.40})
    _row_json(tmp_path, SICK_E, command="old", config=_cfg(epochs=3))
    assert ledger.merge_runs(fresh, tmp_path, [SICK_E]) == fresh
    assert report.collect(tmp_path, SICK_E, fresh).values["accuracy"] == [0.83]
    assert report.collect(tmp_path, SICK_E_T6, fresh).info.get("command") is None
    # without a fresh record it is merged (the document shows what was run)
    assert ledger.merge_runs({}, tmp_path, [SICK_E])[KEY]["config"] == _cfg(epochs=3)
    # seeds of one directory with another configuration than its row.json: left out
    for s in (2, 3):
        _fake(tmp_path, SICK_E, s, {"accuracy": 0.5 + s / 10})
    d = runner.row_dir(tmp_path, SICK_E)
    (d / "seed-2" / "config.json").write_text(json.dumps({"run_config": _cfg(epochs=3)}))
    (d / "seed-3" / "config.json").write_text(json.dumps({"run_config": _cfg(epochs=10)}))
    found, _ = ledger.read_run(tmp_path, SICK_E)
    assert sorted(found["seeds"]) == ["1", "2"]         # seed 1 has no config.json: kept


def test_a_row_sharing_runs_records_the_directory_as_its_owner(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(runner, "run", _fake_run(calls))
    runner.run_rows([SICK_E_T6], root=tmp_path, options=RunRowsOptions(quick=True))
    info = json.loads((runner.row_dir(tmp_path, SICK_E) / "row.json").read_text())
    assert calls == [1] and info["row"]["key"] == KEY and info["config"]
    old = {"seeds": {"1": _seed(0.1), "2": _seed(0.2)}, "quick": True,
           "config": {**info["config"], "optimizer": "adagrad"}}
    rec = ledger.merge_runs({KEY: old}, tmp_path, [SICK_E_T6])[KEY]  # replaced, not mixed
    assert list(rec["seeds"]) == ["1"] and rec["config"] == info["config"]
    assert rec["seeds"]["1"]["test"]["accuracy"] == 0.6


def test_every_rows_command_resolves_to_its_configuration():
    """The command a results document prints for a row is what the row trains (the
    importer resolves commands to configurations for the stale check)."""
    for row in R.ROWS:
        cfg = runner.row_config(row, data="/d", embeddings=Path("/v/vectors.txt.gz"))
        assert ledger.stale({"config": ledger.command_config(runner.command(cfg))}, cfg) \
            == "", row.key
    with pytest.raises(ValueError, match="not a 'gnn-treelstm train' command"):
        ledger.command_config("python train.py --task sick-e")
    with pytest.raises(ValueError, match="cannot read the command"):
        ledger.command_config("gnn-treelstm train --model no-such-flag-value --bogus")


def test_best_epoch_and_non_finite_numbers_are_recorded(tmp_path):
    d = runner.row_dir(tmp_path, SICK_E) / "seed-2"
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps({
        "test": {"accuracy": {"mean": 0.8}, "mse": {"mean": float("nan")}},
        "seeds": [{"seed": 2, "best_epoch": 7}], "seconds_per_epoch": float("nan")}))
    rec = ledger.merge_runs({}, tmp_path, [SICK_E])[KEY]
    assert rec["seeds"] == {"2": {"test": {"accuracy": 0.8, "mse": None},
                                  "seconds_per_epoch": None, "best_epoch": 7}}
    path = ledger.save(tmp_path / "results.json", {KEY: rec})
    assert "NaN" not in path.read_text() and ledger.load(path) == {KEY: rec}


def test_summary_only_record_renders_its_numbers(tmp_path):
    held = {KEY: {"summary": _summary()}}
    doc = tmp_path / "RESULTS.md"
    report.write_results(tmp_path / "no-runs", doc, [SICK_E, SICK_E_T6], ledger=held)
    text = doc.read_text()
    acc = _line(text, "treelstm-d", "accuracy")
    assert acc[4] == "83.1 (0.2), n=4/5"        # mean (std), n of the summary, of 5 seeds
    assert acc[5] == "+0.2" and acc[6] == "✓"   # 83.1 >= 82.9 - 0.3
    assert acc[7] == "3.5" and acc[8] == "glove.840B.300d.sick-vocab.txt.gz |"
    neg = _line(text, "treelstm-d", "accuracy_negation")
    assert neg[4] == "85.0, n=4/5" and neg[5] == "+0.7"
    assert _line(text, "treelstm-d", "accuracy_ls")[4] == "not run"  # not in the summary
    assert "- `tran-t3/treelstm-d`: `gnn-treelstm train --task sick-e --from-the-summary`" \
        in text
    assert text.count("83.1 (0.2), n=4/5") == 2            # t6 shares the record
    # without the ledger the same row is not run
    report.write_results(tmp_path / "no-runs", doc, [SICK_E])
    assert _line(doc.read_text(), "treelstm-d", "accuracy")[4] == "not run"
    # seeds and a summary: the seeds are used, the summary is not
    held[KEY]["seeds"] = {"1": _seed(0.70), "2": _seed(0.72)}
    report.write_results(tmp_path / "no-runs", doc, [SICK_E], ledger=held)
    acc = _line(doc.read_text(), "treelstm-d", "accuracy")
    assert acc[4] == "71.0 (1.4), n=2/5" and acc[7] == "1.0"
    assert ledger.done_seeds(tmp_path, SICK_E, held) == [1, 2]


def test_summary_only_record_counts_its_seeds_and_is_plotted(tmp_path):
    held = {KEY: {"summary": _summary()}}
    assert ledger.done_seeds(tmp_path, SICK_E, held) == [1, 2, 3, 4]
    assert runner.done_seeds(tmp_path, SICK_E) == []
    assert plot._panels(tmp_path, [SICK_E, SICK_R]) == []
    panels = plot._panels(tmp_path, [SICK_E, SICK_R], held)
    assert [t for t, _ in panels] == ["tran-t3"]
    (res, metric), = panels[0][1]
    assert metric == "accuracy" and res.n == 4 and res.stats(metric) == (0.831, 0.002)
    out = plot.plot_results(tmp_path, [SICK_E, SICK_R], tmp_path / "f.png", ledger=held)
    assert out is not None and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class _Dying(io.RawIOBase):
    """A file that writes half of what it is given, then the process 'dies'."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        self.f.write(data[:len(data) // 2])
        self.f.flush()
        raise KeyboardInterrupt("killed while writing")

    def writable(self):
        return True

    def close(self):
        self.f.close()
        super().close()


def test_a_killed_save_leaves_the_previous_ledger(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    old = {KEY: {"seeds": {"1": _seed(0.8)}}}
    ledger.save(path, old)
    text = path.read_text()
    assert text == json.dumps(old, sort_keys=True, indent=1) + "\n"  # sorted keys, indent 1
    real_open, real_io_open = builtins.open, io.open

    def dying_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return _Dying(f) if ("w" in mode and Path(file).parent == tmp_path) else f

    monkeypatch.setattr(builtins, "open", dying_open)
    monkeypatch.setattr(io, "open", dying_open)
    new = {KEY: {"seeds": {str(s): _seed(0.8, extra_metric=[0.1] * 50) for s in range(9)}}}
    with pytest.raises(KeyboardInterrupt):
        ledger.save(path, new)
    monkeypatch.setattr(builtins, "open", real_open)
    monkeypatch.setattr(io, "open", real_io_open)
    assert path.read_text() == text and ledger.load(path) == old
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no half file left
    ledger.save(path, new)
    assert ledger.load(path) == new


def test_a_corrupt_ledger_is_an_error_not_overwritten(tmp_path, capsys):
    doc, led = tmp_path / "R.md", tmp_path / "results.json"
    led.write_text('{"tran-t3/treelstm-d": {"seeds": ')
    assert cli.main(["--report-only", "--root", str(tmp_path), "--results", str(doc)]) == 2
    assert "not a results ledger" in capsys.readouterr().err
    assert led.read_text() == '{"tran-t3/treelstm-d": {"seeds": ' and not doc.exists()


def test_importer_round_trips_a_table_row_and_its_command(tmp_path):
    imp = load_script("import_results_ledger")
    for s, (acc, ls, neg, spe) in enumerate([(0.80, 0.79, 0.85, 3.0), (0.82, 0.80, 0.86, 1.0),
                                             (0.84, 0.81, 0.87, 2.0)], start=1):
        _fake(tmp_path, SICK_E, s, {"accuracy": acc, "accuracy_ls": ls,
                                    "accuracy_negation": neg}, seconds=spe)
    cmd = "gnn-treelstm train --task sick-e --model childsum --data /tmp/built --seeds 5"
    _row_json(tmp_path, SICK_E, command=cmd, vectors="/g/glove.840B.300d.sick-vocab.txt.gz")
    doc = tmp_path / "RESULTS.md"
    report.write_results(tmp_path, doc, [SICK_E, SICK_R, SICK_E_T6])
    text = doc.read_text()

    parsed = imp.parse(text)
    assert set(parsed) == {KEY, SICK_E_T6.key}                        # SICK-R: not run
    p = parsed[KEY]
    assert p["n"] == 3 and p["seconds_per_epoch"] == 2.0 and p["command"] == cmd
    assert p["vectors"] == "glove.840B.300d.sick-vocab.txt.gz"
    assert p["metrics"]["accuracy"] == {"mean": 0.82, "std": 0.02}   # fractions, not %
    assert p["metrics"]["accuracy_negation"] == {"mean": 0.86, "std": 0.01}
    held = imp.to_ledger(parsed, source="test")
    assert set(held) == {KEY}                                         # t6: t3's record
    assert held[KEY]["summary"]["source"] == "test" and "seeds" not in held[KEY]
    assert held[KEY]["summary"]["config"] == ledger.command_config(cmd)
    assert held[KEY]["summary"]["config"]["optimizer"] == "adam"        # resolved
    assert imp.add_configs({KEY: {"summary": {"command": cmd}}}) == \
        {KEY: {"summary": {"command": cmd, "config": ledger.command_config(cmd)}}}
    # importing again keeps the configuration a summary was resolved to when imported
    then = {KEY: {"summary": {**held[KEY]["summary"], "config": {"optimizer": "adagrad"}}}}
    assert imp.to_ledger(parsed, into=then)[KEY]["summary"]["config"] == {"optimizer": "adagrad"}

    again = tmp_path / "AGAIN.md"
    report.write_results(tmp_path / "gone", again, [SICK_E, SICK_R, SICK_E_T6], ledger=held)
    table = [ln for ln in text.splitlines() if ln.startswith(("| ", "- `"))]
    assert [ln for ln in again.read_text().splitlines() if ln.startswith(("| ", "- `"))] \
        == table
    assert f"- `{KEY}`: `{cmd}`" in table

    # the command line: a ledger made by the importer keeps a record's seeds
    led = ledger.ledger_path(doc)
    ledger.save(led, {KEY: {"seeds": {"9": _seed(0.5)}}})
    assert imp.main(["--results", str(doc)]) == 0
    rec = ledger.load(led)[KEY]
    assert rec["seeds"] == {"9": _seed(0.5)} and rec["summary"]["n"] == 3


def test_importer_refuses_rows_sharing_runs_that_disagree(tmp_path):
    imp = load_script("import_results_ledger")
    _fake(tmp_path, SICK_E, 1, {"accuracy": 0.80})
    doc = tmp_path / "RESULTS.md"
    report.write_results(tmp_path, doc, [SICK_E, SICK_E_T6])
    parsed = imp.parse(doc.read_text())
    parsed[SICK_E_T6.key]["metrics"]["accuracy"]["mean"] = 0.9
    with pytest.raises(ValueError, match="share runs but differ in accuracy"):
        imp.to_ledger(parsed)
    with pytest.raises(ValueError, match="cannot read the numbers"):
        imp.parse(doc.read_text().replace("80.0, n=1/5", "80.0 n=1"))


def _fake_run(calls):
    def fake(cfg, hooks=None, resume=False):
        calls.append(cfg.seed)
        d = Path(cfg.runs_dir) / cfg.name
        d.mkdir(parents=True, exist_ok=True)
        (d / "results.json").write_text(json.dumps({
            "test": {"accuracy": {"mean": 0.6}}, "seconds_per_epoch": 1.0}))
        (d / "config.json").write_text(json.dumps({"run_config": cfg.resolved().to_dict()}))
        return {}
    return fake


def test_cli_merges_into_the_ledger_and_does_not_retrain_what_it_holds(tmp_path, monkeypatch,
                                                                        capsys):
    root, doc = tmp_path / "runs", tmp_path / "R.md"
    led = tmp_path / "results.json"
    base = ["--root", str(root), "--results", str(doc), "-q"]
    kept: list[int] = []  # the process settings of `gnn-treelstm train`, training runs only
    monkeypatch.setattr(heap, "keep_heap_pages", lambda: kept.append(1) or True)
    monkeypatch.setattr(denormals, "flush_denormals", lambda: kept.append(2) or True)
    # --report-only merges the run directories into the ledger
    _fake(root, SICK_E, 2, {"accuracy": 0.80})
    ledger.save(led, {KEY: {"seeds": {"1": _seed(0.70)}}, "tai-t3/mean": {"summary": _summary(
        n=5, metrics={"pearson": {"mean": 0.78, "std": 0.0017}})}})
    assert cli.main(["--report-only", *base]) == 0
    assert not kept
    held = ledger.load(led)
    assert sorted(held[KEY]["seeds"]) == ["1", "2"]
    text = doc.read_text()
    t3 = text[text.index("### " + R.TABLES["tran-t3"].title):]  # not tran-t2's treelstm-d
    assert _line(t3, "treelstm-d", "accuracy")[4] == "75.0 (7.1), n=2/5"
    assert _line(text, "mean", "pearson")[4] == "0.7800 (0.0017), n=5"

    # --list counts the ledger's seeds
    assert cli.main(["tran-t3/treelstm-d", "tai-t3/mean", "--list", *base]) == 0
    out = capsys.readouterr().out
    assert "tran-t3/treelstm-d  2/5 seeds" in out and "tai-t3/mean" in out
    assert "5/5 seeds" in out

    # a row whose seeds the ledger holds is not trained; --force trains it
    calls: list[int] = []
    monkeypatch.setattr(runner, "run", _fake_run(calls))
    ledger.save(led, {**held, KEY: {"seeds": {"1": _seed(0.70)}, "quick": True}})
    assert cli.main(["tran-t3/treelstm-d", "--quick", "--seeds", "2", *base]) == 0
    assert calls == []                              # seed 1: ledger, seed 2: run directory
    assert "tran-t3/treelstm-d: done, seeds [1, 2] (in " in capsys.readouterr().out
    assert cli.main(["tran-t3/treelstm-d", "--quick", "--seeds", "2", "--force", *base]) == 0
    assert calls == [1, 2] and kept == [2, 1, 2, 1]  # denormals and heap, each training call
    held = ledger.load(led)
    assert held[KEY]["seeds"]["1"]["test"]["accuracy"] == 0.6   # the new run won
    assert held[KEY]["quick"] is True


def test_quick_runs_do_not_replace_measured_seeds(tmp_path):
    _fake(tmp_path, SICK_E, 1, {"accuracy": 0.4})
    _row_json(tmp_path, SICK_E, command="quick", quick=True)
    measured = {KEY: {"seeds": {"1": _seed(0.83)}}}
    assert ledger.merge_runs(measured, tmp_path, [SICK_E]) == measured
    assert ledger.merge_runs({KEY: {"summary": _summary()}}, tmp_path, [SICK_E]) == \
        {KEY: {"summary": _summary()}}
    quick = ledger.merge_runs({}, tmp_path, [SICK_E])[KEY]
    assert quick["quick"] is True and quick["seeds"]["1"]["test"]["accuracy"] == 0.4


def test_cli_lists_a_stale_record_and_trains_it_again(tmp_path, monkeypatch, capsys):
    root, doc = tmp_path / "runs", tmp_path / "R.md"
    base = ["--root", str(root), "--results", str(doc), "-q"]
    ledger.save(tmp_path / "results.json",
                {KEY: {"summary": _summary(n=5, config=_cfg(loss_reduction="sum"))}})
    assert cli.main(["tran-t3/treelstm-d", "--list", *base]) == 0
    out = capsys.readouterr().out
    assert "tran-t3/treelstm-d  0/5 seeds" in out
    assert "[ledger measured with another configuration: loss_reduction: 'sum' -> 'mean']" \
        in out
    calls: list[int] = []
    monkeypatch.setattr(runner, "run", _fake_run(calls))
    quick = json.loads(json.dumps(runner.row_config(SICK_E, quick=True).resolved().to_dict()))
    ledger.save(tmp_path / "results.json",
                {KEY: {"seeds": {"1": _seed(0.5)}, "quick": True, "config": quick}})
    assert cli.main(["tran-t3/treelstm-d", "--quick", *base]) == 0
    assert calls == []                                   # the ledger holds it: not trained
    ledger.save(tmp_path / "results.json", {KEY: {"seeds": {"1": _seed(0.5)}, "quick": True,
                                                  "config": {**quick, "loss_reduction": "sum"}}})
    assert cli.main(["tran-t3/treelstm-d", "--quick", *base]) == 0
    assert calls == [1]                                  # stale: trained again


def test_seeds_that_ran_with_other_code_are_named_not_retrained(tmp_path, monkeypatch, capsys,
                                                                caplog):
    """A seed records its model's module fingerprints; one measured before a change of the
    math (same configuration, other code: the top-down classifier fix) is named by --list
    and by the runner, and kept (a fingerprint also changes with a refactor)."""
    from gnn_treelstm.training import provenance

    root, doc = tmp_path / "runs", tmp_path / "R.md"
    base = ["--root", str(root), "--results", str(doc), "-q"]
    cfg = runner.row_config(SICK_E, quick=True)
    now = provenance.model_sources(cfg.model, cfg.task)
    old = {**now, "gnn_treelstm.cells.childsum": "0" * 12}
    d = runner.row_dir(root, SICK_E)
    for s, code in ((1, old), (2, now), (3, old), (4, None)):
        _fake(root, SICK_E, s, {"accuracy": 0.5})
        rec = {"run_config": cfg.resolved().to_dict()}
        if code:
            rec["code"] = {"version": "0", "python": provenance.PYTHON, "modules": code}
        (d / f"seed-{s}" / "config.json").write_text(json.dumps(rec))
    _row_json(root, SICK_E, command="quick", quick=True, config=_cfg(**json.loads(
        json.dumps(cfg.resolved().to_dict()))))
    found, _ = ledger.read_run(root, SICK_E)
    assert found["seeds"]["2"]["code"]["modules"] == now and "code" not in found["seeds"]["4"]
    assert ledger.code_changes(found, cfg) == "seeds 1, 3: cells.childsum"
    assert ledger.code_changes({"seeds": {"1": _seed(0.5)}}, cfg) == ""   # none recorded

    assert cli.main(["tran-t3/treelstm-d", "--quick", "--seeds", "4", "--list", *base]) == 0
    out = capsys.readouterr().out
    assert "4/4 seeds" in out
    assert "[ran with other code than today's: seeds 1, 3: cells.childsum; --force reruns]" \
        in out
    calls: list[int] = []
    monkeypatch.setattr(runner, "run", _fake_run(calls))
    caplog.set_level("WARNING", logger=runner.log.name)
    assert cli.main(["tran-t3/treelstm-d", "--quick", "--seeds", "4", *base]) == 0
    assert calls == []
    named = [r.getMessage() for r in caplog.records if "other code" in r.getMessage()]
    assert len(named) == 2 and "seed 1: ran with other code in gnn_treelstm.cells.childsum" \
        in named[0]
    assert ledger.load(tmp_path / "results.json")[KEY]["seeds"]["1"]["code"]["modules"] == old

