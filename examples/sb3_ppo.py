"""Any SB3 algorithm through the SB3 VecEnv adapter (here PPO on the NumPy backend)."""

from stable_baselines3 import PPO

from gpu_trading_env import TradingVectorEnv
from gpu_trading_env.wrappers import SB3VecEnv

env = SB3VecEnv(TradingVectorEnv(num_envs=16, device="cpu", episode_length=200))
model = PPO("MlpPolicy", env, n_steps=256, verbose=1, seed=0)
model.learn(total_timesteps=50_000)
