"""Where :class:`~agents.GpuDQN` meets Stable-Baselines3's env wrapping and its files.

- :func:`wrap_env`: SB3's wrapping, with a Gymnasium ``VectorEnv`` put in
  :class:`~gpu_trading_env.integrations.sb3_vec_env.SB3VecEnv` first;
- :func:`make_eval_env`: the same for the env of SB3's ``evaluate_policy`` and ``EvalCallback``;
- :func:`find_trading_env`: the raw :class:`~gpu_trading_env.TradingVectorEnv` under SB3's
  wrappers and the adapter, which the fused rollout and the curiosity weights talk to;
- :func:`find_portfolio_env`: the raw portfolio env there, which the fused rollout steps.

Saving and loading are in :mod:`agents.files.model_files`.
"""

from __future__ import annotations

from gymnasium.vector import VectorEnv as GymVectorEnv
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.type_aliases import GymEnv
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv
from gpu_trading_env.portfolio_env import PortfolioVectorEnv
from gpu_trading_env.vector_env import TradingVectorEnv

__all__ = ["find_portfolio_env", "find_trading_env", "make_eval_env", "wrap_env"]


def wrap_env(env: GymEnv | GymVectorEnv, verbose: int = 0, monitor_wrapper: bool = True) -> VecEnv:
    """SB3's wrapping, with Gymnasium vector envs wrapped in :class:`SB3VecEnv` first."""
    if isinstance(env, GymVectorEnv):
        if verbose >= 1:
            print("Wrapping the vector env in an SB3VecEnv.")
        env = SB3VecEnv(env)  # type: ignore[assignment]
    return OffPolicyAlgorithm._wrap_env(env, verbose, monitor_wrapper)  # noqa: SLF001 (SB3's hook)  # type: ignore[arg-type]


def make_eval_env(env: GymEnv | GymVectorEnv) -> VecEnv:
    """``env`` as SB3's ``evaluate_policy`` and ``EvalCallback`` take it: an SB3 ``VecEnv``.

    Those helpers wrap anything that is not a ``VecEnv`` in ``DummyVecEnv``, which takes a
    single Gymnasium env only, so a ``gym.make_vec(...)`` env (what ``GpuDQN`` accepts) must be
    put in :class:`SB3VecEnv` first, as ``GpuDQN`` does with its training env. Its episode
    statistics count as SB3 ``Monitor``'s, so ``evaluate_policy`` reports whole episodes
    without its "not wrapped with a Monitor" warning. A Gymnasium env gets ``Monitor`` and
    ``DummyVecEnv``; an SB3 ``VecEnv`` is returned as it is.

    :param env: A Gymnasium ``VectorEnv`` (for example
        ``gym.make_vec("GpuTrading-v0", num_envs=N, device=...)``, switched to SAME_STEP),
        a Gymnasium env or an SB3 ``VecEnv``.
    :return: ``evaluate_policy(model, make_eval_env(env))``,
        ``EvalCallback(make_eval_env(env), ...)``.
    """
    return wrap_env(env, monitor_wrapper=True)


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


def find_portfolio_env(env: VecEnv | None) -> PortfolioVectorEnv | None:
    """The ``PortfolioVectorEnv`` under SB3 ``VecEnvWrapper``s and the adapter, if there is one."""
    while isinstance(env, VecEnvWrapper):
        env = env.venv
    if isinstance(env, SB3VecEnv):
        inner = env.venv
        raw = getattr(inner, "unwrapped", inner)
        if isinstance(raw, PortfolioVectorEnv):
            return raw
    return None
