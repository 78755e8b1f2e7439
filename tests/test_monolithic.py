"""The monolithic (source-design) rollout kernel follows the env's semantics and reports episodes.

GPU tier: its transitions are replayed action by action through the NumPy reference env from
the same seed: observations, rewards, episode ends and the ended episodes' returns and lengths
must agree, so the selectable monolithic path trains on the same environment as every other
path, and its episodes reach SB3's statistics. CPU: the episode accounting of a launch's outputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_trading_env import MarketData, TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties): all of the step is exercised.
SOURCE = EnvConfig.source_design()


def test_finished_episodes_in_step_order_newest_kept():
    import torch as th

    from agents.rollouts.monolithic import finished_episodes

    # 3 envs x 4 steps, env-major as the kernel writes them.
    done = th.tensor(
        [[False, True, False, True], [True, False, False, False], [False, True, False, False]]
    )
    returns = th.where(done, th.arange(12, dtype=th.float32).reshape(3, 4) / 10, 0.0)
    lengths = th.where(done, th.arange(12, dtype=th.int32).reshape(3, 4) + 1, 0)
    count, infos = finished_episodes(done, returns, lengths)
    # Step 0: env 1; step 1: envs 0 and 2; step 3: env 0.
    assert count == 4
    assert infos == [
        {"r": pytest.approx(0.4), "l": 5},
        {"r": pytest.approx(0.1), "l": 2},
        {"r": pytest.approx(0.9), "l": 10},
        {"r": pytest.approx(0.3), "l": 4},
    ]
    count, newest = finished_episodes(done, returns, lengths, keep=2)
    assert count == 4 and newest == infos[2:]
    assert finished_episodes(done & False, returns, lengths) == (0, [])
    with pytest.raises(ValueError, match=r"must be \[N, L\] of one shape"):
        finished_episodes(done, returns[:, :2], lengths)


@pytest.mark.gpu
def test_monolithic_transitions_match_the_reference_env():
    from agents import GpuDQN
    from agents.rollouts.monolithic import MonolithicRollout

    data = MarketData.synthetic(kind="regime", n_bars=3000, n_instruments=2, seed=5)
    kw = dict(
        config=SOURCE,
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
        expected_next = np.where(done[:, None], info.get("final_obs", obs), obs)
        np.testing.assert_allclose(out["next_obs"][:, t], expected_next, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(
            out["episode_length"][:, t], info["episode_length"], err_msg=f"length at {t}"
        )
        np.testing.assert_allclose(
            out["episode_return"][:, t],
            info["episode_return"],
            rtol=1e-6,
            atol=1e-7,
            err_msg=f"episode return at {t}",
        )
    assert out["terminated"].any() and out["truncated"].any()
    assert len(np.unique(out["action"])) > 10  # exploration and greedy choices both present
    assert set(out) == {
        "obs",
        "action",
        "reward",
        "terminated",
        "truncated",
        "next_obs",
        "episode_return",
        "episode_length",
    }


@pytest.mark.gpu
def test_gpudqn_trains_and_counts_episodes_with_the_monolithic_rollout():
    from agents import GpuDQN

    env = TradingVectorEnv(num_envs=512, device="cuda", episode_length=50, config=SOURCE)
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
    # Episodes of 50 steps in 512 envs over 40,000 env steps: at least 512 * (78 // 50) ended
    # (terminations end some earlier), and their statistics reach SB3's buffer.
    assert model._episode_num >= 512
    assert len(model.ep_info_buffer) == model.ep_info_buffer.maxlen
    assert all(1 <= e["l"] <= 50 and np.isfinite(e["r"]) for e in model.ep_info_buffer)
