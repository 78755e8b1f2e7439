"""Metrics against hand-computed values: annualisation, ratios, costs, buy-and-hold."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from gpu_trading_env.reports.metrics import (
    WEEKS_PER_YEAR,
    bars_per_year,
    buy_and_hold_equity,
    curve_metrics,
    sharpe,
    sortino,
)


def test_weeks_per_year_is_the_gregorian_average():
    assert WEEKS_PER_YEAR * 7 == pytest.approx(365.2425)


def test_daily_weekday_bars_are_261_a_year():
    ts = pd.bdate_range("2021-01-04", periods=300).to_numpy()
    assert bars_per_year(ts) == pytest.approx(5 * 52.1775, rel=1e-6)


def test_daily_bars_with_holidays_give_the_stock_calendar():
    # 252 trading days: every weekday of 2019 except 9 holidays, spread over 9 weeks.
    days = pd.bdate_range("2019-01-01", "2019-12-31")
    holidays = days[[0, 14, 34, 74, 99, 126, 157, 226, 248]]
    ts = days.difference(holidays)
    # The first (Tue 1 Jan - Fri 4 Jan, a holiday on the 1st) and the last (Mon 30 - Tue 31 Dec)
    # weeks are partial and left out: 252 - 3 - 2 bars over 52 - 2 complete weeks... of 53.
    weeks = pd.Index(ts.to_period("W-SUN")).unique()
    expected = (252 - 3 - 2) / (len(weeks) - 2) * 52.1775
    assert len(ts) == 252
    assert bars_per_year(ts.to_numpy()) == pytest.approx(expected)
    assert 250 < bars_per_year(ts.to_numpy()) < 254


def test_hourly_bars_of_a_24_7_market():
    ts = pd.date_range("2020-01-01", periods=24 * 60, freq="1h").to_numpy()
    assert bars_per_year(ts) == pytest.approx(24 * 365.2425)


def test_hourly_fx_bars_sunday_evening_to_friday_evening():
    # 22:00 Sunday to 21:00 Friday: 120 bars a week.
    ts = pd.date_range("2017-01-01 22:00", periods=24 * 7 * 8, freq="1h")
    ts = ts[~((ts.day_of_week == 5) | ((ts.day_of_week == 6) & (ts.hour < 22)))]
    ts = ts[~((ts.day_of_week == 4) & (ts.hour >= 22))]
    assert bars_per_year(ts.to_numpy()) == pytest.approx(120 * 52.1775)


def test_minute_bars_of_a_stock_session():
    days = pd.bdate_range("2024-01-01", periods=25)
    ts = np.concatenate(
        [pd.date_range(d + pd.Timedelta("9h30min"), periods=390, freq="1min") for d in days]
    )
    assert bars_per_year(ts) == pytest.approx(390 * 5 * 52.1775)


def test_short_series_fall_back_to_the_spacing():
    ts = pd.date_range("2024-01-01", periods=10, freq="15min").to_numpy()
    assert bars_per_year(ts) == pytest.approx(365.25 * 96)


def test_curve_metrics_by_hand():
    equity = np.array([1.0, 1.1, 0.99, 1.089])
    r = np.array([0.1, -0.1, 0.1])
    m = curve_metrics(equity, 252.0, costs_included=True, exposure=np.array([1.0, 0.0, -0.5]))
    assert m.total_return == pytest.approx(0.089)
    assert m.annual_return == pytest.approx(1.089 ** (252 / 3) - 1)
    sd = math.sqrt(((0.1 - 1 / 30) ** 2 * 2 + (-0.1 - 1 / 30) ** 2) / 2)
    assert m.sharpe == pytest.approx((1 / 30) / sd * math.sqrt(252))
    assert m.annual_volatility == pytest.approx(sd * math.sqrt(252))
    assert m.sortino == pytest.approx((1 / 30) / math.sqrt(0.01 / 3) * math.sqrt(252))
    assert m.max_drawdown == pytest.approx(0.1)
    assert m.exposure == pytest.approx(0.5)
    assert m.time_in_market == pytest.approx(2 / 3)
    assert m.hit_rate == pytest.approx(1.0)  # held over bars 0 and 2, both +10%
    assert r.mean() == pytest.approx(1 / 30)


def test_hit_rate_counts_only_bars_in_the_market():
    equity = np.array([1.0, 1.1, 1.0, 1.2, 1.1])
    m = curve_metrics(equity, 252, costs_included=False, exposure=np.array([1, 0, 1, 1.0]))
    # Held over bars 0 (+), 2 (+), 3 (-): 2 of 3.
    assert m.hit_rate == pytest.approx(2 / 3)


def test_turnover_and_costs():
    equity = np.ones(5)
    traded = np.array([1.0, 0.0, 2.0, 0.0])
    costs = np.array([1e-4, 0.0, 2e-4, 0.0])
    m = curve_metrics(equity, 252, costs_included=True, traded=traded, costs=costs)
    assert m.turnover == pytest.approx(0.75 * 252)
    assert m.costs_paid == pytest.approx(3e-4)
    assert m.sharpe == 0.0 and m.max_drawdown == 0.0


def test_buy_and_hold_pays_the_entry_and_the_exit_cost():
    close = np.array([100.0, 110.0, 121.0])
    rate = 1e-3
    equity, costs = buy_and_hold_equity(close, rate)
    units = 1.0 / (100.0 * 1.001)
    assert equity[0] == pytest.approx(1.0 / 1.001)
    assert equity[1] == pytest.approx(units * 110.0)
    assert equity[-1] == pytest.approx(units * 121.0 * (1 - rate))
    assert costs.sum() == pytest.approx(units * 100 * rate + units * 121 * rate)
    free, free_costs = buy_and_hold_equity(close, 0.0)
    np.testing.assert_allclose(free, close / 100.0)
    assert free_costs.sum() == 0.0


# ---------------------------------------------------------------------- edge cases of the ratios


def test_sharpe_of_returns_that_do_not_vary_is_zero_not_rounding_noise():
    # np.std of 100 copies of 0.001 is ~2e-19, not 0: dividing by it gave 7.28e16.
    r = np.full(100, 0.001)
    assert np.std(r, ddof=1) > 0.0
    assert sharpe(r, 252) == 0.0
    assert sharpe(np.full(50, -0.02), 252) == 0.0
    assert sharpe(np.zeros(10), 252) == 0.0


def test_sharpe_still_sees_small_real_variation():
    r = 1e-6 * np.array([1.0, 2.0, 1.5, 0.5])
    sd = np.std(r, ddof=1)
    assert sharpe(r, 252) == pytest.approx(r.mean() / sd * math.sqrt(252))


def test_sortino_of_a_never_losing_series_is_inf_and_of_a_flat_one_zero():
    assert sortino(np.full(100, 0.001), 252) == math.inf
    assert sortino(np.array([0.0, 0.01, 0.0, 0.02]), 252) == math.inf
    assert sortino(np.zeros(10), 252) == 0.0
    assert sortino(np.array([]), 252) == 0.0
    # A loss keeps the ordinary formula.
    r = np.array([0.01, -0.02, 0.03])
    assert sortino(r, 252) == pytest.approx(r.mean() / math.sqrt(0.0004 / 3) * math.sqrt(252))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_returns_are_refused_with_their_position(bad):
    r = np.array([0.01, 0.02, bad, 0.0])
    for fn in (sharpe, sortino):
        with pytest.raises(ValueError, match="returns has .* at position 2"):
            fn(r, 252)
    with pytest.raises(ValueError, match="equity has nan at position 1"):
        curve_metrics(np.array([1.0, np.nan, 1.1]), 252, costs_included=True)


def test_a_steadily_rising_curve_reports_finite_sharpe_and_no_loss(tmp_path):
    from agents.cli.report import format_metrics, results_table
    from gpu_trading_env.reports.report import write_json

    equity = 1.001 ** np.arange(300)
    m = curve_metrics(equity, 252, costs_included=False).to_dict()
    assert m["sharpe"] == 0.0 and m["sortino"] == math.inf
    line = format_metrics(m)
    assert "Sortino no loss" in line and "inf" not in line and "e+" not in line
    assert results_table([("s", m)])[1][4:6] == ["0.00", "no loss"]
    write_json(m, tmp_path / "m.json")
    import json

    assert json.loads((tmp_path / "m.json").read_text())["sortino"] is None
