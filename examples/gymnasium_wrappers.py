"""Gymnasium's own vector wrappers on the trading env, as CleanRL's ``make_env`` stacks them.

The env autoresets in NEXT_STEP mode (Gymnasium's vector default), which the observation
wrappers require; its episode statistics live under ``episode_return``/``episode_length``, so
``RecordEpisodeStatistics`` adds its ``episode`` key unchanged.

    python examples/gymnasium_wrappers.py
    python examples/gymnasium_wrappers.py --device cuda --array-type numpy
"""

import argparse

import gymnasium as gym
import numpy as np

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--array-type", default="numpy", help="the wrappers compute in NumPy")
parser.add_argument("--num-envs", type=int, default=64)
parser.add_argument("--steps", type=int, default=1_000)
args = parser.parse_args()

envs = gym.make_vec(
    "GpuTrading-v0",
    num_envs=args.num_envs,
    device=args.device,
    array_type=args.array_type,
    episode_length=200,
)
envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
envs = gym.wrappers.vector.NormalizeObservation(envs)
envs = gym.wrappers.vector.ClipReward(envs, min_reward=-1.0, max_reward=1.0)

obs, _ = envs.reset(seed=0)
returns: list[float] = []
for _ in range(args.steps):
    obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
    if "episode" in info:
        returns.extend(info["episode"]["r"][info["_episode"]].tolist())
print(f"normalised observation mean {float(np.mean(obs)):+.3f}, std {float(np.std(obs)):.3f}")
print(f"{len(returns)} episodes, mean return {np.mean(returns):+.4f} (clipped rewards)")
envs.close()
