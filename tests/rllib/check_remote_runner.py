"""RLlib PPO with the plain id in a remote env runner: without and with register_rllib_env().

RLlib pins its own Gymnasium (ray[rllib] 2.60 wants 1.2.2), so this runs in a venv of its own,
not in the test suite (pytest does not collect this file):

    python3 -m venv /tmp/rl && /tmp/rl/bin/pip install torch "ray[rllib]==2.60.0" pandas \
        matplotlib tqdm rich "stable-baselines3>=2.4" && /tmp/rl/bin/pip install --no-deps -e .
    /tmp/rl/bin/python tests/rllib/check_remote_runner.py

It prints RLlib's own failure for the plain id without registration (the runner never imported
the package), then one PPO iteration with the plain id after ``register_rllib_env()``.
"""

import ray
from ray.rllib.algorithms.ppo import PPOConfig

from gpu_trading_env.integrations.rllib_env import register_rllib_env


def build_ppo():
    """PPO with one remote env runner, two envs in it, on the plain id."""
    return (
        PPOConfig()
        .environment("GpuTrading-v0", env_config={"episode_length": 50})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
        .training(train_batch_size=256, minibatch_size=64, num_epochs=1)
        .build()
    )


ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
plain_fails = None
try:
    build_ppo().train()
    plain_fails = False
except Exception as exc:  # RLlib's own error, printed
    plain_fails = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
print("plain id without registration:", plain_fails)
register_rllib_env()
algo = build_ppo()
res = algo.train()
m = res.get("env_runners", {})
print(
    "registered plain id: trained one iteration; episodes",
    m.get("num_episodes"),
    "return mean",
    m.get("episode_return_mean"),
)
algo.stop()
ray.shutdown()
