"""Sharpe-ratio inference against the papers' worked example and the statistics' properties."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_trading_env.reports.sharpe_inference import (
    DeflatedSharpe,
    deflated_sharpe_ratio,
    detectable_edge,
    effective_trials,
    expected_max_sharpe,
    minimum_track_record_length,
    probabilistic_sharpe_ratio,
    probability_of_backtest_overfitting,
    return_moments,
)

# Bailey & López de Prado (2014), "The Deflated Sharpe Ratio", numerical example: N = 100 trials,
# annualised variance of their Sharpe ratios 1/2, the best of them an annualised SR of 2.5 over
# T = 1250 daily observations (five years of 250 days), skewness -3 and kurtosis 10.
DAYS = 250
PAPER = {
    "sr": 2.5 / math.sqrt(DAYS),
    "n": 1250,
    "skew": -3.0,
    "kurtosis": 10.0,
    "n_trials": 100,
    "sr_variance": 0.5 / DAYS,
}


def test_dsr_paper_example_expected_max_and_dsr():
    """The paper prints SR0 = 0.1132 (per day) and DSR = 0.9004."""
    sr0 = expected_max_sharpe(PAPER["n_trials"], PAPER["sr_variance"])
    assert round(sr0, 4) == 0.1132
    result = deflated_sharpe_ratio(
        PAPER["sr"],
        PAPER["n"],
        PAPER["skew"],
        PAPER["kurtosis"],
        n_trials=PAPER["n_trials"],
        sr_variance=PAPER["sr_variance"],
    )
    assert isinstance(result, DeflatedSharpe)
    assert round(result.dsr, 4) == 0.9004
    assert result.sr0 == sr0
    assert result.to_dict()["kurtosis"] == 10.0
    # The DSR is the PSR against SR0.
    assert result.dsr == probabilistic_sharpe_ratio(
        PAPER["sr"], sr0, PAPER["n"], PAPER["skew"], PAPER["kurtosis"]
    )


def _psr_formula(sr: float, sr_star: float, n: int, skew: float, kurt: float) -> float:
    """The PSR formula with whatever kurtosis it is handed (no validation)."""
    z = (sr - sr_star) * math.sqrt(n - 1) / math.sqrt(1 - skew * sr + (kurt - 1) / 4 * sr**2)
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def test_paper_figure_needs_raw_kurtosis_not_excess():
    """Handing the formula the excess kurtosis (10 - 3 = 7, pandas' and scipy's default) misses
    the paper's 0.9004; with the raw 10 it matches. quantstats' ``probabilistic_ratio`` writes the
    variance as ``1 + sr^2/2 - skew sr + (k - 3)/4 sr^2`` (the raw-kurtosis form) and feeds it
    pandas' excess kurtosis, which is this mistake. Skew -3 with a kurtosis of 7 is not a
    distribution's (kurtosis >= 1 + skew^2 = 10), so the module refuses it."""
    sr, n = PAPER["sr"], PAPER["n"]
    sr0 = expected_max_sharpe(PAPER["n_trials"], PAPER["sr_variance"])
    raw = _psr_formula(sr, sr0, n, -3.0, 10.0)
    excess = _psr_formula(sr, sr0, n, -3.0, 7.0)
    quantstats_style = 1 + 0.5 * sr**2 + 3.0 * sr + (7.0 - 3) / 4 * sr**2
    assert quantstats_style == pytest.approx(1 + 3.0 * sr + (7.0 - 1) / 4 * sr**2)
    assert round(raw, 4) == 0.9004
    assert round(excess, 4) == 0.9018
    with pytest.raises(ValueError, match=r"kurtosis .*1 \+ skew\*\*2.*got 7\.0"):
        probabilistic_sharpe_ratio(sr, sr0, n, -3.0, 7.0)


def test_moments_of_returns_are_raw_kurtosis():
    rng = np.random.default_rng(0)
    r = rng.normal(0.001, 0.01, 200_000)
    sr, n, skew, kurt = return_moments(r)
    assert n == len(r)
    assert abs(sr - 0.1) < 0.01
    assert abs(skew) < 0.03
    assert abs(kurt - 3.0) < 0.05


