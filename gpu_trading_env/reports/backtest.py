"""Backtests of a policy on MarketData: equity, positions, trades and costs per bar.

A backtest walks one instrument from its first bar to its last with one env, episodes back to
back: when an episode ends (a barrier, or ``episode_length``), the next starts at the bar where
it ended, flat, so the equity curve covers the whole period. The env's own semantics (fills,
costs, barriers) apply unchanged. An episode that ends holding a position is closed at that
bar's close paying the market order's cost (``order_cost_bps[0]``), as the env's next episode
starts flat and would otherwise drop the position for free.

Ruin ends the backtest's capital: the env ends an episode whose value falls to 0 or below, and
the backtest does not start another from a negative equity (whose gains would book as losses).
From the bar of ruin on, the equity is 0 (the floor: total return -100%, returns after it 0, no
trade, no cost); the result records the bar (``ruined_at_bar``) and the value / initial capital
the account reached there before the floor (``ruin_value``, -0.8 for a debt of 80% of the
capital that the curve does not carry).

The benchmark, buy-and-hold, invests all the capital at the first close, paying the same market
order cost to buy there and to sell at the last (``gpu_trading_env.reports.metrics.
buy_and_hold_equity``); the frictionless ``close / first close`` curve is kept beside it and is
labelled as such. A policy holding full exposure is that benchmark only with ``sizing="equity"``
at leverage 1 (up to the episodes' exit and entry costs): with ``sizing="units"`` it holds a
fixed ``max_position`` units (recorded in the result), which earns that many times the price
change instead of compounding with the price.
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
    returns_of,
)
from gpu_trading_env.reports.report import plot_equity, plot_learning_curve, write_json
from gpu_trading_env.vector_env import TradingVectorEnv

__all__ = [
    "BacktestResult",
    "BatchPolicy",
    "Metrics",
    "Policy",
    "backtest",
    "backtest_batch",
    "exposure_policy",
    "plot_equity",
    "plot_learning_curve",
    "write_json",
]

Policy = Callable[[np.ndarray, int], np.ndarray]
"""Maps an observation float32 [1, D] and its bar index (within the instrument) to an action."""
BatchPolicy = Callable[[np.ndarray, int], np.ndarray]
"""Maps k observations float32 [k, D] and their common bar index to k actions."""


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
    ruined_at_bar: int | None = None  # the bar whose value was <= 0 (equity 0 from it), or None
    ruin_value: float | None = None  # value / initial capital at that bar before the floor
    max_position: float | None = None  # units at full exposure with sizing="units", else None

    @property
    def returns(self) -> np.ndarray:
        """float64 [T-1], the strategy's per-bar returns (0 after a ruin)."""
        return returns_of(self.equity)

    @property
    def buy_and_hold_returns(self) -> np.ndarray:
        """float64 [T-1], buy-and-hold's per-bar returns over the same bars, costs in."""
        return returns_of(self.buy_and_hold)

    def to_dict(self) -> dict[str, Any]:
        return {
            "instrument": self.instrument,
            "episodes": self.episodes,
            "ruined_at_bar": self.ruined_at_bar,
            "ruin_value": self.ruin_value,
            "max_position": self.max_position,
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
    (result,) = backtest_batch(
        lambda obs, bar: np.asarray(policy(obs, bar), dtype=np.int64).reshape(1),
        1,
        data,
        config,
        instrument,
        device,
        per_year,
    )
    return result


def backtest_batch(
    policy: BatchPolicy,
    k: int,
    data: MarketData,
    config: EnvConfig | None = None,
    instrument: int = 0,
    device: str = "cpu",
    per_year: float | None = None,
) -> list[BacktestResult]:
    """``k`` backtests side by side over one instrument of ``data``: ``policy`` acts for all
    ``k`` at each bar (for instance ``k`` snapshots of one network taken during training).

    Each is the backtest :func:`backtest` runs for its policy alone, to the bit: the envs walk
    the same bars together (an episode that ends restarts at the bar where it ended), and only
    where their episodes end differs. One env step serves ``k`` backtests, and a step of a few
    envs costs about what one env's does.

    :param policy: ``(obs float32 [k, D], bar) -> actions int [k]``.
    :param k: the number of backtests, >= 1.
    :param per_year: as in :func:`backtest`.
    :return: the ``k`` results, in the order of ``policy``'s rows.
    """
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k = {k!r} is invalid: allowed is an int >= 1")
    one = data.instrument(instrument)
    n = one.n_bars
    cfg = (config or EnvConfig()).replace(autoreset_mode="disabled")
    if cfg.episode_length > n - 1:
        cfg = cfg.replace(episode_length=n - 1)
    env = TradingVectorEnv(k, device=device, data=one, config=cfg, array_type="numpy")
    rates = action_table(cfg).cost_rate
    exit_rate = cfg.order_cost_bps[0] / 1e4
    close = np.asarray(one.close, dtype=np.float64)
    fill = close if cfg.fill == "close" else np.r_[np.asarray(one.open)[1:], np.nan]
    c0 = cfg.initial_capital
    equity = np.ones((k, n), dtype=np.float64)
    exposure = np.zeros((k, n - 1))
    traded = np.zeros((k, n - 1))
    costs = np.zeros((k, n - 1))
    scale = np.ones(k)  # equity at the start of each one's current episode
    pos, value = np.zeros(k), np.full(k, float(c0))  # env units, before the bar's trade
    episodes = np.zeros(k, dtype=np.int64)
    ruin_bar, ruin_value = np.full(k, -1), np.zeros(k)  # -1: not ruined
    obs, _ = env.reset(seed=0, options={"start_index": 0})
    for bar in range(n - 1):
        action = np.asarray(policy(obs, bar), dtype=np.int64).reshape(k)
        obs, _, terminated, truncated, info = env.step(action)
        new_pos = np.asarray(info["position"], dtype=np.float64)
        new_value = np.asarray(info["portfolio_value"], dtype=np.float64)
        notional = np.abs(new_pos - pos) * fill[bar]
        traded[:, bar] = notional / value
        costs[:, bar] = scale * notional * rates[action] / c0
        exposure[:, bar] = new_pos * close[bar] / value
        equity[:, bar + 1] = scale * new_value / c0
        pos, value = new_pos, new_value
        alive = ruin_bar < 0
        ended = np.asarray(terminated | truncated, dtype=bool) & alive
        if bar + 1 < n - 1 and ended.any():
            # An episode ending with a position is closed at this bar's close, at the market
            # order's cost; the next starts flat here.
            held = ended & (pos != 0.0)
            exit_cost = np.abs(pos) * close[bar + 1] * exit_rate
            equity[held, bar + 1] -= scale[held] * exit_cost[held] / c0
            costs[held, bar] += scale[held] * exit_cost[held] / c0
            traded[held, bar] += np.abs(pos[held]) * close[bar + 1] / value[held]
        _floor_ruins(bar, alive, equity, exposure, traded, costs, ruin_bar, ruin_value)
        ended &= ruin_bar < 0  # a ruined backtest's env stays ended: no capital to restart
        if bar + 1 < n - 1 and ended.any():
            scale[ended] = equity[ended, bar + 1]
            episodes[ended] += 1
            pos[ended], value[ended] = 0.0, c0
            obs, _ = env.reset(options={"start_index": bar + 1, "reset_mask": ended})
    episodes += 1
    per_year = bars_per_year(one.timestamps) if per_year is None else float(per_year)
    units = float(env.max_position[0]) if cfg.sizing == "units" else None
    curves = (equity, exposure, traded, costs)
    return _results(one, curves, episodes, per_year, exit_rate, (ruin_bar, ruin_value), units)


def _floor_ruins(
    bar: int,
    alive: np.ndarray,
    equity: np.ndarray,
    exposure: np.ndarray,
    traded: np.ndarray,
    costs: np.ndarray,
    ruin_bar: np.ndarray,
    ruin_value: np.ndarray,
) -> None:
    """Record the backtests whose equity at ``bar + 1`` fell to 0 or below (``ruin_bar``,
    ``ruin_value`` [k], in place), and hold every ruined one at the floor: equity 0 at
    ``bar + 1``, and no exposure, trade or cost over ``bar`` for those ruined before it (their
    env waits ended, its outputs unused)."""
    now = alive & (equity[:, bar + 1] <= 0.0)
    ruin_bar[now] = bar + 1
    ruin_value[now] = equity[now, bar + 1]
    dead = ~alive
    exposure[dead, bar] = traded[dead, bar] = costs[dead, bar] = 0.0
    equity[dead | now, bar + 1] = 0.0


def _results(
    one: MarketData,
    curves: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    episodes: np.ndarray,
    per_year: float,
    exit_rate: float,
    ruin: tuple[np.ndarray, np.ndarray],
    max_position: float | None,
) -> list[BacktestResult]:
    """The ``k`` results of :func:`backtest_batch` from its per-bar arrays (``curves``: ``[k, n]``
    equity, ``[k, n - 1]`` exposure, traded and costs; ``[k]`` episodes; ``ruin``: ``[k]`` bars
    of ruin, -1 for none, and the values there) over the instrument ``one``."""
    equity, exposure, traded, costs = curves
    ruin_bar, ruin_value = ruin
    close = np.asarray(one.close, dtype=np.float64)
    k = len(equity)
    bh, benchmark, frictionless = _benchmarks(close, exit_rate, per_year)
    return [
        BacktestResult(
            equity=equity[j],
            buy_and_hold=bh,
            timestamps=one.timestamps,
            exposure=exposure[j],
            traded=traded[j],
            costs=costs[j],
            strategy=curve_metrics(
                equity[j],
                per_year,
                costs_included=True,
                exposure=exposure[j],
                traded=traded[j],
                costs=costs[j],
            ),
            benchmark=benchmark,
            frictionless_buy_and_hold=frictionless,
            episodes=int(episodes[j]),
            instrument=one.instruments[0],
            ruined_at_bar=int(ruin_bar[j]) if ruin_bar[j] >= 0 else None,
            ruin_value=float(ruin_value[j]) if ruin_bar[j] >= 0 else None,
            max_position=max_position,
        )
        for j in range(k)
    ]


def _benchmarks(
    close: np.ndarray, exit_rate: float, per_year: float
) -> tuple[np.ndarray, Metrics, Metrics]:
    """``(buy_and_hold, benchmark, frictionless)``: the buy-and-hold equity [n] with the market
    order's costs (bought at the first bar, sold at the last), its metrics, and the metrics of
    the close's own curve without costs."""
    bh, bh_costs = buy_and_hold_equity(close, exit_rate)
    n = len(close)
    bh_traded = np.zeros(n - 1)
    bh_traded[0] = 1.0
    bh_traded[-1] += 1.0
    benchmark = curve_metrics(
        bh,
        per_year,
        costs_included=True,
        exposure=np.ones(n - 1),
        traded=bh_traded,
        costs=bh_costs,
    )
    frictionless = curve_metrics(close / close[0], per_year, costs_included=False)
    return bh, benchmark, frictionless


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
