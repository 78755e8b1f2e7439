"""Any SB3 algorithm through the SB3 VecEnv adapter (here PPO on the NumPy backend).

SB3 does not take a Gymnasium vector env itself (``PPO(gym.make_vec(...))`` fails with
"not a Gymnasium environment"): wrap it in ``SB3VecEnv``, which also switches the env to the
SAME_STEP autoreset SB3 expects.

    python examples/sb3_ppo.py --total-steps 200000
"""

import argparse

import gymnasium as gym
from stable_baselines3 import PPO

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv

parser = argparse.ArgumentParser()
parser.add_argument("--num-envs", type=int, default=16)
parser.add_argument("--total-steps", type=int, default=50_000)
args = parser.parse_args()

env = SB3VecEnv(gym.make_vec("GpuTrading-v0", num_envs=args.num_envs, episode_length=200))
model = PPO("MlpPolicy", env, n_steps=128, batch_size=256, verbose=1, seed=0)
model.learn(total_timesteps=args.total_steps)
