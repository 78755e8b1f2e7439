"""The portfolio env (docs/ENV_SPEC.md, "Portfolio env"): the worked example by hand, K = 1
against the single-instrument env bit for bit, per-instrument costs, the gross cap, the
autoreset modes, Gymnasium's conventions, data alignment and config errors."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_action_space, check_observation_space

import gpu_trading_env  # noqa: F401 - registers the ids
from gpu_trading_env.core.portfolio_config import (
    RUIN_LOG_REWARD,
    PortfolioConfig,
    single_instrument_config,
)
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.data.portfolio_data import PortfolioData
from gpu_trading_env.portfolio_env import PortfolioVectorEnv
from gpu_trading_env.vector_env import TradingVectorEnv

HOUR = np.timedelta64(1, "h")
T0 = np.datetime64("2024-01-01T00:00", "ns")


def bars(name: str, close, open_=None, times=None, n_features: int = 2) -> MarketData:
    """One instrument with exactly these closes (opens: the closes unless given), hourly."""
    c = np.asarray(close, dtype=np.float64)
    o = c.copy() if open_ is None else np.asarray(open_, dtype=np.float64)
    t = c.size
    ts = T0 + np.arange(t) * HOUR if times is None else np.asarray(times, dtype="datetime64[ns]")
    feats = (np.arange(t * n_features, dtype=np.float32).reshape(t, n_features) / 100).astype(
        np.float32
    )
    return MarketData(
        features=feats,
        open=o,
        high=np.maximum(o, c),
        low=np.minimum(o, c),
        close=c,
        volume=np.full(t, 10.0),
        timestamps=ts,
        instrument_offsets=np.array([0, t]),
        instruments=(name,),
        feature_names=tuple(f"f{j}" for j in range(n_features)),
    )


EXAMPLE = PortfolioConfig(
    initial_capital=10_000.0,
    exposure_levels=(-1.0, 0.0, 1.0),
    cost_bps=(10.0, 20.0),
    leverage=1.0,
    max_leverage=1.0,
    episode_length=2,
)
SHORT, FLAT, LONG = 0, 1, 2


def example_env(**changes) -> PortfolioVectorEnv:
    data = [bars("A", [100.0, 110.0, 99.0]), bars("B", [50.0, 50.0, 55.0])]
    return PortfolioVectorEnv(1, data=data, config=EXAMPLE.replace(**changes))


def test_worked_example() -> None:
    env = example_env()
    obs, _ = env.reset(seed=0, options={"start_index": 0})
    assert obs.shape == (1, 2 * 2 + 1 + 2)
    np.testing.assert_array_equal(obs[0, 4:], np.float32([1.0, 0.0, 0.0]))

    obs, reward, term, trunc, info = env.step(np.array([[LONG, LONG]]))
    # Gross 2 > max_leverage 1: exposures (0.5, 0.5), 50 A and 100 B, cash 10000-5000-5-5000-10.
    np.testing.assert_array_equal(info["positions"], [[50.0, 100.0]])
    np.testing.assert_array_equal(info["costs"], [[5.0, 10.0]])
    assert info["portfolio_value"][0] == 10485.0
    assert reward[0] == np.float32(0.0485)
    np.testing.assert_allclose(info["reward_components"][0], [0.05, 0.0015], rtol=1e-6)
    np.testing.assert_allclose(obs[0, 4:], [1.0485, 0.55, 0.5], rtol=1e-6)
    assert not term[0] and not trunc[0]

    obs, reward, term, trunc, info = env.step(np.array([[SHORT, LONG]]))
    # A reverses to -10485/220 units (its cash covers 49 whole units), B buys 4.85.
    np.testing.assert_allclose(info["positions"], [[-10485 / 220, 104.85]], rtol=1e-15)
    np.testing.assert_allclose(info["costs"], [[10.7425, 0.485]], rtol=1e-12)
    assert info["portfolio_value"][0] == pytest.approx(11522.2725, rel=1e-14)
    assert reward[0] == pytest.approx(1037.2725 / 10485, rel=1e-6)
    np.testing.assert_allclose(info["reward_components"][0], [0.1, 11.2275 / 10485], rtol=1e-6)
    assert trunc[0] and not term[0]  # t + 2 = 3 >= T
    assert info["episode_length"][0] == 2
    assert info["episode_return"][0] == pytest.approx(0.0485 + 1037.2725 / 10485, rel=1e-6)


def test_worked_example_log_reward() -> None:
    env = example_env(reward="log")
    env.reset(seed=0, options={"start_index": 0})
    _, r1, *_ = env.step(np.array([[LONG, LONG]]))
    _, r2, *_ = env.step(np.array([[SHORT, LONG]]))
    assert r1[0] == np.float32(math.log(10485 / 10000))
    assert r2[0] == pytest.approx(math.log(11522.2725 / 10485), rel=1e-6)


def test_ruin_terminates_with_the_log_floor() -> None:
    # Short at 2x leverage into a tripling price: the value goes below zero.
    data = [bars("A", [100.0, 300.0, 300.0, 300.0])]
    env = PortfolioVectorEnv(
        1,
        data=data,
        initial_capital=1000.0,
        leverage=2.0,
        max_leverage=2.0,
        reward="log",
        episode_length=3,
        cost_bps=0.0,
    )
    env.reset(seed=0, options={"start_index": 0})
    _, reward, term, trunc, info = env.step(np.array([[SHORT]]))
    assert info["portfolio_value"][0] == 1000.0 - 20 * 200.0
    assert term[0] and not trunc[0]
    assert reward[0] == np.float32(RUIN_LOG_REWARD)


def test_costs_per_instrument() -> None:
    # Two instruments of the same prices: costs in the ratio of their rates, none at 0 bps.
    close = [100.0, 101.0, 102.0, 103.0]
    data = [bars("A", close), bars("B", close), bars("C", close)]
    env = PortfolioVectorEnv(
        2, data=data, cost_bps=(5.0, 15.0, 0.0), max_leverage=3.0, episode_length=3
    )
    env.reset(seed=0, options={"start_index": 0})
    _, _, _, _, info = env.step(np.array([[LONG, LONG, LONG], [SHORT, LONG, FLAT]]))
    costs = info["costs"]
    notional = 100_000.0  # leverage 1 x equity per instrument, under the cap of 3
    np.testing.assert_allclose(costs[0], [notional * 5e-4, notional * 15e-4, 0.0], rtol=1e-12)
    np.testing.assert_allclose(costs[1], [notional * 5e-4, notional * 15e-4, 0.0], rtol=1e-12)
    np.testing.assert_array_equal(env.backend.state.costs.T, costs)


def test_gross_cap_scales_every_exposure() -> None:
    close = [100.0, 100.0, 100.0]
    data = [bars("A", close), bars("B", close), bars("C", close), bars("D", close)]
    env = PortfolioVectorEnv(
        1, data=data, cost_bps=0.0, leverage=1.0, max_leverage=2.0, episode_length=2
    )
    env.reset(seed=0, options={"start_index": 0})
    _, _, _, _, info = env.step(np.array([[LONG, SHORT, LONG, FLAT]]))
    # gross 3 > 2: every exposure x 2/3 of 100000 / 100 = 1000 units.
    np.testing.assert_allclose(info["positions"][0], [2000 / 3, -2000 / 3, 2000 / 3, 0.0])


# ---------------------------------------------------------------- K = 1 is the single env


def _random_config(rng: np.random.Generator, mode: str) -> PortfolioConfig:
    """Levels and leverage that are not powers of two, so that a reordered product rounds
    differently."""
    choices = [-1.0, -0.7, -0.3, 0.0, 0.3, 0.6, 1.0]
    levels = tuple(sorted(rng.choice(choices, int(rng.integers(2, 5)), replace=False)))
    leverage = float(rng.choice([0.7, 1.0, 1.3, 3.0]))
    return PortfolioConfig(
        initial_capital=float(rng.choice([1000.0, 1e5, 3.3e6])),
        exposure_levels=levels,
        cost_bps=float(rng.choice([0.0, 1.0, 7.5, 50.0])),
        leverage=leverage,
        max_leverage=leverage * max(abs(x) for x in levels) * float(rng.choice([1.0, 1.5])),
        reserve_pct=float(rng.choice([0.0, 0.0, 5.0, 30.0])),
        fill=str(rng.choice(["close", "next_open"])),
        episode_length=int(rng.integers(3, 40)),
        autoreset_mode=mode,
    )


MODES = ("next_step", "same_step", "disabled")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("trial", range(5))
def test_one_instrument_equals_the_single_env_bit_for_bit(mode: str, trial: int) -> None:
    rng = np.random.default_rng([trial, MODES.index(mode)])
    config = _random_config(rng, mode)
    data = MarketData.synthetic(str(rng.choice(["planted", "gbm"])), n_bars=300, seed=trial)
    n = 7
    port = PortfolioVectorEnv(n, data=data, config=config)
    single = TradingVectorEnv(n, data=data, config=single_instrument_config(config))
    d = port.backend.obs_dim
    seed = int(rng.integers(2**63))
    po, _ = port.reset(seed=seed)
    so, _ = single.reset(seed=seed)
    np.testing.assert_array_equal(po, so[:, :d])
    for step in range(120):
        a = rng.integers(0, config.n_levels, n)
        if mode == "disabled" and step % 9 == 8:
            mask = rng.random(n) < 0.5
            mask[0] = True
            po, _ = port.reset(options={"reset_mask": mask})
            so, _ = single.reset(options={"reset_mask": mask})
            np.testing.assert_array_equal(po, so[:, :d])
            continue
        po, pr, pte, ptr, pi = port.step(a[:, None])
        so, sr, ste, s_tr, si = single.step(a)
        np.testing.assert_array_equal(po, so[:, :d], err_msg=f"obs at step {step}")
        np.testing.assert_array_equal(pr, sr, err_msg=f"reward at step {step}")
        np.testing.assert_array_equal(pte, ste)
        np.testing.assert_array_equal(ptr, s_tr)
        np.testing.assert_array_equal(pi["portfolio_value"], si["portfolio_value"])
        np.testing.assert_array_equal(pi["positions"][:, 0], si["position"])
        for key in ("episode_return", "episode_length", "_episode_return"):
            np.testing.assert_array_equal(pi[key], si[key], err_msg=key)
        assert ("final_obs" in pi) == ("final_obs" in si)
        if "final_obs" in pi:
            np.testing.assert_array_equal(pi["_final_obs"], si["_final_obs"])
            np.testing.assert_array_equal(pi["final_obs"], si["final_obs"][:, :d])
    np.testing.assert_array_equal(port.backend.state.cash, single.backend.state.cash)
    np.testing.assert_array_equal(port.backend.state.costs[0], single.backend.state.costs)


# ---------------------------------------------------------------- autoreset modes, K = 3


def _three(mode: str, n: int = 5, length: int = 4) -> PortfolioVectorEnv:
    data = MarketData.synthetic("gbm", n_bars=200, n_instruments=3, seed=3)
    return PortfolioVectorEnv(
        n, data=data, episode_length=length, autoreset_mode=mode, max_leverage=3.0
    )


def test_next_step_starts_ended_envs_at_the_next_step() -> None:
    env = _three("next_step")
    first, _ = env.reset(seed=4)
    acts = np.full((5, 3), LONG)
    for _ in range(3):
        env.step(acts)
    _, _, _, trunc, info = env.step(acts)
    assert trunc.all() and info["_episode_length"].all() and (info["episode_length"] == 4).all()
    obs, reward, term, trunc, info = env.step(acts)
    assert (reward == 0).all() and not term.any() and not trunc.any()
    np.testing.assert_array_equal(info["positions"], 0.0)
    np.testing.assert_array_equal(info["portfolio_value"], 100_000.0)
    np.testing.assert_array_equal(obs[:, -4:], np.float32([[1.0, 0, 0, 0]] * 5))
    assert not info["_episode_return"].any()


def test_same_step_returns_final_obs_and_the_new_episode() -> None:
    env = _three("same_step")
    env.reset(seed=4)
    acts = np.full((5, 3), SHORT)
    for _ in range(3):
        _, _, _, _, info = env.step(acts)
        assert "final_obs" not in info
    obs, _, _, trunc, info = env.step(acts)
    assert trunc.all() and info["_final_obs"].all() and info["final_info"]["_positions"].all()
    assert (info["final_obs"][:, -3:] < 0).all()  # the ended episodes were short
    np.testing.assert_array_equal(obs[:, -4:], np.float32([[1.0, 0, 0, 0]] * 5))
    assert (env.backend.state.step_in_episode == 0).all()


def test_disabled_freezes_until_reset_mask() -> None:
    env = _three("disabled")
    env.reset(seed=4)
    acts = np.full((5, 3), LONG)
    for _ in range(4):
        obs, *_ = env.step(acts)
    frozen, reward, _, trunc, info = env.step(acts)
    np.testing.assert_array_equal(frozen, obs)
    assert (reward == 0).all() and trunc.all() and not info["_episode_length"].any()
    mask = np.array([True, False, False, False, True])
    obs, _ = env.reset(options={"reset_mask": mask})
    np.testing.assert_array_equal(obs[~mask], frozen[~mask])
    _, _, _, trunc, _ = env.step(acts)
    np.testing.assert_array_equal(trunc, ~mask)


# ---------------------------------------------------------------- Gymnasium conventions


def test_make_vec_and_gymnasium_checks() -> None:
    data = MarketData.synthetic("planted", n_bars=200, n_instruments=3, seed=1)
    env = gym.make_vec("GpuPortfolio-v0", num_envs=4, device="cpu", data=data, episode_length=20)
    assert isinstance(env, PortfolioVectorEnv)
    check_observation_space(env.single_observation_space)
    check_action_space(env.single_action_space)
    assert env.single_action_space == gym.spaces.MultiDiscrete([3, 3, 3])
    assert env.single_observation_space.shape == (3 * 51 + 1 + 3,)
    obs, info = env.reset(seed=11)
    assert env.observation_space.contains(obs) and info == {}
    env.action_space.seed(0)
    history = []
    for _ in range(30):
        out = env.step(env.action_space.sample())
        assert env.observation_space.contains(out[0])
        assert out[1].dtype == np.float32 and out[2].dtype == np.bool_
        for key, value in out[4].items():
            if not key.startswith("_") and key != "final_info":
                assert out[4]["_" + key].shape == (4,)
                assert value.shape[0] == 4
        history.append(out)
    # Determinism under a seed, and no returned array reused by a later step.
    again = gym.make_vec("GpuPortfolio-v0", num_envs=4, device="cpu", data=data, episode_length=20)
    again.reset(seed=11)
    again.action_space.seed(0)
    for out in history:
        out2 = again.step(again.action_space.sample())
        for x, y in zip(out[:4], out2[:4], strict=True):
            np.testing.assert_array_equal(x, y)
    assert history[0][0] is not history[1][0]
    assert not np.shares_memory(history[0][0], history[1][0])


def test_action_errors_name_the_entry() -> None:
    env = example_env()
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions\[0, 1\] = 3 is invalid: allowed is 0..2"):
        env.step(np.array([[0, 3]]))
    with pytest.raises(ValueError, match=r"shape \(2,\) are invalid: allowed is \(1, 2\)"):
        env.step(np.array([0, 1]))
    with pytest.raises(TypeError, match="dtype float64"):
        env.step(np.array([[0.0, 1.0]]))


def test_step_before_reset_and_unknown_device_refused() -> None:
    env = example_env()
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(np.array([[0, 0]]))
    with pytest.raises(ValueError, match="device = 'tpu' is invalid for the portfolio env"):
        PortfolioVectorEnv(1, device="tpu", data=[bars("A", [1.0, 2.0, 3.0])], episode_length=2)


# ---------------------------------------------------------------- data and config errors


def test_misaligned_timestamps_name_instrument_and_timestamp() -> None:
    a = bars("A", [1.0, 2.0, 3.0, 4.0])
    b = bars("B", [1.0, 2.0, 4.0], times=T0 + np.array([0, 1, 3]) * HOUR)
    with pytest.raises(
        ValueError,
        match=r"instrument 'B' disagrees with instrument 'A' at timestamp 2024-01-01T02:00.*"
        r"no bar there.*align='ffill'",
    ):
        PortfolioData.from_market_data([a, b])
    c = bars("C", [1.0, 2.0, 3.0, 4.0], times=T0 + np.array([0, 1, 2, 5]) * HOUR)
    with pytest.raises(ValueError, match=r"'C' disagrees .* 2024-01-01T03:00"):
        PortfolioVectorEnv(1, data=[a, c], episode_length=2)


def test_forward_fill_aligns_on_the_union() -> None:
    a = bars("A", [1.0, 2.0, 3.0, 4.0], open_=[1.0, 1.5, 2.5, 3.5])
    b = bars("B", [10.0, 20.0, 40.0], times=T0 + np.array([1, 2, 3]) * HOUR)
    c = bars("C", [7.0, 8.0], times=T0 + np.array([0, 2]) * HOUR)
    data = PortfolioData.from_market_data([a, b, c], align="ffill", max_filled=1.0)
    # The grid starts at B's first bar; C misses 03:00 and repeats its 02:00 close.
    np.testing.assert_array_equal(data.timestamps, T0 + np.array([1, 2, 3]) * HOUR)
    np.testing.assert_array_equal(
        data.close, [[2.0, 10.0, 7.0], [3.0, 20.0, 8.0], [4.0, 40.0, 8.0]]
    )
    np.testing.assert_array_equal(data.open[:, 2], [7.0, 8.0, 8.0])
    np.testing.assert_array_equal(data.volume[:, 2], [0.0, 10.0, 0.0])
    np.testing.assert_array_equal(data.filled[:, 2], [True, False, True])
    np.testing.assert_array_equal(data.features[2, 2], data.features[1, 2])
    np.testing.assert_array_equal(data.features[:, 0], np.asarray(a.features)[1:])
    env = PortfolioVectorEnv(1, data=data, episode_length=2)
    assert env.backend.obs_dim == 3 * 2 + 1 + 3


def test_inner_align_keeps_the_common_timestamps() -> None:
    a = bars("A", [1.0, 2.0, 3.0, 4.0], open_=[1.0, 1.5, 2.5, 3.5])
    b = bars("B", [10.0, 20.0, 40.0], times=T0 + np.array([1, 2, 3]) * HOUR)
    c = bars("C", [7.0, 8.0, 9.0], times=T0 + np.array([0, 1, 3]) * HOUR)
    data = PortfolioData.from_market_data([a, b, c], align="inner")
    # 02:00 is missing from C: no bar is invented, the grid skips it.
    np.testing.assert_array_equal(data.timestamps, T0 + np.array([1, 3]) * HOUR)
    np.testing.assert_array_equal(data.close, [[2.0, 10.0, 8.0], [4.0, 40.0, 9.0]])
    np.testing.assert_array_equal(data.open[:, 0], [1.5, 3.5])
    np.testing.assert_array_equal(data.features[:, 0], np.asarray(a.features)[[1, 3]])
    assert not data.filled.any()
    d = bars("D", [5.0, 6.0], times=T0 + np.array([7, 8]) * HOUR)
    with pytest.raises(ValueError, match=r"align='inner' leaves 0 timestamp\(s\) common .*'D' "
                       r"2024-01-01 07:00:00 to 2024-01-01 08:00:00\): allowed are instruments "
                       "that share at least 2"):  # fmt: skip
        PortfolioData.from_market_data([a, d], align="inner")


def test_forward_fill_refuses_instruments_whose_dates_barely_overlap() -> None:
    n = 100
    a = bars("A", np.linspace(1.0, 2.0, n))
    # B's bars end where A's are 30 bars from their end: 30% of B's grid bars would be stale.
    b = bars("B", np.linspace(5.0, 6.0, n), times=T0 + (np.arange(n) - 30) * HOUR)
    with pytest.raises(
        ValueError,
        match=r"align='ffill' fills 30\.0% of the 100 bars of instrument 'B' \(30 bars of previous "
        r"closes; its own bars run 2023-12-30 18:00:00 to 2024-01-03 21:00:00, the grid "
        r"2024-01-01 00:00:00 to 2024-01-05 03:00:00\): allowed is at most 10\.0% \(max_filled, "
        r"--max-filled\)",
    ):
        PortfolioData.from_market_data([a, b], align="ffill")
    with pytest.raises(ValueError, match=r"fills 30\.0% .* at most 29\.0%"):
        PortfolioData.from_market_data([a, b], align="ffill", max_filled=0.29)
    data = PortfolioData.from_market_data([a, b], align="ffill", max_filled=0.3)
    assert data.filled[:, 1].sum() == 30 and not data.filled[:, 0].any()
    # a few missing bars (a holiday calendar's) stay within the default
    c = bars(
        "C",
        np.linspace(5.0, 6.0, n - 5),
        times=np.delete(T0 + np.arange(n) * HOUR, [9, 19, 29, 39, 49]),
    )
    assert PortfolioData.from_market_data([a, c], align="ffill").filled[:, 1].sum() == 5
    with pytest.raises(ValueError, match=r"max_filled = 1\.5 is invalid: allowed is a share"):
        PortfolioData.from_market_data([a, c], align="ffill", max_filled=1.5)


def test_portfolio_data_refusals() -> None:
    a = bars("A", [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="align = 'nearest' is invalid"):
        PortfolioData.from_market_data([a], align="nearest")
    with pytest.raises(ValueError, match=r"instruments \['A'\] appear more than once"):
        PortfolioData.from_market_data([a, a])
    with pytest.raises(ValueError, match="instrument 'B' has features"):
        PortfolioData.from_market_data([a, bars("B", [1.0, 2.0, 3.0], n_features=3)])
    with pytest.raises(ValueError, match="episode_length = 5 needs at least 6"):
        PortfolioVectorEnv(1, data=[a], episode_length=5)


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("initial_capital", 0.0, "in [0.01, 1e+15]"),
        ("exposure_levels", (0.0, 1.5), "each in [-1, 1]"),
        ("exposure_levels", (), "1..64 numbers"),
        ("cost_bps", -1.0, "each in [0, 10000)"),
        ("cost_bps", "5", "a tuple of numbers"),
        ("leverage", float("nan"), "(0, 1000]"),
        ("max_leverage", 0.0, "(0, 1000]"),
        ("reserve_pct", 100.0, "[0, 100)"),
        ("fill", "open", "one of ('close', 'next_open')"),
        ("reward", "sharpe", "one of ('simple', 'log')"),
        ("episode_length", 0, "an integer in [1,"),
        ("episode_length", 2.0, "an integer in [1,"),
        ("autoreset_mode", "sometimes", "AutoresetMode.SAME_STEP"),
        ("initial_capital", True, "a number (got bool)"),
    ],
)
def test_config_errors_name_field_value_and_allowed(field: str, value, allowed: str) -> None:
    with pytest.raises(ValueError) as err:
        PortfolioConfig(**{field: value})
    message = str(err.value)
    assert message.startswith(f"PortfolioConfig.{field} = ")
    assert allowed in message


def test_cost_bps_of_another_length_than_the_instruments() -> None:
    with pytest.raises(
        ValueError,
        match=r"cost_bps = \(1.0, 2.0\) is invalid: allowed is one "
        r"number or 3 numbers",
    ):
        PortfolioVectorEnv(
            1,
            data=MarketData.synthetic(n_bars=50, n_instruments=3),
            cost_bps=(1.0, 2.0),
            episode_length=10,
        )
    with pytest.raises(TypeError, match="unexpected keyword argument 'barriers'"):
        PortfolioVectorEnv(1, barriers=False)


@pytest.mark.parametrize("j", [0, 2])
def test_one_active_instrument_of_three_equals_the_single_env(j: int) -> None:
    """Instruments held flat add exact zeros to every sum: the active one is the single env."""
    rng = np.random.default_rng(j)
    config = PortfolioConfig(
        exposure_levels=(-1.0, -0.3, 0.0, 0.6, 1.0),
        cost_bps=(3.0, 3.0, 3.0),
        leverage=1.3,
        max_leverage=1.3,
        fill="next_open",
        episode_length=25,
    )
    data = MarketData.synthetic("gbm", n_bars=200, n_instruments=3, seed=5)
    n = 6
    port = PortfolioVectorEnv(n, data=data, config=config)
    single = TradingVectorEnv(
        n, data=data.instrument(j), config=single_instrument_config(config, 3.0)
    )
    port.reset(seed=9)
    single.reset(seed=9)
    f = data.n_features
    for _ in range(80):
        a = rng.integers(0, config.n_levels, n)
        acts = np.full((n, 3), config.exposure_levels.index(0.0))
        acts[:, j] = a
        po, pr, pte, ptr, pi = port.step(acts)
        so, sr, ste, s_tr, si = single.step(a)
        np.testing.assert_array_equal(pr, sr)
        np.testing.assert_array_equal(pte | ptr, ste | s_tr)
        np.testing.assert_array_equal(pi["portfolio_value"], si["portfolio_value"])
        np.testing.assert_array_equal(pi["positions"][:, j], si["position"])
        np.testing.assert_array_equal(po[:, j * f : (j + 1) * f], so[:, :f])
        np.testing.assert_array_equal(po[:, 3 * f], so[:, f])
        np.testing.assert_array_equal(po[:, 3 * f + 1 + j], so[:, f + 1])


def test_from_bar_files(tmp_path) -> None:
    from random_bars import write_daily_bar_csv

    paths = [
        write_daily_bar_csv(tmp_path / f"{name}.csv", 340, seed=k)
        for k, name in enumerate(("AAA", "BBB"))
    ]
    env = gym.make_vec("GpuPortfolio-v0", num_envs=2, device="cpu", data=paths, episode_length=10)
    assert env.data.instruments == ("AAA", "BBB")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 2 * env.data.n_features + 3)
    short = write_daily_bar_csv(tmp_path / "CCC.csv", 339, seed=3)
    with pytest.raises(ValueError, match="instrument 'CCC' disagrees with instrument 'AAA'"):
        PortfolioData.from_files([paths[0], short])


def test_components_and_episode_costs_add_up() -> None:
    """gross - cost is the simple return (to rounding); the state's episode costs are the sum
    of the steps' costs per instrument."""
    data = MarketData.synthetic("gbm", n_bars=200, n_instruments=3, seed=8)
    env = PortfolioVectorEnv(
        4, data=data, cost_bps=(2.0, 9.0, 25.0), max_leverage=2.0, episode_length=100
    )
    env.reset(seed=1, options={"start_index": 0})
    rng = np.random.default_rng(1)
    total = np.zeros((4, 3))
    for _ in range(50):
        _, reward, _, _, info = env.step(rng.integers(0, 3, (4, 3)))
        gross, cost = info["reward_components"].T
        np.testing.assert_allclose(gross - cost, reward, rtol=1e-5, atol=1e-7)
        assert (info["costs"] >= 0).all()
        total += info["costs"]
    np.testing.assert_allclose(env.backend.state.costs.T, total, rtol=1e-12)


