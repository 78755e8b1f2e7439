"""The env step as one pure function: the test oracle of the NumPy backend.

``step(state, action, market, params, curiosity) -> (state, outputs)`` in the style of gymnax:
it reads its inputs and returns a new :class:`EnvState` and new :class:`StepOutputs`, vectorised
over envs with plain masks: the readable statement of docs/ENV_SPEC.md, written to be read, not
to be fast. ``tests/test_reference_step.py`` holds the tuned
:class:`~gpu_trading_env.backends.numpy_backend.NumpyBackend` bit-identical to it (and the CUDA
parity tests hold the kernel to NumPy).

It is independent of the backend in its trade, barriers, diversity ring, end flags and
autoreset modes; the reward's parts are :mod:`gpu_trading_env.core.reward`'s (the one place
they are written), and the observation rows, start-bar draws, resets and the reversal formula
are the backend's own helpers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_trading_env.backends.numpy_step_parts import (
    draw_start_bars,
    observation,
    reset_rows,
    reversal_trade,
)
from gpu_trading_env.core import reward
from gpu_trading_env.core.constants import (
    BARRIER_ARMED,
    BARRIER_FIRED,
    BARRIER_NONE,
    LABEL_NONE,
    LABEL_PROFIT,
    LABEL_STOP,
    LABEL_TIME,
    MODE_DISABLED,
    MODE_NEXT_STEP,
    MODE_SAME_STEP,
    N_CATEGORIES,
    RUNNING,
    WAIT_TERMINATED,
    WAIT_TRUNCATED,
)
from gpu_trading_env.core.state import EnvState, StepOutputs, allocate_outputs


@dataclass(frozen=True)
class Market:
    """Market arrays of a step. ``obs_rows`` float32 [T, F+3]: each bar's features, two columns
    the step fills (value, position) and the spread; ``open``/``close`` float64 [T]."""

    obs_rows: np.ndarray
    open: np.ndarray
    close: np.ndarray


def _observe(market: Market, p: Any, s: EnvState, rows: np.ndarray) -> np.ndarray:
    out = np.empty((rows.size, market.obs_rows.shape[1]), dtype=np.float32)
    return observation(
        market.obs_rows, market.close, p, s.bar[rows], s.cash[rows], s.position[rows], out
    )


def _reset(s: EnvState, p: Any, rows: np.ndarray) -> None:
    """New episodes for ``rows``, at start bars drawn from each env's Philox stream."""
    n_starts = s.hi[rows] - s.lo[rows] - p.episode_length
    start = draw_start_bars(s.seed[rows], rows, s.episode_count[rows], s.lo[rows], n_starts)
    s.episode_count[rows] += np.uint64(1)
    reset_rows(s, p, rows, start)


