"""RLlib: the plain id ``"GpuTrading-v0"`` in remote env runners, through RLlib's env registry.

An RLlib env runner on another process has not imported ``gpu_trading_env``, so Gymnasium does
not know the plain id there; RLlib then loses the runner and fails later with an unrelated
``IndexError`` in ``get_spaces``. Two ways work:

- the module-qualified id ``"gpu_trading_env:GpuTrading-v0"``, which makes Gymnasium import the
  package (and so register the id) in the runner;
- :func:`register_rllib_env` in the driver, before the algorithm is built: RLlib's env registry
  (``ray.tune.registry.register_env``) reaches every runner of the cluster, and its runners
  build registered envs through :func:`rllib_env_creator` in every ``gym_env_vectorize_mode``.

``ray`` is imported only by :func:`register_rllib_env`. Installing ``ray[rllib]`` replaces
Gymnasium with ray's pin; where that is older than this package needs, the package's import
(``gpu_trading_env/gymnasium_version.py``, before this module's) raises an ``ImportError``
naming both versions (docs/INTEGRATIONS.md, "Installing RLlib beside it").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_trading_env.env import TradingEnv
from gpu_trading_env.vector_env import TradingVectorEnv

__all__ = ["register_rllib_env", "rllib_env_creator"]

ENV_ID = "GpuTrading-v0"


def rllib_env_creator(env_config: Mapping[str, Any]) -> TradingEnv | TradingVectorEnv:
    """The env RLlib's runner asks a registered creator for.

    Args:
        env_config: RLlib's ``EnvContext`` (the ``env_config`` dict of ``.environment(...)``):
            ``TradingEnv``/``TradingVectorEnv`` keyword arguments (``EnvConfig`` fields,
            ``data``, ``device``, ...). With ``gym_env_vectorize_mode=VECTOR_ENTRY_POINT``
            RLlib adds ``num_envs``.

    Returns:
        ``TradingVectorEnv(num_envs, **env_config)`` (NEXT_STEP autoreset, what RLlib's runner
        assumes) when ``num_envs`` is given, else ``TradingEnv(**env_config)`` (``SYNC`` and
        ``ASYNC`` modes vectorise single envs).
    """
    kwargs = dict(env_config)  # EnvContext's worker_index etc. are attributes, not keys
    num_envs = kwargs.pop("num_envs", None)
    if num_envs is None:
        return TradingEnv(**kwargs)
    return TradingVectorEnv(num_envs, **kwargs)


def register_rllib_env(name: str = ENV_ID) -> None:
    """Register ``name`` in RLlib's env registry (``ray.tune.registry.register_env``), so that
    ``PPOConfig().environment(name, env_config={...})`` works in remote env runners.

    Call it in the driver before building the algorithm; the registry is shared with every
    runner of the cluster.

    :param name: The id RLlib's config names (default ``"GpuTrading-v0"``).
    :raises ImportError: If ``ray[rllib]`` is not installed.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name = {name!r} is invalid: allowed is a non-empty str")
    try:
        from ray.tune.registry import register_env
    except ImportError as err:
        raise ImportError(
            "register_rllib_env() needs ray[rllib] (pip install 'ray[rllib]'); without "
            "registering, use the module-qualified id 'gpu_trading_env:GpuTrading-v0'"
        ) from err
    register_env(name, rllib_env_creator)