def test_moments_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    r = np.random.default_rng(1).standard_t(5, 500) * 0.01 + 0.0005
    _, _, skew, kurt = return_moments(r)
    assert skew == pytest.approx(stats.skew(r), rel=1e-10)
    assert kurt == pytest.approx(stats.kurtosis(r, fisher=False), rel=1e-10)


def test_normal_functions_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    for n_trials in (2, 10, 1000):
        v = 0.01
        z = (1 - np.euler_gamma) * stats.norm.ppf(1 - 1 / n_trials) + np.euler_gamma * (
            stats.norm.ppf(1 - 1 / (n_trials * np.e))
        )
        assert expected_max_sharpe(n_trials, v) == pytest.approx(math.sqrt(v) * z, rel=1e-12)
    psr = probabilistic_sharpe_ratio(0.1, 0.02, 300, -0.5, 5.0)
    z = 0.08 * math.sqrt(299) / math.sqrt(1 + 0.05 + 0.01)
    assert psr == pytest.approx(stats.norm.cdf(z), rel=1e-12)


def test_deflated_from_returns_uses_their_moments():
    r = np.random.default_rng(2).standard_t(4, 1000) * 0.01 + 0.001
    sr, n, skew, kurt = return_moments(r)
    got = deflated_sharpe_ratio(r, n_trials=20, sr_variance=0.001)
    want = deflated_sharpe_ratio(sr, n, skew, kurt, n_trials=20, sr_variance=0.001)
    assert got == want
    with pytest.raises(ValueError, match="skew is computed from the returns"):
        deflated_sharpe_ratio(r, skew=0.0, n_trials=20, sr_variance=0.001)


def test_psr_is_half_at_the_benchmark():
    for skew, kurt in ((0.0, 3.0), (-1.0, 6.0), (0.5, 4.0)):
        assert probabilistic_sharpe_ratio(0.07, 0.07, 100, skew, kurt) == pytest.approx(0.5)


def test_psr_increases_in_n_above_benchmark():
    values = [probabilistic_sharpe_ratio(0.05, 0.0, n, -0.5, 5.0) for n in (10, 50, 250, 1000)]
    assert all(a < b for a, b in zip(values, values[1:], strict=False))


def test_dsr_at_most_psr_zero_and_expected_max_grows():
    sr, n, skew, kurt = 0.08, 500, -0.3, 4.0
    psr0 = probabilistic_sharpe_ratio(sr, 0.0, n, skew, kurt)
    for n_trials in (2, 5, 50, 1000):
        dsr = deflated_sharpe_ratio(sr, n, skew, kurt, n_trials=n_trials, sr_variance=1e-4).dsr
        assert dsr <= psr0
    maxima = [expected_max_sharpe(k, 1e-4) for k in (1, 2, 5, 50, 1000, 10**6)]
    assert maxima[0] == 0.0
    assert all(a < b for a, b in zip(maxima, maxima[1:], strict=False))


def test_min_track_record_length_reaches_the_confidence():
    sr, skew, kurt = 0.1, -1.0, 6.0
    n_star = minimum_track_record_length(sr, 0.0, skew, kurt, 0.95)
    # At n* observations the PSR is the confidence (n - 1 enters the PSR, so evaluate there).
    z = sr * math.sqrt(n_star - 1) / math.sqrt(1 + skew * -sr + (kurt - 1) / 4 * sr**2)
    assert 0.5 * (1 + math.erf(z / math.sqrt(2))) == pytest.approx(0.95)
    assert probabilistic_sharpe_ratio(sr, 0.0, math.ceil(n_star), skew, kurt) >= 0.95
    assert probabilistic_sharpe_ratio(sr, 0.0, math.floor(n_star), skew, kurt) < 0.95


def test_pbo_near_zero_for_one_real_edge():
    rng = np.random.default_rng(3)
    m = rng.normal(0.0, 0.01, (800, 12))
    m[:, 5] += 0.003
    result = probability_of_backtest_overfitting(m, n_blocks=10)
    assert result.pbo < 0.05
    assert result.n_splits == math.comb(10, 5) == len(result.logits)
    assert result.to_dict()["n_strategies"] == 12


