"""Significance tests of backtest figures: is a Sharpe ratio, or a difference of two, or the best
of several, more than chance, and do features predict returns at all?

- ``sharpe_difference_interval``: circular block bootstrap interval and p-value of
  ``Sharpe(a) - Sharpe(b)`` on paired per-bar returns (strategy against buy-and-hold or flat).
- ``best_sharpe_reality_check``: White's reality check of the best of ``K`` strategies' Sharpe
  ratios against zero, allowing for the choice among them, on the same bootstrap.
- ``regression_slopes_test``: heteroskedasticity-robust (HC3) Wald test that every slope of a
  linear regression is zero, referred to ``chi2_survival``.

The Sharpe ratios and the rule for returns that do not vary are :mod:`.metrics`'s; the
probabilistic and deflated Sharpe ratios and the probability of backtest overfitting are in
:mod:`.sharpe_inference`.
"""

from __future__ import annotations

import math

import numpy as np

from gpu_trading_env.reports.metrics import FLAT_TOLERANCE, finite_values, sharpe

__all__ = [
    "best_sharpe_reality_check",
    "chi2_survival",
    "regression_slopes_test",
    "sharpe_difference_interval",
]


def _block_starts(t: int, n_boot: int, block: int | None, seed: int) -> tuple[np.ndarray, int]:
    """``([n_boot, ceil(t / block)] first bars, block)`` of a circular block bootstrap of ``t``
    bars: blocks of ``block`` consecutive bars (default ``ceil(t ** (1/3))``) drawn with
    replacement from the series wrapped into a circle, each resample cut to ``t`` bars."""
    blk = int(block) if block is not None else max(1, math.ceil(t ** (1.0 / 3.0)))
    if not 1 <= blk <= t:
        raise ValueError(f"block must be in [1, {t}], got {block}")
    rng = np.random.default_rng(seed)
    return rng.integers(0, t, size=(n_boot, math.ceil(t / blk))), blk


