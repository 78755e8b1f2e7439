"""What a walk-forward returns (:class:`WalkForwardResult`): each fold
(:class:`WalkForwardFold`) and the test windows' curves stitched (:class:`StitchedCurves`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.pipelines.train_result import TrainResult
from gpu_trading_env.reports.backtest import BacktestResult
from gpu_trading_env.reports.sharpe_inference import DetectableEdge

__all__ = ["StitchedCurves", "WalkForwardFold", "WalkForwardResult"]


@dataclass
class WalkForwardFold:
    """One fold: its windows, each seed's deployed policy and figures, the benchmarks'.

    :param fold: the fold's index (0 first).
    :param train: the training window: ``{"start", "end", "bars"}``.
    :param test: the test window, as ``train``.
    :param seeds: per seed, the JSON record of its run (the policy kept and why, its and its
        baseline's out-of-sample figures, the learning curve and snapshot evaluations).
    :param buy_and_hold: buy-and-hold's out-of-sample figures (costs in).
    :param random: the uniformly random policy's.
    :param rule: the planted market's known rule's, or None on other data.
    :param results: each seed's :class:`TrainResult`, in ``seeds``' order.
    :param random_result: the random policy's backtest.
    :param rule_result: the known rule's backtest, or None.
    """

    fold: int
    train: dict[str, Any]
    test: dict[str, Any]
    seeds: list[dict[str, Any]]
    buy_and_hold: dict[str, Any]
    random: dict[str, Any]
    rule: dict[str, Any] | None
    results: list[TrainResult]
    random_result: BacktestResult
    rule_result: BacktestResult | None

    def to_dict(self) -> dict[str, Any]:
        """The fold's entry of walkforward's metrics.json (the JSON-able fields; ``fold``
        numbered from 1)."""
        return {
            "fold": self.fold + 1,  # numbered from 1, as the report's text and plots
            "train": self.train,
            "test": self.test,
            "seeds": self.seeds,
            "buy_and_hold": self.buy_and_hold,
            "random": self.random,
            "rule": self.rule,
        }


@dataclass
class StitchedCurves:
    """The test windows' value curves joined end to end (each starts at 1.0; one point more
    than the bars stitched).

    :param timestamps: [T + 1] the first test bar's timestamp, then each stitched bar's.
    :param ensemble: [T + 1] value of the seeds' mean return per bar.
    :param seeds: per seed, [T + 1] its value curve.
    :param buy_and_hold: [T + 1] buy-and-hold with the same costs.
    :param random: [T + 1] the random policy.
    :param rule: [T + 1] the known rule, or None on other data.
    :param exposure: [T] the first seed's exposure held after each bar.
    :param boundaries: the first timestamp of each fold's test window.
    """

    timestamps: np.ndarray
    ensemble: np.ndarray
    seeds: dict[int, np.ndarray]
    buy_and_hold: np.ndarray
    random: np.ndarray
    rule: np.ndarray | None
    exposure: np.ndarray
    boundaries: list[Any]


@dataclass
class WalkForwardResult:
    """A walk-forward over one instrument
    (:func:`~agents.pipelines.walkforward.walk_forward`).

    :param folds: every fold, in time order.
    :param stitched: the out-of-sample curves over all test windows.
    :param aggregate: metrics of the stitched curves (costs in): ``{"ensemble", "seeds",
        "buy_and_hold", "random"}`` and ``"rule"`` where there is one.
    :param sharpe_vs_buy_and_hold: block-bootstrap interval of the ensemble's Sharpe minus
        buy-and-hold's.
    :param beats_buy_and_hold_every_fold: per seed (as a string), whether its final value beat
        buy-and-hold's in every fold.
    :param settings: the training settings (``asdict(TrainSettings)``).
    :param expanding: whether the training windows expand (else they roll).
    :param confirm: whether a fold's network needed the previous fold's network to have beaten
        its baseline out of sample, in return and in Sharpe (``walk_forward(confirm=)``).
    :param detectable_edge: the smallest annualised Sharpe over flat that the stitched test
        bars detect with 80% power at ``sharpe_vs_buy_and_hold``'s one-sided level (each fold's
        gate's own is in its seeds' records), or None.
    """

    folds: list[WalkForwardFold]
    stitched: StitchedCurves
    aggregate: dict[str, Any]
    sharpe_vs_buy_and_hold: dict[str, Any]
    beats_buy_and_hold_every_fold: dict[str, bool]
    settings: dict[str, Any]
    expanding: bool
    confirm: bool = True
    detectable_edge: DetectableEdge | None = None
