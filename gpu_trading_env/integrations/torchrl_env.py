"""TorchRL: the trading vector env as a TorchRL ``EnvBase`` (``GymWrapper``), in the mode it needs.

TorchRL's ``GymWrapper`` accepts a Gymnasium vector env in ``SAME_STEP`` or ``DISABLED`` autoreset
mode and prefers ``DISABLED``: its own collector resets the envs that are done, so every stored
``("next", "observation")`` is the true next observation. The trading env defaults to
``NEXT_STEP`` (Gymnasium's vector default), which TorchRL refuses; :func:`make_torchrl_env`
switches it. ``torchrl`` is imported only when this function is called.

``GymEnv("GpuTrading-v0", num_envs=N)`` is refused
(:func:`~gpu_trading_env.library_checks.refuse_torchrl_async_by_id`): TorchRL
builds a Gymnasium ``AsyncVectorEnv`` of single envs in the default ``NEXT_STEP`` mode and reads
it as ``SAME_STEP``, which stores wrong transitions at every episode end.
"""

from __future__ import annotations

from typing import Any

from gymnasium.vector import AutoresetMode

from gpu_trading_env.integrations.mode_switch import env_or_build
from gpu_trading_env.portfolio_env import PortfolioVectorEnv
from gpu_trading_env.vector_env import TradingVectorEnv


def make_torchrl_env(
    env: TradingVectorEnv | PortfolioVectorEnv | None = None,
    *,
    num_envs: int = 1,
    device: Any = "cpu",
    wrapper_kwargs: dict[str, Any] | None = None,
    **env_kwargs: Any,
) -> Any:
    """A ``torchrl.envs.GymWrapper`` over a trading vector env in ``DISABLED`` autoreset mode.

    Args:
        env: an existing :class:`TradingVectorEnv` or ``PortfolioVectorEnv`` (switched to
            ``DISABLED``; the wrapper resets it), or None to build ``TradingVectorEnv(num_envs, device, **env_kwargs)``.
        num_envs: N, when ``env`` is None.
        device: the env's device, when ``env`` is None; also the TensorDicts' device.
        wrapper_kwargs: extra keyword arguments of ``GymWrapper``.
        env_kwargs: ``TradingVectorEnv`` keyword arguments (``data``, ``config``, ``EnvConfig``
            fields), when ``env`` is None.

    Returns:
        A TorchRL env with batch size ``[N]``: ``observation`` float32 ``[N, F+3]``, one-hot
        ``action``, ``reward`` ``[N, 1]`` and the env's info arrays as extra keys.
    """
    from torchrl.envs import GymWrapper

    env = env_or_build("make_torchrl_env", env, num_envs, device, "disabled", env_kwargs)
    if not isinstance(env, TradingVectorEnv | PortfolioVectorEnv):
        raise TypeError(
            f"env of type {type(env).__name__} is invalid: allowed is a TradingVectorEnv, a "
            "PortfolioVectorEnv or None"
        )
    env.set_autoreset_mode(AutoresetMode.DISABLED)
    kwargs = {"device": env.device, **(wrapper_kwargs or {})}
    return GymWrapper(env, **kwargs)
