"""Parameter-free baselines, and the tests a trained network must pass to be deployed over them.

A Q-network trained on a few thousand bars fits their noise as well as their edge, and an edge
the training bars show is often gone in the bars after them. Model selection on a validation
window does not stop either by itself: the best of several snapshots is the best of several
noisy draws. So ``train`` deploys the network only where the edge held up, and otherwise the
best policy that has nothing to fit:

1. **The baseline** is chosen on the whole training window (fit and validation bars): hold long
   where holding beats staying flat there (the circular block bootstrap of the Sharpe
   difference, :func:`gpu_trading_env.reports.significance.sharpe_difference_interval`, lower bound
   of the two-sided ``GATE_LEVEL`` interval above zero) **and** in each of its ``HOLD_PARTS``
   consecutive parts (one-sided at ``HOLD_PART_LEVEL``); hold short where all are worse; flat
   otherwise. A drift that flips sign, or that one stretch of the training bars carries, is no
   reason to hold.
2. **No input, no network.** Where the input selection (:mod:`agents.pipelines.input_selection`,
   the default) keeps no input, the network would see nothing that predicted a return on the
   training bars; ``train`` deploys the baseline without training one.
3. **The network** (the snapshot best on validation) is deployed where, on the validation
   window, its Sharpe beats flat's (zero) by White's reality check over every snapshot it was
   chosen from (:func:`gpu_trading_env.reports.significance.best_sharpe_reality_check`, the lower
   bound of its ``GATE_LEVEL`` interval above zero: "significant"); where the baseline is a
   hold, its Sharpe minus the hold's has the lower bound of its ``GATE_LEVEL`` interval above
   zero too (a network replaces a hold only where it beats the hold, not only flat); its
   Sharpe is above the baseline's in each half of the validation window (an edge one stretch
   of the window carries is not one that held up); and it beats the baseline in the **last
   third** of the validation window, the bars nearest the ones it will trade, by the bootstrap
   test at the one-sided ``HOLD_PART_LEVEL`` a hold's drift is held to in each part (an edge
   that was fading by the end of the training bars is one the next bars are least likely to
   keep).
4. **Where the inputs predict the next return** on the training bars (the selection's
   family-wise p-value below ``predictability_level``), the validation evidence the network
   needs is less, since a weak edge after costs is only one or two standard errors wide over
   the validation window even for the best rule: the reality check's p-value below
   ``PREDICTABLE_P_VALUE`` (a one-sided level of an eighth: "predictable"). A validation Sharpe
   barely above zero allowing for the choice is not enough.

Costs are in every curve, so a network that trades an edge too small to pay for its turnover
loses to the baseline too. :class:`Deployment` says in one line what was deployed and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.backtest import BacktestResult, backtest, exposure_policy
from gpu_trading_env.reports.metrics import sharpe
from gpu_trading_env.reports.significance import (
    best_sharpe_reality_check,
    regression_slopes_test,
    sharpe_difference_interval,
)

__all__ = [
    "BASELINE_EXPOSURE",
    "GATE_LEVEL",
    "HOLD_PARTS",
    "HOLD_PART_LEVEL",
    "PREDICTABILITY_LEVEL",
    "PREDICTABLE_P_VALUE",
    "STABILITY_LEVEL",
    "BaselineChoice",
    "GateVerdict",
    "ValidationReturns",
    "baseline_action",
    "baseline_backtest",
    "baseline_config",
    "choose_baseline",
    "features_predict_returns",
    "network_beats_baseline",
    "set_baseline_policy",
    "set_constant_policy",
]

# Exposure of each parameter-free policy, a fraction of max_position.
BASELINE_EXPOSURE = {"flat": 0.0, "hold long": 1.0, "hold short": -1.0}
# Two-sided interval level of both tests: a lower bound above zero is a one-sided test at 5%.
GATE_LEVEL = 0.90
# Level of the training window's test that the inputs predict the next bar's return, below
# which the network needs less validation evidence (step 4 of the module doc).
PREDICTABILITY_LEVEL = 0.01
# The reality check's p-value (twice the one-sided share) that step 4 requires on validation.
PREDICTABLE_P_VALUE = 0.25
# One-sided level at which an edge must hold in each part of the training bars it is checked on.
STABILITY_LEVEL = 0.10
# Consecutive parts of the training bars a hold's drift must show in, and the one-sided level
# of each part's test: more parts at a looser level than the features' test, since each part
# is shorter and a drift is one number, not a fitted rule.
HOLD_PARTS = 3
HOLD_PART_LEVEL = 0.20


@dataclass(frozen=True)
class BaselineChoice:
    """The baseline chosen on the training window, and the evidence for it."""

    name: str  # a key of BASELINE_EXPOSURE
    hold_vs_flat: dict[str, float]  # sharpe_difference_interval of holding long against flat
    # The same test on each of HOLD_PARTS consecutive parts of the training window, at the
    # one-sided HOLD_PART_LEVEL (empty where the window is too short to cut).
    parts: tuple[dict[str, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "hold_vs_flat": self.hold_vs_flat, "parts": list(self.parts)}


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
    # How flat was beaten: "significant" (step 3), "predictable" (step 4) or None (it was not)
    beat_flat_by: str | None = None
    # The network's Sharpe minus the baseline's in each half of the validation window
    halves: tuple[float, ...] = ()
    # The same in each third and quarter (the quarters recorded, not tested)
    thirds: tuple[float, ...] = ()
    quarters: tuple[float, ...] = ()
    # The bootstrap test (sharpe_difference_interval at the one-sided HOLD_PART_LEVEL, the level
    # a hold's drift is held to in each part) of the network against the baseline in each half
    # and each third of validation; the last third's is step 3's last test
    half_tests: tuple[dict[str, float], ...] = ()
    third_tests: tuple[dict[str, float], ...] = ()

    @property
    def held_in_halves(self) -> bool:
        """Whether the network's Sharpe is above the baseline's in each half of validation."""
        return bool(self.halves) and all(h > 0.0 for h in self.halves)

    @property
    def held_in_last_third(self) -> bool:
        """Whether the network beat the baseline in the last third of validation: the lower
        bound of that third's one-sided ``HOLD_PART_LEVEL`` interval above zero (False where
        the window is too short to cut in thirds)."""
        return bool(self.third_tests) and self.third_tests[-1]["low"] > 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kept": "network" if self.keep_network else self.baseline,
            "baseline": self.baseline,
            "level": GATE_LEVEL,
            "network_minus_flat_validation_sharpe": self.validation_vs_flat,
            "network_minus_baseline_validation_sharpe": self.validation,
            "features_predict_next_return": self.predictability,
            "beat_flat_by": self.beat_flat_by,
            "network_minus_baseline_sharpe_in_validation_halves": list(self.halves),
            "network_minus_baseline_sharpe_in_validation_thirds": list(self.thirds),
            "network_minus_baseline_sharpe_in_validation_quarters": list(self.quarters),
            "network_minus_baseline_validation_half_tests": list(self.half_tests),
            "network_minus_baseline_validation_third_tests": list(self.third_tests),
            "held_in_last_validation_third": self.held_in_last_third,
        }


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


def choose_baseline(train: MarketData, config: EnvConfig, per_year: float) -> BaselineChoice:
    """Flat, hold long or hold short, from the whole training window and each of its
    ``HOLD_PARTS`` parts (step 1 of the module doc)."""
    hold = baseline_backtest("hold long", train, config, per_year)
    r = hold.returns
    ci = sharpe_difference_interval(r, np.zeros_like(r), per_year, level=GATE_LEVEL)
    parts: tuple[dict[str, float], ...] = ()
    if len(r) >= 4 * HOLD_PARTS:
        parts = tuple(
            sharpe_difference_interval(p, np.zeros_like(p), per_year, level=1 - 2 * HOLD_PART_LEVEL)
            for p in np.array_split(r, HOLD_PARTS)
        )
    if ci["low"] > 0.0 and parts and all(p["low"] > 0.0 for p in parts):
        name = "hold long"
    elif ci["high"] < 0.0 and parts and all(p["high"] < 0.0 for p in parts):
        name = "hold short"
    else:
        name = "flat"
    return BaselineChoice(name, ci, parts)


def features_predict_returns(train: MarketData) -> dict[str, float] | None:
    """Step 4's test on the training window: the robust Wald test that the regression of each
    bar's next log return (close to close, within its instrument) on that bar's features has no
    slope (:func:`gpu_trading_env.reports.significance.regression_slopes_test`): ``{"statistic",
    "df", "p_value", "bars"}``; None where the window has too few bars for the regression
    (at most two per feature: the test would say nothing), and step 4 is not taken."""
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
    :func:`features_predict_returns` of the training window (``None``: step 4 is not taken);
    below ``predictability_level`` (0 turns step 4 off) its p-value lets a reality-check
    p-value below ``PREDICTABLE_P_VALUE`` beat flat."""
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
    elif predictable and vs_flat["p_value"] < PREDICTABLE_P_VALUE and vs_flat["adjusted"] > 0.0:
        beat_flat_by = "predictable"
    halves, thirds, quarters = (
        _parts_difference(network.returns, baseline.returns, per_year, n) for n in (2, 3, 4)
    )
    half_tests, third_tests = (
        _parts_tests(network.returns, baseline.returns, per_year, n) for n in (2, 3)
    )
    held = bool(halves) and all(h > 0.0 for h in halves)
    recent = bool(third_tests) and third_tests[-1]["low"] > 0.0
    if name == "flat":
        keep = beat_flat_by is not None and held and recent
        ci = vs_flat
    else:
        ci = sharpe_difference_interval(
            network.returns, baseline.returns, per_year, level=GATE_LEVEL
        )
        keep = bool(beat_flat_by is not None and held and recent and ci["low"] > 0.0)
    return GateVerdict(
        keep,
        name,
        ci,
        vs_flat,
        predictability,
        beat_flat_by,
        halves,
        thirds,
        quarters,
        half_tests,
        third_tests,
    )


def _parts_difference(
    network: np.ndarray, baseline: np.ndarray, per_year: float, parts: int
) -> tuple[float, ...]:
    """Sharpe of ``network`` minus ``baseline``'s in each of ``parts`` consecutive parts of the
    bars, the first ones a bar shorter where they do not divide (empty under 4 bars a part)."""
    if len(network) < 4 * parts:
        return ()
    bounds = [k * len(network) // parts for k in range(parts + 1)]
    return tuple(
        sharpe(network[a:b], per_year) - sharpe(baseline[a:b], per_year)
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    )


def _parts_tests(
    network: np.ndarray, baseline: np.ndarray, per_year: float, parts: int
) -> tuple[dict[str, float], ...]:
    """:func:`sharpe_difference_interval` of ``network`` against ``baseline`` at the one-sided
    ``HOLD_PART_LEVEL`` in each of ``parts`` consecutive parts, cut as
    :func:`_parts_difference` cuts them (empty under 4 bars a part)."""
    if len(network) < 4 * parts:
        return ()
    bounds = [k * len(network) // parts for k in range(parts + 1)]
    return tuple(
        sharpe_difference_interval(
            network[a:b], baseline[a:b], per_year, level=1 - 2 * HOLD_PART_LEVEL
        )
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    )


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
