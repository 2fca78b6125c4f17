"""Evaluation metrics of the three papers, on plain arrays.

* accuracy (Tai Table 2, Teng Table 1, Tran Tables 1 and 3),
* Pearson's r, Spearman's rho and mean squared error (Tai Table 3, Tran Table 2),
* mean (std) aggregation over seeds (how Tai and Tran report results),
* length-binned scores in windows of +-2 words (Tai Figs 3-4).

All functions take array-likes and return Python floats, so the results go straight
into JSON. The correlations are scipy's (``scipy.stats``); ``tests/test_metrics.py`` checks
them against hand-computed values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

__all__ = [
    "accuracy",
    "pearson",
    "spearman",
    "mse",
    "mean_std",
    "length_curve",
]


def _arrays(pred, gold) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pred, dtype=np.float64).reshape(-1)
    g = np.asarray(gold, dtype=np.float64).reshape(-1)
    if p.shape != g.shape:
        raise ValueError(f"predictions ({p.size}) and gold values ({g.size}) differ in length")
    return p, g


def accuracy(pred, gold) -> float:
    """Fraction of equal entries; NaN for empty input."""
    p, g = _arrays(pred, gold)
    return float(np.mean(p == g)) if p.size else math.nan


def _correlation(fn: Callable, pred, gold) -> float:
    p, g = _arrays(pred, gold)
    if p.size < 2 or np.all(p == p[0]) or np.all(g == g[0]):
        return math.nan  # undefined (scipy would warn and return nan)
    return float(fn(p, g).statistic)


def pearson(pred, gold) -> float:
    """Pearson correlation coefficient (``scipy.stats.pearsonr``); NaN when either side is
    constant or has fewer than two values."""
    from scipy import stats

    return _correlation(stats.pearsonr, pred, gold)


def spearman(pred, gold) -> float:
    """Spearman rank correlation (``scipy.stats.spearmanr``: Pearson on average ranks);
    NaN when either side is constant or has fewer than two values."""
    from scipy import stats

    return _correlation(stats.spearmanr, pred, gold)


def mse(pred, gold) -> float:
    """Mean squared error; NaN for empty input."""
    p, g = _arrays(pred, gold)
    return float(np.mean((p - g) ** 2)) if p.size else math.nan


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and (population, ddof=0) standard deviation over seeds; NaNs are skipped."""
    v = np.asarray([x for x in values if x is not None and not math.isnan(x)], dtype=np.float64)
    if v.size == 0:
        return math.nan, math.nan
    return float(v.mean()), float(v.std())


def length_curve(
    lengths,
    pred,
    gold,
    metric: Callable[[np.ndarray, np.ndarray], float],
    *,
    window: int = 2,
    min_count: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Score against length, pooling examples within ``+-window`` words (Tai Figs 3-4).

    Returns ``(length, score, count)`` for every integer length between the shortest and
    longest example whose window holds at least ``min_count`` examples.
    """
    n = np.asarray(lengths, dtype=np.float64).reshape(-1)
    p, g = _arrays(pred, gold)
    if n.shape != p.shape:
        raise ValueError(f"lengths ({n.size}) and predictions ({p.size}) differ in length")
    if n.size == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
    xs, ys, cs = [], [], []
    for length in range(int(math.floor(n.min())), int(math.ceil(n.max())) + 1):
        sel = np.abs(n - length) <= window
        count = int(sel.sum())
        if count < min_count:
            continue
        xs.append(length)
        ys.append(metric(p[sel], g[sel]))
        cs.append(count)
    return np.asarray(xs), np.asarray(ys, dtype=np.float64), np.asarray(cs, dtype=np.int64)


def format_metrics(metrics: Mapping[str, object], *, sep: str = ", ",
                   counts: bool = True) -> str:
    """``"accuracy 0.8123, count 50"``: metrics for a log or console line, floats to four
    decimals; ``counts=False`` leaves out the ``count*`` entries and anything not a float."""
    return sep.join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in metrics.items()
                    if counts or (isinstance(v, float) and not k.startswith("count")))
