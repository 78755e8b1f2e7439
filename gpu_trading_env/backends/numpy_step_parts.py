"""Parts of the NumPy backends' step: seeds and start-bar draws, observation rows, resets, the
trade, the barriers and row subsets of a state.

The trade and barrier helpers work on the rows that need them (reversals, opened positions)
and update the state in place; ``tests/step_oracle.py`` states the same semantics plainly and
``tests/test_reference_step.py`` holds the backend bit-identical to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_runtime.philox import STREAM_START_BAR, philox4x32, split_u64, uniform_index
from gpu_trading_env.backends.base import StepParams
from gpu_trading_env.core.constants import BARRIER_ARMED, BARRIER_NONE, RUNNING
from gpu_trading_env.core.portfolio_state import PortfolioState
from gpu_trading_env.core.state import EnvState


def seed_rows(s: EnvState | PortfolioState, seeds: np.ndarray, mask: np.ndarray) -> None:
    """The envs of ``mask`` (bool [N]) take their ``seeds`` (uint64 [N]) as Philox keys, and
    their start-bar draws begin again at counter 0 (in place)."""
    mask = np.asarray(mask, dtype=bool)
    s.seed[mask] = np.asarray(seeds, dtype=np.uint64)[mask]
    s.episode_count[mask] = 0


def draw_start_bars(
    seed: np.ndarray, env_id: np.ndarray, counter: np.ndarray, lo: np.ndarray, n_starts: np.ndarray
) -> np.ndarray:
    """Start bar of an episode: ``lo + uniform_index(philox(counter, env, STREAM).x0, n_starts)``.

    Keyed by the env's seed; the counter is the number of draws the env has taken, so the k-th
    episode of env i starts at the same bar on every backend and in every run. Arrays of one
    shape (or broadcastable): seed uint64, env_id int, counter uint64, lo and n_starts int64.
    """
    k0, k1 = split_u64(seed)
    c0, c1 = split_u64(counter)
    x0, _, _, _ = philox4x32(c0, c1, env_id.astype(np.uint32), STREAM_START_BAR, k0, k1)
    return lo + uniform_index(x0, n_starts)


def observation(
    padded_features: np.ndarray,
    close: np.ndarray,
    p: Any,
    bar: np.ndarray,
    cash: np.ndarray,
    position: np.ndarray,
    out: np.ndarray,
    px: np.ndarray | None = None,
    value: np.ndarray | None = None,
) -> np.ndarray:
    """Observation rows into ``out`` float32 [n, F+3]: features of ``bar``, then
    value / initial capital, position / (initial capital / close), spread.

    ``padded_features`` float32 [T, F+3] holds each bar's features, two columns this fills and
    the spread, so whole rows are gathered into ``out`` in one contiguous take. Callers that
    already hold ``px = close[bar]`` and ``value = cash + position * px`` pass them (same bits,
    fewer ops).
    """
    n_f = padded_features.shape[1] - 3
    np.take(padded_features, bar, axis=0, out=out, mode="clip")
    if px is None:
        px = close.take(bar)
    if value is None:
        value = cash + position * px
    c0 = p.initial_capital
    out[:, n_f] = value / c0
    out[:, n_f + 1] = position / (c0 / px)
    return out


def reset_rows(s: EnvState, p: Any, rows: np.ndarray, start: np.ndarray) -> None:
    """New episodes for ``rows`` of ``s`` (in place) at global bars ``start`` (ENV_SPEC "Reset")."""
    s.bar[rows] = start
    s.step_in_episode[rows] = 0
    s.cash[rows] = p.initial_capital
    s.position[rows] = 0.0
    s.costs[rows] = 0.0
    s.entry_price[rows] = 0.0
    s.entry_bar[rows] = 0
    s.barrier_status[rows] = BARRIER_NONE
    s.div_cursor[rows] = 0
    s.div_count[rows] = 0
    for hist in s.div_hist:  # a 1-D scatter per category row beats one [:, rows] scatter
        hist[rows] = 0
    s.done_flag[rows] = RUNNING
    s.episode_return[rows] = 0.0


def reversal_trade(
    pos: np.ndarray,
    target: np.ndarray,
    cash: np.ndarray,
    fill: np.ndarray,
    rate: np.ndarray,
    reserve: np.ndarray | float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cash, position and cost after a reversal (ENV_SPEC "Trade"): close the position, then
    open towards ``target`` (non-zero, of the other sign) what the cash pays for, in whole units.
    """
    close_cost = np.abs(pos) * fill * rate
    cash_c = cash + pos * fill - close_cost
    units = np.minimum(
        np.floor(np.maximum(cash_c - reserve, 0.0) / (fill * (1.0 + rate))), np.abs(target)
    )
    new_pos = np.copysign(units, target)
    open_cost = units * fill * rate
    return cash_c - new_pos * fill - open_cost, new_pos, close_cost + open_cost


