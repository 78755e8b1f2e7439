"""One table of bad inputs: each raises an error that names the problem, and leaves the env,
buffer, config or arrays it was given exactly as they were."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hand_market import hand_market

from agents import PrioritizedReplayBuffer
from gpu_trading_env import EnvConfig, TradingVectorEnv
from gpu_trading_env.data.market_data import MarketData

N_ENVS = 3
STATE_DIMS, HIDDEN = 4, 5


def wavy(n: int = 64) -> list[float]:
    return [100.0 + 5.0 * math.sin(0.3 * t) for t in range(n)]


def make_env() -> TradingVectorEnv:
    env = TradingVectorEnv(
        N_ENVS,
        "cpu",
        data=hand_market(wavy()),
        episode_length=10,
        curiosity_state_dims=STATE_DIMS,
        curiosity_hidden=HIDDEN,
        config=EnvConfig.source_design(),  # actions 36 and 20: long and half short
    )
    env.reset(seed=5)
    rng = np.random.default_rng(0)
    env.set_curiosity_weights(*(w.copy() for w in good_weights(rng)))
    env.step(np.array([36, 0, 20]))
    return env


def good_weights(rng: np.random.Generator) -> list[np.ndarray]:
    shapes = [(HIDDEN, STATE_DIMS + 3), (HIDDEN,), (STATE_DIMS, HIDDEN), (STATE_DIMS,)]
    return [rng.normal(0, 0.3, s).astype(np.float32) for s in shapes]


def env_snapshot(env: TradingVectorEnv) -> dict[str, Any]:
    b = env.backend
    snap = {f.name: np.array(getattr(b.state, f.name)) for f in dataclasses.fields(b.state)}
    cur = b.curiosity
    snap["curiosity"] = None if cur is None else [np.array(w) for w in vars(cur).values()]
    snap["np_random"] = copy.deepcopy(env.np_random.bit_generator.state)
    return snap


def assert_same(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def with_weight(name: str, value: Any, index: tuple[int, ...] = (0,)) -> Callable:
    def call(env: TradingVectorEnv) -> None:
        w = dict(zip(("w1", "b1", "w2", "b2"), good_weights(np.random.default_rng(1)), strict=True))
        if isinstance(value, np.ndarray):
            w[name] = value
        else:
            arr = w[name].astype(np.float64)
            arr[index] = value
            w[name] = arr
        env.set_curiosity_weights(w["w1"], w["b1"], w["w2"], w["b2"])

    return call


ENV_CASES = [
    # (id, call on the env, exception, pattern the message must contain)
    (
        "seed above 2**64",
        lambda e: e.reset(seed=2**64 + 7),
        ValueError,
        r"seed = 18446744073709551623 is out of range.*\[0, 2\*\*64\)",
    ),
    ("seed negative", lambda e: e.reset(seed=-1), ValueError, r"seed = -1 is out of range"),
    ("seed float", lambda e: e.reset(seed=1.5), TypeError, r"seed = 1\.5 \(float\) is invalid"),
    ("seed string", lambda e: e.reset(seed="7"), TypeError, r"seed = '7' \(str\) is invalid"),
    ("seed bool", lambda e: e.reset(seed=True), TypeError, r"seed = True \(bool\)"),
    (
        "seed list float",
        lambda e: e.reset(seed=[1, 2.0, 3]),
        TypeError,
        r"seed\[1\] = 2\.0 \(float\)",
    ),
    (
        "seed list too big",
        lambda e: e.reset(seed=[1, 2, 2**64]),
        ValueError,
        r"seed\[2\] = 18446744073709551616 is out of range",
    ),
    (
        "seed list length",
        lambda e: e.reset(seed=[1, 2]),
        ValueError,
        r"seed has 2 entries.*3 such ints",
    ),
    (
        "curiosity NaN",
        with_weight("w1", np.nan, (1, 2)),
        ValueError,
        r"curiosity weight w1\[1, 2\] = .*nan.*finite",
    ),
    ("curiosity inf", with_weight("b1", -np.inf), ValueError, r"curiosity weight b1\[0\] = .*inf"),
    (
        "curiosity float32 overflow",
        with_weight("b2", 1e39),
        ValueError,
        r"curiosity weight b2\[0\] = .*1e\+39.*float32",
    ),
    (
        "curiosity shape",
        with_weight("w2", np.zeros((STATE_DIMS, HIDDEN + 1), np.float32)),
        ValueError,
        r"curiosity weight w2 has shape \(4, 6\); expected \(4, 5\)",
    ),
    (
        "curiosity dtype",
        with_weight("b1", np.array(["a"] * HIDDEN)),
        ValueError,
        r"curiosity weight b1 has dtype",
    ),
]


@pytest.mark.parametrize(
    ("call", "exc", "pattern"), [c[1:] for c in ENV_CASES], ids=[c[0] for c in ENV_CASES]
)
def test_bad_env_input(call, exc, pattern) -> None:
    env = make_env()
    before = env_snapshot(env)
    with pytest.raises(exc, match=pattern):
        call(env)
    assert_same(env_snapshot(env), before)
    # The env goes on exactly as a twin that never saw the bad input.
    twin = make_env()
    a = np.array([5, 40, 18])
    for _ in range(3):
        got, want = env.step(a), twin.step(a)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


CONFIG_CASES = [
    ("diversity_threshold_bits", "1", "a number (got str)"),
    ("initial_capital", "100", "a number (got str)"),
    ("initial_capital", True, "a number (got bool)"),
    ("initial_capital", 1e308, "[0.01, 1e+15]"),
    ("initial_capital", 1e-111, "[0.01, 1e+15]"),
    ("initial_capital", float("inf"), "[0.01, 1e+15]"),
    ("max_position", 1e308, "(0, 1e+15]"),
    ("max_position", "5", "a number or None"),
    ("spread", 1e308, "[0, 1]"),
    ("diversity_penalty", 1e308, "[0, 1e+06]"),
    ("risk_penalty_scale", 1e308, "[0, 1e+06]"),
    ("risk_threshold", 1e308, "[0, 1e+06]"),
    ("barrier_reward_scale", 1e308, "[0, 1e+06]"),
    ("curiosity_scale", 1e308, "[0, 1e+06]"),
    ("curiosity_max_reward", 1e308, "(0, 1e+06]"),
    ("profit_target_bps", 1e308, "(0, 1e+06]"),
    ("reserve_pct", "5", "a number (got str)"),
    ("exposure_levels", ("1", 0.0), "a tuple of numbers"),
    ("exposure_levels", "10", "a tuple of numbers"),
    ("order_cost_bps", (True,), "a tuple of numbers"),
    ("episode_length", np.float32(5.0), "an integer"),
]


@pytest.mark.parametrize(
    ("field", "value", "allowed"), CONFIG_CASES, ids=[f"{c[0]}={c[1]!r}" for c in CONFIG_CASES]
)
def test_bad_config_value(field: str, value: Any, allowed: str) -> None:
    base = EnvConfig()
    with pytest.raises(ValueError) as err:
        base.replace(**{field: value})
    msg = str(err.value)
    assert f"EnvConfig.{field} = {value!r} is invalid" in msg, msg
    assert allowed in msg, msg
    assert base == EnvConfig()


def test_numpy_scalars_are_accepted_as_numbers() -> None:
    cfg = EnvConfig(
        initial_capital=np.float32(1000.0),
        max_position=np.float64(2.5),
        spread=np.float32(0.0),
        diversity_threshold_bits=np.float32(1.0),
        episode_length=np.int64(20),
        exposure_levels=(np.float32(-1.0), np.int32(0), np.float64(1.0)),
    )
    assert cfg.initial_capital == 1000.0 and type(cfg.initial_capital) is float
    assert type(cfg.diversity_threshold_bits) is float and type(cfg.episode_length) is int
    assert cfg.exposure_levels == (-1.0, 0.0, 1.0)
    assert cfg == EnvConfig(
        initial_capital=1000.0,
        max_position=2.5,
        diversity_threshold_bits=1.0,
        episode_length=20,
        exposure_levels=(-1.0, 0.0, 1.0),
    )


def market_arrays() -> dict[str, Any]:
    d = hand_market(wavy(16))
    return {
        "features": np.array(d.features),
        "open": np.array(d.open),
        "high": np.array(d.high),
        "low": np.array(d.low),
        "close": np.array(d.close),
        "volume": np.array(d.volume),
        "timestamps": np.array(d.timestamps),
        "instrument_offsets": np.array(d.instrument_offsets),
        "instruments": d.instruments,
        "feature_names": d.feature_names,
    }


MARKET_CASES = [
    ("close", 3, np.nan, r"column 'close' has NaN at row 3 \(timestamp .*instrument 'inst0'\)"),
    ("close", 4, 0.0, r"column 'close' has a non-positive price 0.0 at row 4"),
    ("open", 2, -1.0, r"column 'open' has a non-positive price -1.0 at row 2"),
    ("high", 5, np.inf, r"column 'high' has an infinite value at row 5"),
    ("low", 6, 1e9, r"high < low: column 'high' .* < column 'low' 1000000000.0 at row 6"),
    ("volume", 1, -5.0, r"column 'volume' has a negative value -5.0 at row 1"),
    ("features", (7, 2), np.nan, r"features has a non-finite value nan in column 'f2' at row 7"),
    ("features", (8, 0), 1e39, r"features has a non-finite value 1e\+39 in column 'f0' at row 8"),
]


@pytest.mark.parametrize(
    ("column", "where", "value", "pattern"),
    MARKET_CASES,
    ids=[f"{c[0]}={c[2]}" for c in MARKET_CASES],
)
def test_market_data_constructor_validates(column, where, value, pattern) -> None:
    arrays = market_arrays()
    arrays[column] = arrays[column].astype(np.float64)
    arrays[column][where] = value
    before = {k: np.array(v, copy=True) for k, v in arrays.items()}
    with pytest.raises(ValueError, match=pattern):
        MarketData(**arrays)
    assert_same({k: np.array(v) for k, v in arrays.items()}, before)


def make_buffer(**kwargs: Any) -> PrioritizedReplayBuffer:
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    buf = PrioritizedReplayBuffer(16, space, gym.spaces.Discrete(3), device="cpu", seed=1, **kwargs)
    for i in range(6):
        buf.add(
            np.full(2, i / 10),
            np.full(2, i / 10),
            np.array([i % 3]),
            np.array([0.5]),
            np.array([False]),
            [{}],
        )
    buf.update_priorities(np.array([0, 1, 2]), np.array([0.5, 2.0, 0.1]))
    return buf


def buffer_snapshot(buf: PrioritizedReplayBuffer) -> dict[str, Any]:
    s, m = buf.tree.to_numpy()
    return {
        "sum": np.array(s),
        "min": np.array(m),
        "max": buf.max_priority,
        "calls": buf.tree.sample_calls,
        "pos": buf.pos,
        "obs": buf.observations.numpy().copy(),
    }


BUFFER_CASES = [
    (
        "sample 2.5",
        lambda b: b.sample(2.5),
        TypeError,
        r"batch_size = 2\.5 is invalid: allowed is an integer >= 1",
    ),
    (
        "sample 0",
        lambda b: b.sample(0),
        ValueError,
        r"batch_size = 0 is invalid: allowed is an integer >= 1",
    ),
    ("sample -3", lambda b: b.sample(-3), ValueError, r"batch_size = -3 is invalid"),
    ("sample True", lambda b: b.sample(True), TypeError, r"batch_size = True is invalid"),
    ("tree sample 2.5", lambda b: b.tree.sample(2.5), TypeError, r"batch_size = 2\.5 is invalid"),
    (
        "None priority",
        lambda b: b.update_priorities(np.array([0, 1]), [0.3, None]),
        TypeError,
        r"td_errors\[1\] = None is not allowed",
    ),
    (
        "str priority",
        lambda b: b.update_priorities([0], ["x"]),
        TypeError,
        r"td_errors\[0\] = 'x' is not allowed",
    ),
    (
        "NaN priority",
        lambda b: b.update_priorities([0, 1], [0.3, np.nan]),
        ValueError,
        r"td_errors\[1\] = nan is not allowed",
    ),
    (
        "negative priority",
        lambda b: b.update_priorities([2], [-1.0]),
        ValueError,
        r"td_errors\[0\] = -1\.0 is not allowed",
    ),
    (
        "index out of range",
        lambda b: b.update_priorities([9], [1.0]),
        ValueError,
        r"indices\[0\] = 9 is out of range",
    ),
]


@pytest.mark.parametrize(
    ("call", "exc", "pattern"), [c[1:] for c in BUFFER_CASES], ids=[c[0] for c in BUFFER_CASES]
)
def test_bad_buffer_input(call, exc, pattern) -> None:
    buf = make_buffer()
    before = buffer_snapshot(buf)
    with pytest.raises(exc, match=pattern):
        call(buf)
    assert_same(buffer_snapshot(buf), before)


@pytest.mark.parametrize(("epsilon", "alpha"), [(1e-320, 3.0), (1e-200, 2.0), (1e-10, 40.0)])
def test_priorities_that_underflow_are_rejected(epsilon: float, alpha: float) -> None:
    with pytest.raises(ValueError, match=r"epsilon\*\*alpha = 0\.0 \(float64 underflow\)") as err:
        make_buffer(epsilon=epsilon, alpha=alpha)
    assert repr(epsilon) in str(err.value) and repr(alpha) in str(err.value)
    make_buffer(epsilon=1e-6, alpha=3.0)  # 1e-18: fine
