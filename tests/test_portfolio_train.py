"""The portfolio training pipeline: backtest_portfolio against a hand computation, the settings'
checks, the splits, and train_portfolio end to end on a tiny budget (CPU)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pytest

from agents.pipelines.portfolio_inputs import select_portfolio_inputs
from agents.pipelines.portfolio_training import (
    PortfolioTrainConfig,
    PortfolioTrainConfigError,
    backtest_portfolio,
    backtest_portfolios,
    buy_and_hold_portfolio,
    portfolio_splits,
    slice_portfolio,
    train_portfolio,
)
from gpu_trading_env.core.portfolio_config import PortfolioConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.data.portfolio_data import PortfolioData

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HOUR = np.timedelta64(1, "h")
T0 = np.datetime64("2024-01-01T00:00", "ns")
SHORT, FLAT, LONG = 0, 1, 2
# docs/ENV_SPEC.md, "Portfolio env": the worked example's settings.
EXAMPLE = PortfolioConfig(
    initial_capital=10_000.0, cost_bps=(10.0, 20.0), leverage=1.0, max_leverage=1.0
)


def bars(name: str, close) -> MarketData:
    """One instrument with exactly these closes (opens equal), hourly, two features."""
    c = np.asarray(close, dtype=np.float64)
    t = c.size
    return MarketData(
        features=np.zeros((t, 2), dtype=np.float32),
        open=c.copy(),
        high=c.copy(),
        low=c.copy(),
        close=c,
        volume=np.full(t, 10.0),
        timestamps=T0 + np.arange(t) * HOUR,
        instrument_offsets=np.array([0, t]),
        instruments=(name,),
        feature_names=("f0", "f1"),
    )


def example_data() -> PortfolioData:
    return PortfolioData.from_market_data(
        [bars("A", [100.0, 110.0, 99.0]), bars("B", [50.0, 50.0, 55.0])]
    )


def test_backtest_matches_the_hand_computation() -> None:
    # Two instruments, three bars: the spec's worked example as a backtest of levels by bar.
    levels = np.array([[LONG, LONG], [SHORT, LONG], [FLAT, FLAT]])
    bt = backtest_portfolio(levels, example_data(), EXAMPLE, 0, 3, per_year=8766.0)
    assert bt.n_bars == 2
    v1 = 10_000.0 - 5000.0 - 5.0 - 5000.0 - 10.0 + 50 * 110.0 + 100 * 50.0  # 10485
    units_a = -10485.0 / 220.0
    cash2 = -15.0 + 5500.0 - 5.5 - units_a * 110.0 - 5.2425 - 242.5 - 0.485
    v2 = cash2 + units_a * 99.0 + 104.85 * 55.0  # 11522.2725
    np.testing.assert_allclose(bt.equity, [1.0, v1 / 1e4, v2 / 1e4], rtol=1e-13)
    np.testing.assert_allclose(bt.positions, [[50.0, 100.0], [units_a, 104.85]], rtol=1e-13)
    np.testing.assert_allclose(bt.costs_by_instrument, [5.0 + 10.7425, 10.0 + 0.485], rtol=1e-12)
    np.testing.assert_allclose(bt.weights[0], [50 * 110.0 / v1, 100 * 50.0 / v1], rtol=1e-13)
    np.testing.assert_array_equal(bt.levels, levels[:2])
    assert bt.total_return == pytest.approx(v2 / 1e4 - 1.0, rel=1e-13)
    r = np.array([v1 / 1e4 - 1.0, v2 / v1 - 1.0])
    assert bt.sharpe == pytest.approx(r.mean() / r.std(ddof=1) * math.sqrt(8766.0), rel=1e-12)
    # The window's rows and a callable give the same path.
    same = backtest_portfolio(levels[:3], example_data(), EXAMPLE, 0, 3, per_year=8766.0)
    by_call = backtest_portfolio(
        lambda obs, bar: levels[bar], example_data(), EXAMPLE, 0, 3, per_year=8766.0
    )
    np.testing.assert_array_equal(same.equity, bt.equity)
    np.testing.assert_array_equal(by_call.equity, bt.equity)


def test_batch_rows_equal_single_backtests() -> None:
    rng = np.random.default_rng(0)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0, 0.01, size=(40, 3)), axis=0))
    data = PortfolioData.from_market_data([bars(n, close[:, k]) for k, n in enumerate("XYZ")])
    config = PortfolioConfig(cost_bps=2.0)
    policies = [rng.integers(0, 3, size=(40, 3)) for _ in range(3)]
    batch = backtest_portfolios(policies, data, config, 5, 40)
    for p, b in zip(policies, batch, strict=True):
        one = backtest_portfolio(p, data, config, 5, 40)
        np.testing.assert_array_equal(one.equity, b.equity)
        np.testing.assert_array_equal(one.costs, b.costs)
        assert one.n_bars == 34


def test_buy_and_hold_holds_equal_weights() -> None:
    data = example_data()
    bh = buy_and_hold_portfolio(data, EXAMPLE, 0, 3)
    units = np.array([5000.0 / (100.0 * 1.001), 5000.0 / (50.0 * 1.002)])
    entry = units * np.array([100.0, 50.0]) * np.array([0.001, 0.002])
    cash = 10_000.0 - float(np.sum(units * [100.0, 50.0] + entry))
    assert cash == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(bh.equity[1:], (units @ [[110.0, 99.0], [50.0, 55.0]]) / 1e4)
    assert bh.equity[0] == 1.0
    np.testing.assert_allclose(bh.costs_by_instrument, entry)


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        (np.zeros((2, 2), dtype=np.int64), r"levels of shape \(2, 2\) are invalid"),
        (np.zeros((3, 3), dtype=np.int64), r"levels of shape \(3, 3\) are invalid"),
        (np.zeros((3, 2)), "levels of dtype float64 are invalid"),
        (np.array([[0, 3], [0, 0], [0, 0]]), r"levels\[0, 1\] = 3 is invalid: allowed is 0..2"),
    ],
)
def test_backtest_refuses_bad_levels(levels, message) -> None:
    with pytest.raises(ValueError, match=message):
        backtest_portfolio(levels, example_data(), EXAMPLE, 0, 3)


def test_backtest_refuses_a_window_outside_the_data() -> None:
    levels = np.zeros((3, 2), dtype=np.int64)
    with pytest.raises(ValueError, match="window start = 0, stop = 4 is invalid"):
        backtest_portfolio(levels, example_data(), EXAMPLE, 0, 4)
    with pytest.raises(ValueError, match="window start = 2, stop = 3 is invalid"):
        backtest_portfolio(levels, example_data(), EXAMPLE, 2, 3)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_envs": 0}, "PortfolioTrainConfig.num_envs = 0 is invalid: allowed is 1 to"),
        ({"gamma": 1.5}, r"PortfolioTrainConfig.gamma = 1.5 is invalid: allowed is a number in"),
        ({"train_fraction": 1.0}, "PortfolioTrainConfig.train_fraction = 1.0 is invalid"),
        (
            {"env": PortfolioConfig(exposure_levels=(-1.0, 1.0))},
            "PortfolioTrainConfig.env = .* is invalid: allowed is exposure_levels with a 0.0",
        ),
    ],
)
def test_config_errors_name_field_value_and_allowed(changes, message) -> None:
    with pytest.raises(PortfolioTrainConfigError, match=message):
        PortfolioTrainConfig(**changes)


def test_config_resolves_budgets_by_device() -> None:
    config = PortfolioTrainConfig()
    cpu, gpu = config.resolved("cpu"), config.resolved("cuda")
    assert cpu.num_envs < gpu.num_envs and cpu.timesteps < gpu.timesteps
    assert config.resolved("cpu").torch_threads == 1 and gpu.torch_threads is None
    assert PortfolioTrainConfig(num_envs=3).resolved("cuda").num_envs == 3


def test_train_refuses_episodes_longer_than_the_fit_window() -> None:
    with pytest.raises(ValueError, match="episode_length = 200 is invalid for the 192 bars"):
        train_portfolio(noise_data(), PortfolioTrainConfig(), seed=0, device="cpu", out=None)


def test_splits_are_chronological_and_refuse_short_windows() -> None:
    s = portfolio_splits(1000, 0.8, 0.4)
    assert (s.fit_stop, s.val_stop, s.n_bars) == (480, 800, 1000)
    with pytest.raises(ValueError, match="leave the test window 8 bars"):
        portfolio_splits(40, 0.8, 0.4)
    part = slice_portfolio(example_data(), 1, 3)
    np.testing.assert_array_equal(part.close, [[110.0, 50.0], [99.0, 55.0]])


def drifting(
    drifts: tuple[float, ...], n_bars: int = 400, seed: int = 0, prefix: str = "T"
) -> PortfolioData:
    """K random walks with these per-bar log drifts (sd 1%), features of pure noise."""
    rng = np.random.default_rng(seed)
    steps = rng.normal(0, 0.01, size=(n_bars, len(drifts))) + np.asarray(drifts)
    close = 100.0 * np.exp(np.cumsum(steps, axis=0))
    parts = []
    for j in range(len(drifts)):
        m = bars(f"{prefix}{j}", close[:, j])
        parts.append(
            MarketData(
                features=rng.normal(size=(n_bars, 2)).astype(np.float32),
                open=m.open,
                high=m.high,
                low=m.low,
                close=m.close,
                volume=m.volume,
                timestamps=m.timestamps,
                instrument_offsets=m.instrument_offsets,
                instruments=m.instruments,
                feature_names=m.feature_names,
            )
        )
    return PortfolioData.from_market_data(parts)


def noise_data(n_bars: int = 400, k: int = 2, seed: int = 0) -> PortfolioData:
    """K random walks with no edge (features of pure noise)."""
    return drifting((0.0,) * k, n_bars, seed, prefix="N")


TINY = PortfolioTrainConfig(
    num_envs=4,
    timesteps=1_500,
    batch_size=32,
    buffer_size=2_000,
    net_width=8,
    env=PortfolioConfig(episode_length=50),
)


def test_train_portfolio_end_to_end_tiny(tmp_path) -> None:
    data = noise_data()
    config = TINY.replace(select_inputs=False)
    result = train_portfolio(data, config, seed=0, device="cpu", out=tmp_path)
    assert result.kept == "flat"  # noise and a tiny budget: nothing beats flat
    assert result.reason.startswith("flat kept: the best snapshot")
    assert result.test.total_return == 0.0 and result.test.sharpe == 0.0
    assert result.splits.to_dict() == {
        "fit": [0, 192],
        "validation": [192, 320],
        "test": [320, 400],
    }
    assert result.test.n_bars == 79 and result.validation.n_bars == 127
    assert len(result.snapshot_steps) == len(result.snapshot_sharpes) >= 2
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["kept"] == "flat" and metrics["reason"] == result.reason
    assert set(metrics["test"]) == {"kept", "flat", "network", "buy_and_hold"}
    assert metrics["config"]["num_envs"] == 4
    # The saved model acts the kept policy: flat in every branch.
    from agents import GpuDQN

    model = GpuDQN.load(tmp_path / "model.zip", device="cpu")
    obs = np.random.default_rng(1).normal(size=(5, model.observation_space.shape[0]))
    actions, _ = model.predict(obs.astype(np.float32), deterministic=True)
    np.testing.assert_array_equal(actions, np.full((5, 2), FLAT))


def test_train_portfolio_without_fallback_keeps_the_network() -> None:
    config = TINY.replace(fallback=False, select_inputs=False)
    result = train_portfolio(noise_data(), config, seed=0, device="cpu", out=None)
    assert result.kept == "network"
    assert "--no-fallback" in result.reason
    np.testing.assert_array_equal(result.test.equity, result.test_network.equity)


def test_no_predictive_input_keeps_flat_without_training(tmp_path) -> None:
    result = train_portfolio(noise_data(), TINY, seed=0, device="cpu", out=tmp_path)
    assert result.inputs is not None and result.inputs.n_kept == 0
    assert result.kept == "flat" and "no network was trained" in result.reason
    assert result.snapshot_steps == () and result.gate is None and result.train_seconds == 0.0
    np.testing.assert_array_equal(result.test_network.equity, result.test_flat.equity)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["inputs"]["kept"] == [] and metrics["inputs"]["tests"] == 2 * 2 * 2


def _leading_column_data() -> tuple[Any, np.ndarray, np.random.Generator]:
    """Two noise instruments whose column (N0, f1) holds N1's next return plus as much noise (a
    lead-lag column): ``(data, its features, the generator drawn from)``."""
    data = noise_data(n_bars=1500, seed=3)
    rng = np.random.default_rng(4)
    close = np.asarray(data.close)
    features = np.array(data.features)
    nxt = np.r_[np.log(close[1:, 1] / close[:-1, 1]), 0.0]
    features[:, 0, 1] = (nxt / nxt.std() + rng.normal(size=len(nxt))).astype(np.float32)
    return dataclasses.replace(data, features=features), features, rng


def test_input_selection_keeps_a_column_that_leads_another_instrument() -> None:
    leading, features, _ = _leading_column_data()
    inputs = select_portfolio_inputs(leading, 1200)
    assert inputs.kept_names() == ["N0:f1"]
    assert inputs.predicted.tolist() == [False, True]  # N0's column predicts N1 alone
    assert inputs.z[0, 1, 1] > 10.0 and inputs.family_p_value < 1e-10
    seen = inputs.apply(leading)
    np.testing.assert_array_equal(seen.features[:, 0, 1], features[:, 0, 1])
    assert not seen.features[:, 1, :].any() and not seen.features[:, 0, 0].any()


def test_flat_unpredicted_holds_the_unpredicted_instruments_flat(tmp_path) -> None:
    # N0's f1 predicts N1's next return, nothing predicts N0's.
    leading, _, rng = _leading_column_data()
    for encoder in (False, True):
        config = TINY.replace(fallback=False, flat_unpredicted=True, instrument_encoder=encoder)
        result = train_portfolio(leading, config, seed=0, device="cpu", out=tmp_path)
        assert result.kept == "network"
        assert not (result.test.levels[:, 0] != FLAT).any()  # N0 never traded
        assert not (result.validation.levels[:, 0] != FLAT).any()
        from agents import GpuDQN

        model = GpuDQN.load(tmp_path / "model.zip", device="cpu")
        obs = rng.normal(size=(16, model.observation_space.shape[0])).astype(np.float32)
        actions, _ = model.predict(obs, deterministic=True)
        np.testing.assert_array_equal(actions[:, 0], np.full(16, FLAT))
        # The saved model records the columns it sees: its env zeroes the others.
        assert model.portfolio_setup["kept"] == result.inputs.kept_names() == ["N0:f1"]
        env = model.make_env(leading, num_envs=2)
        obs, _ = env.reset(seed=0)
        assert env.data.features[:, 1].max() == 0.0 and env.data.features[:, 0, 1].any()


def test_flat_unpredicted_defaults_on() -> None:
    assert PortfolioTrainConfig().flat_unpredicted is True
    with pytest.raises(PortfolioTrainConfigError, match="flat_unpredicted"):
        PortfolioTrainConfig(flat_unpredicted=1)


def test_branch_inputs_give_each_branch_the_columns_that_predict_it() -> None:
    leading, _, _ = _leading_column_data()
    inputs = select_portfolio_inputs(leading, 1200)
    assert inputs.branch_columns() == [[], [1]]  # (N0, f1) = column 0·F + 1 predicts N1 alone
    config = TINY.replace(fallback=False)
    assert config.branch_inputs is True
    result = train_portfolio(leading, config, seed=0, device="cpu", out=None)
    assert result.model.q_net.branch_columns == [[], [1]]
    off = train_portfolio(
        leading, config.replace(branch_inputs=False), seed=0, device="cpu", out=None
    )
    assert off.model.q_net.branch_columns is None and off.model.q_net.evidence_head is None
    with pytest.raises(PortfolioTrainConfigError, match="branch_inputs"):
        PortfolioTrainConfig(branch_inputs="yes")


def test_branch_columns_leave_an_instruments_own_columns_to_the_shared_encoder() -> None:
    from agents.pipelines.portfolio_inputs import PortfolioInputs

    def inputs(passing: list[tuple[int, int, int]]) -> PortfolioInputs:
        p = np.ones((2, 2, 2))
        for k, f, j in passing:
            p[k, f, j] = 0.001
        return PortfolioInputs(
            kept=(p <= 0.01).any(axis=2),
            z=np.zeros((2, 2, 2)),
            adjusted_p=p,
            level=0.01,
            bars=100,
            instruments=("N0", "N1"),
            feature_names=("f0", "f1"),
        )

    # N1's own f0 and N0's f1 predict N1: the evidence head reads N0's column (0·2 + 1) alone.
    assert inputs([(1, 0, 1), (0, 1, 1)]).branch_columns() == [[], [1]]
    # Each instrument predicted by its own columns only (the AR(1) market): no evidence head.
    assert inputs([(0, 0, 0), (1, 1, 1)]).branch_columns() is None
    assert inputs([]).branch_columns() is None


def test_reason_names_the_validation_test_that_kept_flat() -> None:
    from agents.pipelines.deployment import (
        BaselineChoice,
        GateVerdict,
        PortfolioBaseline,
        describe_portfolio_deployment,
    )

    drift = {"difference": 0.1, "low": -0.4, "high": 0.6, "level": 0.9}
    flat = PortfolioBaseline(("A", "B"), (BaselineChoice("flat", drift),) * 2)

    def _reason(kept: str, gate: GateVerdict, fallback: bool, sharpe: float) -> str:
        deployment = describe_portfolio_deployment(
            kept, flat, gate, fallback=fallback, validation_sharpe=sharpe
        )
        return deployment.headline

    check = {"difference": 10.3, "low": 3.8, "high": 12.8, "level": 0.9, "candidates": 5}
    third = {"difference": 3.36, "low": -0.42, "high": 7.52, "level": 0.6}
    passed = {"difference": 12.7, "low": 7.5, "high": 17.5, "level": 0.6}

    def gate(halves: tuple[float, ...]) -> GateVerdict:
        return GateVerdict(
            keep_network=False,
            baseline="flat",
            validation=check,
            validation_vs_flat=check,
            beat_flat_by="significant",
            halves=halves,
            thirds=(12.7, 14.6, 3.36),
            third_tests=(passed, passed, third),
        )

    faded = _reason("flat", gate((10.82, 9.76)), True, 10.3)
    assert "not in the last third of the validation bars (+3.36 Sharpe (60% interval" in faded
    assert "[-0.42, +7.52]; the interval spans zero)" in faded and "halves +10.82, +9.76" in faded
    split = _reason("flat", gate((10.82, -1.5)), True, 10.3)
    assert "not in each half of the validation bars" in split and "last third" not in split
