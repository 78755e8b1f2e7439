"""GPU tier: GpuDQN learns the planted-signal market (issue: learning test).

The planted market's close-to-close returns follow an AR(1) with phi = 0.3, so the known rule
"long after an up bar, short after a down bar" earns a known positive return per bar. The rule
is held at full exposure (the risk and diversity penalties are off here). The agent is
trained on the first 80% of the bars with the fused GPU rollout; both are then scored on the
same 256 out-of-sample episodes (pinned start bars), greedy, by mean episode return. The
learning curve is written to $GTE_ARTIFACTS when that variable is set.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from gpu_trading_env import EnvConfig, MarketData, TradingVectorEnv
from gpu_trading_env.data.synthetic import planted_rule_exposure

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

# The source design's 45 actions and barriers (its recorded figures' env), penalties off: the
# test isolates whether the agent learns the pnl signal.
CONFIG = EnvConfig.source_design(episode_length=200, diversity_penalty=0.0, risk_penalty_scale=0.0)
HYPER = dict(
    learning_rate=5e-4,
    buffer_size=4_000_000,
    learning_starts=200_000,
    batch_size=4096,
    gamma=0.9,
    train_freq=1,
    gradient_steps=2,
    target_update_interval=200_000,
    exploration_fraction=0.3,
    exploration_final_eps=0.02,
    seed=0,
)
NUM_ENVS = 4096
TIMESTEPS = 4096 * 5000


def mean_episode_return(policy, data: MarketData, episodes: int = 256) -> float:
    env = TradingVectorEnv(
        episodes, device="cpu", data=data, config=CONFIG.replace(autoreset_mode="disabled")
    )
    rng = np.random.default_rng(1)
    starts = rng.integers(0, data.n_bars - CONFIG.episode_length - 1, episodes)
    obs, _ = env.reset(seed=1, options={"start_index": starts})
    bar = starts.copy()
    total = np.zeros(episodes)
    alive = np.ones(episodes, dtype=bool)
    while alive.any():
        obs, reward, terminated, truncated, _ = env.step(policy(obs, bar))
        total += reward * alive
        bar += 1
        alive &= ~(terminated | truncated)
    return float(total.mean())


def test_gpudqn_reaches_80_percent_of_the_planted_rule():
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    from agents import GpuDQN

    data = MarketData.default()
    train, test = data.split(0.8)
    exposure = planted_rule_exposure(test)
    long_a, short_a = CONFIG.encode_action(4, 1), CONFIG.encode_action(0, 1)  # +-1, limit order
    rule = mean_episode_return(lambda obs, bar: np.where(exposure[bar] > 0, long_a, short_a), test)
    assert rule > 0

    class Curve(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.points: list[tuple[int, float]] = []

        def _on_step(self) -> bool:
            if self.n_calls % 50 == 0 and len(self.model.ep_info_buffer):
                self.points.append(
                    (
                        self.num_timesteps,
                        float(np.mean([e["r"] for e in self.model.ep_info_buffer])),
                    )
                )
            return True

    env = TradingVectorEnv(NUM_ENVS, device="cuda", data=train, config=CONFIG)
    model = GpuDQN("DuelingPolicy", env, device="cuda", **HYPER)
    curve = Curve()
    t0 = time.perf_counter()
    model.learn(total_timesteps=TIMESTEPS, callback=curve)
    seconds = time.perf_counter() - t0

    def greedy(obs, bar):
        with torch.no_grad():
            return model.q_net(torch.as_tensor(obs, device="cuda")).argmax(1).cpu().numpy()

    agent = mean_episode_return(greedy, test)
    result = {
        "rule": rule,
        "agent": agent,
        "ratio": agent / rule,
        "seconds": seconds,
        "timesteps": int(model.num_timesteps),
        "curve": curve.points,
        "hyper": HYPER,
        "num_envs": NUM_ENVS,
    }
    out = os.environ.get("GTE_ARTIFACTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "learning.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "curve"}))
    assert agent >= 0.8 * rule, result
