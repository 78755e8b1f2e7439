"""What ``train`` deployed and why, in one line a reader can act on (:class:`Deployment`).

The rule itself is :mod:`agents.pipelines.baseline_policies`'; this module states its outcome:
a headline first ("no edge found: the model stays flat", "holds long: the training bars'
drift", "a network: ..."), then the evidence with its intervals, and beside it the deflated
Sharpe ratio of the network's validation returns with the count of trials behind it. Where an
interval spans zero the text says so and nothing reassuring is said of it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from agents.pipelines.baseline_policies import PREDICTABLE_P_VALUE
from agents.pipelines.input_selection import kept_inputs_count

__all__ = [
    "OUTCOMES",
    "Deployment",
    "describe_deployment",
    "describe_unconfirmed",
    "interval_text",
    "overfitting_text",
    "resolution_text",
]

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
        (:class:`~agents.pipelines.baseline_policies.BaselineChoice` as a dict).
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