def test_sb3_vec_env_runs_the_portfolio() -> None:
    from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv

    data = MarketData.synthetic("gbm", n_bars=200, n_instruments=3, seed=0)
    venv = gym.make_vec("GpuPortfolio-v0", num_envs=4, device="cpu", data=data, episode_length=5)
    env = SB3VecEnv(venv)
    assert env.action_space == gym.spaces.MultiDiscrete([3, 3, 3])
    env.reset()
    for step in range(5):
        obs, reward, done, infos = env.step(np.full((4, 3), LONG))
        assert done.all() == (step == 4)
    np.testing.assert_array_equal(obs[:, -4:], np.float32([[1.0, 0, 0, 0]] * 4))
    for info in infos:
        assert info["terminal_observation"].shape == (3 * 51 + 1 + 3,)
        assert (info["terminal_observation"][-3:] > 0).all()  # the ended episode held longs


class _RecordingPortfolioEnv(gym.vector.VectorWrapper):
    """What the portfolio env gave SB3: the observation before each step, the actions, rewards,
    flags and final observations of each step."""

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        self.obs: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []
        self.rewards: list[np.ndarray] = []
        self.dones: list[np.ndarray] = []
        self.truncated: list[np.ndarray] = []
        self.final_obs: list[dict[int, np.ndarray]] = []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.obs = [np.array(obs, copy=True)]
        return obs, info

    def step(self, actions):
        self.actions.append(np.array(actions, copy=True))
        obs, reward, term, trunc, info = self.env.step(actions)
        done = np.asarray(term | trunc)
        self.rewards.append(np.array(reward, copy=True))
        self.dones.append(done.copy())
        self.truncated.append(np.asarray(trunc & ~term).copy())
        self.final_obs.append(
            {int(i): np.array(info["final_obs"][i], copy=True) for i in np.flatnonzero(done)}
        )
        self.obs.append(np.array(obs, copy=True))
        return obs, reward, term, trunc, info