def test_pbo_near_half_or_above_for_noise():
    pbos = [
        probability_of_backtest_overfitting(
            np.random.default_rng(seed).normal(0.0, 0.01, (600, 16)), n_blocks=10
        ).pbo
        for seed in range(6)
    ]
    assert 0.35 < float(np.mean(pbos)) < 0.75


def test_pbo_refuses_bad_matrices():
    good = np.random.default_rng(4).normal(0.0, 0.01, (100, 4))
    with pytest.raises(ValueError, match="n_blocks must be even"):
        probability_of_backtest_overfitting(good, n_blocks=5)
    with pytest.raises(ValueError, match=r"shape \(100,\)"):
        probability_of_backtest_overfitting(good[:, 0])
    bad = good.copy()
    bad[7, 2] = np.nan
    with pytest.raises(ValueError, match="row 7, column 2"):
        probability_of_backtest_overfitting(bad, n_blocks=4)
    flat = good.copy()
    flat[:, 1] = 0.001
    with pytest.raises(ValueError, match="column 1 does not vary"):
        probability_of_backtest_overfitting(flat, n_blocks=4)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: probabilistic_sharpe_ratio(0.1, 0.0, 1), r"n must be an integer >= 2, got 1"),
        (lambda: probabilistic_sharpe_ratio(0.1, 0.0, 100, 0.0, 0.5), r"kurtosis .*got 0\.5"),
        (lambda: probabilistic_sharpe_ratio(math.nan, 0.0, 100), r"sr must be a finite.*nan"),
        (lambda: probabilistic_sharpe_ratio(0.1, 0.0, 100, math.nan), r"skew must be.*nan"),
        (lambda: expected_max_sharpe(0, 0.1), r"n_trials must be an integer >= 1, got 0"),
        (lambda: expected_max_sharpe(10, -0.1), r"sr_variance must be >= 0, got -0\.1"),
        (lambda: expected_max_sharpe(10, math.inf), r"sr_variance must be a finite.*inf"),
        (
            lambda: deflated_sharpe_ratio(0.1, n_trials=10, sr_variance=0.1),
            r"n must be given",
        ),
        (
            lambda: deflated_sharpe_ratio(np.array([0.1, np.nan, 0.2]), n_trials=3, sr_variance=1),
            r"returns must be finite, got nan at position 1",
        ),
        (
            lambda: minimum_track_record_length(0.0, 0.1),
            r"sr must exceed sr_benchmark=0\.1.*got 0\.0",
        ),
        (
            lambda: minimum_track_record_length(0.2, 0.1, confidence=1.0),
            r"confidence must be in \(0, 1\), got 1\.0",
        ),
    ],
)
def test_bad_inputs_name_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# The power calculation against the gate itself: returns with the stated minimum detectable
# Sharpe pass it at about the stated power, and returns with no edge at about its stated rate.
GATE_BARS = 240


def _gate_pass_rate(sr_per_bar: float, reps: int, seed: int) -> float:
    """Share of ``reps`` iid normal return series (``GATE_BARS`` bars, Sharpe ``sr_per_bar``)
    that the deployment gate keeps over a flat baseline."""
    from agents.pipelines.deployment import ValidationReturns, network_beats_baseline

    flat = ValidationReturns(np.zeros(GATE_BARS))
    draws = 0.01 * (np.random.default_rng(seed).standard_normal((reps, GATE_BARS)) + sr_per_bar)
    kept = [
        network_beats_baseline(ValidationReturns(r), flat, "flat", 252.0).keep_network
        for r in draws
    ]
    return float(np.mean(kept))


def test_detectable_edge_matches_the_gates_simulated_power_and_size():
    from agents.pipelines.deployment import GATE_LEVEL, HOLD_PART_LEVEL

    edge = detectable_edge(
        GATE_BARS,
        252.0,
        level=(1.0 - GATE_LEVEL) / 2.0,
        halves=True,
        last_third_level=HOLD_PART_LEVEL,
    )
    assert edge.power == 0.80 and edge.bars == GATE_BARS
    assert edge.sharpe == pytest.approx(edge.sharpe_per_bar * math.sqrt(252.0))
    assert abs(_gate_pass_rate(edge.sharpe_per_bar, 200, seed=1) - edge.power) < 0.07
    assert abs(_gate_pass_rate(0.0, 200, seed=2) - edge.false_positive_rate) < 0.035
    # The whole-window test alone understates what the gate needs: at its figure the stacked
    # conditions pass well under the stated power.
    alone = detectable_edge(GATE_BARS, 252.0, level=(1.0 - GATE_LEVEL) / 2.0)
    assert alone.sharpe < 0.85 * edge.sharpe


