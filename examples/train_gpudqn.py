"""Train GpuDQN on the built-in planted-signal market, with TensorBoard logs and a progress bar.

python examples/train_gpudqn.py            # uses the GPU when CuPy and CUDA are present
tensorboard --logdir runs/example
"""

import gymnasium as gym

import gpu_trading_env  # noqa: F401
from agents import GpuDQN
from gpu_runtime.device import cuda_available
from gpu_trading_env import MarketData

gpu = cuda_available()
train, test = MarketData.default().split(0.8)
envs = gym.make_vec(
    "GpuTrading-v0",
    num_envs=4096 if gpu else 16,
    device="cuda" if gpu else "cpu",
    data=train,
    episode_length=200,
)
model = GpuDQN(
    "DuelingPolicy",
    envs,
    learning_rate=5e-4,
    buffer_size=4_000_000 if gpu else 200_000,
    batch_size=4096 if gpu else 128,
    learning_starts=200_000 if gpu else 2_000,
    gamma=0.9,
    gradient_steps=2 if gpu else 1,
    target_update_interval=200_000 if gpu else 4_000,
    exploration_fraction=0.3,
    exploration_final_eps=0.02,
    tensorboard_log="runs/example",
    verbose=1,
    seed=0,
    device="cuda" if gpu else "cpu",
)
model.learn(total_timesteps=20_000_000 if gpu else 200_000, progress_bar=True)
model.save("runs/example/model.zip")
