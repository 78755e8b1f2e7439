"""Position sizing (docs/ENV_SPEC.md "Position sizing"), pinned by hand on tiny markets:
per-instrument default max_position, equity sizing at a leverage, the leverage cap and its
warning.

Actions: a = e*9 + o*3 + k (e: 0 -> -1, 2 -> 0, 3 -> +0.5, 4 -> +1; o = 0 costs 1 bp).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hand_market import hand_market

from gpu_trading_env import EnvConfig, TradingVectorEnv
from gpu_trading_env.data.market_data import MarketData

SHORT, FLAT, HALF_LONG, LONG = 0, 18, 27, 36
QUIET = {
    "initial_capital": 1000.0,
    "barriers": False,
    "diversity_penalty": 0.0,
    "risk_penalty_scale": 0.0,
    "autoreset_mode": "disabled",
    "curiosity_state_dims": 7,
}


def two_instruments(close_a: list[float], close_b: list[float]) -> MarketData:
    """Instrument 'a' then 'b' (same length), from one hand market over both closes."""
    d = hand_market(close_a + close_b)
    n = len(close_a)
    return MarketData(
        features=d.features,
        open=np.concatenate([[close_a[0]], close_a[:-1], [close_b[0]], close_b[:-1]]),
        high=d.high,
        low=d.low,
        close=d.close,
        volume=d.volume,
        timestamps=np.concatenate([d.timestamps[:n], d.timestamps[:n]]),
        instrument_offsets=[0, n, 2 * n],
        instruments=("a", "b"),
        feature_names=d.feature_names,
    )


def make(data: MarketData, num_envs: int = 1, **overrides) -> TradingVectorEnv:
    cfg = {**QUIET, "episode_length": int(data.bars_per_instrument.min()) - 1, **overrides}
    # The source design's 45-action layout: SHORT, FLAT, HALF_LONG and LONG above index it.
    env = TradingVectorEnv(num_envs, "cpu", data=data, config=EnvConfig.source_design(**cfg))
    env.reset(seed=0, options={"start_index": 0})
    return env


def test_default_max_position_is_per_instrument() -> None:
    # 'a' trades near 100: floor(1000/100) = 10 units; 'b' near 20: floor(1000/20) = 50 units.
    data = two_instruments([100.0, 100.0, 101.0, 99.0], [20.0, 21.0, 20.0, 19.0])
    env = make(data, num_envs=4)  # envs 0, 2 trade 'a'; envs 1, 3 trade 'b'
    np.testing.assert_array_equal(env.max_position, [10.0, 50.0])
    _, _, _, _, info = env.step(np.array([LONG, LONG, HALF_LONG, SHORT]))
    np.testing.assert_array_equal(info["position"], [10.0, 50.0, 5.0, -50.0])
    # Full exposure is 1000 of notional on both instruments (1x capital), not 1x on one and
    # 0.2x on the other as one pooled median (60 -> 16 units) gave.
    np.testing.assert_array_equal(info["position"][:2] * np.array([100.0, 20.0]), [1000.0] * 2)


def test_single_instrument_default_is_unchanged() -> None:
    # median of [100, 200, 300, 400, 50] = 200 -> floor(1000/200) = 5, as before.
    env = make(hand_market([100.0, 200.0, 300.0, 400.0, 50.0]))
    np.testing.assert_array_equal(env.max_position, [5.0])


def test_equity_sizing_by_hand() -> None:
    env = make(hand_market([100.0, 110.0, 110.0, 50.0]), sizing="equity", leverage=2.0)
    # t=0, LONG at 100: value_pre = 1000; target = 1 * (2 * 1000 / 100) = 20 units.
    # cost = 20*100*1e-4 = 0.2; cash = 1000 - 2000 - 0.2 = -1000.2; V(1) = -1000.2 + 20*110.
    _, r, _, _, info = env.step(np.array([LONG]))
    assert info["position"][0] == 20.0
    v1 = -1000.2 + 20.0 * 110.0  # 1199.8
    assert info["portfolio_value"][0] == v1
    assert r[0] == np.float32((v1 - 1000.0) / 1000.0)
    # t=1, LONG at 110: target = 2 * 1199.8 / 110 = 21.8145... units (equity grew).
    _, _, _, _, info = env.step(np.array([LONG]))
    target = 1.0 * (2.0 * v1 / 110.0)
    assert info["position"][0] == target
    delta = target - 20.0
    cash2 = -1000.2 - delta * 110.0 - abs(delta) * 110.0 * 1e-4
    assert info["portfolio_value"][0] == cash2 + target * 110.0
    assert abs(info["position"][0]) * 110.0 <= 2.0 * v1  # never above leverage x equity
    # t=2, SHORT at 110, a reversal: close 21.81 units, then open what the cash carries.
    _, _, _, _, info = env.step(np.array([SHORT]))
    close_cost = target * 110.0 * 1e-4
    cash_c = cash2 + target * 110.0 - close_cost
    units = min(np.floor(cash_c / (110.0 * (1.0 + 1e-4))), 2.0 * (cash2 + target * 110.0) / 110.0)
    assert info["position"][0] == -units


def test_equity_sizing_scales_down_after_losses() -> None:
    # The account loses most of its value; the next full-exposure order is sized on what is
    # left (the fixed-units sizing would still open max_position units).
    env = make(hand_market([100.0, 10.0, 10.0, 10.0]), sizing="equity", leverage=1.0)
    env.step(np.array([LONG]))  # 10 units at 100; V(1) = 1000 - 0.1 - 1000 + 100 = 99.9
    _, _, _, _, info = env.step(np.array([SHORT]))  # reversal at 10
    v = info["portfolio_value"][0]
    assert info["position"][0] < 0 and abs(info["position"][0]) * 10.0 <= 99.9
    assert np.isfinite(v) and v > 0


def test_half_exposure_in_equity_mode() -> None:
    env = make(hand_market([50.0, 50.0, 50.0]), sizing="equity", leverage=3.0)
    _, _, _, _, info = env.step(np.array([HALF_LONG]))
    assert info["position"][0] == 0.5 * (3.0 * 1000.0 / 50.0)  # 30 units = 1.5x of 1000


def test_units_sizing_above_the_cap_warns() -> None:
    with pytest.warns(UserWarning, match=r"100x leverage on instrument 'inst0'.*max_leverage = 10"):
        make(hand_market([100.0, 100.0, 100.0]), max_position=1000.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make(hand_market([100.0, 100.0, 100.0]), max_position=1000.0, max_leverage=100.0)
        make(hand_market([100.0, 100.0, 100.0]))  # default: 10 units = 1x


def test_default_floor_of_one_unit_is_refused_on_dear_instrument() -> None:
    # Price 50000 with capital 1000: the 1-unit floor would be 50x leverage.
    with pytest.raises(ValueError, match=r"instrument 'b'.*50x leverage.*sizing='equity'"):
        make(two_instruments([100.0, 100.0, 100.0], [50000.0, 50000.0, 50000.0]), num_envs=2)


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"sizing": "equity", "leverage": 20.0}, r"EnvConfig.leverage = 20.0 is invalid.*10.0"),
        ({"sizing": "percent"}, r"EnvConfig.sizing = 'percent' is invalid"),
        ({"leverage": 0.0}, r"EnvConfig.leverage = 0.0 is invalid"),
        ({"max_leverage": float("nan")}, r"EnvConfig.max_leverage = nan is invalid"),
        ({"leverage": "2"}, r"EnvConfig.leverage = '2' is invalid: allowed is a number"),
    ],
)
def test_bad_sizing_config(changes: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        EnvConfig(**changes)


@pytest.mark.parametrize("field", ["leverage", "max_leverage"])
@pytest.mark.parametrize("value", [1e5, 1000.5])
def test_leverage_above_the_bound_is_refused(field: str, value: float) -> None:
    # 1e5 was accepted: the equity-sized position feature (leverage x value / capital) then
    # overflowed float32, rewards -inf and observations inf, with nothing raised.
    from gpu_trading_env.core.portfolio_config import PortfolioConfig

    with pytest.raises(ValueError, match=rf"EnvConfig.{field} = {value} is invalid.*\(0, 1000\]"):
        EnvConfig(**{field: value})
    with pytest.raises(ValueError, match=rf"PortfolioConfig.{field} = {value} is invalid.*1000"):
        PortfolioConfig(**{field: value})


def test_leverage_at_the_bound_is_accepted() -> None:
    from gpu_trading_env.core.portfolio_config import PortfolioConfig

    EnvConfig(sizing="equity", leverage=1000.0, max_leverage=1000.0)
    PortfolioConfig(leverage=1000.0, max_leverage=1000.0)


def test_leverage_above_the_bound_is_a_usage_error(capsys) -> None:
    from agents import cli

    argv = ["backtest", "--env", "sizing=equity", "leverage=1e5", "max_leverage=1e5"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "leverage = 100000.0 is invalid" in err and "1000]" in err


def test_equity_leverage_uses_the_largest_exposure() -> None:
    EnvConfig(sizing="equity", leverage=20.0, exposure_levels=(-0.5, 0.0, 0.5))  # 10x: ok
    with pytest.raises(ValueError, match="leverage"):
        EnvConfig(sizing="equity", leverage=20.0, exposure_levels=(-0.6, 0.0, 0.5))
