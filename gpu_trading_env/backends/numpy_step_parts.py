"""Trade, barrier and row-subset helpers of the NumPy backend's tuned step.

Each computes what :mod:`gpu_trading_env.core.reference_step` states, with the same float64
operations in the same order, restricted to the rows that need them (reversals, opened
positions) and updating the state in place.
"""

from __future__ import annotations

import numpy as np

from gpu_trading_env.backends.base import StepParams
from gpu_trading_env.core.constants import BARRIER_ARMED
from gpu_trading_env.core.reference_step import reversal_trade
from gpu_trading_env.core.state import EnvState


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
            np, pos[r], target[r], cash[r], fill[r], rate[r], reserve_r
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
