"""What is deployed, a trained network or a parameter-free baseline, and why: the one rule of
``train``, ``walkforward`` and ``train --portfolio``, and its words (:class:`Deployment`).

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
5. **K instruments** (``train --portfolio``): step 1 on each instrument's own training bars
   (its whole-window test at ``GATE_LEVEL``'s error over K) gives a baseline portfolio (flat,
   hold long or hold short per instrument, as levels the portfolio env acts); steps 2 and 3 judge the network against it: a network that beats
   flat but not the holds of drifting instruments is not deployed.

Costs are in every curve, so a network that trades an edge too small to pay for its turnover
loses to the baseline too. :class:`Deployment` words the outcome: a headline first ("no edge
found: the model stays flat", "holds long: the training bars' drift", "a network: ..."), then
the evidence with its intervals, the deflated Sharpe ratio with the count of trials behind it,
the smallest edge the gate detects and the probability of backtest overfitting. Where an
interval spans zero the text says so and nothing reassuring is said of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from agents.pipelines.baseline_policies import baseline_backtest
from agents.pipelines.input_selection import kept_inputs_count
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.backtest import BacktestResult
from gpu_trading_env.reports.metrics import sharpe
from gpu_trading_env.reports.significance import (
    best_sharpe_reality_check,
    regression_slopes_test,
    sharpe_difference_interval,
)

__all__ = [
    "GATE_LEVEL",
    "HOLD_PARTS",
    "HOLD_PART_LEVEL",
    "OUTCOMES",
    "PREDICTABILITY_LEVEL",
    "PREDICTABLE_P_VALUE",
    "BaselineChoice",
    "Deployment",
    "GateVerdict",
    "PortfolioBaseline",
    "ValidationReturns",
    "choose_baseline",
    "choose_portfolio_baseline",
    "describe_deployment",
    "describe_portfolio_deployment",
    "describe_unconfirmed",
    "drift_baseline",
    "features_predict_returns",
    "interval_text",
    "kept_policy",
    "network_beats_baseline",
    "overfitting_text",
    "resolution_text",
]

# Two-sided interval level of both tests: a lower bound above zero is a one-sided test at 5%.
GATE_LEVEL = 0.90
# Level of the training window's test that the inputs predict the next bar's return, below
# which the network needs less validation evidence (step 4 of the module doc).
PREDICTABILITY_LEVEL = 0.01
# The reality check's p-value (twice the one-sided share) that step 4 requires on validation.
PREDICTABLE_P_VALUE = 0.25
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


def choose_baseline(train: MarketData, config: EnvConfig, per_year: float) -> BaselineChoice:
    """Flat, hold long or hold short, from the whole training window and each of its
    ``HOLD_PARTS`` parts (step 1 of the module doc)."""
    return drift_baseline(baseline_backtest("hold long", train, config, per_year).returns, per_year)


def drift_baseline(r: np.ndarray, per_year: float, level: float = GATE_LEVEL) -> BaselineChoice:
    """Step 1's rule on ``r`` (float [T]), the per-bar returns of holding long over the training
    bars: hold long where they beat flat over the whole window (the two-sided ``level``
    interval) and in each of its ``HOLD_PARTS`` parts, hold short where they lose to it in all,
    flat otherwise."""
    ci = sharpe_difference_interval(r, np.zeros_like(r), per_year, level=level)
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


def kept_policy(verdict: GateVerdict, fallback: bool = True) -> str:
    """What is deployed after the gate: ``"network"`` where ``verdict`` keeps it or the
    fallback is off (``--no-fallback``), else the baseline it was judged against
    (``verdict.baseline``). ``train`` and ``train --portfolio`` both decide here."""
    return "network" if verdict.keep_network or not fallback else verdict.baseline


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


# Every kind of outcome, and the headline's opening words.
OUTCOMES = {
    "no_input": "no edge found",
    "drift_no_input": "holds {side}: the training bars' drift",
    "network": "a network",
    "not_held": "no edge held up",
    "drift_not_held": "holds {side}: the training bars' drift",
    "no_fallback": "a network (the fallback is off)",
    "not_confirmed": "no edge confirmed out of sample",
}


@dataclass(frozen=True)
class Deployment:
    """The deployed policy and the reason, as :func:`describe_deployment` words it.

    :param kept: ``"network"`` or the baseline's name (``"flat"``, ``"hold long"``, ``"hold
        short"``).
    :param outcome: a key of :data:`OUTCOMES`.
    :param headline: one line: what the model does and why.
    :param details: the evidence in sentences (intervals, p-values, trial counts).
    :param trained: whether a network was trained at all.
    """

    kept: str
    outcome: str
    headline: str
    details: tuple[str, ...]
    trained: bool

    @property
    def policy(self) -> str:
        """The deployed policy in a few words, for the report's first sentence: "a network", or
        the baseline with its reason ("flat (no edge found)", "hold long (the training bars'
        drift)")."""
        if self.kept == "network":
            return "a network" + (" (the fallback is off)" if self.outcome == "no_fallback" else "")
        reason = OUTCOMES[self.outcome].split(": ", 1)[-1]
        return f"{self.kept} ({reason})"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["details"] = list(self.details)
        return d


