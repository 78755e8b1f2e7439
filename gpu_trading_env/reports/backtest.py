"""Walk-forward backtests of a policy on MarketData, with metrics and plots for a report.

A backtest walks every instrument from its first bar to its last with one env, episodes
back to back: when an episode ends (a barrier, or ``episode_length``), the next starts at the
bar where it ended, flat, so the equity curve covers the whole period. The env's own semantics
(fills, costs, barriers) apply unchanged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.vector_env import TradingVectorEnv

Policy = Callable[[np.ndarray, int], np.ndarray]
"""Maps an observation float32 [1, D] and its bar index (within the instrument) to an action."""


@dataclass
class Metrics:
    """Performance of one equity curve (returns are fractions, not percent)."""

    total_return: float
    annual_return: float
    sharpe: float
    max_drawdown: float
    n_bars: int


@dataclass
class BacktestResult:
    equity: np.ndarray  # float64 [T], strategy value / initial capital, per bar
    buy_and_hold: np.ndarray  # float64 [T], close / first close
    timestamps: np.ndarray  # datetime64[ns] [T]
    strategy: Metrics
    benchmark: Metrics
    episodes: int
    instrument: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "instrument": self.instrument,
            "episodes": self.episodes,
            "strategy": asdict(self.strategy),
            "buy_and_hold": asdict(self.benchmark),
            **self.extra,
        }


def bars_per_year(timestamps: np.ndarray) -> float:
    """Annualisation factor from the median bar spacing (365.25 days a year)."""
    if len(timestamps) < 2:
        return 252.0
    step = np.median(np.diff(timestamps.astype("datetime64[ns]").astype(np.int64)))
    return float(365.25 * 24 * 3600 * 1e9 / max(step, 1))


def curve_metrics(equity: np.ndarray, per_year: float) -> Metrics:
    """Total and annualised return, annualised Sharpe of per-bar returns, max drawdown."""
    equity = np.asarray(equity, dtype=np.float64)
    rets = np.diff(equity) / equity[:-1]
    total = float(equity[-1] / equity[0] - 1.0)
    years = max(len(rets) / per_year, 1e-12)
    annual = float((equity[-1] / equity[0]) ** (1.0 / years) - 1.0) if equity[-1] > 0 else -1.0
    sd = float(np.std(rets))
    sharpe = float(np.mean(rets) / sd * math.sqrt(per_year)) if sd > 0 else 0.0
    peak = np.maximum.accumulate(equity)
    mdd = float(np.max(1.0 - equity / peak))
    return Metrics(total, annual, sharpe, mdd, int(len(equity)))


def backtest(
    policy: Policy,
    data: MarketData,
    config: EnvConfig | None = None,
    instrument: int = 0,
    device: str = "cpu",
) -> BacktestResult:
    """Run ``policy`` over one instrument of ``data`` from its first bar to its last."""
    one = data.instrument(instrument)
    n = one.n_bars
    cfg = (config or EnvConfig()).replace(autoreset_mode="disabled")
    if cfg.episode_length > n - 1:
        cfg = cfg.replace(episode_length=n - 1)
    env = TradingVectorEnv(1, device=device, data=one, config=cfg, array_type="numpy")
    equity = np.ones(n, dtype=np.float64)
    scale = 1.0
    bar = 0
    episodes = 0
    obs, _ = env.reset(seed=0, options={"start_index": 0})
    while bar < n - 1:
        action = np.asarray(policy(obs, bar), dtype=np.int64).reshape(1)
        obs, _, terminated, truncated, info = env.step(action)
        bar += 1
        equity[bar] = scale * float(info["portfolio_value"][0]) / cfg.initial_capital
        if (terminated[0] or truncated[0]) and bar < n - 1:
            scale = equity[bar]
            episodes += 1
            obs, _ = env.reset(options={"start_index": bar, "reset_mask": np.ones(1, dtype=bool)})
    episodes += 1
    bh = one.close / one.close[0]
    per_year = bars_per_year(one.timestamps)
    return BacktestResult(
        equity=equity,
        buy_and_hold=bh,
        timestamps=one.timestamps,
        strategy=curve_metrics(equity, per_year),
        benchmark=curve_metrics(bh, per_year),
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


def plot_equity(result: BacktestResult, path: Path, title: str = "Out-of-sample equity") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(
        result.timestamps, result.equity, label=f"strategy (Sharpe {result.strategy.sharpe:.2f})"
    )
    ax.plot(
        result.timestamps,
        result.buy_and_hold,
        label=f"buy and hold (Sharpe {result.benchmark.sharpe:.2f})",
        alpha=0.8,
    )
    ax.set_ylabel("value / initial capital")
    ax.set_title(f"{title}: {result.instrument}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_learning_curve(
    timesteps: np.ndarray, returns: np.ndarray, path: Path, reference: float | None = None
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(timesteps, returns, label="mean episode return (last 100)")
    if reference is not None:
        ax.axhline(reference, color="k", ls="--", label="reference")
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return")
    ax.set_title("Learning curve")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_json(obj: Any, path: Path) -> None:
    path.write_text(json.dumps(obj, indent=2, default=float))
