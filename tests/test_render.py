"""rgb_array rendering of the single env, and SB3's make-by-id path that asks for it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import gpu_trading_env  # noqa: F401


def test_rgb_array_frames_follow_the_episode():
    env = gym.make("GpuTrading-v0", render_mode="rgb_array", episode_length=100)  # Discrete(3)
    env.reset(seed=0)
    first = env.render()
    assert first.shape == (320, 480, 3) and first.dtype == np.uint8
    for i in range(40):
        env.step(2 if i < 20 else 0)  # long, then short
    frame = env.render()
    assert not np.array_equal(first, frame)
    top = frame[: int(320 * 0.62)]
    green = np.all(top == [214, 240, 214], axis=-1).any()
    red = np.all(top == [245, 214, 214], axis=-1).any()
    assert green and red  # both position shadings are drawn


def test_render_is_none_without_render_mode_and_bad_modes_are_rejected():
    env = gym.make("GpuTrading-v0")
    env.reset(seed=0)
    assert env.unwrapped.render() is None
    # (gym.make itself turns "human" into rgb_array frames shown by its HumanRendering wrapper.)
    with pytest.raises(ValueError, match="render_mode = 'ansi' is invalid"):
        gpu_trading_env.TradingEnv(render_mode="ansi")


def test_gpudqn_accepts_the_env_id():
    from agents import GpuDQN

    model = GpuDQN(
        "DuelingPolicy", "GpuTrading-v0", learning_starts=50, buffer_size=1000, seed=0, device="cpu"
    )
    model.learn(total_timesteps=300)
    assert model.num_timesteps == 300
