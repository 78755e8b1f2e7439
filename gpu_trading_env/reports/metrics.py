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
    "METRIC_UNITS",
    "WEEKS_PER_YEAR",
    "Metrics",
    "bars_per_year",
    "buy_and_hold_equity",
    "curve_metrics",
    "drawdown",
    "sharpe",
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


# Each field of :class:`Metrics` with its unit, as metrics.json's ``schema`` states them.
METRIC_UNITS: dict[str, str] = {
    "total_return": "fraction of the starting value over the window (0.25 = +25%)",
    "annual_return": "fraction a year, compounded over the window",
    "annual_volatility": "fraction a year: the bar returns' standard deviation x sqrt(bars_per_year)",
    "sharpe": "annualised Sharpe ratio, zero risk-free rate (no unit); null where undefined",
    "sortino": "annualised Sortino ratio, zero risk-free rate; null where no bar lost",
    "max_drawdown": "largest fall from a running peak, fraction of that peak (positive)",
    "n_bars": "bars in the curve (count)",
    "bars_per_year": "bars a year used to annualise (count)",
    "costs_included": "whether the trading costs are in the curve (bool)",
    "turnover": "traded notional / portfolio value, summed over a year; null without positions",
    "costs_paid": "costs paid over the window, fraction of the initial capital",
    "exposure": "mean |notional| / portfolio value",
    "time_in_market": "fraction of bars holding a position",
    "hit_rate": "fraction of the bars held in the market whose return was positive",
}


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
    """float64 [T-1] per-bar simple returns of an equity curve [T]; 0 after a bar at 0 or
    below (a ruined curve, held at 0 by the backtest: nothing left to gain or lose)."""
    equity = finite_values(equity, "equity")
    before = equity[:-1]
    live = before > 0.0
    return np.divide(equity[1:], before, out=np.ones_like(before), where=live) - 1.0


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
