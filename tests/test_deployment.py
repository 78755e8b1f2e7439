"""The deployment verdict: its wording for each kind of outcome, and the rule's parts that need
no network (the baseline's stability, no input no network, the hold baseline is
buy-and-hold)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agents.pipelines.baseline_policies import baseline_backtest
from agents.pipelines.deployment import (
    HOLD_PARTS,
    OUTCOMES,
    PREDICTABLE_P_VALUE,
    choose_baseline,
    describe_deployment,
    describe_unconfirmed,
    interval_text,
    network_beats_baseline,
)
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData

SELECTION = {"feature_names": [f"f{i}" for i in range(51)], "kept": ["f3"], "p_value": 0.004}
NONE_KEPT = {**SELECTION, "kept": [], "p_value": 0.6}


def ci(d: float, lo: float, hi: float, level: float = 0.9) -> dict[str, float]:
    return {"difference": d, "low": lo, "high": hi, "level": level, "p_value": 0.5}


def baseline(name: str) -> dict:
    return {"name": name, "hold_vs_flat": ci(0.8, 0.2, 1.4), "parts": [ci(1.0, 0.3, 1.7)] * 3}


def gate(kept: str, by: str | None, flat: dict, vs_base: dict | None = None) -> dict:
    return {
        "kept": kept,
        "baseline": "flat",
        "level": 0.9,
        "network_minus_flat_validation_sharpe": {**flat, "candidates": 10},
        "network_minus_baseline_validation_sharpe": vs_base or flat,
        "features_predict_next_return": None,
        "beat_flat_by": by,
    }


def test_no_input_flat_says_no_edge_and_no_training():
    d = describe_deployment("flat", baseline("flat"), gate=None, selection=NONE_KEPT)
    assert d.outcome == "no_input" and not d.trained
    assert d.headline.startswith("no edge found: the model stays flat")
    assert "no network was trained" in d.headline


def test_no_input_hold_says_drift():
    d = describe_deployment("hold long", baseline("hold long"), gate=None, selection=NONE_KEPT)
    assert d.outcome == "drift_no_input"
    assert d.headline.startswith("holds long: the training bars' drift")


def test_network_significant_headline_has_interval():
    g = gate("network", "significant", ci(1.9, 0.4, 3.5))
    d = describe_deployment("network", baseline("flat"), gate=g, selection=SELECTION)
    assert d.outcome == "network" and d.trained
    assert d.headline.startswith("a network: validation edge over flat +1.90 Sharpe")
    assert "[+0.40, +3.50]" in d.headline and "spans zero" not in d.headline


def test_network_predictable_says_interval_spans_zero():
    g = gate("network", "predictable", ci(1.2, -0.3, 2.8))
    d = describe_deployment("network", baseline("flat"), gate=g, selection=SELECTION)
    assert "the interval spans zero" in d.headline
    assert "87.5% one-sided" in d.headline
    text = d.headline + " ".join(d.details)
    assert "suffices" not in text


def test_not_held_flat_and_drift_not_held():
    g = gate("flat", None, ci(0.01, -0.68, 0.73))
    d = describe_deployment("flat", baseline("flat"), gate=g, selection=SELECTION)
    assert d.outcome == "not_held"
    assert d.headline.startswith("no edge held up: the model stays flat")
    assert "the interval spans zero" in d.headline
    g = gate("hold long", "significant", ci(1.0, 0.1, 2.0), vs_base=ci(-0.4, -1.2, 0.5))
    d = describe_deployment("hold long", baseline("hold long"), gate=g, selection=SELECTION)
    assert d.outcome == "drift_not_held"
    assert d.headline.startswith("holds long: the training bars' drift; the network did not")


def test_an_edge_faded_in_the_last_third_is_named():
    last = {**ci(-0.3, -0.9, 0.2, level=0.6)}
    g = {
        **gate("flat", "significant", ci(1.0, 0.2, 1.8)),
        "network_minus_baseline_validation_third_tests": [ci(1.5, 0.5, 2.5)] * 2 + [last],
    }
    d = describe_deployment("flat", baseline("flat"), gate=g, selection=SELECTION)
    assert d.outcome == "not_held"
    assert "was not in the last third of the validation window (-0.30 Sharpe" in d.headline
    assert "in its last third: -0.30 Sharpe" in " ".join(d.details)
    g = {
        **g,
        "baseline": "hold long",
        "network_minus_baseline_validation_sharpe": ci(0.6, 0.1, 1.1),
    }
    d = describe_deployment("hold long", baseline("hold long"), gate=g, selection=SELECTION)
    assert d.outcome == "drift_not_held"
    assert "was not in the last third of the validation window" in d.headline
    # Kept: the headline says the edge held in the last third too.
    g = {
        **gate("network", "significant", ci(1.9, 0.4, 3.5)),
        "network_minus_baseline_validation_third_tests": [ci(1.5, 0.5, 2.5)] * 3,
    }
    d = describe_deployment("network", baseline("flat"), gate=g, selection=SELECTION)
    assert d.headline.endswith("in each half of it, and beat the baseline in its last third")


def test_no_fallback_is_named():
    g = gate("network", None, ci(-0.5, -1.5, 0.4))
    d = describe_deployment("network", baseline("flat"), gate=g, selection=None, fallback=False)
    assert d.outcome == "no_fallback"
    assert d.headline.startswith(OUTCOMES["no_fallback"])


# One train run of each outcome but walkforward's: (kept, baseline, gate, selection, fallback).
OUTCOME_CASES = [
    ("flat", "flat", None, NONE_KEPT, True),
    ("hold long", "hold long", None, NONE_KEPT, True),
    ("network", "flat", gate("network", "significant", ci(2, 1, 3)), SELECTION, True),
    ("flat", "flat", gate("flat", None, ci(0, -1, 1)), SELECTION, True),
    ("hold short", "hold short", gate("hold short", None, ci(0, -1, 1)), SELECTION, True),
    ("network", "flat", gate("network", None, ci(0, -1, 1)), SELECTION, False),
]


def test_every_outcome_is_worded():
    seen = set()
    for kept, base, g, sel, fb in OUTCOME_CASES:
        d = describe_deployment(kept, baseline(base), gate=g, selection=sel, fallback=fb)
        seen.add(d.outcome)
        assert d.to_dict()["headline"] == d.headline
        if d.kept == "network":  # walkforward's check on the fold before
            seen.add(describe_unconfirmed(d, "flat", -0.01, 0.0, first_fold=False).outcome)
    assert seen == set(OUTCOMES)


def test_interval_text_marks_zero():
    assert "spans zero" in interval_text(ci(0.1, -0.2, 0.4))
    assert "spans zero" not in interval_text(ci(0.5, 0.2, 0.9))


def _bars(log_returns: np.ndarray) -> MarketData:
    close = 100.0 * np.exp(np.cumsum(log_returns))
    df = pd.DataFrame(
        {
            "open": close,
            "high": close * 1.001,
            "low": close * 0.999,
            "close": close,
            "volume": 1.0,
        },
        index=pd.date_range("2000-01-01", periods=len(close), freq="h"),
    )
    return MarketData.from_dataframe(df)


def test_drift_that_flips_sign_is_no_reason_to_hold():
    rng = np.random.default_rng(0)
    n = 4000
    up = _bars(1e-3 + 0.002 * rng.standard_normal(n))
    flip = np.r_[3e-3 * np.ones(n // 2), -1e-3 * np.ones(n // 2)] + 0.002 * rng.standard_normal(n)
    config = EnvConfig(episode_length=200)
    assert choose_baseline(up, config, 8766.0).name == "hold long"
    choice = choose_baseline(_bars(flip), config, 8766.0)
    # Over all the bars the drift is up and significant; the last third's is down.
    assert choice.hold_vs_flat["low"] > 0.0
    assert choice.parts[-1]["difference"] < 0.0
    assert choice.name == "flat"


def test_drift_one_stretch_carries_is_no_reason_to_hold():
    # Up for two thirds of the bars, slightly down in the last: both halves' drifts are up
    # (the second half is half up-stretch), the last third's is not.
    rng = np.random.default_rng(2)
    n = 6000
    mu = np.r_[2e-3 * np.ones(2 * n // 3), -2e-4 * np.ones(n - 2 * n // 3)]
    choice = choose_baseline(_bars(mu + 0.002 * rng.standard_normal(n)), EnvConfig(), 8766.0)
    assert len(choice.parts) == HOLD_PARTS == 3
    assert choice.hold_vs_flat["low"] > 0.0 and choice.parts[1]["low"] > 0.0
    assert choice.parts[2]["high"] < 0.0
    assert choice.name == "flat"
    assert (
        "in each third"
        in describe_deployment("flat", choice.to_dict(), gate=None, selection=None).details[0]
    )


def test_hold_long_baseline_is_buy_and_hold():
    rng = np.random.default_rng(1)
    data = _bars(2e-4 + 0.01 * rng.standard_normal(3000))
    config = EnvConfig(episode_length=200)  # barriers on and unit sizing: not a hold
    result = baseline_backtest("hold long", data, config, 8766.0)
    assert result.episodes == 1
    np.testing.assert_allclose(result.exposure, 1.0, atol=1e-9)
    assert result.strategy.total_return == pytest.approx(result.benchmark.total_return, abs=2e-3)


def test_predictable_path_needs_a_quarter_one_sided():
    rng = np.random.default_rng(2)
    t = 2000
    noise = [rng.standard_normal(t) * 0.01 for _ in range(10)]
    base = np.zeros(t)

    class R:
        def __init__(self, r):
            self.returns = r

    pool = [R(r) for r in noise]
    best = max(pool, key=lambda c: c.returns.mean() / c.returns.std())
    verdict = network_beats_baseline(
        best,
        R(base),
        "flat",
        8766.0,
        candidates=pool,
        predictability={"p_value": 1e-6, "statistic": 1.0, "df": 52.0, "bars": 2000.0},
    )
    flat = verdict.validation_vs_flat
    expected = flat["low"] > 0.0 or (flat["p_value"] < PREDICTABLE_P_VALUE and flat["adjusted"] > 0)
    assert verdict.keep_network == expected


def test_the_gates_resolution_is_worded_after_its_evidence():
    """A kept baseline reads "no edge above Sharpe X detectable in N bars"; a kept network
    reads the edge the gate detects; the PBO follows, or why it is not computable."""
    from gpu_trading_env.reports.sharpe_inference import detectable_edge

    edge = detectable_edge(500, 252.0, halves=True, last_third_level=0.2).to_dict()
    pbo = {"pbo": 0.25, "candidates": 5, "bars": 500, "splits": 12870, "blocks": 16}
    flat = ci(0.1, -0.4, 0.6)
    kept_flat = describe_deployment(
        "flat",
        baseline("flat"),
        gate=gate("flat", None, flat),
        selection=SELECTION,
        resolution=edge,
        overfitting=pbo,
    )
    assert kept_flat.details[-2] == (
        f"No edge above Sharpe {edge['sharpe']:.2f} over flat detectable in 500 validation bars "
        "(at the 5% one-sided level with 80% power, 1 effective trial, in each half and the "
        "last third); a smaller one may be there unseen."
    )
    assert kept_flat.details[-1].startswith("Probability of backtest overfitting: 0.25 (CSCV ")
    net = describe_deployment(
        "network",
        baseline("flat"),
        gate=gate("network", "significant", ci(2.0, 0.5, 3.0)),
        selection=SELECTION,
        resolution=edge,
        overfitting={"pbo": None, "candidates": 1, "bars": 20, "reason": "fewer than 2 candidates"},
    )
    assert f"Detectable edge: Sharpe >= {edge['sharpe']:.2f} over flat in 500" in net.details[-2]
    assert net.details[-1] == (
        "Probability of backtest overfitting: not computable (fewer than 2 candidates)."
    )
    untrained = describe_deployment(
        "flat", baseline("flat"), gate=None, selection=NONE_KEPT, resolution=edge
    )
    assert untrained.details[-1].startswith(f"No edge above Sharpe {edge['sharpe']:.2f}")


def test_gate_resolution_counts_the_gates_level_trials_and_parts():
    from agents.pipelines.snapshot_selection import gate_resolution
    from gpu_trading_env.reports.sharpe_inference import detectable_edge

    rng = np.random.default_rng(0)
    one = rng.standard_normal(400)
    # Copies of one snapshot are one trial; independent snapshots are each one.
    copies = gate_resolution(400, 252.0, "flat", candidates=[one, one, 2 * one])
    assert copies.n_trials == 1
    alone = detectable_edge(400, 252.0, halves=True, last_third_level=0.2)
    assert copies.sharpe == pytest.approx(alone.sharpe) and copies.level == pytest.approx(0.05)
    apart = gate_resolution(400, 252.0, "flat", candidates=list(rng.standard_normal((5, 400))))
    assert apart.n_trials >= 4 and apart.sharpe > copies.sharpe
    assert gate_resolution(400, 252.0, "flat", predictable=True).level == PREDICTABLE_P_VALUE / 2
    hold = gate_resolution(400, 252.0, "hold long")
    assert not hold.halves and hold.last_third_level is None and hold.sharpe < copies.sharpe


def test_overfitting_probability_says_why_it_is_not_computable():
    from agents.pipelines.snapshot_selection import overfitting_probability

    rng = np.random.default_rng(0)
    flat = np.zeros(200)
    assert overfitting_probability([rng.standard_normal(200)])["reason"] == (
        "fewer than 2 candidates"
    )
    assert overfitting_probability([flat, flat])["reason"] == "no candidate trades"
    short = overfitting_probability([rng.standard_normal(20), flat[:20]])
    assert short["pbo"] is None and short["reason"].startswith("too few bars (20")
    # A snapshot that trades in one half only is rated Sharpe 0 in the other, not refused.
    half = np.concatenate([np.zeros(100), rng.standard_normal(100)])
    done = overfitting_probability([rng.standard_normal(200), half, flat])
    assert done["candidates"] == 3 and done["blocks"] == 16 and 0.0 <= done["pbo"] <= 1.0


def test_gate_resolution_is_none_where_the_bars_are_too_few():
    from agents.pipelines.snapshot_selection import gate_resolution

    assert gate_resolution(4, 252.0, "flat") is None
    # Ten trials over 6 bars: the estimate's variance outgrows any Sharpe's mean.
    many = list(np.random.default_rng(0).standard_normal((200, 6)))
    assert gate_resolution(6, 252.0, "flat", candidates=many) is None
    assert gate_resolution(60, 252.0, "flat") is not None