def interval_text(ci: dict[str, float], what: str = "Sharpe") -> str:
    """``+0.42 [-0.10, +0.95]`` of a ``{"difference", "low", "high", "level"}`` interval, with
    the words "the interval spans zero" where it does."""
    text = (
        f"{ci['difference']:+.2f} {what} ({ci['level']:.0%} interval "
        f"[{ci['low']:+.2f}, {ci['high']:+.2f}]"
    )
    if ci["low"] <= 0.0 <= ci["high"]:
        text += "; the interval spans zero"
    return text + ")"


def _p_text(p: float) -> str:
    return f"p = {p:.2g}" if p >= 1e-16 else "p < 1e-16"


def _side(kept: str) -> str:
    return "long" if kept == "hold long" else "short"


# The one-sided confidence of the predictable path's test (its p-value is two-sided).
PREDICTED_CONFIDENCE = f"{100 * (1 - PREDICTABLE_P_VALUE / 2):g}%"
_PART_NAMES = {2: "half", 3: "third", 4: "quarter"}


def _drift_sentence(choice: dict[str, Any]) -> str:
    ci = choice["hold_vs_flat"]
    parts = choice.get("parts") or []
    text = f"holding long minus flat over the training bars: {interval_text(ci)}"
    if parts:
        text += f"; in each {_PART_NAMES.get(len(parts), 'part')}: " + ", ".join(
            f"{p['difference']:+.2f}" for p in parts
        )
    return text


def describe_deployment(
    kept: str,
    baseline: dict[str, Any],
    *,
    gate: dict[str, Any] | None,
    selection: dict[str, Any] | None,
    fallback: bool = True,
    deflated: dict[str, Any] | None = None,
    vs_buy_and_hold: dict[str, float] | None = None,
    resolution: dict[str, Any] | None = None,
    overfitting: dict[str, Any] | None = None,
) -> Deployment:
    """Word the outcome of one ``train`` run.

    :param kept: what the model acts as: ``"network"`` or a baseline's name.
    :param baseline: the baseline choice: ``{"name", "hold_vs_flat", "parts"}``
        (:class:`BaselineChoice` as a dict).
    :param gate: :meth:`GateVerdict.to_dict` of the validation test, None where no network was
        trained.
    :param selection: the input selection's ``to_dict``, None with ``--all-inputs``.
    :param deflated: the deflated Sharpe ratio of the network's validation returns
        (:class:`~gpu_trading_env.reports.sharpe_inference.DeflatedSharpe` as a dict), or None.
    :param vs_buy_and_hold: the network's validation Sharpe minus buy-and-hold's, or None.
    :param resolution: the smallest edge the gate detects
        (:class:`~gpu_trading_env.reports.sharpe_inference.DetectableEdge` as a dict), or None.
    :param overfitting: :func:`~agents.pipelines.snapshot_selection.overfitting_probability`,
        or None.
    """
    details = _input_details(selection, gate) + [_baseline_sentence(baseline)]
    name = baseline["name"]
    # What the test could have seen, after what it saw (last where it saw nothing).
    power = [] if resolution is None else [resolution_text(resolution, kept, name)]
    power += [] if overfitting is None else [overfitting_text(overfitting)]
    if gate is None:
        return _untrained(kept, baseline, details + power)
    halves = gate.get("network_minus_baseline_sharpe_in_validation_halves") or []
    details.append(_evidence(gate, name, vs_buy_and_hold, halves))
    if deflated is not None:
        details.append(
            f"Deflated Sharpe ratio of the network's validation returns: {deflated['dsr']:.2f} "
            f"(the probability that its true Sharpe is above the best of {deflated['n_trials']} "
            "trials with no edge; trials: inputs tested x snapshots)."
        )
    details += power
    if kept == "network":
        return _network_kept(kept, gate, fallback, details)
    return _baseline_kept(kept, name, gate, halves, details)


