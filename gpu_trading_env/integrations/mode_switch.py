"""Shared by the adapters: the env an adapter is given or builds, and its switch to ``SAME_STEP``
under Gymnasium vector wrappers (refusing the observation wrappers it would bypass)."""

from __future__ import annotations

from typing import Any

from gymnasium.vector import AutoresetMode, VectorObservationWrapper
from gymnasium.vector import VectorEnv as GymVectorEnv
from gymnasium.vector import VectorWrapper as GymVectorWrapper
from gymnasium.wrappers.vector import VectorizeTransformObservation

from gpu_trading_env.vector_env import TradingVectorEnv

__all__ = ["env_or_build", "switch_to_same_step", "wrapper_chain"]

# Attributes in which Gymnasium's vector wrappers keep the autoreset mode they were built over
# (RecordEpisodeStatistics and NormalizeReward: "_autoreset_mode"; RecordVideo:
# "autoreset_mode"); a wrapper reads it on every step, so it must follow a switch.
_CACHED_MODE_ATTRIBUTES = ("_autoreset_mode", "autoreset_mode")


def env_or_build(
    caller: str,
    env: Any,
    num_envs: int,
    device: Any,
    autoreset_mode: str,
    env_kwargs: dict[str, Any],
) -> Any:
    """An adapter's env: ``env`` as given, or a new
    ``TradingVectorEnv(num_envs, device, autoreset_mode=..., **env_kwargs)`` when it is None.

    :param caller: the adapter's name, for the error.
    :raises TypeError: when both an env and keywords to build one are given.
    """
    if env is None:
        return TradingVectorEnv(num_envs, device, autoreset_mode=autoreset_mode, **env_kwargs)
    if env_kwargs:
        raise TypeError(
            f"{caller}() got keyword arguments {sorted(env_kwargs)} with env=...: "
            "allowed is either an env or the keywords to build one"
        )
    return env


def wrapper_chain(venv: GymVectorEnv) -> list[GymVectorWrapper]:
    """The Gymnasium vector wrappers around ``venv.unwrapped``, outermost first."""
    chain = []
    while isinstance(venv, GymVectorWrapper):
        chain.append(venv)
        venv = venv.env
    return chain


def switch_to_same_step(venv: GymVectorEnv, mode: Any) -> None:
    """Switch the trading env under ``venv`` (and its wrappers) to ``SAME_STEP``, or refuse.

    Gymnasium vector wrappers that remember the mode they were built over
    (``RecordEpisodeStatistics``, ``NormalizeReward``, ``RecordVideo``) are told about the
    switch; observation wrappers, which would not transform ``info["final_obs"]``, are refused.

    :param venv: A vector env whose ``unwrapped`` has ``set_autoreset_mode``.
    :param mode: Its current autoreset mode (named in the error).
    :raises ValueError: If an observation wrapper sits between the caller and the env.
    """
    chain = wrapper_chain(venv)
    for wrapper in chain:
        if isinstance(wrapper, VectorObservationWrapper | VectorizeTransformObservation):
            name = type(wrapper).__name__
            raise ValueError(
                f"venv is wrapped in {name} over an env in autoreset mode {mode!r}: switching "
                f"the env to SAME_STEP (as SB3VecEnv and make_skrl_env do) would bypass {name}, "
                "which does not transform info['final_obs'] there, so replay buffers and "
                "time-limit bootstraps would get untransformed last observations. Allowed: "
                "transform on the library's side, e.g. VecNormalize(SB3VecEnv(env)) with SB3 "
                "(it normalises terminal_observation too), or build the env with "
                "autoreset_mode='same_step' before wrapping it (Gymnasium then checks that the "
                "wrapper supports that mode)"
            )
    venv.unwrapped.set_autoreset_mode(AutoresetMode.SAME_STEP)
    for wrapper in chain:
        for attr in _CACHED_MODE_ATTRIBUTES:
            if isinstance(vars(wrapper).get(attr), AutoresetMode):
                setattr(wrapper, attr, AutoresetMode.SAME_STEP)
