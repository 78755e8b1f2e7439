"""Metrics against hand-computed values: annualisation, ratios, costs, the bootstrap's coverage."""

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
    sharpe_difference_interval,
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


def test_bootstrap_interval_of_identical_series_is_zero():
    r = np.random.default_rng(0).normal(0, 0.01, 300)
    ci = sharpe_difference_interval(r, r, 252)
    assert ci["difference"] == 0.0 and ci["low"] == 0.0 and ci["high"] == 0.0


def test_bootstrap_interval_covers_the_true_difference():
    """AR(1) returns with known mean and variance: the 90% interval of the Sharpe difference
    holds the true value in about 90% of replications."""
    rng = np.random.default_rng(1)
    per_year, n, reps, phi = 252.0, 500, 200, 0.2
    mu_a, mu_b, sigma = 0.001, 0.0, 0.01
    sd = sigma / math.sqrt(1 - phi * phi)
    truth = (mu_a - mu_b) / sd * math.sqrt(per_year)
    hits = 0
    for k in range(reps):
        eps = rng.standard_normal((2, n))
        x = np.empty((2, n))
        x[:, 0] = eps[:, 0] * sd
        for t in range(1, n):
            x[:, t] = phi * x[:, t - 1] + sigma * eps[:, t]
        ci = sharpe_difference_interval(
            x[0] + mu_a, x[1] + mu_b, per_year, level=0.9, n_boot=400, seed=k
        )
        hits += ci["low"] <= truth <= ci["high"]
    coverage = hits / reps
    assert 0.82 <= coverage <= 0.97, coverage


def test_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError, match="paired"):
        sharpe_difference_interval(np.zeros(5), np.zeros(6), 252)
    with pytest.raises(ValueError, match="level"):
        sharpe_difference_interval(np.zeros(5), np.zeros(5), 252, level=1.5)


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
    with pytest.raises(ValueError, match="returns_a has .* at position 2"):
        sharpe_difference_interval(r, np.zeros(4), 252)


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


def test_reality_check_of_one_strategy_is_the_basic_bootstrap_of_its_sharpe() -> None:
    from gpu_trading_env.reports.metrics import best_sharpe_reality_check

    rng = np.random.default_rng(3)
    r = 0.0003 + rng.normal(0.0, 0.01, 1_000)
    one = best_sharpe_reality_check(r, 8766.0, level=0.9, n_boot=500, seed=7)
    # The same blocks (sharpe_difference_interval's percentile interval
    # against zero): the basic interval is that interval reflected about the point estimate.
    pct = sharpe_difference_interval(r, np.zeros_like(r), 8766.0, level=0.9, n_boot=500, seed=7)
    s = one["difference"]
    assert s == pytest.approx(pct["difference"], rel=1e-12)
    assert one["low"] == pytest.approx(2 * s - pct["high"], rel=1e-9)
    assert one["high"] == pytest.approx(2 * s - pct["low"], rel=1e-9)
    assert one["candidates"] == 1 and one["best"] == 0


def test_reality_check_holds_its_false_positive_rate_over_the_best_of_ten() -> None:
    from gpu_trading_env.reports.metrics import best_sharpe_reality_check

    rng = np.random.default_rng(11)
    naive = checked = 0
    trials = 40
    for i in range(trials):
        market = rng.normal(0.0, 0.01, 2_000)
        # Ten strategies that trade noise: random long/short signs on one market.
        rows = np.stack([np.sign(rng.normal(size=2_000)) * market for _ in range(10)])
        best = int(np.argmax([sharpe(x, 8766.0) for x in rows]))
        plain = sharpe_difference_interval(
            rows[best], np.zeros(2_000), 8766.0, level=0.9, n_boot=400, seed=i
        )
        rc = best_sharpe_reality_check(rows, 8766.0, level=0.9, n_boot=400, seed=i)
        assert rc["best"] == best
        naive += plain["low"] > 0
        checked += rc["low"] > 0
    assert naive / trials >= 0.25  # the best of ten "beats" flat far above the nominal 5%
    assert checked / trials <= 0.10


def test_reality_check_refuses_bad_input() -> None:
    from gpu_trading_env.reports.metrics import best_sharpe_reality_check

    r = np.zeros((2, 50))
    with pytest.raises(ValueError, match="chosen = 5"):
        best_sharpe_reality_check(r, 252.0, chosen=5)
    with pytest.raises(ValueError, match=r"returns\[1\]"):
        best_sharpe_reality_check(np.array([[0.0] * 10, [0.0] * 9 + [np.nan]]), 252.0)
    with pytest.raises(ValueError, match="K >= 1"):
        best_sharpe_reality_check(np.zeros((2, 3, 4)), 252.0)