def resolution_text(edge: dict[str, Any], kept: str, baseline: str) -> str:
    """The gate's resolution in one sentence: the edge it detects, or (a baseline kept) the
    edge above which none was there to be found."""
    over = "flat" if baseline == "flat" else "flat (the reality check alone; the hold needs more)"
    how = (
        f"at the {100 * edge['level']:g}% one-sided level with {edge['power']:.0%} power, "
        f"{edge['n_trials']} effective trial{'s' if edge['n_trials'] != 1 else ''}"
    )
    if edge["halves"]:
        how += ", in each half and the last third"
    if kept == "network":
        return (
            f"Detectable edge: Sharpe >= {edge['sharpe']:.2f} over {over} in {edge['bars']} "
            f"validation bars ({how})."
        )
    return (
        f"No edge above Sharpe {edge['sharpe']:.2f} over {over} detectable in {edge['bars']} "
        f"validation bars ({how}); a smaller one may be there unseen."
    )


def overfitting_text(pbo: dict[str, Any]) -> str:
    """The probability of backtest overfitting of the choice among the candidates, or why it
    is not computable."""
    if pbo["pbo"] is None:
        return f"Probability of backtest overfitting: not computable ({pbo['reason']})."
    return (
        f"Probability of backtest overfitting: {pbo['pbo']:.2f} (CSCV over {pbo['candidates']} "
        f"candidates, snapshots and baselines, {pbo['splits']} splits of {pbo['bars']} "
        "validation bars: the share where the best in one half ranks at or below the median in "
        "the other)."
    )


def _input_details(selection: dict[str, Any] | None, gate: dict[str, Any] | None) -> list[str]:
    """The sentence on the inputs: the selection's count kept, or (every input given) the
    features' test of predicting the next return; none where neither ran."""
    if selection is not None:
        shown = _p_text(float(selection["p_value"]))
        counted = kept_inputs_count(selection["kept"], len(selection["feature_names"]))
        return [f"Input selection on the training bars: {counted} kept (family-wise {shown})."]
    predict = None if gate is None else gate.get("features_predict_next_return")
    if predict is not None:
        shown = _p_text(float(predict["p_value"]))
        return [
            f"The features predict the next bar's return on the training bars with {shown} "
            f"(robust Wald test, {int(predict['df'])} slopes)."
        ]
    return []


def _baseline_sentence(baseline: dict[str, Any]) -> str:
    """Why the baseline is the one chosen on the training bars."""
    name = baseline["name"]
    if name != "flat":
        return f"Baseline {name}: {_drift_sentence(baseline)}."
    return (
        f"Baseline flat: no drift held over the training bars and each "
        f"{_PART_NAMES.get(len(baseline.get('parts') or ()), 'part')} of them "
        f"({_drift_sentence(baseline)})."
    )


def _untrained(kept: str, baseline: dict[str, Any], details: list[str]) -> Deployment:
    """No network trained (no input kept): flat, or the hold of the training bars' drift."""
    name = baseline["name"]
    if name == "flat":
        return Deployment(
            kept,
            "no_input",
            "no edge found: the model stays flat (no input predicted the next return on the "
            "training bars, so no network was trained)",
            tuple(details),
            False,
        )
    return Deployment(
        kept,
        "drift_no_input",
        f"holds {_side(name)}: the training bars' drift ({interval_text(baseline['hold_vs_flat'])}"
        "); no input predicted the next return, so no network was trained",
        tuple(details),
        False,
    )


