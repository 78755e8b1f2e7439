"""The env step of a whole vector env, one env at a time, through the scalar oracle.

``step(state, action, backend) -> (state, outputs)`` in the style of gymnax: it reads its inputs
and returns a new :class:`EnvState` and new :class:`StepOutputs`. Each running env's transition
is :class:`~gpu_trading_env.backends.step_oracle.ScalarStep`'s, in Python scalars; around it,
the autoreset modes with plain masks (docs/ENV_SPEC.md "Autoreset modes"): envs that wait for a
reset, NEXT_STEP's resets before the step, SAME_STEP's final observations and resets after it.
``tests/test_reference_step.py`` holds the NumPy backend bit-identical to it.

The observation rows, start-bar draws and resets are the NumPy backend's own helpers.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from gpu_trading_env.backends.numpy_backend import NumpyBackend
from gpu_trading_env.backends.numpy_step_parts import draw_start_bars, observation, reset_rows
from gpu_trading_env.backends.step_oracle import ScalarStep
from gpu_trading_env.core import reward
from gpu_trading_env.core.constants import (
    MODE_DISABLED,
    MODE_NEXT_STEP,
    MODE_SAME_STEP,
    RUNNING,
    WAIT_TERMINATED,
    WAIT_TRUNCATED,
)
from gpu_trading_env.core.state import EnvState, StepOutputs, allocate_outputs

# One ScalarStep per env of a backend, built once (they share the backend's tables).
_STEPS: weakref.WeakKeyDictionary[NumpyBackend, list[ScalarStep]] = weakref.WeakKeyDictionary()


def _scalar_steps(backend: NumpyBackend) -> list[ScalarStep]:
    steps = _STEPS.get(backend)
    if steps is None:
        first = ScalarStep(backend, 0)
        steps = [first] + [first.for_env(i) for i in range(1, backend.num_envs)]
        _STEPS[backend] = steps
    return steps


def _observe(backend: NumpyBackend, s: EnvState, rows: np.ndarray) -> np.ndarray:
    out = np.empty((rows.size, backend.obs_dim), dtype=np.float32)
    return observation(
        backend.features, backend.close, backend.params, s.bar[rows], s.cash[rows],
        s.position[rows], out,
    )  # fmt: skip


def _reset(s: EnvState, p: Any, rows: np.ndarray) -> None:
    """New episodes for ``rows``, at start bars drawn from each env's Philox stream."""
    n_starts = s.hi[rows] - s.lo[rows] - p.episode_length
    start = draw_start_bars(s.seed[rows], rows, s.episode_count[rows], s.lo[rows], n_starts)
    s.episode_count[rows] += np.uint64(1)
    reset_rows(s, p, rows, start)


def _transition(
    backend: NumpyBackend, s: EnvState, out: StepOutputs, rows: np.ndarray, action: np.ndarray
) -> None:
    """One bar for the running envs ``rows``, each through its ScalarStep.

    With curiosity weights, the bonus of every running env is computed first, over the batch
    as the backend computes it: each env is stepped once to find its next observation, then
    again from its loaded state with its bonus.
    """
    steps = _scalar_steps(backend)
    bonus = [None] * s.bar.shape[0]
    if backend.curiosity is not None and rows.size:
        obs0 = _observe(backend, s, rows)
        obs1 = np.empty_like(obs0)
        for k, i in enumerate(rows.tolist()):
            steps[i].load(s)
            obs1[k] = steps[i].step(int(action[i]), bonus=0.0)[0]
        category = backend.params.category[action[rows]]
        batch = reward.curiosity(backend.curiosity, obs0, obs1, category, backend.params)
        for k, i in enumerate(rows.tolist()):
            bonus[i] = float(batch[k])
    for i in rows.tolist():
        env = steps[i]
        env.load(s)
        _, r, terminated, truncated, info = env.step(int(action[i]), bonus=bonus[i])
        env.store(s)
        ended = terminated or truncated
        out.reward[i] = r
        out.components[i] = info["reward_components"]
        out.terminated[i], out.truncated[i] = terminated, truncated
        out.portfolio_value[i] = info["portfolio_value"]
        out.position[i] = info["position"]
        out.barrier_label[i] = info["barrier_label"]
        # x * False is -0.0 for a negative return, as the backend's product gives.
        out.episode_return[i] = env.episode_return * ended
        out.episode_length[i] = env.step_in_episode * ended


def step(
    state: EnvState, action: np.ndarray, backend: NumpyBackend
) -> tuple[EnvState, StepOutputs]:
    """One vector step of every env; returns the new state and the step's outputs.

    Args:
        state: the envs' state (not modified).
        action: int64 [N], valid action ids.
        backend: the NumPy backend whose market, parameters and curiosity weights the step
            reads (its own state is neither read nor written).

    ``outputs.final_obs`` is defined on the rows that ended (SAME_STEP mode), zero elsewhere.
    """
    s = EnvState(**{k: np.array(v, copy=True) for k, v in vars(state).items()})
    params = backend.params
    n = s.bar.shape[0]
    out = allocate_outputs(np, n, backend.obs_dim)
    mode = params.autoreset_mode
    waiting = s.done_flag != RUNNING
    if mode == MODE_NEXT_STEP:
        # Envs that ended last step start anew; their actions are ignored this step.
        _reset(s, params, np.flatnonzero(waiting))
    running = np.flatnonzero(~waiting)
    quiet = np.flatnonzero(waiting)
    _transition(backend, s, out, running, action)

    # Envs that did not step report nothing but their frozen value and position.
    px = backend.close[s.bar[quiet]]
    out.portfolio_value[quiet] = s.cash[quiet] + s.position[quiet] * px
    out.position[quiet] = s.position[quiet]
    if mode == MODE_DISABLED:
        out.terminated[quiet] = s.done_flag[quiet] == WAIT_TERMINATED
        out.truncated[quiet] = s.done_flag[quiet] == WAIT_TRUNCATED
    out.done[...] = out.terminated | out.truncated

    if mode == MODE_SAME_STEP:
        ended = np.flatnonzero(out.done)
        out.final_obs[ended] = _observe(backend, s, ended)
        _reset(s, params, ended)
    else:
        fresh = out.done & (s.done_flag == RUNNING)
        s.done_flag[fresh & out.terminated] = WAIT_TERMINATED
        s.done_flag[fresh & ~out.terminated] = WAIT_TRUNCATED
    out.obs[...] = _observe(backend, s, np.arange(n))
    return s, out
