"""Where :class:`~agents.GpuDQN` meets Stable-Baselines3's env wrapping and its files.

- :func:`wrap_env`: SB3's wrapping, with a Gymnasium ``VectorEnv`` put in
  :class:`~gpu_trading_env.wrappers.SB3VecEnv` first;
- :func:`find_trading_env`: the raw :class:`~gpu_trading_env.TradingVectorEnv` under SB3's
  wrappers and the adapter, which the fused rollout and the curiosity weights talk to;
- :func:`write_atomically`: a save into a temporary file renamed over the old one, so that a
  save that fails leaves the old file intact.
"""

from __future__ import annotations

import io
import os
import pathlib
from collections.abc import Callable
from typing import Any

from gymnasium.vector import VectorEnv as GymVectorEnv
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.type_aliases import GymEnv
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from gpu_trading_env.atomic_file import atomic_write, with_suffix_if_missing
from gpu_trading_env.vector_env import TradingVectorEnv
from gpu_trading_env.wrappers import SB3VecEnv

__all__ = ["find_trading_env", "wrap_env", "write_atomically"]


def wrap_env(env: GymEnv | GymVectorEnv, verbose: int = 0, monitor_wrapper: bool = True) -> VecEnv:
    """SB3's wrapping, with Gymnasium vector envs wrapped in :class:`SB3VecEnv` first."""
    if isinstance(env, GymVectorEnv):
        if verbose >= 1:
            print("Wrapping the vector env in an SB3VecEnv.")
        env = SB3VecEnv(env)  # type: ignore[assignment]
    return OffPolicyAlgorithm._wrap_env(env, verbose, monitor_wrapper)  # type: ignore[arg-type]


def find_trading_env(env: VecEnv | None) -> TradingVectorEnv | None:
    """The ``TradingVectorEnv`` under SB3 ``VecEnvWrapper``s and the adapter, if there is one."""
    while isinstance(env, VecEnvWrapper):
        env = env.venv
    if isinstance(env, SB3VecEnv):
        inner = env.venv
        raw = getattr(inner, "unwrapped", inner)
        if isinstance(raw, TradingVectorEnv):
            return raw
    return None


def write_atomically(
    path: str | pathlib.Path | io.BufferedIOBase, suffix: str, write: Callable[[Any], None]
) -> None:
    """``write(file)`` into ``path`` atomically; a path without a suffix gets ``.suffix``.

    A file object (not a path) is written to directly.
    """
    if isinstance(path, (str, os.PathLike)):
        with atomic_write(with_suffix_if_missing(path, suffix)) as fh:
            write(fh)
    else:
        write(path)