def _evidence(
    gate: dict[str, Any],
    name: str,
    vs_buy_and_hold: dict[str, float] | None,
    halves: list[float],
) -> str:
    """The validation test's evidence in one sentence: the edge over flat (allowing for the
    choice among snapshots), over buy-and-hold and the baseline, per half of the window and in
    its last third."""
    flat = gate["network_minus_flat_validation_sharpe"]
    evidence = (
        f"the network's validation Sharpe minus flat's, allowing for its choice among "
        f"{flat.get('candidates', 1)} snapshots: {interval_text(flat)}, reality-check "
        f"p = {flat['p_value']:.2g}"
    )
    if vs_buy_and_hold is not None:
        evidence += f"; minus buy-and-hold's: {interval_text(vs_buy_and_hold)}"
    if name != "flat":
        evidence += (
            f"; minus {name}'s: {interval_text(gate['network_minus_baseline_validation_sharpe'])}"
        )
    if halves:
        evidence += f"; minus {name}'s in each half of the validation window: " + ", ".join(
            f"{h:+.2f}" for h in halves
        )
    thirds = gate.get("network_minus_baseline_validation_third_tests") or []
    if thirds:
        evidence += f"; in its last third: {interval_text(thirds[-1])}"
    return evidence[0].upper() + evidence[1:] + "."


def _network_kept(
    kept: str, gate: dict[str, Any], fallback: bool, details: list[str]
) -> Deployment:
    """The network deployed: by the test (at 95%, or at the predictable path's level), or with
    the fallback off."""
    flat = gate["network_minus_flat_validation_sharpe"]
    how = gate.get("beat_flat_by")
    if not fallback:
        outcome, reason = "no_fallback", "kept whatever it earned on validation"
    elif how == "significant":
        outcome, reason = "network", "it beat flat on the validation window at 95% one-sided"
    else:
        outcome, reason = (
            "network",
            f"it beat flat on the validation window at {PREDICTED_CONFIDENCE} one-sided, "
            "where its inputs predict the next return on the training bars",
        )
    if fallback:
        reason += ", in each half of it, and beat the baseline in its last third"
    headline = f"{OUTCOMES[outcome]}: validation edge over flat {interval_text(flat)}; {reason}"
    return Deployment(kept, outcome, headline, tuple(details), True)


def _baseline_kept(
    kept: str, name: str, gate: dict[str, Any], halves: list[float], details: list[str]
) -> Deployment:
    """A trained network replaced by the baseline: its edge was not enough, not in each half of
    the validation window, or not in its last third."""
    flat = gate["network_minus_flat_validation_sharpe"]
    beat_flat = gate.get("beat_flat_by") is not None
    split = ""
    if beat_flat and halves and not all(h > 0.0 for h in halves):
        split = ", ".join(f"{h:+.2f}" for h in halves)
    faded = "" if split or not beat_flat else _faded_text(gate)
    if name == "flat":
        if split:
            why = f"was not in each half of the validation window ({split})"
        elif faded:
            why = f"was not in the last third of the validation window ({faded})"
        else:
            why = "was not enough"
        return Deployment(
            kept,
            "not_held",
            f"no edge held up: the model stays flat (the network's validation edge over flat, "
            f"{interval_text(flat)}, {why})",
            tuple(details),
            True,
        )
    vs = gate["network_minus_baseline_validation_sharpe"]
    vs_hold = interval_text(vs)
    if split and vs["low"] > 0.0:
        why = (
            f"its edge over the hold ({vs_hold}) was not in each half of the validation window "
            f"({split})"
        )
    elif faded and vs["low"] > 0.0:
        why = (
            f"its edge over the hold ({vs_hold}) was not in the last third of the validation "
            f"window ({faded})"
        )
    else:
        why = f"the network did not beat it on the validation window ({vs_hold})"
    return Deployment(
        kept,
        "drift_not_held",
        f"holds {_side(name)}: the training bars' drift; {why}",
        tuple(details),
        True,
    )


def _faded_text(gate: dict[str, Any]) -> str:
    """The last third's test where it failed (the edge faded by the end of validation), else
    empty (passed, or not recorded)."""
    thirds = gate.get("network_minus_baseline_validation_third_tests") or []
    if not thirds or thirds[-1]["low"] > 0.0:
        return ""
    return interval_text(thirds[-1])


