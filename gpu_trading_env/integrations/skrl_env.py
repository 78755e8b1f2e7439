"""skrl: the trading vector env in the mode skrl needs, and off-policy agents that store the true
last observation of every episode.

skrl's ``GymnasiumWrapper`` steps a Gymnasium vector env and hands the observations it returns to
the agent as ``next_observations``; it never reads ``info["final_obs"]``. So

- with Gymnasium's default ``NEXT_STEP`` mode, the reset step after every episode end is stored
  as a transition (last observation -> next episode's first, reward 0): :func:`make_skrl_env`
  builds the env in ``SAME_STEP`` instead, and a vector env warns at its first reset in
  ``NEXT_STEP`` while skrl's wrapper is loaded
  (:func:`~gpu_trading_env.library_checks.warn_if_skrl_is_loaded`);
- in ``SAME_STEP``, the observation returned at an episode end is the next episode's first, so
  off-policy agents (``DQN``, ``DDQN``) store it as ``next_observations`` and bootstrap from it,
  and PPO's ``time_limit_bootstrap`` values it: :func:`with_final_observations` gives an agent
  class whose ``record_transition`` puts ``info["final_obs"]`` in those rows. The agent still
  acts on the new episode's first observation (the trainer keeps its own reference). The same
  substitution in skrl's ``Agent.record_transition`` (or its trainers) would fix it upstream.

``skrl`` is imported only by :func:`make_skrl_env`.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector import VectorEnv as GymVectorEnv

from gpu_trading_env.integrations.mode_switch import env_or_build, switch_to_same_step
from gpu_trading_env.portfolio_env import PortfolioVectorEnv
from gpu_trading_env.vector_env import TradingVectorEnv

__all__ = [
    "FinalObservations",
    "final_next_observations",
    "make_skrl_env",
    "with_final_observations",
]

AgentT = TypeVar("AgentT", bound=type)


def make_skrl_env(
    env: GymVectorEnv | None = None,
    *,
    num_envs: int = 1,
    device: Any = "cpu",
    **env_kwargs: Any,
) -> Any:
    """An skrl ``GymnasiumWrapper`` over a trading vector env in ``SAME_STEP`` autoreset mode.

    Pair it with an agent class from :func:`with_final_observations` for off-policy agents (and
    PPO with ``time_limit_bootstrap``): skrl alone stores the next episode's first observation
    as the next observation of every episode end.

    Args:
        env: a :class:`TradingVectorEnv` or ``PortfolioVectorEnv``, possibly under Gymnasium
            vector wrappers (switched to ``SAME_STEP`` as
            :class:`~gpu_trading_env.integrations.sb3_vec_env.SB3VecEnv` does), or None to
            build ``TradingVectorEnv(num_envs, device, **env_kwargs)``.
        num_envs: N, when ``env`` is None.
        device: the env's device, when ``env`` is None; skrl's tensors live there.
        env_kwargs: ``TradingVectorEnv`` keyword arguments, when ``env`` is None.

    Returns:
        skrl's wrapper: ``step`` returns observations float32 ``[N, F+3]``, rewards, terminated
        and truncated ``[N, 1]`` as torch tensors on the env's device and the env's info dict
        (``final_obs`` ``[N, F+3]`` included).
    """
    from skrl.envs.wrappers.torch import wrap_env

    env = env_or_build("make_skrl_env", env, num_envs, device, "same_step", env_kwargs)
    inner = env.unwrapped if isinstance(env, GymVectorEnv) else None
    if not isinstance(inner, TradingVectorEnv | PortfolioVectorEnv):
        raise TypeError(
            f"env of type {type(env).__name__} is invalid: allowed is a TradingVectorEnv or "
            "PortfolioVectorEnv (possibly under Gymnasium vector wrappers) or None"
        )
    mode = env.metadata.get("autoreset_mode")
    if mode != AutoresetMode.SAME_STEP:
        switch_to_same_step(env, mode)
    return wrap_env(env, wrapper="gymnasium")


def final_next_observations(
    next_observations: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    infos: Any,
) -> torch.Tensor:
    """``next_observations`` with the rows of ended episodes replaced by ``info["final_obs"]``.

    Args:
        next_observations: float ``[N, D]``, what the vector env returned (the new episodes'
            first observations at ended rows, in ``SAME_STEP``).
        terminated, truncated: bool ``[N, 1]`` (or ``[N]``).
        infos: the vector env's info dict of that step.

    Returns:
        A new ``[N, D]`` tensor (the input is not written: the trainer acts on it next), or
        ``next_observations`` itself where no episode ended.

    Raises:
        RuntimeError: If an episode ended and the info has no ``final_obs`` (the env is not in
            ``SAME_STEP``).
    """
    done = (terminated | truncated).reshape(-1).to(torch.bool)
    if not bool(done.any()):
        return next_observations
    if not isinstance(infos, dict) or "final_obs" not in infos:
        raise RuntimeError(
            "an episode ended but info has no 'final_obs': the env is not in SAME_STEP "
            "autoreset mode; build it with "
            "gpu_trading_env.integrations.skrl_env.make_skrl_env(...)"
        )
    final = infos["final_obs"]
    if isinstance(final, np.ndarray) and final.dtype == object:  # SyncVectorEnv: one per env
        rows = np.flatnonzero(done.cpu().numpy())
        final = np.stack([np.asarray(final[i]) for i in rows])
        final = torch.as_tensor(final, device=next_observations.device)
        out = next_observations.clone()
        out[torch.as_tensor(rows, device=out.device)] = final.to(out.dtype).reshape(len(rows), -1)
        return out
    final = torch.as_tensor(final, device=next_observations.device)
    final = final.to(next_observations.dtype).reshape(next_observations.shape)
    return torch.where(done.to(next_observations.device)[:, None], final, next_observations)


class FinalObservations:
    """Mixin for skrl agents: ``record_transition`` stores ``info["final_obs"]`` as the next
    observation of ended episodes (see :func:`final_next_observations`). Put it first:
    ``class MyDQN(FinalObservations, DQN)``, or use :func:`with_final_observations`."""

    def record_transition(
        self,
        *,
        next_observations: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        infos: Any,
        **kwargs: Any,
    ) -> None:
        super().record_transition(  # type: ignore[misc]
            next_observations=final_next_observations(
                next_observations, terminated, truncated, infos
            ),
            terminated=terminated,
            truncated=truncated,
            infos=infos,
            **kwargs,
        )


def with_final_observations(agent_class: AgentT) -> AgentT:
    """``agent_class`` (an skrl agent such as ``skrl.agents.torch.dqn.DQN``) with
    :class:`FinalObservations` mixed in; constructed with the same arguments."""
    return type(agent_class.__name__, (FinalObservations, agent_class), {})  # type: ignore[return-value]
