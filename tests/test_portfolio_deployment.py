"""The deployment rule for K instruments (``train --portfolio``): each instrument's baseline
chosen on its own training bars by ``train``'s rule, and the network judged against that
baseline portfolio, not against flat alone."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.pipelines.deployment import (
    GATE_LEVEL,
    BaselineChoice,
    PortfolioBaseline,
    choose_portfolio_baseline,
    describe_portfolio_deployment,
    drift_baseline,
)
from agents.pipelines.portfolio_training import (
    PortfolioTrainConfig,
    baseline_levels,
    hold_returns,
    portfolio_splits,
    set_flat_policy,
    train_portfolio,
    training_baseline,
)
from tests.test_portfolio_train import TINY, drifting

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHORT, FLAT, LONG = 0, 1, 2


def test_each_instrument_gets_the_baseline_of_its_own_training_bars() -> None:
    data = drifting((0.003, 0.0, -0.003), n_bars=2000)
    config = PortfolioTrainConfig()
    baseline = training_baseline(data, config, 1600, per_year=None)
    assert baseline.names == ("hold long", "flat", "hold short")
    assert baseline.name == "baseline"
    assert baseline_levels(baseline, config).tolist() == [LONG, FLAT, SHORT]
    # A level set without shorts holds the falling instrument flat, as it cannot short it.
    long_only = config.replace(env=config.env.replace(exposure_levels=(0.0, 1.0)))
    assert baseline_levels(baseline, long_only).tolist() == [1, 0, 0]
    assert set(baseline.to_dict()["instruments"]) == {"T0", "T1", "T2"}
    # Holding long pays the entry cost once, as equal-weight buy-and-hold does.
    close = np.asarray(data.close[:1600], dtype=np.float64)
    rate = config.env.cost_rates(3)
    np.testing.assert_allclose(
        np.prod(1.0 + hold_returns(data, config, 1600), axis=0),
        close[-1] / (close[0] * (1.0 + rate)),
    )
    words = describe_portfolio_deployment("baseline", baseline, None)
    assert "baseline per instrument: T0 hold long, T1 flat, T2 hold short" in words.headline
    assert [d.split(":")[0] for d in words.details] == ["T0", "T1", "T2"]
    assert words.details[0].startswith("T0: Baseline hold long: holding long minus flat")


def test_k_instruments_share_the_drift_tests_error() -> None:
    # One instrument alone is held at the single env's level; among 8 its test is at 1 - 0.1/8.
    hold = drifting((0.0012,), n_bars=1200, seed=5)
    r = hold_returns(hold, PortfolioTrainConfig(), 1200)
    alone = choose_portfolio_baseline(r, 8760.0, ("T0",))
    assert alone.choices[0] == drift_baseline(r[:, 0], 8760.0)
    among = choose_portfolio_baseline(np.tile(r, (1, 8)), 8760.0, [f"T{j}" for j in range(8)])
    assert among.choices[0].hold_vs_flat["level"] == pytest.approx(1.0 - (1.0 - GATE_LEVEL) / 8)


def test_a_network_that_beats_flat_but_not_the_hold_is_not_deployed(tmp_path) -> None:
    # Two instruments rising strongly: the network learns to hold them long, which beats flat
    # by far but is no better than holding (the real stocks' failure: kept over flat alone).
    data = drifting((0.004, 0.004), seed=1)
    config = TINY.replace(select_inputs=False)
    result = train_portfolio(data, config, seed=1, device="cpu", out=tmp_path)
    assert result.gate is not None and result.gate.beat_flat_by == "significant"
    assert result.kept == "hold long" and not result.gate.keep_network
    assert result.reason.startswith(
        "hold long kept: the best snapshot beats flat but not the baseline (T0 hold long, "
        "T1 hold long) on the validation bars"
    )
    np.testing.assert_array_equal(result.test.equity, result.test_baseline.equity)
    assert result.test.total_return > 0.1 and result.test_flat.total_return == 0.0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["baseline"]["instruments"]["T1"]["name"] == "hold long"
    assert metrics["deployment"]["details"][0].startswith("T0: Baseline hold long")
    # train's figures on the choice: five identical snapshots are one effective trial (and no
    # variance to deflate by); the PBO's candidates are the snapshots, flat and the hold.
    assert metrics["deflated"] is None and metrics["resolution"]["n_trials"] == 1
    assert metrics["overfitting"]["candidates"] == len(result.snapshot_steps) + 2
    # The saved model acts the baseline's levels, one a branch where they differ.
    obs = np.random.default_rng(2).normal(size=(6, result.model.observation_space.shape[0]))
    actions, _ = result.model.predict(obs.astype(np.float32), deterministic=True)
    np.testing.assert_array_equal(actions, np.full((6, 2), LONG))
    set_flat_policy(result.model, np.array([SHORT, LONG]))
    actions, _ = result.model.predict(obs.astype(np.float32), deterministic=True)
    np.testing.assert_array_equal(actions, np.tile([SHORT, LONG], (6, 1)))


def test_the_zoo_markets_without_drift_keep_flat_baselines() -> None:
    from agents.pipelines.portfolio_zoo import PORTFOLIO_ZOO_BARS
    from gpu_trading_env.data.portfolio_markets import portfolio_market

    config = PortfolioTrainConfig()
    held = []
    for kind in ("ar1", "lead_lag", "common_factor"):
        for seed in (0, 1, 2):
            data = portfolio_market(kind, PORTFOLIO_ZOO_BARS, 8, seed)
            splits = portfolio_splits(data.n_bars, config.train_fraction, config.val_fraction)
            baseline = training_baseline(data, config, splits.val_stop, per_year=None)
            held += [(kind, seed, i) for i, n in baseline.zip() if n != "flat"]
    # One of the 72 driftless walks rose 4.7-fold over its training bars (p = 0.013, at the
    # 8-instrument bound): the one hold the rule takes on them.
    assert held == [("ar1", 1, "ar1_6")]


def test_baseline_kept_without_a_network_is_worded_per_instrument() -> None:
    drift = {"difference": 0.1, "low": -0.4, "high": 0.6, "level": 0.9}
    flat = PortfolioBaseline(("A", "B"), (BaselineChoice("flat", drift),) * 2)
    words = describe_portfolio_deployment("flat", flat, None)
    assert words.outcome == "no_input" and not words.trained
    assert words.headline.startswith("flat kept: no (instrument, feature) column predicts")
    assert "no network was trained" in words.headline


def test_both_pipelines_keep_what_the_gate_and_the_fallback_say() -> None:
    from agents.pipelines.deployment import GateVerdict, kept_policy

    ci = {"difference": 0.5, "low": -0.1, "high": 1.1, "level": 0.9, "candidates": 3}
    failed = GateVerdict(False, "hold long", ci, ci)
    assert kept_policy(failed) == "hold long"
    assert kept_policy(failed, fallback=False) == "network"
    assert kept_policy(GateVerdict(True, "baseline", ci, ci)) == "network"
