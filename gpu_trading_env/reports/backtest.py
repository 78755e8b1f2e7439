"""Backtests of a policy on MarketData: equity, positions, trades and costs per bar.

A backtest walks one instrument from its first bar to its last with one env, episodes back to
back: when an episode ends (a barrier, or ``episode_length``), the next starts at the bar where
it ended, flat, so the equity curve covers the whole period. The env's own semantics (fills,
costs, barriers) apply unchanged. An episode that ends holding a position is closed at that
bar's close paying the market order's cost (``order_cost_bps[0]``), as the env's next episode
starts flat and would otherwise drop the position for free.

The benchmark, buy-and-hold, pays the same market order cost to buy at the first close and to
sell at the last (``gpu_trading_env.reports.metrics.buy_and_hold_equity``); the frictionless
``close / first close`` curve is kept beside it and is labelled as such.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpu_trading_env.core.config import EnvConfig, action_table
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.metrics import (
    Metrics,
    bars_per_year,
    buy_and_hold_equity,
    curve_metrics,
)
from gpu_trading_env.reports.report import plot_equity, plot_learning_curve, write_json
from gpu_trading_env.vector_env import TradingVectorEnv

__all__ = [
    "BacktestResult",
    "Metrics",
    "Policy",
    "backtest",
    "exposure_policy",
    "plot_equity",
    "plot_learning_curve",
    "write_json",
]

Policy = Callable[[np.ndarray, int], np.ndarray]
"""Maps an observation float32 [1, D] and its bar index (within the instrument) to an action."""


@dataclass
class BacktestResult:
    """One instrument's backtest. Per-step arrays [T-1] describe bar t -> t+1."""

    equity: np.ndarray  # float64 [T], strategy value / initial capital, costs in
    buy_and_hold: np.ndarray  # float64 [T], buy-and-hold value / initial capital, costs in
    timestamps: np.ndarray  # datetime64[ns] [T]
    exposure: np.ndarray  # float64 [T-1], signed notional / value held after bar t's trade
    traded: np.ndarray  # float64 [T-1], |traded notional| / value at bar t
    costs: np.ndarray  # float64 [T-1], costs paid at bar t / initial capital
    strategy: Metrics
    benchmark: Metrics
    frictionless_buy_and_hold: Metrics
    episodes: int
    instrument: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def returns(self) -> np.ndarray:
        """float64 [T-1], the strategy's per-bar returns."""
        return self.equity[1:] / self.equity[:-1] - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "instrument": self.instrument,
            "episodes": self.episodes,
            "strategy": self.strategy.to_dict(),
            "buy_and_hold": self.benchmark.to_dict(),
            "buy_and_hold_frictionless": self.frictionless_buy_and_hold.to_dict(),
            **self.extra,
        }


def backtest(
    policy: Policy,
    data: MarketData,
    config: EnvConfig | None = None,
    instrument: int = 0,
    device: str = "cpu",
    per_year: float | None = None,
) -> BacktestResult:
    """Run ``policy`` over one instrument of ``data`` from its first bar to its last.

    :param per_year: bars per year for the annualised figures; None infers it from the
        instrument's timestamps (``gpu_trading_env.reports.metrics.bars_per_year``).
    """
    one = data.instrument(instrument)
    n = one.n_bars
    cfg = (config or EnvConfig()).replace(autoreset_mode="disabled")
    if cfg.episode_length > n - 1:
        cfg = cfg.replace(episode_length=n - 1)
    env = TradingVectorEnv(1, device=device, data=one, config=cfg, array_type="numpy")
    rates = action_table(cfg).cost_rate
    exit_rate = cfg.order_cost_bps[0] / 1e4
    close = np.asarray(one.close, dtype=np.float64)
    fill = close if cfg.fill == "close" else np.r_[np.asarray(one.open)[1:], np.nan]
    c0 = cfg.initial_capital
    equity = np.ones(n, dtype=np.float64)
    exposure = np.zeros(n - 1)
    traded = np.zeros(n - 1)
    costs = np.zeros(n - 1)
    scale = 1.0  # equity at the start of the current episode
    pos, value = 0.0, c0  # env units: position and value before the bar's trade
    bar = 0
    episodes = 0
    obs, _ = env.reset(seed=0, options={"start_index": 0})
    while bar < n - 1:
        action = np.asarray(policy(obs, bar), dtype=np.int64).reshape(1)
        obs, _, terminated, truncated, info = env.step(action)
        new_pos = float(info["position"][0])
        new_value = float(info["portfolio_value"][0])
        notional = abs(new_pos - pos) * fill[bar]
        traded[bar] = notional / value
        costs[bar] = scale * notional * rates[int(action[0])] / c0
        exposure[bar] = new_pos * close[bar] / value
        bar += 1
        equity[bar] = scale * new_value / c0
        pos, value = new_pos, new_value
        if (terminated[0] or truncated[0]) and bar < n - 1:
            if pos != 0.0:
                exit_cost = abs(pos) * close[bar] * exit_rate
                equity[bar] -= scale * exit_cost / c0
                costs[bar - 1] += scale * exit_cost / c0
                traded[bar - 1] += abs(pos) * close[bar] / value
            scale = equity[bar]
            episodes += 1
            pos, value = 0.0, c0
            obs, _ = env.reset(options={"start_index": bar, "reset_mask": np.ones(1, dtype=bool)})
    episodes += 1
    per_year = bars_per_year(one.timestamps) if per_year is None else float(per_year)
    bh, bh_costs = buy_and_hold_equity(close, exit_rate)
    bh_traded = np.zeros(n - 1)
    bh_traded[0] = 1.0
    bh_traded[-1] += 1.0
    return BacktestResult(
        equity=equity,
        buy_and_hold=bh,
        timestamps=one.timestamps,
        exposure=exposure,
        traded=traded,
        costs=costs,
        strategy=curve_metrics(
            equity,
            per_year,
            costs_included=True,
            exposure=exposure,
            traded=traded,
            costs=costs,
        ),
        benchmark=curve_metrics(
            bh,
            per_year,
            costs_included=True,
            exposure=np.ones(n - 1),
            traded=bh_traded,
            costs=bh_costs,
        ),
        frictionless_buy_and_hold=curve_metrics(close / close[0], per_year, costs_included=False),
        episodes=episodes,
        instrument=one.instruments[0],
    )


def exposure_policy(exposure: np.ndarray, config: EnvConfig) -> Policy:
    """A policy holding a given exposure at each bar (a known rule), with order type 0.

    ``exposure`` [T] floats, each mapped to the nearest of ``config.exposure_levels``.
    """
    levels = np.asarray(config.exposure_levels)
    nearest = np.abs(np.asarray(exposure, dtype=np.float64)[:, None] - levels[None, :]).argmin(
        axis=1
    )
    actions = np.array([config.encode_action(int(e)) for e in range(len(levels))], dtype=np.int64)[
        nearest
    ]

    def policy(obs: np.ndarray, bar: int) -> np.ndarray:
        return actions[bar : bar + 1]

    return policy