def _resampled_sharpes(x: np.ndarray, starts: np.ndarray, blk: int, per_year: float) -> np.ndarray:
    """Annualised Sharpe of each circular block resample of ``x`` (float64 [T]): the blocks
    start at ``starts`` ([n_boot, ceil(T / blk)]), ``blk`` bars each, the resample cut to T.

    Each resample's sum and sum of squares are block sums of prefix sums of the circle, not
    gathered bar by bar: n_boot x T draws of a 16,000-bar training window took seconds and a
    quarter of a gigabyte per series. A resample whose deviation is at most ``FLAT_TOLERANCE``
    times the series' largest magnitude has a Sharpe of 0.0, as in :func:`sharpe`.
    """
    t = len(x)
    lengths = np.full(starts.shape[1], blk)
    lengths[-1] = t - blk * (starts.shape[1] - 1)
    circle = np.concatenate([x, x[:blk]])
    s1 = np.concatenate([[0.0], np.cumsum(circle)])
    s2 = np.concatenate([[0.0], np.cumsum(circle * circle)])
    total = (s1[starts + lengths] - s1[starts]).sum(axis=1)
    total_sq = (s2[starts + lengths] - s2[starts]).sum(axis=1)
    sd = np.sqrt(np.maximum(total_sq - total * total / t, 0.0) / (t - 1))
    flat = sd <= FLAT_TOLERANCE * (np.abs(x).max() if t else 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(flat, 0.0, total / t / sd) * math.sqrt(per_year)


def _check_bootstrap(t: int, level: float) -> None:
    if t < 4:
        raise ValueError(f"the bootstrap needs at least 4 paired returns, got {t}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def sharpe_difference_interval(
    returns_a: np.ndarray,
    returns_b: np.ndarray,
    per_year: float,
    *,
    level: float = 0.95,
    n_boot: int = 2000,
    block: int | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """Circular block bootstrap of ``Sharpe(a) - Sharpe(b)`` on paired per-bar returns.

    Blocks of ``block`` consecutive bars (default ``ceil(T ** (1/3))``) are drawn with
    replacement from the pair series wrapped into a circle, the same blocks for both series, so
    that their correlation and short-range dependence are kept. The interval is the percentile
    interval of the resampled differences.

    :returns: ``{"difference", "low", "high", "level", "block", "n_boot", "p_value"}``, where
        ``p_value`` is the two-sided bootstrap share of resampled differences on the other side
        of zero.
    """
    a = finite_values(returns_a, "returns_a")
    b = finite_values(returns_b, "returns_b")
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired returns must be 1-D of one length, got {a.shape} and {b.shape}")
    t = len(a)
    _check_bootstrap(t, level)
    starts, blk = _block_starts(t, n_boot, block, seed)
    diff = _resampled_sharpes(a, starts, blk, per_year) - _resampled_sharpes(
        b, starts, blk, per_year
    )
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(diff, [tail, 1.0 - tail])
    point = sharpe(a, per_year) - sharpe(b, per_year)
    p = 2.0 * min(float(np.mean(diff <= 0.0)), float(np.mean(diff >= 0.0)))
    return {
        "difference": float(point),
        "low": float(lo),
        "high": float(hi),
        "level": float(level),
        "block": int(blk),
        "n_boot": int(n_boot),
        "p_value": float(min(p, 1.0)),
    }


def best_sharpe_reality_check(
    returns: np.ndarray,
    per_year: float,
    *,
    level: float = 0.95,
    n_boot: int = 2000,
    block: int | None = None,
    seed: int = 0,
    chosen: int | None = None,
) -> dict[str, float]:
    """Is the best of several strategies' Sharpe ratios above zero, allowing for the choice?

    White's reality check (Econometrica 68, 2000) with the circular block bootstrap of
    :func:`sharpe_difference_interval`: of ``K`` strategies backtested on the same ``T`` bars
    (rows of ``returns``), the one with the highest Sharpe ``S_best`` is tested against zero
    (staying flat) with the null distribution of ``max_k (S*_k - S_k)``, the largest
    deviation of any strategy's resampled Sharpe from its own, all strategies resampled with
    the same blocks. The best of ``K`` noisy strategies beats zero by chance more often than one
    strategy does; this test's false-positive rate is its nominal one whatever ``K`` and however
    the strategies are correlated. With ``K = 1`` it is the basic bootstrap test of one Sharpe.

    :param returns: ``[K, T]`` per-bar returns (``[T]``: one strategy).
    :param chosen: the row tested, where the caller chose it among the ``K`` by another
        reckoning of the same Sharpe ratios (default: the row of the highest).
    :returns: ``{"difference", "adjusted", "low", "high", "level", "block", "n_boot", "p_value",
        "best", "candidates", "bars"}``: ``difference`` is ``S_best``; ``adjusted`` is ``S_best``
        less the median maximal deviation, the point estimate allowing for the choice (above
        zero where the one-sided p-value is below one half); ``[low, high]`` the two-sided ``level``
        interval ``S_best - q`` over the quantiles ``q`` of the maximal deviation (``low > 0``
        is the one-sided test at ``(1 - level) / 2``); ``p_value`` twice the bootstrap share of
        maximal deviations at least ``S_best`` (capped at 1, comparable with
        :func:`sharpe_difference_interval`'s); ``best`` the row tested (``chosen``, or the
        last of the highest); ``candidates`` is ``K`` and ``bars`` is ``T``.
    """
    r = np.asarray(returns, dtype=np.float64)
    if r.ndim == 1:
        r = r[None, :]
    if r.ndim != 2 or r.shape[0] < 1:
        raise ValueError(f"returns must be [K, T] with K >= 1, got shape {r.shape}")
    for k in range(r.shape[0]):
        finite_values(r[k], f"returns[{k}]")
    t = r.shape[1]
    _check_bootstrap(t, level)
    starts, blk = _block_starts(t, n_boot, block, seed)
    point = np.array([sharpe(row, per_year) for row in r])
    best = int(len(point) - 1 - np.argmax(point[::-1])) if chosen is None else int(chosen)
    if not 0 <= best < len(point):
        raise ValueError(f"chosen = {chosen!r} is invalid: allowed is 0..{len(point) - 1}")
    resampled = np.stack([_resampled_sharpes(row, starts, blk, per_year) for row in r])
    deviation = (resampled - point[:, None]).max(axis=0)
    tail = (1.0 - level) / 2.0
    q_lo, q_hi = np.quantile(deviation, [tail, 1.0 - tail])
    s_best = float(point[best])
    p = 2.0 * float(np.mean(deviation >= s_best))
    return {
        "difference": s_best,
        "adjusted": float(s_best - np.median(deviation)),
        "low": float(s_best - q_hi),
        "high": float(s_best - q_lo),
        "level": float(level),
        "block": int(blk),
        "n_boot": int(n_boot),
        "p_value": float(min(p, 1.0)),
        "best": best,
        "candidates": int(r.shape[0]),
        "bars": int(t),
    }


def chi2_survival(x: float, df: int) -> float:
    """``P(X >= x)`` for ``X`` chi-squared with ``df`` degrees of freedom: the regularised upper
    incomplete gamma function ``Q(df / 2, x / 2)``, by its series below ``a + 1`` and its
    continued fraction (modified Lentz) above, to about 1e-14 (the project does not depend on
    SciPy; ``tests/test_significance.py`` checks it against ``scipy.stats.chi2.sf``)."""
    if int(df) != df or df < 1:
        raise ValueError(f"df = {df!r} is invalid: allowed is an integer >= 1")
    if not math.isfinite(x):
        raise ValueError(f"x = {x!r} is invalid: allowed is a finite number")
    a, z = 0.5 * df, 0.5 * max(float(x), 0.0)
    if z == 0.0:
        return 1.0
    log_front = a * math.log(z) - z - math.lgamma(a)
    if z < a + 1.0:  # P(a, z) by its series; Q = 1 - P
        term = total = 1.0 / a
        k = a
        while abs(term) > abs(total) * 1e-16:
            k += 1.0
            term *= z / k
            total += term
        return float(min(max(1.0 - total * math.exp(log_front), 0.0), 1.0))
    tiny = 1e-300
    b = z + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-16:
            break
    return float(min(max(math.exp(log_front) * h, 0.0), 1.0))


def regression_slopes_test(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Do the columns of ``x`` predict ``y`` linearly? The heteroskedasticity-robust Wald test
    that every slope of the least-squares regression of ``y`` on ``x`` (with an intercept) is
    zero.

    The covariance of the slopes is White's sandwich with the HC3 weights ``e_i^2 / (1 -
    h_ii)^2`` (MacKinnon and White, 1985), which keeps the test's size near its nominal level
    where the noise's variance moves with the regressors, as returns' does with volatility
    features. The slopes are tested in the orthonormal basis of the centred columns' span (their
    singular vectors): columns that are constant, or combinations of others, as a short or
    synthetic series' volume features can be, add no degree of freedom instead of making the
    system singular. The statistic is referred to the chi-squared distribution with one degree
    of freedom per dimension of that span.

    :param x: float [T, K] regressors, finite.
    :param y: float [T] responses, finite; ``T > K + 1``.
    :returns: ``{"statistic", "df" (the span's dimension, at most K), "p_value", "bars"}``; a
        ``df`` of 0 (every column constant) or a constant ``y`` has statistic 0 and p-value 1.
    """
    x = np.asarray(x, dtype=np.float64)
    y = finite_values(y, "y")
    if x.ndim != 2 or x.shape[0] != len(y):
        raise ValueError(f"x must be [T, K] with T = len(y) = {len(y)}, got shape {x.shape}")
    if not np.isfinite(x).all():
        bad = np.flatnonzero(~np.isfinite(x).all(axis=1))[:5].tolist()
        raise ValueError(f"x holds non-finite values, first at rows {bad}")
    t, k = x.shape
    if t <= k + 1:
        raise ValueError(f"the regression needs more than {k + 1} rows for {k} columns, got {t}")
    centred = x - x.mean(axis=0)
    u, sv, _ = np.linalg.svd(centred, full_matrices=False)
    tol = (sv[0] if len(sv) else 0.0) * max(t, k) * np.finfo(np.float64).eps
    basis = u[:, sv > tol] if tol > 0 else u[:, :0]
    rank = basis.shape[1]
    if rank == 0:
        return {"statistic": 0.0, "df": 0, "p_value": 1.0, "bars": int(t)}
    yc = y - y.mean()
    if not yc.any():  # a constant y: no slope, and the robust covariance is zero (singular)
        return {"statistic": 0.0, "df": rank, "p_value": 1.0, "bars": int(t)}
    coef = basis.T @ yc  # the slopes in the orthonormal basis
    resid = yc - basis @ coef
    leverage = 1.0 / t + np.einsum("ij,ij->i", basis, basis)
    weight = resid**2 / np.maximum(1.0 - leverage, 1e-12) ** 2
    cov = (basis * weight[:, None]).T @ basis
    stat = float(coef @ np.linalg.solve(cov, coef))
    return {"statistic": stat, "df": rank, "p_value": chi2_survival(stat, rank), "bars": int(t)}
