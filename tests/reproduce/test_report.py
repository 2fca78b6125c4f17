"""The results document: markers, text kept outside them, statistics of hand-written runs."""

import json

import pytest

from gnn_treelstm.reproduce import report
from gnn_treelstm.reproduce import rows as R
from gnn_treelstm.reproduce.runner import row_dir

SICK_E = R.get("tran-t3/treelstm-d")  # paper 82.9 (0.3), LS 81.0 (2.6), Neg 84.3 (1.2)
SICK_R = R.get("tai-t3/dep-treelstm")  # paper r .8676 (.0030), mse .2532 (.0052)


def _fake(root, row, seed, test, seconds=1.0, std_key=True, dev=None):
    d = row_dir(root, row) / f"seed-{seed}"
    d.mkdir(parents=True)
    agg = {k: {"mean": v, "std": 0.0, "values": [v]} for k, v in test.items()}
    res = {"test": agg if std_key else {}, "seeds": [{"seed": seed, "test": test}],
           "seconds_per_epoch": seconds}
    if dev is not None:  # {metric: value}, the first one the selection metric
        res["selection_metric"] = next(iter(dev))
        res["dev"] = {k: {"mean": v, "std": 0.0, "values": [v]} for k, v in dev.items()}
    (d / "results.json").write_text(json.dumps(res))


def _line(text, label, metric):
    rows = [ln for ln in text.splitlines() if ln.startswith("| ")]
    start = next(i for i, ln in enumerate(rows) if f"(`{label}`)" in ln)
    return next(ln for ln in rows[start:] if f"| {metric} |" in ln).split(" | ")


def test_mean_sample_std_gap_and_within(tmp_path):
    for s, (acc, neg, spe) in enumerate([(0.80, 0.85, 3.0), (0.82, 0.86, 1.0),
                                         (0.84, 0.87, 2.0)], start=1):
        _fake(tmp_path, SICK_E, s, {"accuracy": acc, "accuracy_negation": neg,
                                    "accuracy_ls": 0.8, "count": 40}, seconds=spe)
    res = report.collect(tmp_path, SICK_E)
    assert res.n == 3
    mean, std = res.stats("accuracy")
    assert mean == pytest.approx(0.82) and std == pytest.approx(0.02)  # ddof=1
    doc = tmp_path / "RESULTS.md"
    report.write_results(tmp_path, doc, [SICK_E])
    text = doc.read_text()
    cells = _line(text, "treelstm-d", "accuracy")
    assert cells[3] == "82.9 (0.3)"           # paper
    assert cells[4] == "82.0 (2.0), n=3/5"     # ours, sample std, 3 of 5 seeds
    assert cells[5] == "-0.9"                  # gap in points
    assert cells[6] == "✗"                     # 82.0 < 82.9 - 0.3
    assert cells[7] == "2.0"                   # median seconds per epoch
    neg = _line(text, "treelstm-d", "accuracy_negation")
    assert neg[4] == "86.0 (1.0), n=3/5" and neg[5] == "+1.7" and neg[6] == "✓"
    assert "ddof=1" in text
    assert "gnn-treelstm train --task sick-e --model childsum --tree dependency" in text


TENG_TREC = R.get("teng-t2/contree")  # paper 93.4, the best of 5 runs selected on dev


def test_best_of_runs_tables_report_the_test_value_of_the_best_dev_seed(tmp_path):
    # the seed with the best dev accuracy (seed 2) is not the one with the best test
    for s, (dev, test) in enumerate([(0.90, 0.95), (0.92, 0.93), (0.91, 0.94)], start=1):
        _fake(tmp_path, TENG_TREC, s, {"accuracy": test}, dev={"accuracy": dev, "loss": 1.0})
    res = report.collect(tmp_path, TENG_TREC)
    assert res.selected_on == "accuracy" and res.best_by_dev("accuracy") == 0.93
    doc = tmp_path / "RESULTS.md"
    report.write_results(tmp_path, doc, [TENG_TREC, SICK_E])
    text = doc.read_text()
    assert "| best by dev (gap) |" in text
    cells = _line(text, "contree", "accuracy")
    assert cells[4] == "94.0 (1.0), n=3/5" and cells[5] == "+0.6"
    assert cells[6] == "93.0 (-0.4)"  # seed 2: 93.0 against the paper's 93.4
    assert len(cells) == 10
    # a table of means has no such column; a seed without its dev value gives none
    assert len(_line(text, "treelstm-d", "accuracy")) == 9
    _fake(tmp_path, TENG_TREC, 4, {"accuracy": 0.99})
    assert report.collect(tmp_path, TENG_TREC).best_by_dev("accuracy") is None


