"""The row registry: every row builds a valid RunConfig, paper numbers, select()."""

import dataclasses
import math

import pytest

from gnn_treelstm.cells import cells
from gnn_treelstm.datasets import build as B
from gnn_treelstm.reproduce import rows as R
from gnn_treelstm.reproduce.runner import row_config
from gnn_treelstm.tasks import build_task
from gnn_treelstm.training.config import RunConfig

AVAILABLE = [r for r in R.ROWS if not R.unavailable_reason(r)]
FIELDS = {f.name for f in dataclasses.fields(RunConfig)}


def test_keys_unique_and_tables_known():
    assert len({r.key for r in R.ROWS}) == len(R.ROWS)
    for r in R.ROWS:
        assert r.table in R.TABLES, r.key
        assert r.key.startswith(r.table + "/")
        assert r.vectors in R.VECTORS
        assert r.seeds > 0
    assert {r.table for r in R.ROWS} == set(R.TABLES)


@pytest.mark.parametrize("row", AVAILABLE, ids=lambda r: r.key)
def test_available_rows_build_a_valid_config(row):
    assert set(row.overrides) <= FIELDS, set(row.overrides) - FIELDS
    cfg = row_config(row)
    cfg.check()
    assert cfg.engine in ("level", "dgl")
    resolved = cfg.resolved()
    assert resolved.seeds == row.seeds and resolved.epochs == row.overrides["epochs"]
    dataset = build_task(cfg.task).dataset
    assert cfg.tree in B.TREES[dataset], f"{row.key}: {dataset} has no {cfg.tree} trees"


@pytest.mark.parametrize("row", R.ROWS, ids=lambda r: r.key)
def test_paper_values_are_numbers_in_our_metric_names(row):
    task = build_task(row.overrides["task"], supervision=row.overrides.get("supervision"))
    assert row.paper
    for metric, (mean, std) in row.paper.items():
        assert metric in task.metric_names, (row.key, metric)
        assert isinstance(mean, float) and math.isfinite(mean)
        assert std is None or (isinstance(std, float) and 0 <= std < 0.2)
        if R.is_accuracy(metric):
            assert 0.3 < mean < 1.0, (row.key, mean)  # fractions, not percent


def test_some_paper_numbers_and_settings():
    r = R.get("tai-t2/const-treelstm-sst5")
    assert r.paper == {"accuracy": (0.51, 0.005)} and r.overrides["hidden"] == 150
    assert R.get("tai-t2/dep-treelstm-sst2").overrides["hidden"] == 168  # Tai Table 1
    assert R.get("tai-t3/lstm2").overrides["hidden"] == 108
    assert R.get("tai-t3/const-treelstm").overrides["hidden"] == 142
    assert R.get("tai-t3/dep-treelstm").paper["pearson"] == (0.8676, 0.003)
    assert R.get("tran-t3/mtreelstm-d").paper["accuracy_negation"] == (0.878, 0.008)
    assert R.get("tran-t1/treelstm-d-root-sst5").overrides["supervision"] == "root"
    assert R.get("tran-t5/mtreelstm-d-r75").overrides["cell_kwargs"] == {"rel_size": 75}
    assert R.get("teng-t1/bicontree-sst2").paper["phrase_accuracy"] == (0.928, None)
    assert R.get("teng-t5/contree-lex-h215").overrides["hidden"] == 215
    assert R.get("teng-t1/contree-sst5").overrides["cell_kwargs"] == {"lexicalized": False}
    assert R.get("tran-t4/mtreelstm-d").overrides["hidden"] == 100
    assert R.get("tai-t2/const-treelstm-random-sst5").vectors == "none"
    neutral = R.get("tai-t2/const-treelstm-fixed-neutral-sst2")  # Tai's code's labels
    assert neutral.overrides["supervision"] == "phrase-neutral"
    assert neutral.paper == R.get("tai-t2/const-treelstm-fixed-sst2").paper


def test_output_gate_rows_and_engines():
    for r in R.select(["tai-t3/*-no-og"]):
        assert r.overrides["cell_kwargs"] == {"output_gate": False}
    assert R.engine_for(R.get("tran-t3/treelstm-d")) == "level"
    # the level engine refuses output_gate=False: such rows fall back to the dgl engine
    assert R.engine_for(R.get("tai-t3/dep-treelstm-no-og")) in ("level", "dgl")


def test_a_rows_engine_is_the_one_train_takes_by_default():
    """One engine choice: a row's engine is RunConfig.resolved's default for its cell and
    options (models.checkpoint.fastest_engine); rows.py builds no probe cells of its own."""
    import inspect

    for r in AVAILABLE:
        if "engine" not in r.overrides:
            cfg = RunConfig(**{k: r.overrides[k] for k in ("task", "model", "cell_kwargs")
                               if k in r.overrides})
            assert R.engine_for(r) == cfg.resolved().engine, r.key
    assert "build_cell" not in inspect.getsource(R)


def test_mean_row_available_only_with_a_mean_cell():
    reason = R.unavailable_reason(R.get("tai-t3/mean"))
    assert bool(reason) == ("mean" not in cells)


def test_amr_rows_unavailable():
    amr = [r for r in R.ROWS if r.overrides.get("tree") == "amr"]
    assert len(amr) == 8
    assert all("AMR" in R.unavailable_reason(r) for r in amr)


def test_ablation_rows():
    rows = R.select(["ablation-sick-e"])
    assert [r.key.split("/")[1] for r in rows] == list(R.ABLATIONS_SICK_E)
    base = R.get("tran-t3/treelstm-d")
    for r in rows:
        assert r.seeds == 3 and r.paper == base.paper
        slug = r.key.split("/")[1]
        assert r.overrides == {**base.overrides, **R.ABLATIONS_SICK_E[slug]}


def test_select_tables_keys_globs_and_order():
    assert R.select([]) == R.ROWS
    t3 = R.select(["tran-t3"])
    assert {r.table for r in t3} == {"tran-t3"} and len(t3) == 6
    assert [r.key for r in R.select(["tran-t3/treelstm-d"])] == ["tran-t3/treelstm-d"]
    glob = R.select(["tran-t*/mtreelstm-d*"])
    assert {r.table for r in glob} == {f"tran-t{i}" for i in (1, 2, 3, 4, 5, 6)}
    both = R.select(["tran-t6/mtreelstm-d", "tai-t2/lstm-sst5", "tai-t2/lstm-sst5"])
    assert [r.key for r in both] == ["tai-t2/lstm-sst5", "tran-t6/mtreelstm-d"]  # registry order
    assert len(R.select(["spacy", "vectors"])) == 8


def test_select_and_get_unknown():
    with pytest.raises(ValueError, match="no row matches 'nope'.*tran-t3"):
        R.select(["tran-t3", "nope"])
    with pytest.raises(ValueError, match="unknown row"):
        R.get("tran-t3/nope")


def test_rows_that_share_runs_have_the_same_configuration():
    from gnn_treelstm.reproduce.runner import row_config, row_dir

    shared = [r for r in R.ROWS if r.same_as]
    assert {r.key for r in shared} >= {"tran-t6/treelstm-d", "tran-t6/mtreelstm-d",
                                       "tran-t5/mtreelstm-d-r100", "teng-t5/contree-h150",
                                       "teng-t5/bicontree-h150", "teng-t3/bicontree-head-gate"}
    for r in shared:
        target = R.get(r.same_as)
        assert not target.same_as
        assert row_config(r, seeds=1) == row_config(target, seeds=1), r.key
        assert r.vectors == target.vectors, r.key
        assert row_dir("root", r) == row_dir("root", target)
