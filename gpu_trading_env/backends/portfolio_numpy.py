"""The portfolio env's step on the CPU: the reference a CUDA kernel of it matches.

docs/ENV_SPEC.md ("Portfolio env") is the written spec. Money is float64; sums over
instruments run left to right (k = 0..K-1) in explicit loops, never NumPy's pairwise sums, so
a kernel thread that loops over its env's instruments computes the same bits. Each
instrument's trade is the single env's ``numpy_step_parts.trade``, so K = 1 is the single
env's equity-sized step bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_trading_env.backends.numpy_step_parts import draw_start_bars, seed_rows, trade
from gpu_trading_env.backends.portfolio_base import PortfolioBackend
from gpu_trading_env.core.constants import (
    MODE_DISABLED,
    MODE_NEXT_STEP,
    MODE_SAME_STEP,
    RUNNING,
    WAIT_TERMINATED,
    WAIT_TRUNCATED,
)
from gpu_trading_env.core.portfolio_config import RUIN_LOG_REWARD, PortfolioConfig
from gpu_trading_env.core.portfolio_state import (
    PortfolioStepOutputs,
    allocate_portfolio_outputs,
)
from gpu_trading_env.data.portfolio_data import PortfolioData


def _sum_from(first: np.ndarray, terms: Any) -> np.ndarray:
    """``first + terms[0] + terms[1] + ...``, left to right, as a new array."""
    out = np.array(first, dtype=np.float64, copy=True)
    for term in terms:
        out += term
    return out


class PortfolioNumpyBackend(PortfolioBackend):
    """Reference portfolio backend on NumPy arrays."""

    xp = np
    device = "cpu"

    def __init__(self, data: PortfolioData, config: PortfolioConfig, num_envs: int) -> None:
        super().__init__(data, config, num_envs)
        self.close = np.ascontiguousarray(data.close, dtype=np.float64)  # [T, K]
        self.open = np.ascontiguousarray(data.open, dtype=np.float64)  # [T, K]
        self.features = np.ascontiguousarray(data.features, dtype=np.float32)  # [T, K, F]
        self._rate = [np.full(1, r) for r in self.params.rate]  # per instrument, broadcastable

    # ---------------------------------------------------------------- contract
    def seed(self, seeds: np.ndarray, mask: np.ndarray) -> None:
        seed_rows(self.state, seeds, mask)

    def reset(self, mask: Any, start_index: Any) -> np.ndarray:
        idx = np.flatnonzero(np.asarray(mask, dtype=bool))
        if idx.size:
            start = np.asarray(start_index, dtype=np.int64)[idx].copy()
            draw = start < 0
            if draw.any():
                start[draw] = self._draw_starts(idx[draw])
            self._reset_rows(idx, start)
        return self.observe()

    def prepare_actions(self, actions: Any) -> np.ndarray:
        a = actions
        if hasattr(a, "detach"):
            a = a.detach().cpu().numpy()
        a = np.asarray(a)
        n, k = self.num_envs, self.n_instruments
        if a.shape == ():
            raise TypeError(
                f"actions of shape () (a scalar) are invalid: allowed is an integer array of "
                f"shape ({n}, {k}), one level per env and instrument"
            )
        if a.shape != (n, k):
            raise ValueError(
                f"actions of shape {a.shape} are invalid: allowed is ({n}, {k}), one level per "
                "env and instrument"
            )
        if a.dtype.kind not in "iu":
            raise TypeError(
                f"actions of dtype {a.dtype} are invalid: allowed is an integer dtype (floats "
                "are refused even when integral: cast them, e.g. actions.astype(np.int64))"
            )
        bad = (a < 0) | (a >= self.n_levels)
        if bad.any():
            i, j = (int(x) for x in np.argwhere(bad)[0])
            raise ValueError(
                f"actions[{i}, {j}] = {int(a[i, j])} is invalid: allowed is 0..{self.n_levels - 1}"
            )
        return a.astype(np.int64, copy=False)

    def observe(self) -> np.ndarray:
        s = self.state
        return self._observation(s.bar, s.cash, s.position)

    def step(self, actions: np.ndarray) -> PortfolioStepOutputs:
        s, p = self.state, self.params
        out = allocate_portfolio_outputs(np, self.num_envs, self.n_instruments, self.obs_dim)
        mode = p.autoreset_mode
        quiet = np.flatnonzero(s.done_flag != RUNNING)
        if mode == MODE_NEXT_STEP and quiet.size:
            # Envs that ended last step start anew; their actions are ignored this step.
            self._reset_rows(quiet, self._draw_starts(quiet))
        active = np.flatnonzero(np.isin(np.arange(self.num_envs), quiet, invert=True))
        if active.size:
            self._transition(active, actions[active], out)
        if quiet.size:
            px = self.close[s.bar[quiet]]
            out.portfolio_value[quiet] = _sum_from(
                s.cash[quiet], (s.position[k, quiet] * px[:, k] for k in range(px.shape[1]))
            )
            out.positions[quiet] = s.position[:, quiet].T
            if mode == MODE_DISABLED:
                out.terminated[quiet] = s.done_flag[quiet] == WAIT_TERMINATED
                out.truncated[quiet] = s.done_flag[quiet] == WAIT_TRUNCATED
            np.logical_or(out.terminated, out.truncated, out=out.done)
        ended = np.flatnonzero(out.done & (s.done_flag == RUNNING))
        if mode == MODE_SAME_STEP:
            if ended.size:
                out.final_obs[ended] = self._observation(
                    s.bar[ended], s.cash[ended], s.position[:, ended]
                )
                self._reset_rows(ended, self._draw_starts(ended))
        else:
            s.done_flag[ended] = np.where(out.terminated[ended], WAIT_TERMINATED, WAIT_TRUNCATED)
        out.obs[...] = self.observe()
        return out

    # ---------------------------------------------------------------- internals
    def _draw_starts(self, envs: np.ndarray) -> np.ndarray:
        """Start bars of the next draw of ``envs``; advances their counters."""
        s = self.state
        count = s.episode_count[envs]
        n_starts = self.data.n_bars - self.params.episode_length
        start = draw_start_bars(s.seed[envs], envs, count, np.int64(0), np.int64(n_starts))
        s.episode_count[envs] = count + np.uint64(1)
        return start

    def _reset_rows(self, rows: np.ndarray, start: np.ndarray) -> None:
        """New episodes, flat with ``initial_capital`` in cash, for envs ``rows`` at ``start``."""
        s = self.state
        s.bar[rows] = start
        s.step_in_episode[rows] = 0
        s.cash[rows] = self.params.initial_capital
        s.position[:, rows] = 0.0
        s.costs[:, rows] = 0.0
        s.done_flag[rows] = RUNNING
        s.episode_return[rows] = 0.0

    def _observation(self, bar: np.ndarray, cash: np.ndarray, position: np.ndarray) -> np.ndarray:
        """float32 [n, D]: features of ``bar`` [n], V / C0, pos_k / (C0 / close_k) (position
        float64 [K, n])."""
        n, k_n, f_n = bar.shape[0], self.n_instruments, self.n_features
        c0 = self.params.initial_capital
        out = np.empty((n, self.obs_dim), dtype=np.float32)
        out[:, : k_n * f_n] = self.features[bar].reshape(n, k_n * f_n)
        px = self.close[bar]
        value = _sum_from(cash, (position[k] * px[:, k] for k in range(k_n)))
        out[:, k_n * f_n] = value / c0
        for k in range(k_n):
            out[:, k_n * f_n + 1 + k] = position[k] / (c0 / px[:, k])
        return out

    def _transition(self, rows: np.ndarray, a: np.ndarray, out: PortfolioStepOutputs) -> None:
        """Advance the running envs ``rows`` by one bar (ENV_SPEC "Portfolio env", One step) and
        fill their rows of ``out`` but ``obs`` and ``final_obs``."""
        s, p = self.state, self.params
        k_n = self.n_instruments
        t = s.bar[rows]
        t1 = t + 1
        close_t = self.close[t]
        close_1 = self.close[t1]
        fill = self.open[t1] if p.fill_next_open else close_t
        cash0 = s.cash[rows]
        pos0 = s.position[:, rows]
        value0 = _sum_from(cash0, (pos0[k] * close_t[:, k] for k in range(k_n)))
        if p.fill_next_open:
            value_pre = _sum_from(cash0, (pos0[k] * fill[:, k] for k in range(k_n)))
        else:
            value_pre = value0
        reserve = p.reserve_frac * value_pre if p.reserve_frac > 0.0 else 0.0
        # --- gross cap: every exposure scaled by one factor where leverage x sum|e| is above it
        e = p.exposure[a]
        gross = p.leverage * _sum_from(np.zeros(rows.size), (np.abs(e[:, k]) for k in range(k_n)))
        capped = np.flatnonzero(gross > p.max_leverage)
        if capped.size:
            e[capped] = e[capped] * (p.max_leverage / gross[capped])[:, None]
        equity = p.leverage * np.maximum(value_pre, 0.0)
        # --- trades in instrument order, each with the cash the previous ones left
        cash = cash0
        pos1 = np.empty_like(pos0)
        cost = np.empty_like(pos0)
        for k in range(k_n):
            target = e[:, k] * (equity / fill[:, k])
            rate = np.broadcast_to(self._rate[k], target.shape)
            cash, pos1[k], cost[k], _ = trade(p, target, rate, fill[:, k], cash, pos0[k], reserve)
        # --- mark to market, reward
        value1 = _sum_from(cash, (pos1[k] * close_1[:, k] for k in range(k_n)))
        if p.reward_log:
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.where(value1 > 0.0, np.log(value1 / value0), RUIN_LOG_REWARD)
        else:
            r = (value1 - value0) / value0
        step_cost = _sum_from(np.zeros(rows.size), cost)
        out.components[rows, 0] = (value1 + step_cost - value0) / value0
        out.components[rows, 1] = step_cost / value0
        out.reward[rows] = r
        episode_return = s.episode_return[rows] + r
        steps = s.step_in_episode[rows] + np.int32(1)
        terminated = value1 <= 0.0
        truncated = ((steps >= p.episode_length) | (t1 + 1 >= self.data.n_bars)) & ~terminated
        ended = terminated | truncated
        s.bar[rows] = t1
        s.cash[rows] = cash
        s.position[:, rows] = pos1
        s.costs[:, rows] += cost
        s.episode_return[rows] = episode_return
        s.step_in_episode[rows] = steps
        out.terminated[rows] = terminated
        out.truncated[rows] = truncated
        out.done[rows] = ended
        out.portfolio_value[rows] = value1
        out.positions[rows] = pos1.T
        out.costs[rows] = cost.T
        out.episode_return[rows] = np.multiply(episode_return, ended)
        out.episode_length[rows] = np.multiply(steps, ended)
