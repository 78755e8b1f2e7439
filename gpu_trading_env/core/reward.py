"""The reward of one step: its five parts, the one place the NumPy step computes them.

``reward = pnl + barrier + risk + diversity + curiosity``, summed left to right in float64
(docs/ENV_SPEC.md "Reward"). The parts are named as :data:`COMPONENT_NAMES`, the columns of
``StepOutputs.components`` and of the info key ``reward_components``. The NumPy backend calls
these functions; the CUDA kernel (``backends/kernels/trading_env.cuh``, the section "mark to
market, reward" of ``env_transition``) computes the same float64 operations in the same order,
and the NumPy-against-CUDA parity tests hold the two bit-identical.

Every function takes arrays of one value per env and returns a new array: float64 [n] unless
said otherwise.
"""

from __future__ import annotations

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


def pnl(value0: np.ndarray, value1: np.ndarray) -> np.ndarray:
    """The portfolio's return over the bar: ``(value1 - value0) / value0``.

    ``value0`` is the value at bar t's close before the trade, ``value1`` at bar t+1's close
    after it (cash plus position times the close; money units).
    """
    return (value1 - value0) / value0


def barrier(pnl: np.ndarray, closing_sign: np.ndarray, half_scale: float) -> np.ndarray:
    """``pnl * (sign * half_scale)``: the bar's return again, with a plus sign on a profit
    barrier's hit, a minus sign on a stop's, nothing otherwise.

    ``closing_sign`` int8 [n]: +1 profit hit, -1 stop hit, 0 else; ``half_scale`` is the
    config's ``barrier_reward_scale / 2``.
    """
    # (sign * h) * pnl as the product of a float64 copy of the sign: the same bits either way.
    out = closing_sign.astype(np.float64)
    out *= half_scale
    out *= pnl
    return out


def risk(position_feature: np.ndarray, threshold: float, scale: float) -> np.ndarray:
    """``min(-(scale * (|position_feature| - threshold)), 0)``: a penalty on the exposure
    above the threshold, read from the observation's position feature before the trade
    (position / (initial capital / close_t))."""
    out = np.abs(position_feature)
    out -= threshold
    out *= -scale  # x * -s rounds as -(s * x): the negation is exact
    np.minimum(out, 0.0, out=out)
    return out


def diversity(penalised: np.ndarray, penalty: float) -> np.ndarray:
    """``-penalty`` where the env's ring of recent action categories is penalised (bool [n]:
    at least ``diversity_min_entries`` entries whose Shannon entropy in bits is below the
    threshold), else 0."""
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


def total(
    pnl: np.ndarray,
    barrier: np.ndarray,
    risk: np.ndarray,
    diversity: np.ndarray,
    curiosity: np.ndarray | float,
) -> np.ndarray:
    """The reward, float64 [n]: the parts summed left to right in ``COMPONENT_NAMES`` order.

    ``curiosity`` may be the scalar 0.0 with the bonus off (it adds as a zero array does).
    """
    out = pnl + barrier
    out += risk
    out += diversity
    out += curiosity
    return out
