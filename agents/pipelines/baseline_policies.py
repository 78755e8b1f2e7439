"""Parameter-free baselines, and the test a trained network must pass to be kept over them.

A Q-network trained on a few thousand bars fits their noise as well as their edge: on a market
with no edge it still finds bars where one action looks better than another and trades on them,
paying costs out of sample (on a driftless random walk the agent of release 0.1 traded away 23%
of its capital). Model selection on a validation window does not stop this by itself: the best
of several snapshots is the best of several noisy draws.

So ``train`` keeps the network only when it beats the best policy that has nothing to fit:

1. **The baseline** is chosen on the whole training window (fit and validation bars): hold long
   if holding is significantly better than staying flat there (the circular block bootstrap of
   the Sharpe difference, :func:`gpu_trading_env.reports.metrics.sharpe_difference_interval`,
   lower bound of the two-sided ``level`` interval above zero), hold short if significantly
   worse, else flat. Choosing among three fixed policies on all the training bars barely
   overfits, and all the bars give the drift test its power.
2. **The network** (the snapshot best on validation) is kept if, on the validation window, its
   Sharpe beats flat's (zero) by White's reality check over every snapshot it was chosen from
   (:func:`gpu_trading_env.reports.metrics.best_sharpe_reality_check`: the best of ten noisy
   snapshots beats zero by chance far more often than one does; on ten unrelated noise
   strategies the plain test of the best passed 40% of the time, the reality check 4%) and,
   where the baseline is a hold, its Sharpe there is at least the hold's; otherwise the model
   is made to act as the baseline
   (:func:`set_constant_policy`), and the report says so. The hold is not a bar the network
   must clear with significance: a drift that passed the test on the training bars may be
   noise (on an AR(1) market with no drift, one seed in five chose hold long, and its network,
   0.68 of the known rule's Sharpe out of sample, was replaced by a losing hold), while a
   network that loses to a real drift on validation is not kept.
3. **Where the features predict the next return**, the validation evidence the network needs is
   less. A weak edge after costs is about 1.5 standard errors wide over the validation window
   even for the known rule (the zoo's phi 0.05 market: the rule passed step 2 in 48% of
   seeds), while the same market's predictability before costs is about 6 standard errors wide
   over all the training bars. So the training window is tested first: if the robust Wald test
   that the features' regression slopes on the next bar's log return are all zero
   (:func:`features_predict_returns`) rejects at ``predictability_level`` (1%), the network is
   kept where its validation Sharpe allowing for the choice among snapshots (the reality
   check's point estimate, ``adjusted``) is above zero, the hold condition unchanged. On a
   market without an edge this adds at most ``predictability_level`` to the chance of keeping
   a network, whatever the network does: both tests must pass, and the first fails that
   often. With ``train``'s input selection (:mod:`agents.pipelines.input_selection`, the
   default) the test is the selection's family-wise p-value instead: the features' slopes one
   by one with Holm's correction, and a fitted regime filter's forecast tested out of its
   fitting sample, which carries the regime market's edge where no feature does linearly.

Costs are in every curve, so a network that trades an edge too small to pay for its turnover
loses to the baseline too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.backtest import BacktestResult, backtest, exposure_policy
from gpu_trading_env.reports.metrics import (
    best_sharpe_reality_check,
    regression_slopes_test,
    sharpe_difference_interval,
)

__all__ = [
    "BASELINE_EXPOSURE",
    "GATE_LEVEL",
    "PREDICTABILITY_LEVEL",
    "BaselineChoice",
    "GateVerdict",
    "ValidationReturns",
    "baseline_action",
    "baseline_backtest",
    "choose_baseline",
    "features_predict_returns",
    "network_beats_baseline",
    "set_constant_policy",
]

# Exposure of each parameter-free policy, a fraction of max_position.
BASELINE_EXPOSURE = {"flat": 0.0, "hold long": 1.0, "hold short": -1.0}
# Two-sided interval level of both tests: a lower bound above zero is a one-sided test at 5%.
GATE_LEVEL = 0.90
# Level of the training window's test that the features predict the next bar's return, below
# which the network needs only a positive validation Sharpe allowing for its choice (step 3 of
# the module doc). On 100 markets each of 16,000 training bars (benchmarks/predictability_power.py)
# it rejected on 82% of phi 0.05 AR(1)s and on 1%, 1% and 0% of driftless and drifting random
# walks and of regime switching without drift.
PREDICTABILITY_LEVEL = 0.01


@dataclass(frozen=True)
class BaselineChoice:
    """The baseline chosen on the training window, and the evidence for it."""

    name: str  # a key of BASELINE_EXPOSURE
    hold_vs_flat: dict[str, float]  # sharpe_difference_interval of holding long against flat


@dataclass(frozen=True)
class ValidationReturns:
    """Per-bar returns of a policy over validation bars: what the test reads of a backtest. A
    cross-fitted pair of networks (``train --cross-fit``) is judged on two windows' returns
    joined."""

    returns: np.ndarray  # float64 [T]


@dataclass(frozen=True)
class GateVerdict:
    """Whether the network is kept over the baseline, and the validation evidence."""

    keep_network: bool
    baseline: str
    validation: dict[str, float]  # sharpe_difference_interval(network, baseline) on validation
    validation_vs_flat: dict[str, float]  # best_sharpe_reality_check of the snapshots: the test
    # features_predict_returns on the training window, or None where not tested
    predictability: dict[str, float] | None = None
    # How flat was beaten: "significant" (step 2), "predictable" (step 3) or None (it was not)
    beat_flat_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kept": "network" if self.keep_network else self.baseline,
            "baseline": self.baseline,
            "level": GATE_LEVEL,
            "network_minus_flat_validation_sharpe": self.validation_vs_flat,
            "network_minus_baseline_validation_sharpe": self.validation,
            "features_predict_next_return": self.predictability,
            "beat_flat_by": self.beat_flat_by,
        }


def baseline_backtest(
    name: str, data: MarketData, config: EnvConfig, per_year: float
) -> BacktestResult:
    """The backtest of baseline ``name`` (a key of :data:`BASELINE_EXPOSURE`) on ``data``."""
    if name not in BASELINE_EXPOSURE:
        raise ValueError(
            f"baseline = {name!r} is invalid: allowed is one of {sorted(BASELINE_EXPOSURE)}"
        )
    exposure = np.full(data.n_bars, BASELINE_EXPOSURE[name])
    return backtest(exposure_policy(exposure, config), data, config, per_year=per_year)


def baseline_action(name: str, config: EnvConfig) -> int:
    """The env action baseline ``name`` takes at every bar: the exposure level nearest its
    exposure, market order (the action :func:`exposure_policy` takes for it)."""
    levels = np.asarray(config.exposure_levels)
    return config.encode_action(int(np.abs(levels - BASELINE_EXPOSURE[name]).argmin()))


def choose_baseline(train: MarketData, config: EnvConfig, per_year: float) -> BaselineChoice:
    """Flat, hold long or hold short, from the whole training window (see the module doc)."""
    hold = baseline_backtest("hold long", train, config, per_year)
    ci = sharpe_difference_interval(
        hold.returns, np.zeros_like(hold.returns), per_year, level=GATE_LEVEL
    )
    name = "hold long" if ci["low"] > 0.0 else "hold short" if ci["high"] < 0.0 else "flat"
    return BaselineChoice(name, ci)


def features_predict_returns(train: MarketData) -> dict[str, float] | None:
    """Step 3's test on the training window: the robust Wald test that the regression of each
    bar's next log return (close to close, within its instrument) on that bar's features has no
    slope (:func:`gpu_trading_env.reports.metrics.regression_slopes_test`): ``{"statistic",
    "df", "p_value", "bars"}``; None where the window has too few bars for the regression
    (at most two per feature: the test would say nothing), and step 3 is not taken."""
    features, next_returns = train.features_and_next_returns()
    if len(next_returns) <= 2 * train.n_features:
        return None
    return regression_slopes_test(features, next_returns)


def network_beats_baseline(
    network: BacktestResult | ValidationReturns,
    baseline: BacktestResult | ValidationReturns,
    name: str,
    per_year: float,
    candidates: Sequence[BacktestResult | ValidationReturns] | None = None,
    predictability: dict[str, float] | None = None,
    predictability_level: float = PREDICTABILITY_LEVEL,
) -> GateVerdict:
    """The validation test of the module doc: ``network`` and ``baseline`` (named ``name``) are
    backtests of the same validation window; ``candidates`` are the backtests there of every
    snapshot ``network`` was chosen from as the best (``network`` among them; ``None``: it
    alone), which the test against flat allows for. ``predictability`` is
    :func:`features_predict_returns` of the training window (``None``: step 3 is not taken);
    below ``predictability_level`` (0 turns step 3 off) its p-value lets a positive
    choice-adjusted validation Sharpe beat flat."""
    if not 0.0 <= predictability_level < 1.0:
        raise ValueError(
            f"predictability_level = {predictability_level!r} is invalid: allowed is a number "
            "in [0, 1) (0 turns the test off)"
        )
    pool = [network] if candidates is None else list(candidates)
    chosen = next((k for k, c in enumerate(pool) if c is network), None)
    if chosen is None:
        raise ValueError("candidates must hold the network's own backtest")
    vs_flat = best_sharpe_reality_check(
        np.stack([c.returns for c in pool]), per_year, level=GATE_LEVEL, chosen=chosen
    )
    predictable = predictability is not None and predictability["p_value"] < predictability_level
    beat_flat_by = None
    if vs_flat["low"] > 0.0:
        beat_flat_by = "significant"
    elif predictable and vs_flat["adjusted"] > 0.0:
        beat_flat_by = "predictable"
    if name == "flat":
        return GateVerdict(
            beat_flat_by is not None, name, vs_flat, vs_flat, predictability, beat_flat_by
        )
    ci = sharpe_difference_interval(network.returns, baseline.returns, per_year, level=GATE_LEVEL)
    keep = bool(beat_flat_by is not None and ci["difference"] >= 0.0)
    return GateVerdict(keep, name, ci, vs_flat, predictability, beat_flat_by)


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
