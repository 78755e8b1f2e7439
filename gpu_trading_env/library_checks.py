"""Checks of the RL library that builds or resets the env, for the paths known to store wrong data.

Some libraries drive the env in a way the env cannot see from its own arguments: TorchRL's
``GymEnv(id, num_envs=N)`` vectorises single envs itself, and skrl's wrapper takes every step of a
``NEXT_STEP`` vector env as a transition. The env runs these checks itself, so they sit beside
the env's shells (the adapters of :mod:`gpu_trading_env.integrations` are above them): the TorchRL
one looks at the callers when a single env is built (a bounded walk up the Python stack); the
skrl one, at a vector env's reset, only asks whether skrl's Gymnasium wrapper is loaded.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from typing import Any

from gymnasium.vector import AutoresetMode

from gpu_trading_env.core.config import parse_autoreset_mode

__all__ = ["refuse_autoreset_mode", "refuse_torchrl_async_by_id", "warn_if_skrl_is_loaded"]

# Frames between the env and the library's code: gym.make and its env creator, or Gymnasium
# vector wrappers, sit in between (a few frames each); the bound keeps a check O(1).
_MAX_CALLER_DEPTH = 32

# The modules of skrl's Gymnasium wrapper (torch, JAX, Warp), which wrap_env imports to wrap a
# Gymnasium env: loaded means it may drive this one.
_SKRL_GYMNASIUM_WRAPPERS = tuple(
    f"skrl.envs.wrappers.{framework}.gymnasium_envs" for framework in ("torch", "jax", "warp")
)


def refuse_torchrl_async_by_id() -> None:
    """Raise if the calling env is being built by TorchRL's ``GymEnv(id, num_envs=N)``, N > 0.

    TorchRL (0.14) vectorises an env id by ``gymnasium.vector.AsyncVectorEnv`` of single envs,
    built in Gymnasium's default ``NEXT_STEP`` autoreset mode, but its ``VecGymEnvTransform``
    reads the batch as ``SAME_STEP`` (CartPole-v1 shows the same): every
    ``("next", "observation")`` at a done would be zeros (no ``final_obs`` in the info) and the
    reset step after each done would be kept as a transition with reward 0. The single env
    cannot see that vector env, so this looks at its callers instead: TorchRL's
    ``GymEnv._build_env`` with ``num_envs > 0`` builds one env in the main process first.

    :raises RuntimeError: Naming the cause and
        :func:`~gpu_trading_env.integrations.torchrl_env.make_torchrl_env`, the way that works.
    """
    here = inspect.currentframe()  # None where the interpreter keeps no frames
    frame = here.f_back if here is not None else None
    for _ in range(_MAX_CALLER_DEPTH):
        if frame is None:
            return
        if (
            frame.f_code.co_name == "_build_env"
            and frame.f_globals.get("__name__") == "torchrl.envs.libs.gym"
            and isinstance(frame.f_locals.get("num_envs"), int)
            and frame.f_locals["num_envs"] > 0
        ):
            n = frame.f_locals["num_envs"]
            raise RuntimeError(
                f"GymEnv('GpuTrading-v0', num_envs={n}) is refused: TorchRL builds a gymnasium "
                "AsyncVectorEnv of single envs in NEXT_STEP autoreset mode and reads it as "
                "SAME_STEP, so every ('next', 'observation') at a done would be zeros and the "
                "reset step after each done would be stored as a transition with reward 0. "
                "Use gpu_trading_env.integrations.torchrl_env.make_torchrl_env("
                f"num_envs={n}, ...) (one vector env in DISABLED mode; TorchRL resets ended "
                "envs), or GymEnv('GpuTrading-v0') for a single env"
            )
        frame = frame.f_back


def refuse_autoreset_mode(value: Any) -> None:
    """Refuse ``autoreset_mode`` given to the single env, naming the calls that honour it.

    The single env never resets itself, and ``gym.make_vec(..., vectorization_mode="sync" or
    "async", autoreset_mode=...)`` passes the keyword to each single env, not to Gymnasium's
    vector env, which would stay in ``NEXT_STEP`` (wrong data for a library that needs another
    mode); the single env cannot see which of the two built it, so the error names both ways.

    :raises ValueError: Always, naming the value and the calls that work.
    """
    try:
        name = parse_autoreset_mode(value).name
    except (TypeError, ValueError):
        name = "SAME_STEP"
    raise ValueError(
        f"autoreset_mode = {value!r} is invalid for the single env (gym.make('GpuTrading-v0') "
        "or each sub-env of gym.make_vec(..., vectorization_mode='sync'/'async')): a single "
        "env never resets itself, and Gymnasium's SyncVectorEnv/AsyncVectorEnv would stay in "
        "NEXT_STEP. Allowed: gym.make_vec('GpuTrading-v0', num_envs=N, "
        f"autoreset_mode=AutoresetMode.{name}) (the env's own vector env), or "
        "gym.make_vec('GpuTrading-v0', num_envs=N, vectorization_mode='sync', "
        f"vector_kwargs={{'autoreset_mode': AutoresetMode.{name}}}) (AutoresetMode of "
        "gymnasium.vector); a single env that resets itself: gym.make(..., autoreset=True)"
    )


def warn_if_skrl_is_loaded(env: Any) -> bool:
    """Warn when skrl's Gymnasium wrapper is loaded and ``env`` resets in ``NEXT_STEP`` mode.

    skrl's wrapper resets a vector env once and then takes every step's output as a transition,
    so in ``NEXT_STEP`` each episode end adds one transition from the last observation to the
    next episode's first, with reward 0. Whether skrl drives this env is not known without a
    look at the callers, which a reset does not take: the warning says "if". ``env.reset``
    calls this until it returns True, so each env warns once.

    :param env: the ``TradingVectorEnv`` or ``PortfolioVectorEnv`` being reset.
    :return: True when it warned.
    """
    if env.autoreset_mode != AutoresetMode.NEXT_STEP:
        return False
    if not any(name in sys.modules for name in _SKRL_GYMNASIUM_WRAPPERS):
        return False
    warnings.warn(
        "skrl's Gymnasium wrapper is loaded and this GpuTrading vector env resets in NEXT_STEP "
        "autoreset mode: if skrl's wrapper drives it, skrl stores the reset step after every "
        "episode end as a transition (last observation -> next episode's first, reward 0). "
        "Use gpu_trading_env.integrations.skrl_env.make_skrl_env(...) (SAME_STEP), with agents "
        "from with_final_observations(AgentClass) for DQN/DDQN (and PPO's "
        "time_limit_bootstrap); an env not driven by skrl can ignore this warning",
        UserWarning,
        stacklevel=3,
    )
    return True
