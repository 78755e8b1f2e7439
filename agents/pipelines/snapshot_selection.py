"""Which snapshot of a training run is kept (``selected_snapshot``), and the figures that judge
the choice: its validation Sharpe beside buy-and-hold's, its deflated Sharpe ratio, the
smallest edge the gate could detect (``gate_resolution``), the probability of backtest
overfitting of the choice (``overfitting_probability``), and with cross-fitting a second
network judged on the earlier bars (``cross_fitted``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.pipelines.baseline_policies import baseline_action, baseline_backtest
from agents.pipelines.deployment import GATE_LEVEL, HOLD_PART_LEVEL, PREDICTABLE_P_VALUE
from agents.pipelines.input_selection import InputSelection
from agents.pipelines.snapshot_training import backtest_snapshots, train_with_snapshots
from agents.pipelines.train_config import TrainSettings
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.backtest import BacktestResult
from gpu_trading_env.reports.metrics import sharpe
from gpu_trading_env.reports.sharpe_inference import (
    DetectableEdge,
    detectable_edge,
    effective_trials,
    probability_of_backtest_overfitting,
)
from gpu_trading_env.reports.significance import sharpe_difference_interval

if TYPE_CHECKING:
    from gpu_trading_env.reports.sharpe_inference import DeflatedSharpe

__all__ = [
    "CrossFitted",
    "cross_fitted",
    "deflated_sharpe",
    "gate_resolution",
    "overfitting_probability",
    "selected_snapshot",
    "vs_buy_and_hold",
]


def selected_snapshot(validation: list[float]) -> int:
    """The kept snapshot's index: the best validation Sharpe, the latest of equals; the latest
    snapshot when no Sharpe is a number (a flat equity curve)."""
    best, best_value = len(validation) - 1, -np.inf
    for j, v in enumerate(validation):
        if v >= best_value:  # NaN compares false: never kept over a number
            best, best_value = j, v
    return best


def vs_buy_and_hold(result: BacktestResult, per_year: float) -> dict[str, float] | None:
    """The validation Sharpe of ``result`` minus buy-and-hold's there (same bars, costs in), a
    ``sharpe_difference_interval``; None where the two return series do not line up."""
    bh = result.buy_and_hold_returns
    if len(bh) < 2 or len(bh) != len(result.returns):
        return None
    return sharpe_difference_interval(result.returns, bh, per_year, level=GATE_LEVEL)


def deflated_sharpe(
    chosen: BacktestResult,
    snapshots: list[BacktestResult],
    selection: InputSelection | None,
    per_year: float,
    inputs_tested: int | None = None,
) -> DeflatedSharpe | None:
    """The deflated Sharpe ratio of the chosen snapshot's validation returns: trials are the
    inputs the selection tested times the snapshots, the variance of the trials' Sharpe ratios
    the snapshots' (per bar); None where it cannot be computed (too few bars, no variance).
    ``inputs_tested`` overrides the count of inputs tested (a portfolio's input columns)."""
    try:
        from gpu_trading_env.reports.sharpe_inference import deflated_sharpe_ratio
    except ImportError:  # a tree without the module reports no deflated ratio
        return None

    if inputs_tested is None:
        inputs_tested = (len(selection.feature_names) + 1) if selection is not None else 1
    per_bar = np.array([sharpe(r.returns, 1.0) for r in snapshots], dtype=np.float64)
    per_bar = per_bar[np.isfinite(per_bar)]
    variance = float(np.var(per_bar, ddof=1)) if len(per_bar) > 1 else 0.0
    returns = np.asarray(chosen.returns, dtype=np.float64)
    if len(returns) < 3 or not np.std(returns) > 0.0 or not variance > 0.0:
        return None
    try:
        result = deflated_sharpe_ratio(
            returns, n_trials=inputs_tested * len(snapshots), sr_variance=variance
        )
    except ValueError:
        return None
    return result


# The power at which the gate's resolution is stated: the edge it detects 4 times in 5.
GATE_POWER = 0.80
# Bars per CSCV block at least, and blocks at most (C(16, 8) = 12,870 splits).
_PBO_BLOCK_BARS, _PBO_MAX_BLOCKS = 8, 16


def gate_resolution(
    bars: int,
    per_year: float,
    baseline: str,
    candidates: list[np.ndarray] | None = None,
    predictable: bool = False,
) -> DetectableEdge | None:
    """The smallest annualised Sharpe edge the deployment gate detects with ``GATE_POWER`` in
    ``bars`` validation bars (:func:`~gpu_trading_env.reports.sharpe_inference.detectable_edge`).

    Against flat, every condition of the gate is counted: the reality check at its one-sided
    level (``PREDICTABLE_P_VALUE / 2`` where ``predictable``: step 4), over the effective number
    of independent trials among ``candidates`` (the snapshots' validation returns), the edge above
    zero in each half and above its ``HOLD_PART_LEVEL`` bound in the last third. Against a hold
    the halves and third are the network's edge over the hold, whose variance depends on how
    the two correlate; the figure is then the reality check's alone, a lower bound. None where
    the bars are too few for the power at any Sharpe.
    """
    level = PREDICTABLE_P_VALUE / 2.0 if predictable else (1.0 - GATE_LEVEL) / 2.0
    trials = 1 if not candidates else effective_trials(np.column_stack(candidates))
    stacked = baseline == "flat"
    try:
        return detectable_edge(
            bars,
            per_year,
            level=level,
            power=GATE_POWER,
            n_trials=trials,
            halves=stacked,
            last_third_level=HOLD_PART_LEVEL if stacked else None,
        )
    except ValueError:  # fewer than 6 bars, or too few for the power
        return None


def overfitting_probability(candidates: list[np.ndarray]) -> dict[str, Any]:
    """The probability of backtest overfitting (CSCV) of choosing among ``candidates`` (float
    [T] validation returns each: the snapshots and the baselines; a policy that stays flat in
    a half has Sharpe 0 there): ``{"pbo", "candidates", "splits", "blocks", "bars"}``, with
    ``pbo`` None and ``"reason"`` where it is not computable (fewer than 2 candidates, none
    that trades, or fewer than ``4 * _PBO_BLOCK_BARS`` bars)."""
    bars = min((len(c) for c in candidates), default=0)
    blocks = min(_PBO_MAX_BLOCKS, 2 * (bars // (2 * _PBO_BLOCK_BARS)))
    out: dict[str, Any] = {"pbo": None, "candidates": len(candidates), "bars": bars}
    if len(candidates) < 2:
        return {**out, "reason": "fewer than 2 candidates"}
    if blocks < 4:
        return {**out, "reason": f"too few bars ({bars}; {4 * _PBO_BLOCK_BARS} needed)"}
    matrix = np.column_stack([np.asarray(c, dtype=np.float64)[:bars] for c in candidates])
    if not (np.std(matrix, axis=0) > 0.0).any():
        return {**out, "reason": "no candidate trades"}
    result = probability_of_backtest_overfitting(matrix, blocks, flat_sharpe=0.0)
    return {**out, "pbo": result.pbo, "splits": result.n_splits, "blocks": blocks}


@dataclass(frozen=True)
class CrossFitted:
    """The second network of ``settings.cross_fit``, judged on the bars the first trained on.

    :param runs: each snapshot's backtest on the validation bars (the first ``validation_bars``).
    :param baseline: the baseline's backtest there.
    :param fit_bars: bars per instrument it trained on (the last ones of the training window).
    :param validation_bars: bars per instrument it was judged on.
    :param train_seconds: its training's wall-clock seconds.
    """

    runs: list[BacktestResult]
    baseline: BacktestResult
    fit_bars: int
    validation_bars: int
    train_seconds: float


def cross_fitted(
    train: MarketData,
    n_val: int,
    config: EnvConfig,
    settings: TrainSettings,
    seed: int,
    per_year: float,
    baseline: str,
    init_from: Any = None,
) -> CrossFitted:
    """The second network of ``settings.cross_fit``: trained on the last ``n - n_val`` bars of
    each instrument of ``train`` and backtested, every snapshot, on the first ``n_val`` (which
    the first network trained on).

    It doubles the validation bars of the fallback's test (its power: experiments/README.md) for one
    more training; the deployed network stays the first,
    which never saw a bar after its validation window. It starts from ``init_from`` as the
    first does (a walk-forward warm start), so that the test judges the same procedure.
    """
    n = int(train.bars_per_instrument.min())
    early, late = train.split(float(n_val) / n)
    model, env, cb, wall = train_with_snapshots(
        late, early, config, settings, seed, init_from=init_from
    )
    env.close()
    ((runs, _),) = backtest_snapshots(
        cb.snapshots, baseline_action(baseline, config), (early,), config, per_year
    )
    base = baseline_backtest(baseline, early, config, per_year)
    del model
    return CrossFitted(
        runs=runs,
        baseline=base,
        fit_bars=int(late.bars_per_instrument.min()),
        validation_bars=int(early.bars_per_instrument.min()),
        train_seconds=wall,
    )
