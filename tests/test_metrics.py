import math

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import accuracy_score, mean_squared_error

from gnn_treelstm import metrics as M


def test_metrics_match_sklearn_and_scipy():
    rng = np.random.default_rng(0)
    gold = rng.uniform(1, 5, 200)
    pred = gold + rng.normal(0, 0.7, 200)
    pred[:20] = np.round(pred[:20])  # ties for Spearman's average ranks
    gold[30:60] = np.round(gold[30:60])
    assert M.pearson(pred, gold) == pytest.approx(stats.pearsonr(pred, gold)[0], abs=1e-12)
    assert M.spearman(pred, gold) == pytest.approx(stats.spearmanr(pred, gold)[0], abs=1e-12)
    assert M.mse(pred, gold) == pytest.approx(mean_squared_error(gold, pred), abs=1e-12)
    labels = rng.integers(0, 5, 300)
    guess = np.where(rng.random(300) < 0.4, labels, rng.integers(0, 5, 300))
    assert M.accuracy(guess, labels) == pytest.approx(accuracy_score(labels, guess))


def test_degenerate_inputs_are_nan_not_errors():
    assert math.isnan(M.pearson([1, 1, 1], [1, 2, 3]))
    assert math.isnan(M.accuracy([], []))
    assert math.isnan(M.spearman([1], [2]))
    with pytest.raises(ValueError, match="differ in length"):
        M.accuracy([1, 2], [1])


def test_mean_std_over_seeds_skips_nan():
    mean, std = M.mean_std([0.5, 0.7, float("nan")])
    assert mean == pytest.approx(0.6) and std == pytest.approx(np.std([0.5, 0.7]))
    assert all(math.isnan(v) for v in M.mean_std([]))


def test_length_curve_pools_plus_minus_two_words():
    lengths = [3, 4, 5, 10, 11]
    pred = [1, 0, 1, 1, 1]
    gold = [1, 1, 1, 0, 1]
    x, y, c = M.length_curve(lengths, pred, gold, M.accuracy, window=2)
    got = dict(zip(x.tolist(), zip(y.tolist(), c.tolist())))
    assert got[5] == (pytest.approx(2 / 3), 3)          # lengths 3, 4, 5
    assert got[7] == (pytest.approx(1.0), 1)            # only length 5 in [5, 9]
    assert 8 in got and got[8] == (pytest.approx(0.0), 1)  # only length 10 in [6, 10]
    assert got[11] == (pytest.approx(1 / 2), 2)          # lengths 10, 11
    assert x.min() == 3 and x.max() == 11
