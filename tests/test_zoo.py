"""The market zoo: references against their analytic values, the fallback test, reproducibility."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from agents.pipelines.baseline_policies import (
    BASELINE_EXPOSURE,
    baseline_action,
    set_constant_policy,
)
from agents.pipelines.deployment import (
    choose_baseline,
    describe_deployment,
    features_predict_returns,
    network_beats_baseline,
)
from agents.pipelines.zoo import MARKETS_BY_NAME, SMALL, market_data, reference_exposures, run_one
from gpu_trading_env import EnvConfig, MarketData
from gpu_trading_env.data.synthetic import (
    planted_conviction_exposure,
    planted_rule_expected_return,
    regime_filter_expected_return,
)
from gpu_trading_env.reports.backtest import BacktestResult, backtest, exposure_policy

FRICTIONLESS = EnvConfig(
    order_cost_bps=(0.0,),
    sub_actions=1,
    barriers=False,
    diversity_penalty=0.0,
    risk_penalty_scale=0.0,
    sizing="equity",
    episode_length=500,
)


@pytest.mark.parametrize("phi", [0.3, -0.2])
def test_planted_reference_earns_its_analytic_return(phi: float) -> None:
    """sign(phi r_t) held from close t to close t+1 earns planted_rule_expected_return per bar:
    in plain arithmetic on the closes, and through the env with no costs (equity sizing)."""
    sigma = 0.005
    data = MarketData.synthetic("planted", 10_000, seed=3, phi=phi, sigma=sigma)
    market = MARKETS_BY_NAME["mean_reverting" if phi < 0 else "builtin"]
    exposure = reference_exposures(market, data)["sign rule"]
    close = np.asarray(data.close, dtype=np.float64)
    per_bar = exposure[:-1] * (close[1:] / close[:-1] - 1.0)
    # The generator's figure is for sign(r_t); sign(phi r_t) earns its magnitude.
    expected = abs(planted_rule_expected_return(phi, sigma))
    se = per_bar.std(ddof=1) / math.sqrt(len(per_bar))
    assert abs(per_bar.mean() - expected) < 4 * se, (per_bar.mean(), expected, se)
    env_returns = backtest(exposure_policy(exposure, FRICTIONLESS), data, FRICTIONLESS).returns
    # Episode ends flatten one bar in 500; positions are whole units of equity / price.
    assert abs(env_returns.mean() - expected) < 5 * se, (env_returns.mean(), expected)
    assert np.corrcoef(env_returns, per_bar)[0, 1] > 0.95


def test_conviction_rule_is_the_clipped_standardised_forecast() -> None:
    data = MarketData.synthetic("planted", 2_000, seed=1, phi=0.1, sigma=0.005)
    x = planted_conviction_exposure(data, 0.1, 0.005)
    r = np.diff(np.log(np.asarray(data.close, dtype=np.float64)))
    s = 0.005 / math.sqrt(1 - 0.01)
    np.testing.assert_allclose(x[1:], np.clip(r / s, -1, 1))
    assert x[0] == 0.0
    with pytest.raises(ValueError, match="phi"):
        planted_conviction_exposure(data, 0.0, 0.005)


def test_regime_filter_knows_separable_regimes() -> None:
    """With regimes told apart by every bar, the filtered forecast is the Markov chain's one
    step ahead from the true regime: p * mu_k + (1 - p) / (K - 1) * sum of the other mus."""
    mus, sigmas, p = (0.02, -0.02, 0.0), (1e-4, 1e-4, 1e-4), 0.99
    data = MarketData.synthetic(
        "regime", 3_000, seed=2, mus=mus, sigmas=sigmas, persistence=p, start_price=100.0
    )
    forecast = regime_filter_expected_return(data, mus, sigmas, p)
    r = np.diff(np.log(np.asarray(data.close, dtype=np.float64)))
    regime = np.argmin(np.abs(r[:, None] - np.asarray(mus)[None, :]), axis=1)  # bar 1..T-1
    mu = np.asarray(mus)
    expect = p * mu[regime] + (1 - p) / 2 * (mu.sum() - mu[regime])
    np.testing.assert_allclose(forecast[1:], expect, atol=1e-9)


def test_regime_filter_forecast_is_calibrated() -> None:
    """On the default regime market the forecast of r_{t+1} is unbiased: regressing the next
    return on it gives a slope near 1 (a filter with wrong parameters is not)."""
    meta = {"mus": (3e-4, -4e-4, 0.0), "sigmas": (0.006, 0.012, 0.004), "persistence": 0.995}
    data = MarketData.synthetic("regime", 150_000, seed=4)
    f = regime_filter_expected_return(data, meta["mus"], meta["sigmas"], meta["persistence"])
    r = np.diff(np.log(np.asarray(data.close, dtype=np.float64)))
    slope = np.polyfit(f[:-1], r, 1)[0]
    assert 0.6 < slope < 1.4, slope


def test_flat_and_hold_references() -> None:
    config = EnvConfig(order_cost_bps=(1.0,), sub_actions=1, barriers=False)
    data = MarketData.synthetic("gbm", 2_000, seed=0, mu=1e-4, sigma=0.002)
    flat = reference_exposures(MARKETS_BY_NAME["gbm_flat"], data)["flat"]
    assert not flat.any()
    result = backtest(exposure_policy(flat, config), data, config)
    assert result.strategy.total_return == 0.0 and result.strategy.costs_paid == 0.0
    hold = reference_exposures(MARKETS_BY_NAME["gbm_drift"], data)["hold"]
    assert (hold == 1.0).all()


def test_baseline_choice_follows_the_drift() -> None:
    config = EnvConfig(order_cost_bps=(1.0,), sub_actions=1, barriers=False, sizing="equity")
    up = MarketData.synthetic("gbm", 2_000, seed=0, mu=3e-4, sigma=0.002)
    down = MarketData.synthetic("gbm", 2_000, seed=0, mu=-3e-4, sigma=0.002)
    none = MarketData.synthetic("gbm", 2_000, seed=0, mu=0.0, sigma=0.01)
    assert choose_baseline(up, config, 8766.0).name == "hold long"
    assert choose_baseline(down, config, 8766.0).name == "hold short"
    assert choose_baseline(none, config, 8766.0).name == "flat"


def test_constant_policy_acts_the_baseline_in_every_state() -> None:
    import gymnasium as gym

    import gpu_trading_env  # noqa: F401
    from agents import GpuDQN

    config = EnvConfig(order_cost_bps=(1.0,), sub_actions=1, barriers=False)
    env = gym.make_vec("GpuTrading-v0", num_envs=2, device="cpu", config=config)
    model = GpuDQN("DuelingPolicy", env, learning_starts=10, buffer_size=1_000, seed=0)
    obs = np.random.default_rng(0).normal(size=(64, env.single_observation_space.shape[0]))
    for name in BASELINE_EXPOSURE:
        action = baseline_action(name, config)
        set_constant_policy(model, action)
        acts, _ = model.predict(obs.astype(np.float32), deterministic=True)
        assert (acts == action).all(), name
    env.close()


def test_small_zoo_run_is_reproducible_under_its_seed() -> None:
    a = run_one("builtin", 0, "cpu", SMALL)
    b = run_one("builtin", 0, "cpu", SMALL)
    for key in ("agent", "network", "reference", "vs_flat", "gate", "evaluations"):
        assert getattr(a, key) == getattr(b, key), key
    assert a.reference_name in ("sign rule", "conviction rule")
    assert a.test_bars == SMALL.bars // 5


def test_zoo_market_data_matches_the_builtin_market() -> None:
    assert np.array_equal(
        market_data(MARKETS_BY_NAME["builtin"], 0).close, MarketData.default().close
    )


def test_zoo_command_writes_json_csv_and_page(tmp_path, capsys) -> None:
    from agents.cli import main

    out = tmp_path / "zoo"
    # One CPU worker: the run goes in this process (agents.pipelines.zoo.run_zoo).
    code = main(
        ["zoo", "--small", "--device", "cpu", "--markets", "gbm_flat", "--seeds", "0",
         "--no-progress", "--out", str(out)]
    )  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.err[-2000:]
    doc = json.loads((out / "zoo.json").read_text())
    assert doc["summary"][0]["market"] == "gbm_flat" and len(doc["runs"]) == 1
    page = (out / "index.html").read_text()
    assert "driftless GBM" in page
    # --small says it is a smoke test first, on the console and on the page.
    assert printed.out.splitlines()[0].startswith("market zoo, smoke test: --small is a smoke")
    assert "<h1>Market zoo (smoke test)</h1>" in page and "not a learning result" in page
    assert "<th>met (smoke test)</th>" in page and "met (smoke test)" in printed.out
    # The page opens with the one-sentence verdict (agents.pipelines.zoo_report.zoo_lead).
    lead = page.split("</h1><p><strong>", 1)[1].split("</strong>", 1)[0]
    assert lead.startswith("Deployed ") and " of 1 runs on 1 markets: " in lead
    assert "vs flat +0.0%, buy-and-hold " in lead and len(lead.split()) <= 30
    assert (out / "gbm_flat.png").stat().st_size > 1000
    assert (out / "zoo.csv").read_text().startswith("market,seed,kept")


def test_zoo_targets_read_as_the_ratios_they_are() -> None:
    from agents.pipelines.zoo import MARKETS, REAL_MARKETS
    from agents.pipelines.zoo_report import _target_text

    texts = {m.target[0]: _target_text(m.target) for m in (*MARKETS, *REAL_MARKETS)}
    assert texts["sharpe_ratio"].startswith("agent/reference Sharpe >= ")
    for text in texts.values():  # no bare "Sharpe ratio >= x" read as an absolute Sharpe
        assert text.startswith(("agent/", "agent return")), text


def test_zoo_command_refuses_unknown_markets_and_owned_options(capsys) -> None:
    from agents.cli import main

    for argv, needle in (
        (["--markets", "nope"], "--markets nope is invalid"),
        (["--train-args", "--seed 3"], "the zoo sets --seed itself"),
        # one option with no space: a value of --train-args, not an option of the zoo's
        (["--train-args", "--seed"], "the zoo sets --seed itself"),
    ):
        assert main(["zoo", "--device", "cpu", *argv]) == 2
        err = capsys.readouterr().err
        assert needle in err, err


def test_net_width_zero_is_a_linear_q_network_and_one_is_refused() -> None:
    from agents.cli.options import UsageError, validate
    from agents.cli.parser import build_parser

    args = build_parser().parse_args(["train", "--device", "cpu", "--net-width", "0"])
    validate(args)
    assert args.net_width == 0
    bad = build_parser().parse_args(["train", "--device", "cpu", "--net-width", "1"])
    with pytest.raises(UsageError, match="--net-width 1 is invalid"):
        validate(bad)
    # gbm_flat keeps no input, so --all-inputs: the linear network must be trained.
    row = run_one("gbm_flat", 0, "cpu", SMALL, ("--net-width", "0", "--all-inputs"))
    assert row.network is not None and row.network.n_bars == SMALL.bars // 5


def _returns(values: np.ndarray) -> BacktestResult:
    """A stand-in backtest holding only the per-bar returns the gate reads."""
    return SimpleNamespace(returns=np.asarray(values, dtype=np.float64))


def test_gate_against_a_hold_baseline_needs_flat_and_the_hold_beaten() -> None:
    rng = np.random.default_rng(0)
    noise = rng.normal(0.0, 0.01, 3_000)
    drift = 0.002 + rng.normal(0.0, 0.01, 3_000)  # a hold that earns a strong drift
    edge = 0.003 + rng.normal(0.0, 0.01, 3_000)  # a network that earns more than that
    # A network above the hold but not significantly: the hold is kept.
    hold = 0.0028 + rng.normal(0.0, 0.01, 3_000)
    verdict = network_beats_baseline(_returns(edge), _returns(hold), "hold long", 8766.0)
    assert verdict.validation["low"] < 0 < verdict.validation["difference"]  # not significant
    assert verdict.validation_vs_flat["low"] > 0 and verdict.held_in_halves
    assert not verdict.keep_network and verdict.to_dict()["kept"] == "hold long"
    # A network significantly above a weak hold, in both halves: kept.
    weak = 0.0003 + rng.normal(0.0, 0.01, 3_000)
    verdict = network_beats_baseline(_returns(edge), _returns(weak), "hold long", 8766.0)
    assert verdict.validation["low"] > 0 and verdict.held_in_halves
    assert verdict.keep_network and verdict.to_dict()["kept"] == "network"
    # A network that beats flat but not the hold's real drift: the hold is kept.
    verdict = network_beats_baseline(_returns(edge - 0.0015), _returns(drift), "hold long", 8766.0)
    assert verdict.validation_vs_flat["low"] > 0 and verdict.validation["difference"] < 0
    assert not verdict.keep_network and verdict.to_dict()["kept"] == "hold long"
    # Noise beats neither: flat (or the hold) is kept.
    assert not network_beats_baseline(
        _returns(noise), _returns(0 * noise), "flat", 8766.0
    ).keep_network
    assert not network_beats_baseline(
        _returns(noise), _returns(drift), "hold long", 8766.0
    ).keep_network


def test_gate_needs_the_edge_in_each_half_of_validation() -> None:
    rng = np.random.default_rng(3)
    # An edge over flat over the whole window, all of it in the first half.
    early = np.r_[0.004 * np.ones(1_500), -0.0005 * np.ones(1_500)] + rng.normal(0, 0.01, 3_000)
    verdict = network_beats_baseline(_returns(early), _returns(0 * early), "flat", 8766.0)
    assert verdict.validation_vs_flat["low"] > 0 and verdict.beat_flat_by == "significant"
    assert verdict.halves[0] > 0 > verdict.halves[1] and not verdict.held_in_halves
    assert not verdict.keep_network
    d = verdict.to_dict()
    assert d["network_minus_baseline_sharpe_in_validation_halves"] == list(verdict.halves)
    text = describe_deployment(
        "flat",
        {"name": "flat", "hold_vs_flat": verdict.validation_vs_flat, "parts": []},
        gate=d,
        selection=None,
    )
    assert text.outcome == "not_held" and "not in each half of the validation window" in (
        text.headline
    )


def test_gate_needs_the_edge_in_the_last_third_of_validation() -> None:
    """An edge over flat over the whole window and in each half, gone (slightly negative) in
    the last third: the network is not deployed, and the verdict says where the edge faded."""
    rng = np.random.default_rng(3)
    fading = np.r_[0.004 * np.ones(2_000), -0.0008 * np.ones(1_000)] + rng.normal(0, 0.01, 3_000)
    verdict = network_beats_baseline(_returns(fading), _returns(0 * fading), "flat", 8766.0)
    assert verdict.beat_flat_by == "significant" and verdict.held_in_halves
    assert verdict.third_tests[-1]["low"] <= 0.0 and not verdict.held_in_last_third
    assert not verdict.keep_network
    d = verdict.to_dict()
    assert d["held_in_last_validation_third"] is False
    text = describe_deployment(
        "flat",
        {"name": "flat", "hold_vs_flat": verdict.validation_vs_flat, "parts": []},
        gate=d,
        selection=None,
    )
    assert text.outcome == "not_held"
    assert "was not in the last third of the validation window" in text.headline
    # The same edge carried to the end of the window is deployed.
    steady = 0.004 + rng.normal(0, 0.01, 3_000)
    kept = network_beats_baseline(_returns(steady), _returns(0 * steady), "flat", 8766.0)
    assert kept.held_in_last_third and kept.keep_network
    # Against a hold, the last third is the network's edge over the hold, not over flat.
    hold = rng.normal(0.0006, 0.01, 3_000)
    over_hold = hold + np.r_[0.004 * np.ones(2_000), -0.0008 * np.ones(1_000)]
    faded = network_beats_baseline(_returns(over_hold), _returns(hold), "hold long", 8766.0)
    assert faded.held_in_halves and faded.validation["low"] > 0.0
    assert not faded.held_in_last_third and not faded.keep_network


def test_gate_allows_for_the_choice_among_snapshots() -> None:
    """The best of ten noise snapshots passes a plain test of itself; against the ten it was
    chosen from it does not, while a snapshot with a real edge among noise ones still does."""
    rng = np.random.default_rng(5)
    market = rng.normal(0.0, 0.01, 3_000)
    flat = _returns(np.zeros(3_000))
    for _trial in range(20):
        noise = [_returns(np.sign(rng.normal(size=3_000)) * market) for _ in range(10)]
        best = max(noise, key=lambda b: float(np.mean(b.returns) / np.std(b.returns)))
        if network_beats_baseline(best, flat, "flat", 8766.0).keep_network:
            break
    else:
        pytest.fail("no best-of-ten noise snapshot passed the plain test in 20 trials")
    verdict = network_beats_baseline(best, flat, "flat", 8766.0, candidates=noise)
    assert not verdict.keep_network
    assert verdict.validation_vs_flat["candidates"] == 10
    edge = _returns(0.0015 + rng.normal(0.0, 0.01, 3_000))
    assert network_beats_baseline(
        edge, flat, "flat", 8766.0, candidates=[*noise, edge]
    ).keep_network
    with pytest.raises(ValueError, match="network's own backtest"):
        network_beats_baseline(edge, flat, "flat", 8766.0, candidates=noise)


def test_gate_takes_a_weak_validation_edge_where_the_features_predict_returns() -> None:
    """Step 4 of the fallback: a network 1.5 standard errors above flat on validation (in each
    half) is not significant, and is kept only where the training bars' features predict the
    returns."""
    rng = np.random.default_rng(2)
    flat = _returns(np.zeros(3_000))
    noise = rng.normal(0.0, 0.01, 3_000)
    centred = np.r_[noise[:1_500] - noise[:1_500].mean(), noise[1_500:] - noise[1_500:].mean()]
    weak = _returns(centred + 1.5 * noise.std() / math.sqrt(3_000))
    predictable = {"statistic": 90.0, "df": 51, "p_value": 1e-4, "bars": 16_000}
    unpredictable = {**predictable, "statistic": 50.0, "p_value": 0.5}
    alone = network_beats_baseline(weak, flat, "flat", 8766.0)
    assert not alone.keep_network and alone.validation_vs_flat["low"] < 0
    assert alone.validation_vs_flat["adjusted"] > 0
    kept = network_beats_baseline(weak, flat, "flat", 8766.0, predictability=predictable)
    assert kept.keep_network and kept.to_dict()["beat_flat_by"] == "predictable"
    assert kept.to_dict()["features_predict_next_return"] == predictable
    assert not network_beats_baseline(
        weak, flat, "flat", 8766.0, predictability=unpredictable
    ).keep_network
    off = network_beats_baseline(
        weak, flat, "flat", 8766.0, predictability=predictable, predictability_level=0.0
    )
    assert not off.keep_network
    # A losing network is not kept whatever the market: its adjusted Sharpe is below zero.
    losing = _returns(noise - noise.mean() - noise.std() / math.sqrt(3_000))
    assert not network_beats_baseline(
        losing, flat, "flat", 8766.0, predictability=predictable
    ).keep_network
    # Against a hold it must still do as well as the hold there.
    hold = _returns(noise - noise.mean() + 3.0 * noise.std() / math.sqrt(3_000))
    assert not network_beats_baseline(
        weak, hold, "hold long", 8766.0, predictability=predictable
    ).keep_network
    with pytest.raises(ValueError, match="predictability_level = 1.5"):
        network_beats_baseline(weak, flat, "flat", 8766.0, predictability_level=1.5)


def test_features_predict_returns_on_a_planted_edge_and_not_on_a_random_walk() -> None:
    edge = MarketData.synthetic("planted", 6_000, seed=3, phi=0.1)
    walk = MarketData.synthetic("gbm", 6_000, seed=3)
    found = features_predict_returns(edge)
    assert found["p_value"] < 1e-4 and found["bars"] == 5_999 and found["df"] == 51
    assert features_predict_returns(walk)["p_value"] > 0.01
    # Too few bars for 51 slopes: no test, step 3 is not taken.
    assert features_predict_returns(edge.slice_bars(0, 90)) is None
    # Instruments are regressed each on its own next bar, not across the seam between them.
    two = MarketData.synthetic("planted", 3_000, n_instruments=2, seed=3, phi=0.1)
    assert features_predict_returns(two)["bars"] == 2 * 2_999


def test_gate_records_the_edge_in_each_third_and_quarter_of_validation() -> None:
    from gpu_trading_env.reports.metrics import sharpe

    rng = np.random.default_rng(4)
    # 3,001 bars: the halves cut at 1,500 as they always have; thirds and quarters are recorded.
    edge = rng.normal(0.0005, 0.01, 3_001)
    verdict = network_beats_baseline(_returns(edge), _returns(0 * edge), "flat", 8766.0)
    assert len(verdict.halves) == 2 and len(verdict.thirds) == 3 and len(verdict.quarters) == 4
    assert verdict.halves[0] == sharpe(edge[:1_500], 8766.0)
    assert verdict.thirds[2] == sharpe(edge[2_000:], 8766.0)
    assert verdict.quarters[0] == sharpe(edge[:750], 8766.0)
    d = verdict.to_dict()
    assert d["network_minus_baseline_sharpe_in_validation_thirds"] == list(verdict.thirds)
    assert d["network_minus_baseline_sharpe_in_validation_quarters"] == list(verdict.quarters)
    assert [t["difference"] for t in verdict.third_tests] == pytest.approx(list(verdict.thirds))
    assert len(d["network_minus_baseline_validation_half_tests"]) == 2
    assert all(t["level"] == pytest.approx(0.6) for t in verdict.third_tests)
    # Too few bars to cut: nothing recorded.
    short = network_beats_baseline(_returns(edge[:11]), _returns(0 * edge[:11]), "flat", 8766.0)
    assert short.thirds == () and short.third_tests == () and len(short.halves) == 2
