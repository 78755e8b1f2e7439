"""The dynamic state of N trading envs, and the buffers a step writes, as struct-of-arrays.

One definition serves both backends: ``xp`` is ``numpy`` or ``cupy``, and the CUDA kernel takes
these arrays' pointers in the order of :data:`STATE_FIELDS`. Rows are envs; the diversity ring is
stored position-major (``[window, N]``) so that env i's entry at a ring slot sits next to env
i+1's, which keeps the kernel's accesses coalesced.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from gpu_trading_env.core.constants import COMPONENT_NAMES, N_CATEGORIES


@dataclass
class EnvState:
    """Per-env state. Shapes: [N] unless noted; money in float64 (see ENV_SPEC.md)."""

    bar: Any  # int64, the bar t the next step trades at (global row of MarketData)
    step_in_episode: Any  # int32, steps taken in the current episode
    lo: Any  # int64, first bar of the env's instrument
    hi: Any  # int64, one past the last bar of the env's instrument
    cash: Any  # float64, currency
    position: Any  # float64, units (negative = short)
    costs: Any  # float64, cumulative transaction costs of the episode, currency
    entry_price: Any  # float64, fill price of the last opening (0 when flat)
    entry_bar: Any  # int64, bar of the last opening
    barrier_status: Any  # int8, BARRIER_NONE / ARMED / FIRED
    div_ring: Any  # uint8 [window, N], recent action categories
    div_cursor: Any  # int32, next ring slot to write
    div_count: Any  # int32, entries in the ring (<= window)
    div_hist: Any  # int32 [N_CATEGORIES, N], count of each category in the ring
    seed: Any  # uint64, Philox key of the env
    episode_count: Any  # uint64, start-bar draws taken so far (Philox counter)
    done_flag: Any  # uint8, RUNNING / WAIT_TERMINATED / WAIT_TRUNCATED
    episode_return: Any  # float64, sum of rewards in the current episode

    @property
    def num_envs(self) -> int:
        return int(self.bar.shape[0])


STATE_FIELDS = tuple(f.name for f in fields(EnvState))


def allocate_state(xp: Any, num_envs: int, window: int, lo: np.ndarray, hi: np.ndarray) -> EnvState:
    """Zeroed state for ``num_envs`` envs; ``lo``/``hi`` [N] give each env's bar range."""
    n = num_envs
    return EnvState(
        bar=xp.asarray(lo, dtype=xp.int64).copy(),
        step_in_episode=xp.zeros(n, dtype=xp.int32),
        lo=xp.asarray(lo, dtype=xp.int64),
        hi=xp.asarray(hi, dtype=xp.int64),
        cash=xp.zeros(n, dtype=xp.float64),
        position=xp.zeros(n, dtype=xp.float64),
        costs=xp.zeros(n, dtype=xp.float64),
        entry_price=xp.zeros(n, dtype=xp.float64),
        entry_bar=xp.zeros(n, dtype=xp.int64),
        barrier_status=xp.zeros(n, dtype=xp.int8),
        div_ring=xp.zeros((window, n), dtype=xp.uint8),
        div_cursor=xp.zeros(n, dtype=xp.int32),
        div_count=xp.zeros(n, dtype=xp.int32),
        div_hist=xp.zeros((N_CATEGORIES, n), dtype=xp.int32),
        seed=xp.zeros(n, dtype=xp.uint64),
        episode_count=xp.zeros(n, dtype=xp.uint64),
        done_flag=xp.zeros(n, dtype=xp.uint8),
        episode_return=xp.zeros(n, dtype=xp.float64),
    )


@dataclass
class StepOutputs:
    """What one vector step writes. Shapes: [N] unless noted."""

    obs: Any  # float32 [N, obs_dim], the observation to act on next
    reward: Any  # float32
    terminated: Any  # bool
    truncated: Any  # bool
    done: Any  # bool, terminated | truncated (written by the step, so no extra launch is needed)
    components: Any  # float32 [N, 5], COMPONENT_NAMES; sums to reward
    final_obs: Any  # float32 [N, obs_dim], last observation of an ended episode (SAME_STEP)
    portfolio_value: Any  # float64, value after the step at bar t+1's close
    position: Any  # float64, units held after the step's trade
    barrier_label: Any  # int8, LABEL_*
    episode_return: Any  # float32, return of the episode that ended this step (else 0)
    episode_length: Any  # int32, length of the episode that ended this step (else 0)


def allocate_outputs(xp: Any, num_envs: int, obs_dim: int) -> StepOutputs:
    n = num_envs
    return StepOutputs(
        obs=xp.zeros((n, obs_dim), dtype=xp.float32),
        reward=xp.zeros(n, dtype=xp.float32),
        terminated=xp.zeros(n, dtype=xp.bool_),
        truncated=xp.zeros(n, dtype=xp.bool_),
        done=xp.zeros(n, dtype=xp.bool_),
        components=xp.zeros((n, len(COMPONENT_NAMES)), dtype=xp.float32),
        final_obs=xp.zeros((n, obs_dim), dtype=xp.float32),
        portfolio_value=xp.zeros(n, dtype=xp.float64),
        position=xp.zeros(n, dtype=xp.float64),
        barrier_label=xp.zeros(n, dtype=xp.int8),
        episode_return=xp.zeros(n, dtype=xp.float32),
        episode_length=xp.zeros(n, dtype=xp.int32),
    )


OUTPUT_FIELDS = tuple(f.name for f in fields(StepOutputs))


def instrument_bounds(offsets: np.ndarray, num_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """Env i trades instrument ``i % n_instruments``; its bars are ``[lo[i], hi[i])``."""
    offsets = np.asarray(offsets, dtype=np.int64)
    n_inst = len(offsets) - 1
    inst = np.arange(num_envs) % n_inst
    return offsets[inst].copy(), offsets[inst + 1].copy()
