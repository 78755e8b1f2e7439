"""Step the vector env with random actions and read its outputs.

python examples/vector_env_basics.py            # NumPy backend
python examples/vector_env_basics.py cuda       # CUDA backend (torch tensors out)
"""

import sys

import gymnasium as gym

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
envs = gym.make_vec("GpuTrading-v0", num_envs=1024, device=device, episode_length=200)
obs, _ = envs.reset(seed=0)
print("observation batch:", tuple(obs.shape), obs.dtype)
for _ in range(500):
    obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
print(
    "reward components (pnl, barrier, risk, diversity, curiosity) of env 0:",
    info["reward_components"][0],
)
print("episodes that ended on the last step:", int(info["_episode_return"].sum()))
envs.close()