def _trade(p: Any, target, rate, fill, cash, pos, reserve):
    """Cash, position and cost after trading towards ``target`` units (ENV_SPEC "Trade")."""
    # Towards the target; buys may not spend the reserve: they are cut to whole affordable units.
    delta = target - pos
    if p.reserve_frac > 0.0:
        capped = (delta > 0.0) & (cash - delta * fill < reserve)
        affordable = np.floor(np.maximum(cash - reserve, 0.0) / fill)
        delta = np.where(capped, np.minimum(delta, affordable), delta)
    cost = np.abs(delta) * fill * rate
    cash1 = cash - delta * fill - cost
    pos1 = pos + delta
    # A reversal (long to short or back) closes first, then opens what the cash pays for.
    reversal = ((pos > 0.0) & (target < 0.0)) | ((pos < 0.0) & (target > 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        cash_r, new_pos, cost_r = reversal_trade(pos, target, cash, fill, rate, reserve)
    cash1 = np.where(reversal, cash_r, cash1)
    pos1 = np.where(reversal, new_pos, pos1)
    cost = np.where(reversal, cost_r, cost)
    return cash1, pos1, cost, reversal


def _barrier(p: Any, s: EnvState, rows, t, fill, pos1, opened):
    """Arm, keep or clear the barriers of ``rows`` (in place) and check them at the fill price.

    Returns the sign the barrier component scales pnl by (+1 profit, -1 stop, else 0), the
    label and whether the episode ends (ENV_SPEC "Triple barrier").
    """
    keep = ~(opened | (pos1 == 0.0))
    status = np.where(opened, BARRIER_ARMED, np.where(keep, s.barrier_status[rows], BARRIER_NONE))
    entry = np.where(opened, fill, np.where(keep, s.entry_price[rows], 0.0))
    entry_bar = np.where(opened, t, s.entry_bar[rows])
    n = t.shape[0]
    sign = np.zeros(n, dtype=np.int8)
    label = np.full(n, LABEL_NONE, dtype=np.int8)
    closing = np.zeros(n, dtype=bool)
    if p.barriers:
        armed = status == BARRIER_ARMED
        long = pos1 > 0.0
        profit = armed & np.where(
            long, fill >= entry * (1.0 + p.profit_frac), fill <= entry * (1.0 - p.profit_frac)
        )
        stop = (
            armed
            & ~profit
            & np.where(
                long, fill <= entry * (1.0 - p.stop_frac), fill >= entry * (1.0 + p.stop_frac)
            )
        )
        time = armed & ~profit & ~stop & (t >= entry_bar + p.max_holding_bars)
        sign = np.where(profit, 1, np.where(stop, -1, 0)).astype(np.int8)
        label = np.select([profit, stop, time], [LABEL_PROFIT, LABEL_STOP, LABEL_TIME], LABEL_NONE)
        closing = profit | stop
        status = np.where(profit | stop | time, BARRIER_FIRED, status)
    s.barrier_status[rows] = status
    s.entry_price[rows] = entry
    s.entry_bar[rows] = entry_bar
    return sign, label.astype(np.int8), closing


def _diversity(p: Any, s: EnvState, rows, cat):
    """Push the action categories into the rings of ``rows`` (in place); whether each is
    penalised.

    The penalty applies when the ring holds at least ``diversity_min_entries`` entries and
    their Shannon entropy (bits) is below the threshold (ENV_SPEC "Diversity").
    """
    window = p.diversity_window
    cursor, count = s.div_cursor[rows], s.div_count[rows]
    full = count >= window
    oldest = s.div_ring[cursor, rows].astype(np.int64)
    s.div_hist[oldest[full], rows[full]] -= 1
    s.div_ring[cursor, rows] = cat
    s.div_hist[cat, rows] += 1
    s.div_cursor[rows] = np.where(cursor + 1 == window, 0, cursor + 1)
    count = np.minimum(count + 1, window)
    s.div_count[rows] = count
    entropy = np.zeros(rows.size, dtype=np.float64)
    for c in range(N_CATEGORIES):
        h = s.div_hist[c, rows]
        pr = h / count.astype(np.float64)
        entropy -= np.where(h > 0, pr * np.log2(np.where(h > 0, pr, 1.0)), 0.0)
    return (count >= p.diversity_min_entries) & (entropy < p.diversity_threshold_bits)


def _transition(s, out, rows, action, market, p, curiosity) -> None:
    """One bar for the running envs ``rows``: trade, barriers, diversity, reward, end flags."""
    c0 = p.initial_capital
    t = s.bar[rows]
    t1 = t + 1
    close_t, close_1 = market.close[t], market.close[t1]
    fill = market.open[t1] if p.fill_next_open else close_t
    a = action[rows]
    cat = p.category[a]
    cash0, pos0 = s.cash[rows], s.position[rows]
    value0 = cash0 + pos0 * close_t
    # Risk, from the position feature before the trade.
    risk = reward.risk(pos0 / (c0 / close_t), p.risk_threshold, p.risk_penalty_scale)
    obs0 = _observe(market, p, s, rows) if curiosity is not None else None

    value_pre = cash0 + pos0 * fill
    reserve = p.reserve_frac * value_pre if p.reserve_frac > 0.0 else 0.0
    # Position sizing (ENV_SPEC "Position sizing"): env i trades instrument i mod I.
    if p.sizing_equity:
        target = p.exposure[a] * (p.leverage * np.maximum(value_pre, 0.0) / fill)
    else:
        target = p.exposure[a] * p.max_position[rows % p.max_position.shape[0]]
    cash1, pos1, cost, reversal = _trade(p, target, p.cost_rate[a], fill, cash0, pos0, reserve)
    opened = (reversal | (pos0 == 0.0)) & (pos1 != 0.0)
    s.cash[rows], s.position[rows] = cash1, pos1
    s.costs[rows] += cost

    sign, label, closing = _barrier(p, s, rows, t, fill, pos1, opened)
    diversity = reward.diversity(_diversity(p, s, rows, cat), p.diversity_penalty)

    # Mark to market at bar t+1's close; the reward's parts in COMPONENT_NAMES' order.
    value1 = cash1 + pos1 * close_1
    pnl = reward.pnl(value0, value1)
    barrier = reward.barrier(pnl, sign, p.barrier_half_scale)
    if curiosity is not None:
        obs1 = np.empty_like(obs0)
        observation(market.obs_rows, market.close, p, t1, cash1, pos1, obs1)
        bonus = reward.curiosity(curiosity, obs0, obs1, cat, p)
    else:
        bonus = np.zeros(rows.size)
    total = reward.total(pnl, barrier, risk, diversity, bonus)
    out.components[rows] = np.stack([pnl, barrier, risk, diversity, bonus], axis=1)
    out.reward[rows] = total
    s.episode_return[rows] += total

    steps = s.step_in_episode[rows] + 1
    s.step_in_episode[rows] = steps
    terminated = (value1 <= 0.0) | closing  # profit and stop end the episode, time does not
    truncated = ((steps >= p.episode_length) | (t1 + 1 >= s.hi[rows])) & ~terminated
    ended = terminated | truncated
    s.bar[rows] = t1
    out.terminated[rows], out.truncated[rows] = terminated, truncated
    out.portfolio_value[rows] = value1
    out.position[rows] = pos1
    out.barrier_label[rows] = label
    out.episode_return[rows] = s.episode_return[rows] * ended
    out.episode_length[rows] = steps * ended


def step(
    state: EnvState,
    action: np.ndarray,
    market: Market,
    params: Any,
    curiosity: Any | None = None,
) -> tuple[EnvState, StepOutputs]:
    """One vector step of every env; returns the new state and the step's outputs.

    Args:
        state: the envs' state (not modified).
        action: int64 [N], valid action ids.
        market: the market arrays.
        params: the :class:`~gpu_trading_env.backends.base.StepParams` of the config.
        curiosity: the curiosity forward model's weights, or None (bonus off).

    ``outputs.final_obs`` is defined on the rows that ended (SAME_STEP mode), zero elsewhere.
    """
    s = EnvState(**{k: np.array(v, copy=True) for k, v in vars(state).items()})
    n = s.bar.shape[0]
    out = allocate_outputs(np, n, market.obs_rows.shape[1])
    mode = params.autoreset_mode
    waiting = s.done_flag != RUNNING
    if mode == MODE_NEXT_STEP:
        # Envs that ended last step start anew; their actions are ignored this step.
        _reset(s, params, np.flatnonzero(waiting))
    running = np.flatnonzero(~waiting)
    quiet = np.flatnonzero(waiting)
    _transition(s, out, running, action, market, params, curiosity)

    # Envs that did not step report nothing but their frozen value and position.
    px = market.close[s.bar[quiet]]
    out.portfolio_value[quiet] = s.cash[quiet] + s.position[quiet] * px
    out.position[quiet] = s.position[quiet]
    if mode == MODE_DISABLED:
        out.terminated[quiet] = s.done_flag[quiet] == WAIT_TERMINATED
        out.truncated[quiet] = s.done_flag[quiet] == WAIT_TRUNCATED
    out.done[...] = out.terminated | out.truncated

    if mode == MODE_SAME_STEP:
        ended = np.flatnonzero(out.done)
        out.final_obs[ended] = _observe(market, params, s, ended)
        _reset(s, params, ended)
    else:
        fresh = out.done & (s.done_flag == RUNNING)
        s.done_flag[fresh & out.terminated] = WAIT_TERMINATED
        s.done_flag[fresh & ~out.terminated] = WAIT_TRUNCATED
    out.obs[...] = _observe(market, params, s, np.arange(n))
    return s, out