def describe_unconfirmed(
    deployment: Deployment,
    baseline: str,
    previous_network_return: float | None,
    previous_baseline_return: float | None,
    first_fold: bool,
    previous_edge: dict[str, float] | None = None,
) -> Deployment:
    """The deployment of a walk-forward fold whose network passed ``train``'s gate but whose
    previous fold's network did not beat its baseline out of sample, in return and in Sharpe
    (or none was tested):
    the baseline, with that reason first and ``train``'s own verdict kept in the details.

    :param deployment: what ``train`` deployed on the fold (a network).
    :param baseline: the baseline deployed instead (``"flat"``, ``"hold long"``, ``"hold
        short"``).
    :param previous_network_return: the previous fold's network's test return; None where that
        fold trained no network.
    :param previous_baseline_return: that fold's baseline's test return.
    :param first_fold: no fold came before (nothing was tested out of sample yet).
    :param previous_edge: the previous network's Sharpe edge over its baseline on its test bars
        (``sharpe_difference_interval``), said where its return beat the baseline's.
    """
    if first_fold:
        why = "no earlier fold has tested a network out of sample yet"
    elif previous_network_return is None or previous_baseline_return is None:
        why = "the previous fold trained no network, so none was tested out of sample"
    else:
        why = (
            f"the previous fold's network returned {previous_network_return:+.1%} on its test "
            f"bars against its baseline's {previous_baseline_return:+.1%}"
        )
        if previous_edge is not None and previous_network_return >= previous_baseline_return:
            why += (
                f", a Sharpe edge of {previous_edge['difference']:+.2f} whose "
                f"{previous_edge['level']:.0%} interval [{previous_edge['low']:+.2f}, "
                f"{previous_edge['high']:+.2f}] is not above zero"
            )
    what = "the model stays flat" if baseline == "flat" else f"the model holds {_side(baseline)}"
    return Deployment(
        baseline,
        "not_confirmed",
        f"{OUTCOMES['not_confirmed']}: {what} (the network passed the validation gate, but {why})",
        (*deployment.details, f"train's verdict on this fold: {deployment.headline}"),
        True,
    )


@dataclass(frozen=True)
class PortfolioBaseline:
    """Step 1 on each of K instruments' own training bars: the baseline portfolio (step 5).

    :param instruments: the K names.
    :param choices: each instrument's :class:`BaselineChoice`, in that order.
    """

    instruments: tuple[str, ...]
    choices: tuple[BaselineChoice, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """Each instrument's baseline: ``"flat"``, ``"hold long"`` or ``"hold short"``."""
        return tuple(c.name for c in self.choices)

    @property
    def name(self) -> str:
        """The portfolio's name: the instruments' one baseline where they share it, else
        ``"baseline"`` (a mix of holds and flat)."""
        names = set(self.names)
        return names.pop() if len(names) == 1 else "baseline"

    def zip(self) -> list[tuple[str, str]]:
        """``[(instrument, its baseline), ...]``."""
        return list(zip(self.instruments, self.names, strict=True))

    def words(self) -> str:
        """``"A hold long, B flat"``: each instrument's baseline."""
        return ", ".join(f"{i} {n}" for i, n in zip(self.instruments, self.names, strict=True))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "instruments": {
                i: c.to_dict() for i, c in zip(self.instruments, self.choices, strict=True)
            },
        }


def choose_portfolio_baseline(
    hold: np.ndarray, per_year: float, instruments: Sequence[str]
) -> PortfolioBaseline:
    """Step 1 per instrument (:func:`drift_baseline`): ``hold`` float [T, K] holds each
    instrument's per-bar returns of holding it long over the training bars (costs in). The
    whole window's test is at ``GATE_LEVEL``'s error shared among the K instruments
    (Bonferroni): K drifts are tested, and with K = 8 random walks one of them would pass the
    single test about one time in three."""
    hold = np.asarray(hold, dtype=np.float64)
    if hold.ndim != 2 or hold.shape[1] != len(instruments):
        raise ValueError(
            f"hold of shape {hold.shape} is invalid: allowed is [T, {len(instruments)}] (one "
            "column of returns per instrument)"
        )
    level = 1.0 - (1.0 - GATE_LEVEL) / hold.shape[1]
    choices = tuple(drift_baseline(hold[:, k], per_year, level) for k in range(hold.shape[1]))
    return PortfolioBaseline(tuple(instruments), choices)


