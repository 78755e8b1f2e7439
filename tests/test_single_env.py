"""The single env's scalar step (``ScalarStep``) against the vector env's NumPy step: the same
outputs over random configs, markets and action sequences, across several episodes and resets."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from gpu_trading_env import MarketData, TradingEnv, TradingVectorEnv

CASES = 24


def _random_config(rng: np.random.Generator) -> dict:
    sizing = str(rng.choice(["units", "equity"]))
    # Windows within the penalty table, within the entropy table only, and past both.
    window = int(rng.choice([1, 3, 20, 100, 200, 600]))
    return {
        "fill": str(rng.choice(["close", "next_open"])),
        "barriers": bool(rng.integers(2)),
        "profit_target_bps": float(rng.uniform(5, 150)),
        "stop_loss_bps": float(rng.uniform(5, 100)),
        "max_holding_bars": int(rng.integers(1, 60)),
        "reserve_pct": float(rng.choice([0.0, rng.uniform(1, 30)])),
        "initial_capital": float(rng.uniform(1e3, 1e6)),
        "episode_length": int(rng.integers(5, 120)),
        "diversity_window": window,
        "diversity_min_entries": int(rng.integers(1, min(window, 10) + 1)),
        "diversity_penalty": float(rng.uniform(0, 0.01)),
        "risk_penalty_scale": float(rng.choice([0.0, rng.uniform(0, 0.1)])),
        "spread": float(rng.uniform(0, 1e-3)),
        "sizing": sizing,
        "leverage": float(rng.uniform(0.5, 3.0)) if sizing == "equity" else 1.0,
        "curiosity_max_reward": 10.0,
    }


def _curiosity(env: TradingVectorEnv, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    d, h = env.config.curiosity_state_dims, env.config.curiosity_hidden
    return (
        rng.normal(0, 0.1, (h, d + 3)).astype(np.float32),
        rng.normal(0, 0.1, h).astype(np.float32),
        rng.normal(0, 0.1, (d, h)).astype(np.float32),
        rng.normal(0, 0.1, d).astype(np.float32),
    )


def _assert_step_equal(single, vector) -> None:
    obs, reward, te, tr, info = single
    v_obs, v_reward, v_te, v_tr, v_info = vector
    np.testing.assert_array_equal(obs, v_obs[0])
    assert obs.dtype == np.float32 and obs.shape == v_obs[0].shape
    assert type(reward) is float and reward == float(v_reward[0])
    assert (te, tr) == (bool(v_te[0]), bool(v_tr[0]))
    np.testing.assert_array_equal(info["reward_components"], v_info["reward_components"][0])
    assert info["reward_components"].dtype == np.float32
    assert info["portfolio_value"] == float(v_info["portfolio_value"][0])
    assert info["position"] == float(v_info["position"][0])
    assert info["barrier_label"] == int(v_info["barrier_label"][0])
    ended = te or tr
    assert ("episode_return" in info) == ended
    if ended:
        assert info["episode_return"] == float(v_info["episode_return"][0])
        assert info["episode_length"] == int(v_info["episode_length"][0])


@pytest.mark.parametrize("case", range(CASES))
def test_single_env_matches_the_vector_env(case: int) -> None:
    rng = np.random.default_rng(1000 + case)
    cfg = _random_config(rng)
    data = MarketData.synthetic(
        kind=str(rng.choice(["regime", "gbm"])),
        n_bars=int(rng.integers(300, 900)),
        n_instruments=int(rng.integers(1, 3)),
        seed=case,
    )
    single = TradingEnv(data=data, **cfg)
    vector = TradingVectorEnv(1, "cpu", data=data, autoreset_mode="disabled", **cfg)
    assert single._scalar is not None  # the CPU single env steps in scalars
    if case % 3 == 0:
        weights = _curiosity(vector, case)
        single.set_curiosity_weights(*weights)
        vector.set_curiosity_weights(*weights)
    # A small action set now and then: runs of one category hit the diversity penalty.
    n = single.action_space.n
    choices = rng.choice(n, size=3, replace=False) if case % 2 else np.arange(n)
    for episode in range(4):
        seed = 77 + case if episode == 0 else None
        options = {"start_index": int(rng.integers(0, 50))} if episode == 2 else None
        obs, _ = single.reset(seed=seed, options=options)
        v_obs, _ = vector.reset(seed=seed, options=options)
        np.testing.assert_array_equal(obs, v_obs[0])
        for _ in range(cfg["episode_length"] + 2):
            a = int(rng.choice(choices))
            got = single.step(a)
            _assert_step_equal(got, vector.step(np.array([a])))
            if got[2] or got[3]:
                break
        else:
            raise AssertionError("an episode ran past episode_length")


def test_single_env_actions_of_every_integer_kind_and_bad_ones() -> None:
    env = gym.make("GpuTrading-v0", episode_length=50).unwrapped  # Discrete(3): short, flat, long
    env.reset(seed=0)
    for a in (2, np.int64(2), np.int32(2), np.uint8(2), np.array(2)):
        assert env.action_space.contains(a)
        env.step(a)
    # np.array([2]) and [2] used to be taken as 2; action_space.contains refuses them.
    bad_ones = (-1, 3, np.int64(3), 2.0, True, "2", np.array([1, 2]), np.array([2]), [2])
    for bad in (*bad_ones, np.array(2.0), np.array([[2]], dtype=np.int32)):
        with pytest.raises(
            ValueError, match=r"action = .* is invalid: allowed is an int in 0\.\.2, an element "
        ) as err:
            env.step(bad)
        if isinstance(bad, np.ndarray):
            assert f"of shape {bad.shape}, dtype {bad.dtype}" in str(err.value)
        assert "Discrete(3)" in str(err.value)
        if not isinstance(bad, bool):  # bools are refused, though Discrete.contains(True) holds
            assert not env.action_space.contains(bad)


def _advised_vector_kwargs(message: str) -> dict:
    """The ``vector_kwargs={...}`` an error message advises, as the dict a user would type."""
    found = re.search(r"vector_kwargs=(\{[^}]*\})", message)
    assert found is not None, message
    return eval(found.group(1), {"AutoresetMode": AutoresetMode})  # noqa: S307 (our own text)


@pytest.mark.parametrize("build", ["make", "make_vec_sync"])
def test_autoreset_mode_given_to_single_envs_is_refused_and_the_advice_works(build: str) -> None:
    # The single env never resets itself, and make_vec passes env keywords to each single env:
    # the keyword used to be validated and then dropped (the vector env stayed NEXT_STEP).
    kwargs = {"episode_length": 3, "barriers": False, "autoreset_mode": "same_step"}
    with pytest.raises(ValueError, match=r"autoreset_mode = 'same_step' is invalid") as err:
        if build == "make":
            gym.make("GpuTrading-v0", **kwargs)
        else:
            gym.make_vec("GpuTrading-v0", num_envs=2, vectorization_mode="sync", **kwargs)
    advised = _advised_vector_kwargs(str(err.value))
    assert advised == {"autoreset_mode": AutoresetMode.SAME_STEP}
    envs = gym.make_vec(
        "GpuTrading-v0",
        num_envs=2,
        vectorization_mode="sync",
        vector_kwargs=advised,
        episode_length=3,
        barriers=False,
    )
    assert envs.autoreset_mode == AutoresetMode.SAME_STEP
    envs.reset(seed=0)
    for _ in range(3):
        _, _, te, tr, info = envs.step(np.zeros(2, dtype=np.int64))
    assert (te | tr).all() and info["_final_obs"].all()  # reset within the step: SAME_STEP
    # The env's own vector entry point takes the keyword itself.
    own = gym.make_vec("GpuTrading-v0", num_envs=2, autoreset_mode="same_step")
    assert own.autoreset_mode == AutoresetMode.SAME_STEP
