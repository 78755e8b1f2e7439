"""The significance tests against their definitions: the bootstrap interval's coverage, the
reality check's false-positive rate, chi-squared tails against SciPy, the robust Wald test's size."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_trading_env.reports.metrics import sharpe
from gpu_trading_env.reports.significance import (
    best_sharpe_reality_check,
    chi2_survival,
    regression_slopes_test,
    sharpe_difference_interval,
)


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


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_bootstrap_refuses_non_finite_returns_with_their_position(bad):
    r = np.array([0.01, 0.02, bad, 0.0])
    with pytest.raises(ValueError, match="returns_a has .* at position 2"):
        sharpe_difference_interval(r, np.zeros(4), 252)


def test_reality_check_of_one_strategy_is_the_basic_bootstrap_of_its_sharpe() -> None:
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
    r = np.zeros((2, 50))
    with pytest.raises(ValueError, match="chosen = 5"):
        best_sharpe_reality_check(r, 252.0, chosen=5)
    with pytest.raises(ValueError, match=r"returns\[1\]"):
        best_sharpe_reality_check(np.array([[0.0] * 10, [0.0] * 9 + [np.nan]]), 252.0)
    with pytest.raises(ValueError, match="K >= 1"):
        best_sharpe_reality_check(np.zeros((2, 3, 4)), 252.0)


def test_reality_check_adjusted_sharpe_is_the_point_estimate_allowing_for_the_choice() -> None:
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

    for df in (1, 2, 3, 7, 51, 54, 300):
        for x in (0.0, 0.3, 1.0, 5.0, df - 1.0, df + 0.5, 2.0 * df, 4.0 * df + 50.0):
            want = stats.chi2.sf(x, df)
            assert chi2_survival(x, df) == pytest.approx(want, rel=1e-10, abs=1e-300)
    with pytest.raises(ValueError, match="df = 0"):
        chi2_survival(1.0, 0)
    with pytest.raises(ValueError, match="x = nan"):
        chi2_survival(float("nan"), 3)


def test_regression_slopes_test_has_its_size_and_finds_a_small_slope() -> None:
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
    with pytest.raises(ValueError, match="more than 4 rows"):
        regression_slopes_test(np.zeros((4, 3)), np.zeros(4))
    with pytest.raises(ValueError, match=r"\[T, K\]"):
        regression_slopes_test(np.zeros((5, 3)), np.zeros(6))
    with pytest.raises(ValueError, match="non-finite"):
        regression_slopes_test(np.full((9, 2), np.nan), np.zeros(9))
