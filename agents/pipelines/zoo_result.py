"""What one zoo run gives (:class:`ZooRun`), or its error (:class:`FailedZooRun`), and a
market's summary over its seeds (:class:`ZooMarketSummary`); ``to_dict`` of each is its entry
of zoo.json."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.pipelines.deployment import Deployment
from agents.pipelines.train_result import SnapshotEvaluations
from gpu_trading_env.reports.metrics import Metrics

__all__ = ["FailedZooRun", "SeedStats", "ZooMarketSummary", "ZooRow", "ZooRun"]


@dataclass(frozen=True)
class ZooRun:
    """One market and seed, trained as ``train`` does and judged on the held-back bars.

    Metrics are out of sample (the test bars), annualised, costs in; returns are fractions.
    Intervals are ``sharpe_difference_interval``'s (``{"difference", "low", "high", "level",
    "p_value", ...}``) or ``return_difference_interval``'s.

    :param market: the market's name; ``suite``: ``"zoo"`` or ``"real"``.
    :param seed: the run's seed; ``device``: ``"cpu"`` or ``"cuda"``.
    :param kept: the deployed policy: ``"network"`` or the baseline's name.
    :param agent: the deployed policy's metrics; ``network``: the selected snapshot's (None
        where no network was trained).
    :param reference_name: the market's reference with the higher Sharpe; ``reference``: its
        metrics; ``references``: every candidate reference's.
    :param buy_and_hold: buy-and-hold's metrics on the agent's bars.
    :param sharpe_ratio: agent Sharpe / reference Sharpe (None where the reference's is <= 0);
        ``network_sharpe_ratio``: the same of the snapshot.
    :param deployment: what ``train`` deployed and why.
    :param baseline: the baseline ``train`` chose on the training bars; ``chosen_baseline``:
        its metrics; ``flat``: flat's.
    :param vs_baseline: the agent's Sharpe minus the baseline's; ``return_vs_baseline``: the
        total-return difference; ``vs_flat``, ``vs_buy_and_hold``: Sharpe differences.
    :param edge_over_flat_claimed: whether ``vs_flat``'s interval lies above zero.
    :param gate: the fallback's test (``TrainResult.gate``).
    :param selected_step: env steps of the selected snapshot; None where none was trained.
    :param inputs: the input selection's ``kept``, ``regime_p_value`` and ``p_value``; None with
        every input.
    :param evaluations: every snapshot's validation and test Sharpe.
    :param learning_curve: ``(env steps, mean episode return)`` during training.
    :param train_seconds: training's wall-clock seconds; ``timesteps``: env steps trained.
    :param seconds: the whole run's wall-clock seconds.
    :param train_bars: bars of the training split; ``test_bars``: of the held-back bars.
    :param curves: value / start of ``agent``, ``reference``, ``buy_and_hold`` and
        ``baseline`` over the held-back bars, at most 600 points each.
    """

    market: str
    suite: str
    seed: int
    device: str
    kept: str
    agent: Metrics
    network: Metrics | None
    reference_name: str
    reference: Metrics
    references: dict[str, Metrics]
    buy_and_hold: Metrics
    sharpe_ratio: float | None
    network_sharpe_ratio: float | None
    deployment: Deployment
    baseline: str
    chosen_baseline: Metrics
    flat: Metrics
    vs_baseline: dict[str, float]
    return_vs_baseline: dict[str, float]
    vs_flat: dict[str, float]
    vs_buy_and_hold: dict[str, float]
    edge_over_flat_claimed: bool
    gate: dict[str, Any]
    selected_step: int | None
    inputs: dict[str, Any] | None
    evaluations: SnapshotEvaluations
    learning_curve: list[tuple[int, float]]
    train_seconds: float
    timesteps: int
    seconds: float
    train_bars: int
    test_bars: int
    curves: dict[str, list[float]]

    def to_dict(self) -> dict[str, Any]:
        """The run's entry of zoo.json, in its order (``curves`` last)."""
        return {
            "market": self.market,
            "suite": self.suite,
            "seed": self.seed,
            "device": self.device,
            "kept": self.kept,
            "agent": self.agent.to_dict(),
            "network": None if self.network is None else self.network.to_dict(),
            "reference_name": self.reference_name,
            "reference": self.reference.to_dict(),
            "references": {k: v.to_dict() for k, v in self.references.items()},
            "buy_and_hold": self.buy_and_hold.to_dict(),
            "sharpe_ratio": self.sharpe_ratio,
            "network_sharpe_ratio": self.network_sharpe_ratio,
            "deployment": self.deployment.to_dict(),
            "baseline": self.baseline,
            "chosen_baseline": {"name": self.baseline, **self.chosen_baseline.to_dict()},
            "flat": self.flat.to_dict(),
            "vs_baseline": self.vs_baseline,
            "return_vs_baseline": self.return_vs_baseline,
            "vs_flat": self.vs_flat,
            "vs_buy_and_hold": self.vs_buy_and_hold,
            "edge_over_flat_claimed": self.edge_over_flat_claimed,
            "gate": self.gate,
            "selected_step": self.selected_step,
            "inputs": self.inputs,
            "evaluations": self.evaluations.to_dict(),
            "learning_curve": self.learning_curve,
            "train_seconds": self.train_seconds,
            "timesteps": self.timesteps,
            "seconds": self.seconds,
            "bars": {"train": self.train_bars, "test": self.test_bars},
            "curves": self.curves,
        }


@dataclass(frozen=True)
class FailedZooRun:
    """A zoo run that raised: the other runs go on, and this one is a row of the report.

    :param error: ``"ExceptionType: message"``; ``traceback``: the formatted traceback.
    """

    market: str
    seed: int
    device: str
    error: str
    traceback: str

    def to_dict(self) -> dict[str, Any]:
        """The run's entry of zoo.json."""
        return {
            "market": self.market,
            "seed": self.seed,
            "device": self.device,
            "error": self.error,
            "traceback": self.traceback,
        }


ZooRow = ZooRun | FailedZooRun
"""One (market, seed) of a zoo: its result or its error."""


@dataclass(frozen=True)
class SeedStats:
    """One figure over a market's seeds, in the figure's unit: mean, sample standard deviation
    (ddof 1; 0.0 for one seed), min, max and the number of finite values ``n`` (the others
    None where there is none)."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    n: int

    @classmethod
    def of(cls, values: Sequence[float | None]) -> SeedStats:
        """The statistics of the finite values among ``values`` (None and NaN left out)."""
        v = [x for x in values if x is not None and math.isfinite(x)]
        if not v:
            return cls(None, None, None, None, 0)
        std = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
        return cls(float(np.mean(v)), std, float(min(v)), float(max(v)), len(v))

    def to_dict(self) -> dict[str, float | int | None]:
        return {"mean": self.mean, "std": self.std, "min": self.min, "max": self.max, "n": self.n}


@dataclass(frozen=True)
class ZooMarketSummary:
    """One market of a zoo over its seeds (:func:`~agents.pipelines.zoo_report.summarize`).

    Each :class:`SeedStats` is over the runs that finished, with :class:`ZooRun`'s units
    (Sharpe ratios annualised, returns as fractions, ``seconds`` of wall clock).

    :param market: the market's name; ``title``: what it is, in words.
    :param target: ``(measure, threshold)``, as ``Market.target``.
    :param seeds: runs that finished; ``failed_runs``: runs that raised.
    :param return_minus_baseline: the agent's total return minus the chosen baseline's, per run.
    :param baselines_chosen: baseline name -> runs where ``train`` chose it, names sorted.
    :param edge_over_flat_claims: runs whose agent's Sharpe interval over flat lies above zero.
    :param kept_network: runs that deployed the network.
    :param passed: whether the target holds; None where a run failed or none finished.
    """

    market: str
    title: str
    target: tuple[str, float]
    seeds: int
    failed_runs: int
    agent_sharpe: SeedStats
    reference_sharpe: SeedStats
    buy_and_hold_sharpe: SeedStats
    sharpe_ratio: SeedStats
    network_sharpe_ratio: SeedStats
    agent_return: SeedStats
    reference_return: SeedStats
    buy_and_hold_return: SeedStats
    baseline_return: SeedStats
    baseline_sharpe: SeedStats
    return_minus_baseline: SeedStats
    baselines_chosen: dict[str, int]
    agent_turnover: SeedStats
    agent_costs: SeedStats
    edge_over_flat_claims: int
    kept_network: int
    seconds: SeedStats
    passed: bool | None

    def to_dict(self) -> dict[str, Any]:
        """The market's entry of zoo.json's ``summary``, in its order."""
        d: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, SeedStats):
                value = value.to_dict()
            elif name == "target":
                value = {"measure": value[0], "threshold": value[1]}
            elif name == "baselines_chosen":
                value = dict(value)
            d[name] = value
        return d
