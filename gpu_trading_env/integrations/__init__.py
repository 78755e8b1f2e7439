"""The trading env in other RL libraries' terms, one module per library (docs/INTEGRATIONS.md).

- :mod:`gpu_trading_env.integrations.sb3_vec_env`: ``SB3VecEnv``, Stable-Baselines3's ``VecEnv``;
- :mod:`gpu_trading_env.integrations.torchrl_env`: ``make_torchrl_env``, a TorchRL ``GymWrapper``;
- :mod:`gpu_trading_env.integrations.skrl_env`: ``make_skrl_env`` and ``with_final_observations``;
- :mod:`gpu_trading_env.integrations.rllib_env`: ``register_rllib_env`` for RLlib's env registry.

This package imports none of them, so that importing one library's module never loads another's.
The env itself never imports this package: the checks it runs when another library builds or
resets it are :mod:`gpu_trading_env.library_checks`.
"""