def trade(
    p: StepParams,
    target: np.ndarray,
    rate: np.ndarray,
    fill: np.ndarray,
    cash: np.ndarray,
    pos: np.ndarray,
    reserve: np.ndarray | float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cash, position and cost after trading towards ``target`` (ENV_SPEC "Trade"), and
    where the trade was a reversal."""
    delta = target - pos
    if p.reserve_frac > 0.0:
        capped = (delta > 0.0) & (cash - delta * fill < reserve)
        affordable = np.floor(np.maximum(cash - reserve, 0.0) / fill)
        delta = np.where(capped, np.minimum(delta, affordable), delta)
    # |delta| * fill is |delta * fill| bit for bit (fill > 0; rounding is sign-symmetric).
    flow = delta * fill
    cost = np.abs(flow)
    cost *= rate
    cash1 = cash - flow
    cash1 -= cost
    del flow
    pos1 = pos + delta
    del delta
    reversal = ((pos > 0.0) & (target < 0.0)) | ((pos < 0.0) & (target > 0.0))
    r = reversal.nonzero()[0]
    if r.size:
        # Reversals, on their rows only (elementwise, so the same bits as on all rows).
        reserve_r = reserve[r] if p.reserve_frac > 0.0 else 0.0
        cash1[r], pos1[r], cost[r] = reversal_trade(
            pos[r], target[r], cash[r], fill[r], rate[r], reserve_r
        )
    return cash1, pos1, cost, reversal


def check_barriers(
    p: StepParams,
    s: EnvState,
    t: np.ndarray,
    fill: np.ndarray,
    pos1: np.ndarray,
    opened: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Set, keep or clear the barriers of ``s`` (in place) and check them at ``fill``.

    Returns ``(profit - stop, label, profit | stop)`` as int8, int8 and bool arrays (the last
    None with barriers off).
    """
    flat = pos1 == 0.0
    keep = ~(opened | flat)
    status = s.barrier_status
    status *= keep  # 0 where opened or flat
    status += opened  # BARRIER_ARMED == 1
    # Scatters at the opened rows: np.where costs several times more inside a step.
    o = opened.nonzero()[0]
    entry = s.entry_price
    entry *= keep  # 0 where flat; entry prices are > 0
    entry[o] = fill[o]
    entry_bar = s.entry_bar
    entry_bar[o] = t[o]
    if not p.barriers:
        zeros = np.zeros(t.shape[0], dtype=np.int8)
        return zeros, zeros, None
    armed = status == BARRIER_ARMED
    is_long = pos1 > 0.0
    is_short = ~is_long
    # (long & x) | (short & y) is np.where(is_long, x, y) on bools, without np.where.
    profit_hit = armed & (
        (is_long & (fill >= entry * (1.0 + p.profit_frac)))
        | (is_short & (fill <= entry * (1.0 - p.profit_frac)))
    )
    unhit = armed & ~profit_hit
    stop_hit = unhit & (
        (is_long & (fill <= entry * (1.0 - p.stop_frac)))
        | (is_short & (fill >= entry * (1.0 + p.stop_frac)))
    )
    time_hit = unhit & ~stop_hit & (t >= entry_bar + p.max_holding_bars)
    # LABEL_PROFIT = 1, LABEL_STOP = -1, LABEL_TIME = 2, from the bool masks' bytes.
    closing_sign = profit_hit.view(np.int8) - stop_hit.view(np.int8)
    label = closing_sign + 2 * time_hit.view(np.int8)
    closing = profit_hit | stop_hit
    status += closing | time_hit  # a hit needs BARRIER_ARMED (1): +1 is BARRIER_FIRED
    return closing_sign, label, closing


def take_rows(s: EnvState, idx: np.ndarray) -> EnvState:
    """The envs ``idx`` of ``s`` as a new state. The ring and the histogram stay the whole
    arrays (shared, not copied): ``NumpyBackend._diversity`` addresses their columns by ``idx``."""
    return EnvState(
        **{
            name: arr if name in ("div_ring", "div_hist") else arr[idx]
            for name, arr in vars(s).items()
        }
    )


def put_rows(s: EnvState, idx: np.ndarray, sub: EnvState) -> None:
    for name, arr in vars(s).items():
        if name not in ("div_ring", "div_hist"):
            arr[idx] = getattr(sub, name)
