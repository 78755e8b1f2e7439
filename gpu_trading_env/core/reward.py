"""The reward of one step: its five parts, the one place the NumPy step computes them.

``reward = pnl + barrier + risk + diversity + curiosity``, summed left to right in float64
(docs/ENV_SPEC.md "Reward"). The parts are named as :data:`COMPONENT_NAMES`, the columns of
``StepOutputs.components`` and of the info key ``reward_components``. The NumPy backend calls
these functions; the CUDA kernel (``backends/kernels/trading_env.cuh``, the section "mark to
market, reward" of ``env_transition``) computes the same float64 operations in the same order,
and the NumPy-against-CUDA parity tests hold the two bit-identical.

Every function but :func:`curiosity` takes either arrays of one value per env (float64 [n]
results, new arrays) or one env's Python floats (a float result): the NumPy backend calls them
with arrays, the scalar step of one env (``backends/step_oracle.py``) with floats, and both
compute the same float64 operations in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpu_trading_env.core.constants import COMPONENT_NAMES, LEAKY_RELU_SLOPE, N_CATEGORIES

__all__ = [
    "COMPONENT_NAMES",
    "barrier",
    "curiosity",
    "diversity",
    "pnl",
    "risk",
    "total",
]


def pnl(value0: Any, value1: Any) -> Any:
    """The portfolio's return over the bar: ``(value1 - value0) / value0``.

    ``value0`` is the value at bar t's close before the trade, ``value1`` at bar t+1's close
    after it (cash plus position times the close; money units).
    """
    return (value1 - value0) / value0


def barrier(pnl: Any, closing_sign: Any, half_scale: float) -> Any:
    """``pnl * (sign * half_scale)``: the bar's return again, with a plus sign on a profit
    barrier's hit, a minus sign on a stop's, nothing otherwise.

    ``closing_sign`` int8 [n] or an int: +1 profit hit, -1 stop hit, 0 else; ``half_scale`` is
    the config's ``barrier_reward_scale / 2``.
    """
    return pnl * (closing_sign * half_scale)


def risk(
    position_feature: Any,
    threshold: float,
    scale: float,
    minimum: Callable[[Any, float], Any] = np.minimum,
) -> Any:
    """``min(-(scale * (|position_feature| - threshold)), 0)``: a penalty on the exposure
    above the threshold, read from the observation's position feature before the trade
    (position / (initial capital / close_t)). ``minimum``: ``np.minimum`` for arrays, the
    builtin ``min`` for floats (both return the first argument unless the second is less)."""
    return minimum(-(scale * (abs(position_feature) - threshold)), 0.0)


def diversity(penalised: Any, penalty: float) -> Any:
    """``-penalty`` where the env's ring of recent action categories is penalised (bool [n] or
    a bool: at least ``diversity_min_entries`` entries whose Shannon entropy in bits is below
    the threshold), else 0."""
    if not isinstance(penalised, np.ndarray):
        return -penalty if penalised else 0.0
    out = np.zeros(penalised.shape[0])
    out[penalised.nonzero()[0]] = -penalty  # a scatter costs less than np.where in a step
    return out


def curiosity(
    weights: Any, obs0: np.ndarray, obs1: np.ndarray, category: np.ndarray, p: Any
) -> np.ndarray:
    """The ICM forward model's bonus: ``min(MSE(f(s[:D], onehot(category)), s'[:D]), cap) *
    scale`` computed in float32, returned as float64 [n].

    ``weights``: ``w1`` float32 [H, D+3], ``b1`` [H], ``w2`` [D, H], ``b2`` [D] (torch's
    ``[out, in]`` layout); ``obs0``/``obs1`` float32 [n, >= D], the observations before and
    after the step; ``category`` int [n] in 0..2; ``p`` the step parameters
    (``curiosity_state_dims``, ``curiosity_max_reward``, ``curiosity_scale``).
    """
    d = p.curiosity_state_dims
    n = obs0.shape[0]
    x = np.zeros((n, d + N_CATEGORIES), dtype=np.float32)
    x[:, :d] = obs0[:, :d]
    x[np.arange(n), d + category] = 1.0
    h = x @ weights.w1.T + weights.b1
    h = np.where(h > 0, h, np.float32(LEAKY_RELU_SLOPE) * h)
    pred = h @ weights.w2.T + weights.b2
    err = pred - obs1[:, :d]
    mse = np.mean(err * err, axis=1, dtype=np.float32)
    bonus = np.minimum(mse, np.float32(p.curiosity_max_reward)) * np.float32(p.curiosity_scale)
    return bonus.astype(np.float64)


def total(pnl: Any, barrier: Any, risk: Any, diversity: Any, curiosity: Any) -> Any:
    """The reward: the parts summed left to right in ``COMPONENT_NAMES`` order.

    With arrays, ``curiosity`` may be the scalar 0.0 with the bonus off (it adds as a zero
    array does).
    """
    out = pnl + barrier
    out += risk
    out += diversity
    out += curiosity
    return out
