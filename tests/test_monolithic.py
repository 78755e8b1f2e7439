"""GPU tier: the monolithic (source-design) rollout kernel follows the env's semantics.

Its transitions are replayed action by action through the NumPy reference env from the same
seed: observations, rewards and episode ends must agree, so the selectable monolithic path
trains on the same environment as every other path.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_trading_env import MarketData, TradingVectorEnv

pytestmark = pytest.mark.gpu


def test_monolithic_transitions_match_the_reference_env():
    from agents import GpuDQN
    from agents.rollouts.monolithic import MonolithicRollout

    data = MarketData.synthetic(kind="regime", n_bars=3000, n_instruments=2, seed=5)
    kw = dict(
        num_envs=256,
        data=data,
        episode_length=25,
        profit_target_bps=30.0,
        stop_loss_bps=20.0,
        autoreset_mode="same_step",  # the reference reads final_obs
    )
    gpu_env = TradingVectorEnv(device="cuda", **kw)
    gpu_env.reset(seed=9)
    model = GpuDQN(
        "DuelingPolicy", gpu_env, buffer_size=10_000, learning_starts=0, seed=0, device="cuda"
    )
    out = MonolithicRollout(model, seed=1).launch(40, epsilon=0.3)
    out = {k: v.cpu().numpy() for k, v in out.items()}

    ref = TradingVectorEnv(device="cpu", **kw)
    obs, _ = ref.reset(seed=9)
    for t in range(40):
        np.testing.assert_allclose(
            out["obs"][:, t], obs, rtol=1e-6, atol=1e-7, err_msg=f"obs at {t}"
        )
        obs, reward, terminated, truncated, info = ref.step(out["action"][:, t])
        np.testing.assert_array_equal(
            out["terminated"][:, t], terminated, err_msg=f"terminated at {t}"
        )
        np.testing.assert_array_equal(
            out["truncated"][:, t], truncated, err_msg=f"truncated at {t}"
        )
        np.testing.assert_allclose(
            out["reward"][:, t], reward, rtol=1e-6, atol=1e-8, err_msg=f"reward at {t}"
        )
        done = terminated | truncated
        expected_next = np.where(done[:, None], info["final_obs"], obs)
        np.testing.assert_allclose(out["next_obs"][:, t], expected_next, rtol=1e-6, atol=1e-7)
    assert out["terminated"].any() and out["truncated"].any()
    assert len(np.unique(out["action"])) > 10  # exploration and greedy choices both present
    assert set(out) == {"obs", "action", "reward", "terminated", "truncated", "next_obs"}


def test_gpudqn_learns_with_the_monolithic_rollout():
    from agents import GpuDQN

    env = TradingVectorEnv(num_envs=512, device="cuda", episode_length=50)
    model = GpuDQN(
        "DuelingPolicy",
        env,
        rollout_kernel="monolithic",
        buffer_size=100_000,
        learning_starts=2048,
        batch_size=256,
        train_freq=4,
        seed=0,
        device="cuda",
    )
    model.learn(total_timesteps=40_000)
    assert model.num_timesteps >= 40_000
    assert model._n_updates > 0