def test_reality_check_adjusted_sharpe_is_the_point_estimate_allowing_for_the_choice() -> None:
    from gpu_trading_env.reports.metrics import best_sharpe_reality_check

    rng = np.random.default_rng(4)
    trials, raw, adjusted = 40, 0, 0
    for i in range(trials):
        market = rng.normal(0.0, 0.01, 2_000)
        rows = np.stack([np.sign(rng.normal(size=2_000)) * market for _ in range(10)])
        rc = best_sharpe_reality_check(rows, 8766.0, level=0.9, n_boot=400, seed=i)
        raw += rc["difference"] > 0
        adjusted += rc["adjusted"] > 0
        # Above zero exactly where the one-sided p-value (half the two-sided one) is below 1/2.
        assert (rc["adjusted"] > 0) == (rc["p_value"] < 1.0)
    # The best of ten noise strategies: positive as measured nearly always, as often as not once
    # the choice is allowed for (a median-unbiased estimate of zero).
    assert raw / trials >= 0.95
    assert 0.25 <= adjusted / trials <= 0.75
    one = best_sharpe_reality_check(rows[0] + 0.0004, 8766.0, level=0.9, n_boot=400, seed=1)
    assert one["adjusted"] == pytest.approx(one["difference"], abs=0.3)  # one: no choice


def test_chi2_survival_matches_scipy() -> None:
    from scipy import stats

    from gpu_trading_env.reports.metrics import chi2_survival

    for df in (1, 2, 3, 7, 51, 54, 300):
        for x in (0.0, 0.3, 1.0, 5.0, df - 1.0, df + 0.5, 2.0 * df, 4.0 * df + 50.0):
            want = stats.chi2.sf(x, df)
            assert chi2_survival(x, df) == pytest.approx(want, rel=1e-10, abs=1e-300)
    with pytest.raises(ValueError, match="df = 0"):
        chi2_survival(1.0, 0)
    with pytest.raises(ValueError, match="x = nan"):
        chi2_survival(float("nan"), 3)


def test_regression_slopes_test_has_its_size_and_finds_a_small_slope() -> None:
    from gpu_trading_env.reports.metrics import regression_slopes_test

    rng = np.random.default_rng(8)
    rejections = 0
    trials = 200
    for _ in range(trials):
        x = rng.normal(size=(600, 8))
        vol = np.exp(x[:, 0])  # the noise's scale moves with a regressor: HC3's case
        y = vol * rng.normal(size=600)
        rejections += regression_slopes_test(x, y)["p_value"] < 0.05
    assert 0.01 <= rejections / trials <= 0.09  # nominal 5%; a plain F-test rejects ~20% here
    x = rng.normal(size=(16_000, 51))
    y = 0.05 * x[:, 3] + rng.normal(size=16_000)  # the zoo's phi 0.05 in size
    found = regression_slopes_test(x, y)
    assert found["p_value"] < 1e-3 and found["df"] == 51 and found["bars"] == 16_000


def test_regression_slopes_test_counts_constant_and_collinear_columns_once() -> None:
    from gpu_trading_env.reports.metrics import regression_slopes_test

    rng = np.random.default_rng(9)
    x = rng.normal(size=(2_000, 3))
    y = 0.2 * x[:, 0] + rng.normal(size=2_000)
    full = regression_slopes_test(x, y)
    padded = np.c_[x, np.ones(2_000), x[:, 0] + x[:, 1]]  # a constant and a sum of two
    same = regression_slopes_test(padded, y)
    assert same["df"] == full["df"] == 3
    assert same["statistic"] == pytest.approx(full["statistic"], rel=1e-8)
    none = regression_slopes_test(np.ones((50, 2)), rng.normal(size=50))
    assert none["df"] == 0 and none["p_value"] == 1.0


def test_regression_slopes_test_refuses_bad_input() -> None:
    from gpu_trading_env.reports.metrics import regression_slopes_test

    with pytest.raises(ValueError, match="more than 4 rows"):
        regression_slopes_test(np.zeros((4, 3)), np.zeros(4))
    with pytest.raises(ValueError, match=r"\[T, K\]"):
        regression_slopes_test(np.zeros((5, 3)), np.zeros(6))
    with pytest.raises(ValueError, match="non-finite"):
        regression_slopes_test(np.full((9, 2), np.nan), np.zeros(9))
