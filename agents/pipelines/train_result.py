"""What one ``train`` run returns (:class:`TrainResult`), and the snapshots' evaluations in it
(:class:`SnapshotEvaluations`); ``TrainResult.to_dict`` is the run's part of metrics.json."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.files.saved_inputs import InputSelection
from agents.pipelines.deployment import BaselineChoice, Deployment
from gpu_trading_env.reports.backtest import BacktestResult
from gpu_trading_env.reports.sharpe_inference import DeflatedSharpe, DetectableEdge

__all__ = ["CrossFitSummary", "SnapshotEvaluations", "TrainResult"]


@dataclass
class SnapshotEvaluations:
    """The validation and out-of-sample Sharpe ratios of every snapshot, in training order.

    :param timesteps: env steps of each snapshot.
    :param validation: each snapshot's Sharpe on the validation window (annualised, costs in).
    :param test: each snapshot's Sharpe out of sample (the learning curve only).
    :param cross_fit_validation: with cross-fitting, the second network's snapshots' Sharpe on
        its validation window (the first bars); else None.
    :param pooled_validation: with cross-fitting, the Sharpe of both networks' snapshot ``j``
        over both validation windows (the one selection ranks on); else None.
    """

    timesteps: list[int]
    validation: list[float]
    test: list[float]
    cross_fit_validation: list[float] | None = None
    pooled_validation: list[float] | None = None

    def to_dict(self) -> dict[str, list[Any]]:
        """``{"timesteps", "validation", "test"}``, and the cross-fitted lists where present."""
        d: dict[str, list[Any]] = {
            "timesteps": self.timesteps,
            "validation": self.validation,
            "test": self.test,
        }
        if self.cross_fit_validation is not None:
            d["cross_fit_validation"] = self.cross_fit_validation
        if self.pooled_validation is not None:
            d["pooled_validation"] = self.pooled_validation
        return d


@dataclass(frozen=True)
class CrossFitSummary:
    """The second network of a cross-fitted run: bars per instrument it trained on and was
    judged on, and its training's wall-clock seconds."""

    fit_bars: int
    validation_bars: int
    train_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "fit_bars": self.fit_bars,
            "validation_bars": self.validation_bars,
            "train_seconds": self.train_seconds,
        }


@dataclass
class TrainResult:
    """One ``train`` run (:func:`~agents.pipelines.model_selection.train_selected`).

    :param model: the GpuDQN holding the kept policy: the snapshot best on validation, or the
        parameter-free baseline the fallback deployed instead (``kept`` names which).
    :param test: the kept policy's out-of-sample backtest.
    :param network_test: the selected snapshot's out-of-sample backtest; None where no network
        was trained.
    :param kept: ``"network"`` or the baseline's name.
    :param deployment: what was deployed and why, in words.
    :param baseline: the parameter-free policy chosen on the training window.
    :param deflated_sharpe: the deflated Sharpe ratio of the selected snapshot's validation
        returns, or None where it could not be computed.
    :param gate: the fallback's test (``GateVerdict.to_dict`` with
        ``hold_vs_flat_on_training_window``).
    :param last_test: the last snapshot's out-of-sample backtest; None where none was trained.
    :param validation: the kept policy's backtest on the validation window.
    :param curve: ``(env steps, mean episode return)`` during training.
    :param evals: every snapshot's validation and test Sharpe.
    :param selected_step: env steps of the selected snapshot; None where none was trained.
    :param validation_sharpe: the selected snapshot's validation Sharpe (the baseline's where
        no network was trained).
    :param train_seconds: wall-clock seconds of the kept network's training (the second
        network's are in ``cross_fit``).
    :param timesteps: env steps trained.
    :param inputs: the input selection made on the training bars, or None with every input.
    :param cross_fit: the second network of a cross-fitted run, or None.
    :param detectable_edge: the smallest annualised Sharpe edge the gate detects with 80% power
        in the validation bars (:func:`~agents.pipelines.snapshot_selection.gate_resolution`).
    :param overfitting: the probability of backtest overfitting of the choice among snapshots
        and baselines (:func:`~agents.pipelines.snapshot_selection.overfitting_probability`).
    """

    model: Any
    test: BacktestResult
    network_test: BacktestResult | None
    kept: str
    deployment: Deployment
    baseline: BaselineChoice
    deflated_sharpe: DeflatedSharpe | None
    gate: dict[str, Any]
    last_test: BacktestResult | None
    validation: BacktestResult
    curve: list[tuple[int, float]]
    evals: SnapshotEvaluations
    selected_step: int | None
    validation_sharpe: float
    train_seconds: float
    timesteps: int
    inputs: InputSelection | None
    cross_fit: CrossFitSummary | None
    detectable_edge: DetectableEdge | None = None
    overfitting: dict[str, Any] | None = None

    @property
    def env_steps_per_second(self) -> float | None:
        """Training throughput; None where nothing was trained."""
        return self.timesteps / self.train_seconds if self.train_seconds > 0 else None

    def to_dict(self) -> dict[str, Any]:
        """The run's entries of the train command's metrics.json (the JSON-able fields under
        their metrics.json names; ``inputs`` only where inputs were selected). A policy's
        figures are written once: ``network_strategy`` is null where the network is deployed
        (they are ``strategy``'s), ``last_model_strategy`` where the last snapshot is the
        selected one."""
        d: dict[str, Any] = {
            "timesteps": self.timesteps,
            "train_seconds": self.train_seconds,
            "env_steps_per_second": self.env_steps_per_second,
            "cross_fit": None if self.cross_fit is None else self.cross_fit.to_dict(),
            "kept_policy": self.kept,
            "deployment": self.deployment.to_dict(),
            "baseline": self.baseline.to_dict(),
            "deflated_sharpe": None
            if self.deflated_sharpe is None
            else self.deflated_sharpe.to_dict(),
            "fallback_test": self.gate,
            "detectable_edge": None
            if self.detectable_edge is None
            else self.detectable_edge.to_dict(),
            "overfitting_probability": self.overfitting,
            # One block per policy: a snapshot deployed or selected again is not repeated.
            "network_strategy": None
            if self.network_test is None or self.kept == "network"
            else self.network_test.strategy.to_dict(),
            "last_model_strategy": None
            if self.last_test is None
            or (
                self.network_test is not None
                and self.last_test.strategy == self.network_test.strategy
            )
            else self.last_test.strategy.to_dict(),
            # What chose the model: its figures on the validation window (the sweep ranks on them).
            "validation": {
                **self.validation.to_dict(),
                "bars": int(self.validation.strategy.n_bars),
                "start": str(self.validation.timestamps[0])[:10],
                "end": str(self.validation.timestamps[-1])[:10],
            },
        }
        if self.inputs is not None:
            sel = self.inputs.to_dict()
            d["inputs"] = {k: sel[k] for k in ("kept", "p_value", "regime_p_value", "bars")}
        return d
