"""The parameter-free baselines as policies: their env configuration, their backtest, their
constant action, and a trained model made to act one (:func:`set_baseline_policy`).

Which baseline is chosen, and whether a network is deployed over it, is
:mod:`agents.pipelines.deployment`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.backtest import BacktestResult, backtest, exposure_policy

__all__ = [
    "BASELINE_EXPOSURE",
    "STABILITY_LEVEL",
    "baseline_action",
    "baseline_backtest",
    "baseline_config",
    "set_baseline_policy",
    "set_constant_policy",
]

# Exposure of each parameter-free policy, a fraction of max_position.
BASELINE_EXPOSURE = {"flat": 0.0, "hold long": 1.0, "hold short": -1.0}
# One-sided level at which an edge must hold in each part of the training bars it is checked on.
STABILITY_LEVEL = 0.10


def baseline_config(config: EnvConfig) -> EnvConfig:
    """The env configuration the baselines act in: ``config`` with the triple barrier off (a
    barrier hit ends the episode, and a hold would be sold and bought again each time), one
    episode as long as the env allows (each new one starts flat) and ``sizing="equity"`` at
    leverage 1, so that "hold long" is buy-and-hold: all of the value in the instrument from the
    first bar to the last, and "hold short" its mirror."""
    return config.replace(barriers=False, sizing="equity", leverage=1.0, episode_length=2**31 - 1)


def baseline_backtest(
    name: str, data: MarketData, config: EnvConfig, per_year: float
) -> BacktestResult:
    """The backtest of baseline ``name`` (a key of :data:`BASELINE_EXPOSURE`) on ``data``, in
    :func:`baseline_config` of ``config``."""
    if name not in BASELINE_EXPOSURE:
        raise ValueError(
            f"baseline = {name!r} is invalid: allowed is one of {sorted(BASELINE_EXPOSURE)}"
        )
    held = baseline_config(config)
    exposure = np.full(data.n_bars, BASELINE_EXPOSURE[name])
    return backtest(exposure_policy(exposure, held), data, held, per_year=per_year)


def baseline_action(name: str, config: EnvConfig) -> int:
    """The env action baseline ``name`` takes at every bar: the exposure level nearest its
    exposure, market order (the action :func:`exposure_policy` takes for it)."""
    levels = np.asarray(config.exposure_levels)
    return config.encode_action(int(np.abs(levels - BASELINE_EXPOSURE[name]).argmin()))


def set_constant_policy(model: Any, action: int) -> None:
    """Make a dueling ``model`` act ``action`` on every observation, through its own network.

    The advantage head's output layer becomes ``A = one_hot(action)`` (zero weights, a unit
    bias), so ``argmax Q = argmax A = action`` everywhere; the value head and the trunk are
    left as trained. The model saves, loads and acts like any other, in every acting path.
    """
    import torch as th

    n = int(model.action_space.n)
    if not 0 <= int(action) < n:
        raise ValueError(f"action = {action!r} is invalid: allowed is 0..{n - 1}")
    for net in (model.q_net, model.q_net_target):
        head = getattr(net, "advantage_head", None)
        if head is None:
            raise TypeError("set_constant_policy needs a dueling Q-network (DuelingPolicy)")
        last = [m for m in head if isinstance(m, th.nn.Linear)][-1]
        with th.no_grad():
            last.weight.zero_()
            last.bias.zero_()
            last.bias[int(action)] = 1.0


def set_baseline_policy(model: Any, name: str, config: EnvConfig) -> None:
    """Make ``model`` deploy baseline ``name``: its constant action (:func:`set_constant_policy`)
    in the env the baseline is evaluated in (``model.env_config = baseline_config(config)``)."""
    set_constant_policy(model, baseline_action(name, config))
    model.env_config = baseline_config(config)