def describe_portfolio_deployment(
    kept: str,
    baseline: PortfolioBaseline,
    gate: GateVerdict | None,
    *,
    fallback: bool = True,
    validation_sharpe: float = float("nan"),
    deflated: dict[str, Any] | None = None,
    resolution: dict[str, Any] | None = None,
    overfitting: dict[str, Any] | None = None,
) -> Deployment:
    """Word the outcome of one ``train --portfolio`` run (step 5): the headline is the run's
    one-line reason, beginning with what was kept; the details name each instrument's baseline
    and why, then the deflated Sharpe, the gate's resolution and the PBO as ``train``'s do.

    :param kept: ``"network"`` or ``baseline.name``.
    :param gate: the validation test of the best snapshot against the baseline portfolio; None
        where no network was trained (no input kept).
    :param validation_sharpe: the best snapshot's validation Sharpe.
    """
    details = [
        f"{i}: {_baseline_sentence(c.to_dict())}"
        for i, c in zip(baseline.instruments, baseline.choices, strict=True)
    ]
    name = baseline.name
    if deflated is not None:
        details.append(
            f"Deflated Sharpe ratio of the network's validation returns: {deflated['dsr']:.2f} "
            f"(the probability that its true Sharpe is above the best of {deflated['n_trials']} "
            "trials with no edge; trials: (column, instrument) input tests x snapshots)."
        )
    details += [] if resolution is None else [resolution_text(resolution, kept, name)]
    details += [] if overfitting is None else [overfitting_text(overfitting)]
    side = "flat" if name == "flat" else f"the baseline ({baseline.words()})"
    if gate is None:
        headline = (
            f"{kept} kept: no (instrument, feature) column predicts an instrument's next return on "
            "the training bars, so no network was trained (--all-inputs trains one on every "
            f"feature); baseline per instrument: {baseline.words()}"
        )
        outcome = "no_input" if name == "flat" else "drift_no_input"
        return Deployment(kept, outcome, headline, tuple(details), False)
    headline = _portfolio_reason(kept, name, side, gate, fallback, validation_sharpe)
    if kept == "network":
        outcome = "network" if fallback else "no_fallback"
    else:
        outcome = "not_held" if name == "flat" else "drift_not_held"
    return Deployment(kept, outcome, headline, tuple(details), True)


def _portfolio_reason(
    kept: str, name: str, side: str, gate: GateVerdict, fallback: bool, sharpe: float
) -> str:
    """The portfolio's one line: what was kept, and which condition of the gate decided."""
    check = gate.validation_vs_flat
    halves = ", ".join(f"{h:+.2f}" for h in gate.halves) or "too few bars"
    evidence = (
        f"validation Sharpe {sharpe:.2f}, reality-check {GATE_LEVEL:.0%} interval "
        f"[{check['low']:.2f}, {check['high']:.2f}] over {check['candidates']} snapshots"
    )
    if name != "flat":
        evidence += f", minus the baseline's {interval_text(gate.validation)}"
    evidence += f", halves {halves}"
    if kept == "network" and not fallback:
        return f"network kept without the test against {side} (--no-fallback): {evidence}"
    if kept == "network":
        return f"network kept: it beats {side} on the validation bars ({evidence})"
    if gate.beat_flat_by is None:
        return (
            f"{kept} kept: the best snapshot does not beat flat on the validation bars ({evidence})"
        )
    if name != "flat" and not gate.validation["low"] > 0.0:
        return (
            f"{kept} kept: the best snapshot beats flat but not {side} on the validation bars "
            f"({evidence})"
        )
    if not gate.held_in_halves:
        return (
            f"{kept} kept: the best snapshot beats {name if name == 'flat' else side} but not in "
            f"each half of the validation bars ({evidence})"
        )
    last = interval_text(gate.third_tests[-1]) if gate.third_tests else "too few bars"
    return (
        f"{kept} kept: the best snapshot beats {name if name == 'flat' else side} but not in the "
        f"last third of the validation bars ({last}; {evidence})"
    )