def test_detectable_edge_of_one_test_matches_the_reality_checks_power_and_level():
    from gpu_trading_env.reports.significance import best_sharpe_reality_check

    edge = detectable_edge(GATE_BARS, 252.0, level=0.05)
    # Closed form for normal returns: SR = c / sqrt(n - c^2 / 2), c = z_0.95 + z_0.80.
    c = 1.6448536269514722 + 0.8416212335729143
    assert edge.sharpe_per_bar == pytest.approx(c / math.sqrt(GATE_BARS - c * c / 2.0))
    assert edge.false_positive_rate == pytest.approx(0.05)
    rng = np.random.default_rng(3)
    for sr, want, tol in ((edge.sharpe_per_bar, 0.80, 0.07), (0.0, 0.05, 0.03)):
        draws = 0.01 * (rng.standard_normal((300, GATE_BARS)) + sr)
        rate = np.mean(
            [best_sharpe_reality_check(r, 252.0, level=0.90)["low"] > 0.0 for r in draws]
        )
        assert abs(rate - want) < tol, (sr, rate)


def test_detectable_edge_grows_with_trials_and_shrinks_with_bars():
    base = detectable_edge(500, 252.0)
    assert detectable_edge(500, 252.0, n_trials=10).sharpe > base.sharpe
    assert detectable_edge(2000, 252.0).sharpe == pytest.approx(base.sharpe / 2.0, rel=0.02)
    assert detectable_edge(500, 252.0, kurtosis=9.0).sharpe > base.sharpe
    assert base.to_dict()["bars"] == 500
    # At power one half it inverts the minimum track record length (n + 1 with its ddof).
    half = detectable_edge(500, 252.0, power=0.5, skew=-1.0, kurtosis=6.0)
    mintrl = minimum_track_record_length(half.sharpe_per_bar, 0.0, -1.0, 6.0, confidence=0.95)
    assert mintrl == pytest.approx(501.0)
    with pytest.raises(ValueError, match="power must be in"):
        detectable_edge(500, 252.0, power=0.01)
    with pytest.raises(ValueError, match="bars must be an integer >= 6"):
        detectable_edge(3, 252.0)


def test_effective_trials_counts_copies_once_and_independent_strategies_each():
    r = np.random.default_rng(0).standard_normal((1000, 8))
    assert effective_trials(r) >= 7
    assert effective_trials(np.repeat(r[:, :1], 6, axis=1)) == 1
    # A column that never trades is no trial.
    assert effective_trials(np.column_stack([r[:, :2], np.zeros(1000)])) == 2


def test_pbo_rates_a_strategy_that_stays_flat_in_a_half_when_asked():
    r = np.random.default_rng(0).standard_normal((64, 3))
    r[:, 2] = 0.0
    with pytest.raises(ValueError, match="column 2 does not vary"):
        probability_of_backtest_overfitting(r, n_blocks=4)
    result = probability_of_backtest_overfitting(r, n_blocks=4, flat_sharpe=0.0)
    assert result.n_strategies == 3 and 0.0 <= result.pbo <= 1.0


def test_detectable_edge_over_trials_matches_the_reality_check_over_candidates():
    """One strategy with the stated edge among four independent ones: the reality check over
    all four detects it at about the stated power (a little more: a lucky one may pass too);
    the one-trial figure would fall well short."""
    from gpu_trading_env.reports.significance import best_sharpe_reality_check

    edge = detectable_edge(GATE_BARS, 252.0, n_trials=4)
    assert edge.sharpe > 1.15 * detectable_edge(GATE_BARS, 252.0).sharpe
    rng = np.random.default_rng(4)
    passed = []
    for _ in range(200):
        r = 0.01 * rng.standard_normal((4, GATE_BARS))
        r[0] += 0.01 * edge.sharpe_per_bar
        passed.append(best_sharpe_reality_check(r, 252.0, level=0.90)["low"] > 0.0)
    assert abs(np.mean(passed) - edge.power) < 0.07
