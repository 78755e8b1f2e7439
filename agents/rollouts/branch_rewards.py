"""Each instrument's share of the portfolio env's reward: the per-branch rewards of GpuDQN's
``branch_rewards`` option.

The simple reward of one portfolio step decomposes exactly over the instruments (ENV_SPEC
"Portfolio env", One step; ``V0 = cash + Σ_k pos_k·close_k[t]``)::

    fill="close":      r_k = (pos'_k·(close_k[t+1] − close_k[t]) − cost_k) / V0
    fill="next_open":  r_k = (pos_k·(open_k[t+1] − close_k[t])
                              + pos'_k·(close_k[t+1] − open_k[t+1]) − cost_k) / V0

and ``Σ_k r_k = (V1 − V0)/V0`` (the cash the trades move cancels against the units bought, the
costs leave it). With ``reward="log"`` the shares are those of the simple return scaled by
``r / Σ_k r_k`` (1 where that sum is 0), so they still add up to the env's reward.

:func:`instrument_rewards` takes NumPy arrays or torch tensors alike (the SB3 loop's NumPy env,
the fused rollout's CUDA tensors), with the state read before the step (:class:`PreStep`) and
the step's ``positions`` and ``costs`` outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th

__all__ = ["PreStep", "instrument_rewards", "pre_step"]


@dataclass
class PreStep:
    """An env's state before a step.

    :param bar: int64 ``[N]``, each env's bar ``t``.
    :param cash: float64 ``[N]``.
    :param position: float64 ``[K, N]`` units (the state's instrument-major layout).
    """

    bar: Any
    cash: Any
    position: Any


def pre_step(state: Any) -> PreStep:
    """Copies of a NumPy backend's ``state.bar``, ``cash`` and ``position`` (the step changes
    them in place, and resets ended envs in ``SAME_STEP`` mode)."""
    return PreStep(
        bar=np.array(state.bar, dtype=np.int64, copy=True),
        cash=np.array(state.cash, dtype=np.float64, copy=True),
        position=np.array(state.position, dtype=np.float64, copy=True),
    )


def instrument_rewards(
    close: Any,
    open_: Any,
    before: PreStep,
    positions: Any,
    costs: Any,
    *,
    fill_next_open: bool,
    reward: Any = None,
    log_reward: bool = False,
) -> Any:
    """The per-instrument rewards ``r_k`` of one step of N envs (the module doc's formulas).

    :param close: float64 ``[T, K]``, the env's closes; ``open_`` the same of its opens.
    :param before: the state before the step (:func:`pre_step`, or tensors in the fused rollout).
    :param positions: float64 ``[N, K]``, the step's ``pos'_k`` (its ``positions`` output).
    :param costs: float64 ``[N, K]``, the step's ``cost_k`` (its ``costs`` output).
    :param fill_next_open: the env's ``fill == "next_open"``.
    :param reward: ``[N]``, the env's reward; read only with ``log_reward``.
    :param log_reward: the env's ``reward == "log"``: scale the shares to add up to ``reward``.
    :return: float32 ``[N, K]``, of ``close``'s kind (NumPy or torch, on its device).
    """
    torch = isinstance(close, th.Tensor)
    bar = before.bar
    c0 = close[bar]
    c1 = close[bar + 1]
    pos0 = before.position.T
    value0 = before.cash + (pos0 * c0).sum(-1)
    if fill_next_open:
        o1 = open_[bar + 1]
        pnl = pos0 * (o1 - c0) + positions * (c1 - o1)
    else:
        pnl = positions * (c1 - c0)
    shares = (pnl - costs) / value0[:, None]
    if log_reward:
        total = shares.sum(-1)
        r = reward.to(total.dtype) if torch else np.asarray(reward, dtype=np.float64)
        where = th.where if torch else np.where
        nonzero = total != 0.0
        safe = where(nonzero, total, 1.0)
        shares = shares * where(nonzero, r / safe, 1.0)[:, None]
    return shares.to(th.float32) if torch else shares.astype(np.float32)