def test_sb3_ppo_on_the_portfolio_stores_what_the_env_gave() -> None:
    """SB3's PPO through SB3VecEnv on the portfolio env (MultiDiscrete): its rollout buffer holds
    the env's observations, the actions it stepped and the env's rewards (its own bootstrap of
    truncated episodes added, as SB3 does), and each ended episode's final observation reached
    PPO as ``terminal_observation``."""
    import torch as th
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv

    th.set_num_threads(1)
    n, k, n_steps = 4, 3, 32
    data = MarketData.synthetic("gbm", n_bars=400, n_instruments=k, seed=1)
    venv = gym.make_vec("GpuPortfolio-v0", num_envs=n, device="cpu", data=data, episode_length=7)
    rec = _RecordingPortfolioEnv(venv)
    sb3_env = SB3VecEnv(rec)
    assert sb3_env.action_space == gym.spaces.MultiDiscrete([3] * k)
    terminal: list[dict[int, np.ndarray]] = []

    class KeepTerminal(BaseCallback):
        def _on_step(self) -> bool:
            dones, infos = self.locals["dones"], self.locals["infos"]
            terminal.append(
                {int(i): infos[i]["terminal_observation"] for i in np.flatnonzero(dones)}
            )
            return True

    model = PPO("MlpPolicy", sb3_env, n_steps=n_steps, batch_size=64, n_epochs=1, seed=0)
    model.learn(total_timesteps=n * n_steps * 3, callback=KeepTerminal())
    steps = len(rec.actions)
    assert steps == 3 * n_steps and len(terminal) == steps
    # The last rollout: PPO's training flattened its observations and actions env-major; the
    # rewards stay [n_steps, n_envs].
    buf = model.rollout_buffer
    last = slice(steps - n_steps, steps)

    def time_major(x: np.ndarray) -> np.ndarray:
        return x.reshape(n, n_steps, *x.shape[1:]).swapaxes(0, 1)

    np.testing.assert_array_equal(time_major(buf.observations), np.stack(rec.obs[last]))
    np.testing.assert_array_equal(
        time_major(buf.actions).astype(np.int64), np.stack(rec.actions[last])
    )
    rewards = buf.rewards
    env_rewards = np.stack(rec.rewards[last]).astype(np.float32)
    plain = ~np.stack(rec.truncated[last])
    assert plain.sum() > 0 and (~plain).sum() > 0  # both kinds of step were checked
    np.testing.assert_allclose(rewards[plain], env_rewards[plain], rtol=0, atol=1e-7)
    assert not np.allclose(rewards[~plain], env_rewards[~plain])  # SB3 added gamma * V(final)
    ended = 0
    for seen, given in zip(terminal, rec.final_obs, strict=True):
        assert seen.keys() == given.keys()
        for i, obs in given.items():
            np.testing.assert_array_equal(seen[i], obs)
            ended += 1
    assert ended >= n * (steps // 7)


def three_instruments(t: int = 40) -> list[MarketData]:
    """Three instruments of ``t`` hourly bars each, with different price paths."""
    steps = np.arange(t, dtype=np.float64)
    return [bars(name, 100.0 + k * 10.0 + np.sin(steps + k)) for k, name in enumerate("ABC")]


def test_call_get_attr_set_attr_render_as_the_single_env() -> None:
    """K = 3: ``call``, ``get_attr`` and ``set_attr`` repeat one object's answer N times, as
    ``TradingVectorEnv`` does; skrl's wrapper renders through ``call("render")``."""
    env = PortfolioVectorEnv(4, data=three_instruments(), episode_length=5)
    obs, _ = env.reset(seed=0)
    assert env.get_attr("n_instruments") == (3,) * 4
    np.testing.assert_array_equal(env.call("observe")[3], obs)
    assert env.call("render") == (None,) * 4
    assert env.call("num_envs") == (4,) * 4
    env.set_attr("note", "x")
    env.set_attr("note2", ["y"] * 4)
    assert env.get_attr("note") == ("x",) * 4 and env.note2 == "y"
    with pytest.raises(ValueError, match=r"set_attr\('note', values\) with 2 values"):
        env.set_attr("note", ["a", "b"])
    with pytest.raises(ValueError, match="differing values"):
        env.set_attr("note", ["a", "a", "a", "b"])
    pytest.importorskip("skrl")
    from skrl.envs.wrappers.torch import wrap_env

    assert wrap_env(env, wrapper="gymnasium").render() == (None,) * 4


def test_skrl_warns_at_a_next_step_reset_and_make_skrl_env_routes_to_same_step() -> None:
    """K = 3, as the single env: skrl's wrapper over a NEXT_STEP env warns once at its reset
    (skrl would store the reset steps); ``make_skrl_env`` switches the env to SAME_STEP and its
    ended rows carry ``final_obs``."""
    pytest.importorskip("skrl")
    import warnings

    from skrl.envs.wrappers.torch import wrap_env

    from gpu_trading_env.integrations.skrl_env import final_next_observations, make_skrl_env

    raw = PortfolioVectorEnv(2, data=three_instruments(), episode_length=2)
    with pytest.warns(UserWarning, match=r"skrl's Gymnasium wrapper is loaded.*NEXT_STEP"):
        wrap_env(raw, wrapper="gymnasium").reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        raw.reset(seed=0)  # once per env; the seed keeps the draws below fixed
        env = make_skrl_env(raw)
        obs, _ = env.reset()
    assert raw.autoreset_mode == gym.vector.AutoresetMode.SAME_STEP
    act = torch_actions(env.num_envs)
    env.step(act)
    nxt, _, term, trunc, info = env.step(act)  # episode_length 2: every env ends here
    assert bool((term | trunc).all())
    fixed = final_next_observations(nxt, term, trunc, info)
    np.testing.assert_array_equal(fixed.numpy(), info["final_obs"])
    assert fixed.shape == obs.shape == (2, 3 * 2 + 1 + 3)
    assert not bool((fixed == nxt).all(-1).any())  # the last observations, not the new firsts


def torch_actions(n: int):
    import torch

    return torch.full((n, 3), 1, dtype=torch.int64)
