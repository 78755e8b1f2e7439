"""RLlib: PPO with the trading vector env built inside a remote env runner.

The runner is another process that has not imported ``gpu_trading_env``; the module-qualified
id ``"gpu_trading_env:GpuTrading-v0"`` makes Gymnasium import (and so register) the package
there. ``gym_env_vectorize_mode=VECTOR_ENTRY_POINT`` builds one ``TradingVectorEnv`` per runner
instead of N single envs; it autoresets in NEXT_STEP mode, which RLlib's env runner assumes,
and RLlib keeps the arrays it is handed, which the env does not overwrite later.

Needs ``pip install "ray[rllib]"`` (its own environment is advisable: it pins its own versions).

    python examples/rllib_ppo.py --iterations 2
"""

import argparse

import gymnasium as gym
from ray.rllib.algorithms.ppo import PPOConfig

parser = argparse.ArgumentParser()
parser.add_argument("--num-env-runners", type=int, default=1)
parser.add_argument("--num-envs", type=int, default=8, help="envs per runner")
parser.add_argument("--iterations", type=int, default=2)
args = parser.parse_args()

config = (
    PPOConfig()
    .environment("gpu_trading_env:GpuTrading-v0", env_config={"episode_length": 200})
    .env_runners(
        num_env_runners=args.num_env_runners,
        num_envs_per_env_runner=args.num_envs,
        gym_env_vectorize_mode=gym.VectorizeMode.VECTOR_ENTRY_POINT,
    )
    .training(train_batch_size_per_learner=1024, minibatch_size=256, num_epochs=2, gamma=0.9)
)
build = getattr(config, "build_algo", None) or config.build
algo = build()
for i in range(args.iterations):
    result = algo.train()
    runners = result.get("env_runners", {})
    print(
        f"iteration {i}: env steps {runners.get('num_env_steps_sampled_lifetime')}, "
        f"episode return mean {runners.get('episode_return_mean')}"
    )
algo.stop()
