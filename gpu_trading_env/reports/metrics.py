"""Performance figures of an equity curve, annualised from the data's own bar calendar.

Every figure is computed from per-bar simple returns ``r_t = equity[t+1] / equity[t] - 1`` of a
curve that starts at 1.0 (value / initial capital); whether trading costs are in the curve is the
caller's statement and travels with the figures (``Metrics.costs_included``).

Annualisation: ``bars_per_year`` is inferred from the timestamps as the mean number of bars in a
complete calendar week times 52.1775 weeks a year, so a stock calendar (about 4.83 daily bars a
week with holidays) gives about 252, a weekday calendar without holidays 260.9, hourly bars of a
24/7 market 8766, and 390 minute bars a day on weekdays 101,746. Series shorter than three weeks
fall back to the median bar spacing over 365.25 days. ``--bars-per-year`` overrides it.

Edge cases of the ratios (the figures must not lie; ``tests/test_metrics.py`` holds each):

- Returns that do not vary (sample std at most ``FLAT_TOLERANCE`` times their largest magnitude,
  which is where float rounding of a constant series lands, about 1e-16 of it) have a Sharpe of
  0.0: the ratio is undefined there, and a division by the rounding noise gave 1e16.
- Sortino of returns that never lose (downside deviation at most ``FLAT_TOLERANCE`` times their
  largest magnitude) is ``+inf`` when their mean is positive: no downside was measured, so the
  ratio is unbounded, and 0.0 would rank a never-losing curve with a flat one. It is 0.0 when
  every return is 0. Reports print ``inf`` as "no loss" and ``metrics.json`` holds ``null``.
- NaN or infinite returns (or equity values) raise ``ValueError`` naming the first position:
  a figure computed around a hole would look valid and be wrong.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "FLAT_TOLERANCE",
    "WEEKS_PER_YEAR",
    "Metrics",
    "bars_per_year",
    "best_sharpe_reality_check",
    "buy_and_hold_equity",
    "chi2_survival",
    "curve_metrics",
    "drawdown",
    "regression_slopes_test",
    "sharpe",
    "sharpe_difference_interval",
    "sortino",
]

WEEKS_PER_YEAR = 365.2425 / 7.0  # 52.1775 (Gregorian calendar)
_NS_PER_DAY = 86_400 * 10**9
# A deviation at most this fraction of the returns' largest magnitude is float rounding, not risk.
FLAT_TOLERANCE = 1e-9


def bars_per_year(timestamps: np.ndarray) -> float:
    """Annualisation factor: bars a year in the calendar the timestamps follow.

    :param timestamps: datetime64 [T], increasing.
    :returns: the mean count of bars per complete ISO week (the first and the last week of the
        series are left out as they may be partial) times ``WEEKS_PER_YEAR``; with fewer than
        three weeks, ``365.25 days / median spacing``.
    :raises ValueError: with fewer than two timestamps.
    """
    ts = np.asarray(timestamps).astype("datetime64[ns]")
    if len(ts) < 2:
        raise ValueError(f"bars_per_year needs at least 2 timestamps, got {len(ts)}")
    ns = ts.astype(np.int64)
    # Weeks counted from a Monday (1970-01-05), so that a week is Monday..Sunday.
    week = (ns - 4 * _NS_PER_DAY) // (7 * _NS_PER_DAY)
    weeks, counts = np.unique(week, return_counts=True)
    if len(weeks) >= 3:
        inner = counts[1:-1]
        # Weeks with no bar at all (a market closed for a week) count as weeks of the calendar.
        span = int(weeks[-2] - weeks[1] + 1)
        return float(inner.sum() / span * WEEKS_PER_YEAR)
    step = float(np.median(np.diff(ns)))
    if step <= 0:
        raise ValueError("bars_per_year: timestamps do not increase")
    return float(365.25 * _NS_PER_DAY / step)


@dataclass
class Metrics:
    """Figures of one equity curve. Returns and drawdowns are fractions, not percent.

    ``turnover`` is traded notional over portfolio value, summed over a year (2.0 = the whole
    portfolio bought and sold once a year); ``costs_paid`` is the sum of trading costs over the
    initial capital; ``exposure`` is the mean absolute notional over value; ``time_in_market``
    the fraction of bars holding a position; ``hit_rate`` the fraction of bars held in the market
    whose return was positive. Fields that need positions are None for curves without them.
    """

    total_return: float
    annual_return: float
    annual_volatility: float
    sharpe: float
    sortino: float
    max_drawdown: float
    n_bars: int
    bars_per_year: float
    costs_included: bool
    turnover: float | None = None
    costs_paid: float | None = None
    exposure: float | None = None
    time_in_market: float | None = None
    hit_rate: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def finite_values(values: np.ndarray, what: str) -> np.ndarray:
    """``values`` as float64, or ValueError naming the first NaN or infinite position."""
    v = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(v)
    if bad.any():
        i = int(np.flatnonzero(bad.ravel())[0])
        raise ValueError(
            f"{what} has {v.ravel()[i]} at position {i}: allowed are finite numbers only "
            "(drop or fill the gap before computing the figures)"
        )
    return v


def returns_of(equity: np.ndarray) -> np.ndarray:
    """float64 [T-1] per-bar simple returns of an equity curve [T]."""
    equity = finite_values(equity, "equity")
    return equity[1:] / equity[:-1] - 1.0


def _negligible(deviation: float, r: np.ndarray) -> bool:
    return deviation <= FLAT_TOLERANCE * float(np.max(np.abs(r)))


def sharpe(returns: np.ndarray, per_year: float) -> float:
    """Annualised Sharpe ratio (zero risk-free rate): mean / sample std (ddof 1) x sqrt(per_year).

    :param returns: float [T] per-bar simple returns, finite.
    :returns: 0.0 when the returns do not vary (std within ``FLAT_TOLERANCE`` of their largest
        magnitude: float rounding, not risk) or when there are fewer than 2.
    :raises ValueError: on a NaN or infinite return.
    """
    r = finite_values(returns, "returns")
    if len(r) < 2:
        return 0.0
    sd = float(np.std(r, ddof=1))
    if _negligible(sd, r):
        return 0.0
    return float(np.mean(r) / sd * math.sqrt(per_year))


def sortino(returns: np.ndarray, per_year: float) -> float:
    """Annualised Sortino ratio: mean / downside deviation sqrt(mean(min(r, 0)^2)) x sqrt(per_year).

    :param returns: float [T] per-bar simple returns, finite.
    :returns: ``+inf`` when no return is negative (downside deviation within ``FLAT_TOLERANCE`` of
        the largest magnitude) and the mean is positive: the ratio is unbounded; 0.0 when every
        return is 0 or there are none.
    :raises ValueError: on a NaN or infinite return.
    """
    r = finite_values(returns, "returns")
    if len(r) == 0 or not np.any(r):
        return 0.0
    mean = float(np.mean(r))
    down = math.sqrt(float(np.mean(np.minimum(r, 0.0) ** 2)))
    if _negligible(down, r):
        return math.inf if mean > 0 else 0.0
    return float(mean / down * math.sqrt(per_year))


def drawdown(equity: np.ndarray) -> np.ndarray:
    """float64 [T]: 1 - equity / running peak (0 at a new high)."""
    equity = np.asarray(equity, dtype=np.float64)
    return 1.0 - equity / np.maximum.accumulate(equity)


def curve_metrics(
    equity: np.ndarray,
    per_year: float,
    *,
    costs_included: bool,
    exposure: np.ndarray | None = None,
    traded: np.ndarray | None = None,
    costs: np.ndarray | None = None,
) -> Metrics:
    """Figures of an equity curve.

    :param equity: float64 [T], value / initial capital per bar (equity[0] is the start).
    :param per_year: bars per year (see ``bars_per_year``).
    :param costs_included: whether the curve is net of trading costs (recorded, not applied).
    :param exposure: float64 [T-1], signed notional / value held over bar t -> t+1.
    :param traded: float64 [T-1], |traded notional| / value at bar t.
    :param costs: float64 [T-1], costs paid at bar t / initial capital.
    """
    equity = finite_values(equity, "equity")
    if len(equity) < 2:
        raise ValueError(f"curve_metrics needs at least 2 bars, got {len(equity)}")
    if not per_year > 0:
        raise ValueError(f"per_year must be > 0, got {per_year}")
    r = returns_of(equity)
    growth = equity[-1] / equity[0]
    years = len(r) / per_year
    annual = float(growth ** (1.0 / years) - 1.0) if growth > 0 else -1.0
    vol = float(np.std(r, ddof=1) * math.sqrt(per_year)) if len(r) > 1 else 0.0
    m = Metrics(
        total_return=float(growth - 1.0),
        annual_return=annual,
        annual_volatility=vol,
        sharpe=sharpe(r, per_year),
        sortino=sortino(r, per_year),
        max_drawdown=float(drawdown(equity).max()),
        n_bars=int(len(equity)),
        bars_per_year=float(per_year),
        costs_included=bool(costs_included),
    )
    if exposure is not None:
        exposure = np.asarray(exposure, dtype=np.float64)
        held = exposure != 0.0
        m.exposure = float(np.mean(np.abs(exposure)))
        m.time_in_market = float(np.mean(held))
        m.hit_rate = float(np.mean(r[held] > 0.0)) if held.any() else 0.0
    if traded is not None:
        m.turnover = float(np.mean(traded) * per_year)
    if costs is not None:
        m.costs_paid = float(np.sum(costs))
    return m


def buy_and_hold_equity(close: np.ndarray, cost_rate: float) -> tuple[np.ndarray, np.ndarray]:
    """Buy with all the capital at the first close and sell at the last, paying ``cost_rate``
    (fraction of traded notional) on both trades.

    :returns: ``(equity [T], costs [T-1])``: value / initial capital per bar, the last bar net of
        the selling cost; costs paid at each bar / initial capital.
    """
    close = np.asarray(close, dtype=np.float64)
    if not 0.0 <= cost_rate < 1.0:
        raise ValueError(f"cost_rate must be in [0, 1), got {cost_rate}")
    units = 1.0 / (close[0] * (1.0 + cost_rate))  # per unit of initial capital
    equity = units * close
    costs = np.zeros(len(close) - 1)
    costs[0] = units * close[0] * cost_rate
    exit_cost = units * close[-1] * cost_rate
    equity[-1] -= exit_cost
    costs[-1] += exit_cost
    return equity, costs


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
    SciPy; ``tests/test_metrics.py`` checks it against ``scipy.stats.chi2.sf``)."""
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