def test_a_pipe_in_a_label_does_not_split_the_table_cell(tmp_path):
    row = R.get("teng-t5/contree-lex-h75")  # "ConTree + Lex |h|=75"
    doc = tmp_path / "RESULTS.md"
    report.write_results(tmp_path, doc, [row])
    line = next(ln for ln in doc.read_text().splitlines() if "(`contree-lex-h75`)" in ln)
    assert "ConTree + Lex \\|h\\|=75 (`contree-lex-h75`)" in line
    assert len(line.replace("\\|", "").split("|")) == 12  # 10 cells and the two ends


def test_correlations_and_mse_raw_gap_and_one_seed(tmp_path):
    _fake(tmp_path, SICK_R, 1, {"pearson": 0.8600, "spearman": 0.80, "mse": 0.2600},
          std_key=False)  # per-seed numbers only
    doc = tmp_path / "RESULTS.md"
    report.write_results(tmp_path, doc, [SICK_R])
    text = doc.read_text()
    r = _line(text, "dep-treelstm", "pearson")
    assert r[4] == "0.8600, n=1/5" and r[5] == "-0.0076" and r[6] == "✗"
    mse = _line(text, "dep-treelstm", "mse")
    assert mse[5] == "+0.0068" and mse[6] == "✗"  # lower is better: .2600 > .2532 + .0052
    assert report.collect(tmp_path, SICK_R).stats("mse") == (0.26, None)


def test_not_run_and_unavailable_rows(tmp_path):
    doc = tmp_path / "RESULTS.md"
    rows = [SICK_E, R.get("tran-t3/treelstm-a")]
    report.write_results(tmp_path, doc, rows)
    text = doc.read_text()
    assert _line(text, "treelstm-d", "accuracy")[4] == "not run"
    assert _line(text, "treelstm-a", "accuracy")[4].startswith("unavailable: no AMR")
    assert "VECTORS_DIR/glove.840B.300d" in text  # the command of a row not run yet


def test_preserves_text_outside_the_markers(tmp_path):
    doc = tmp_path / "RESULTS.md"
    before = "# My results\n\nintro *kept*\n\n"
    after = "\n## Discussion\n\nhand-written, kept\n"
    doc.write_text(f"{before}{report.BEGIN}\nold generated text\n{report.END}{after}")
    report.write_results(tmp_path, doc, [SICK_E])
    text = doc.read_text()
    assert text.startswith(before + report.BEGIN + "\n")
    assert text.endswith(report.END + after)
    assert "old generated text" not in text and "TreeLSTM (D)" in text
    report.write_results(tmp_path, doc, [SICK_E])  # idempotent
    assert doc.read_text() == text
    assert not list(tmp_path.glob(".RESULTS.md.*"))  # no temporary file left behind


def test_creates_or_appends_markers(tmp_path):
    new = tmp_path / "docs" / "RESULTS.md"
    report.write_results(tmp_path, new, [SICK_E])
    text = new.read_text()
    assert text.startswith("# Results") and text.count(report.BEGIN) == 1
    plain = tmp_path / "plain.md"
    plain.write_text("notes only\n")
    report.write_results(tmp_path, plain, [SICK_E])
    assert plain.read_text().startswith("notes only\n\n" + report.BEGIN)
    broken = tmp_path / "broken.md"
    broken.write_text(f"{report.END}\n{report.BEGIN}\n")
    with pytest.raises(ValueError, match="markers"):
        report.write_results(tmp_path, broken, [SICK_E])


def test_figure_has_a_panel_per_table_with_runs(tmp_path):
    from gnn_treelstm.reproduce import plot

    assert plot.plot_results(tmp_path, [SICK_E, SICK_R], tmp_path / "f.png") is None
    assert not (tmp_path / "f.png").exists()                 # nothing run, nothing drawn
    _fake(tmp_path, SICK_E, 1, {"accuracy": 0.83})
    _fake(tmp_path, SICK_E, 2, {"accuracy": 0.84})
    panels = plot._panels(tmp_path, [SICK_E, SICK_R])
    assert [t for t, _ in panels] == ["tran-t3"]             # Tai T3 has no finished row
    out = plot.plot_results(tmp_path, [SICK_E, SICK_R], tmp_path / "f.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
