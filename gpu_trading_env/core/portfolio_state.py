"""The portfolio env's state and step outputs: struct-of-arrays on NumPy (or CuPy).

The layout is docs/ENV_SPEC.md's ("Portfolio env", "State"): per env ``[N]``, per instrument
``[K, N]`` (instrument-major, so that consecutive envs read consecutive addresses on a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Columns of PortfolioStepOutputs.components (info["reward_components"]).
PORTFOLIO_COMPONENT_NAMES = ("gross", "cost")


@dataclass
class PortfolioState:
    """Dynamic state of N portfolio envs over K instruments."""

    bar: Any  # int64 [N], the bar t the next step trades at (row of the grid)
    step_in_episode: Any  # int32 [N], steps taken in the current episode
    cash: Any  # float64 [N], currency
    episode_return: Any  # float64 [N], sum of rewards in the current episode
    seed: Any  # uint64 [N], Philox key of the env
    episode_count: Any  # uint64 [N], start-bar draws taken so far (Philox counter)
    done_flag: Any  # uint8 [N], RUNNING / WAIT_TERMINATED / WAIT_TRUNCATED
    position: Any  # float64 [K, N], units held (negative when short)
    costs: Any  # float64 [K, N], the episode's costs per instrument (currency)


# Spelled out field by field as state.allocate_state is: the two share field names, not layouts.
def allocate_portfolio_state(xp: Any, num_envs: int, n_instruments: int) -> PortfolioState:
    """Zeroed state of ``num_envs`` envs over ``n_instruments`` instruments."""
    n, k = num_envs, n_instruments
    return PortfolioState(
        bar=xp.zeros(n, dtype=xp.int64),
        step_in_episode=xp.zeros(n, dtype=xp.int32),
        cash=xp.zeros(n, dtype=xp.float64),
        episode_return=xp.zeros(n, dtype=xp.float64),
        seed=xp.zeros(n, dtype=xp.uint64),
        episode_count=xp.zeros(n, dtype=xp.uint64),
        done_flag=xp.zeros(n, dtype=xp.uint8),
        position=xp.zeros((k, n), dtype=xp.float64),
        costs=xp.zeros((k, n), dtype=xp.float64),
    )


@dataclass
class PortfolioStepOutputs:
    """What one vector step returns, every array with a leading N axis (env-major)."""

    obs: Any  # float32 [N, D], D = K*F + 1 + K
    final_obs: Any  # float32 [N, D], obs(t+1) of the episodes that ended (SAME_STEP), else 0
    reward: Any  # float32 [N]
    terminated: Any  # bool [N]
    truncated: Any  # bool [N]
    done: Any  # bool [N], terminated | truncated
    components: Any  # float32 [N, 2], PORTFOLIO_COMPONENT_NAMES: gross and cost returns
    portfolio_value: Any  # float64 [N], value after the step at bar t+1's closes
    positions: Any  # float64 [N, K], units after the step
    costs: Any  # float64 [N, K], this step's cost per instrument (currency)
    episode_return: Any  # float32 [N], return of the episode that ended this step (else 0)
    episode_length: Any  # int32 [N], length of the episode that ended this step (else 0)


def allocate_portfolio_outputs(
    xp: Any, num_envs: int, n_instruments: int, obs_dim: int
) -> PortfolioStepOutputs:
    """Zeroed outputs of one step."""
    n, k = num_envs, n_instruments
    return PortfolioStepOutputs(
        obs=xp.zeros((n, obs_dim), dtype=xp.float32),
        final_obs=xp.zeros((n, obs_dim), dtype=xp.float32),
        reward=xp.zeros(n, dtype=xp.float32),
        terminated=xp.zeros(n, dtype=xp.bool_),
        truncated=xp.zeros(n, dtype=xp.bool_),
        done=xp.zeros(n, dtype=xp.bool_),
        components=xp.zeros((n, len(PORTFOLIO_COMPONENT_NAMES)), dtype=xp.float32),
        portfolio_value=xp.zeros(n, dtype=xp.float64),
        positions=xp.zeros((n, k), dtype=xp.float64),
        costs=xp.zeros((n, k), dtype=xp.float64),
        episode_return=xp.zeros(n, dtype=xp.float32),
        episode_length=xp.zeros(n, dtype=xp.int32),
    )


def portfolio_obs_dim(n_instruments: int, n_features: int) -> int:
    """D = K*F + 1 + K: every instrument's features, the value, every position feature."""
    return n_instruments * n_features + 1 + n_instruments


__all__ = [
    "PORTFOLIO_COMPONENT_NAMES",
    "PortfolioState",
    "PortfolioStepOutputs",
    "allocate_portfolio_outputs",
    "allocate_portfolio_state",
    "portfolio_obs_dim",
]
