"""Stable-Baselines3 DQN with the prioritized replay buffer of ``agents``.

Plain SB3 ``DQN`` never reports TD errors to its buffer; ``PrioritizedDQN`` is SB3's DQN with
importance-weighted loss and priority updates, so switching to prioritized replay is one line.
``SB3VecEnv`` adapts the Gymnasium vector env (and switches it to SAME_STEP autoreset, which
SB3 expects).

    python examples/sb3_dqn.py --total-steps 200000
"""

import argparse

import gymnasium as gym

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from agents import PrioritizedDQN, PrioritizedReplayBuffer
from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv

parser = argparse.ArgumentParser()
parser.add_argument("--num-envs", type=int, default=8)
parser.add_argument("--total-steps", type=int, default=50_000)
args = parser.parse_args()

env = SB3VecEnv(gym.make_vec("GpuTrading-v0", num_envs=args.num_envs, episode_length=200))
model = PrioritizedDQN(
    "MlpPolicy",
    env,
    replay_buffer_class=PrioritizedReplayBuffer,
    replay_buffer_kwargs={"alpha": 0.6, "beta": 0.4},
    learning_starts=1_000,
    train_freq=4,
    gamma=0.9,
    verbose=1,
    seed=0,
)
model.learn(total_timesteps=args.total_steps)
print("max priority:", model.replay_buffer.max_priority, "beta:", model.replay_buffer.beta)
