"""Train GpuDQN on one split and keep the weights best on a validation window
(``train_selected``), then test the kept policy against the parameter-free baselines.

Model selection never looks at the out-of-sample window: the last ``val_fraction`` of a training
window is held out as a validation window; every ``eval_every`` env steps the weights are kept
as a snapshot (:mod:`agents.pipelines.snapshot_training`), and after training every snapshot's
greedy policy is backtested on it (costs in, all snapshots side by side); the weights with the
best validation Sharpe are kept (:mod:`agents.pipelines.snapshot_selection`), and the fallback
of :mod:`agents.pipelines.deployment` decides whether the network or a baseline is
deployed. The out-of-sample window is evaluated for the same snapshots, for the learning curve
only. The model is built in :mod:`agents.pipelines.model_builder`, a resumed run checked by
:mod:`agents.pipelines.run_identity`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.pipelines.baseline_policies import (
    baseline_action,
    baseline_backtest,
    set_baseline_policy,
)
from agents.pipelines.deployment import (
    GATE_LEVEL,
    BaselineChoice,
    GateVerdict,
    ValidationReturns,
    choose_baseline,
    describe_deployment,
    features_predict_returns,
    kept_policy,
    network_beats_baseline,
)
from agents.pipelines.input_selection import InputSelection, apply_inputs, select_inputs
from agents.pipelines.model_builder import (
    auto_reward_scale,
    learning_rate_schedule,
    untrained_model,
)
from agents.pipelines.snapshot_selection import (
    CrossFitted,
    cross_fitted,
    deflated_sharpe,
    gate_resolution,
    overfitting_probability,
    selected_snapshot,
    vs_buy_and_hold,
)
from agents.pipelines.snapshot_training import (
    Snapshot,
    SnapshotCallback,
    backtest_snapshots,
    train_with_snapshots,
)
from agents.pipelines.train_config import TrainSettings
from agents.pipelines.train_result import CrossFitSummary, SnapshotEvaluations, TrainResult
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.backtest import BacktestResult
from gpu_trading_env.reports.metrics import sharpe
from gpu_trading_env.reports.sharpe_inference import DetectableEdge

__all__ = ["TrainResult", "auto_reward_scale", "learning_rate_schedule", "train_selected"]


def train_selected(
    train: MarketData,
    test: MarketData,
    config: EnvConfig,
    settings: TrainSettings,
    seed: int,
    *,
    per_year: float,
    init_from: Any = None,
    checkpoint_every: int | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    resume_from: str | os.PathLike[str] | None = None,
) -> TrainResult:
    """Train on ``train`` minus its validation tail; keep the weights best on validation.

    :param init_from: a policy ``state_dict`` to start from (warm start), or None.
    :param checkpoint_every: env steps between checkpoints written into ``checkpoint_dir``
        (:class:`~agents.files.checkpoint.CheckpointEvery`; the validation snapshots and the learning
        curve taken so far go with them), or None.
    :param resume_from: a checkpoint (folder) of a run with the same data, config, settings and
        seed, from which this run continues as if it had not stopped; ``ValueError`` naming
        what differs otherwise.
    With ``settings.select_inputs`` the network's inputs are chosen on ``train`` first
    (:mod:`agents.pipelines.input_selection`), and ``train`` and ``test`` get them.

    :returns: the run (:class:`~agents.pipelines.train_result.TrainResult`); its ``model`` holds
        the kept policy: the snapshot best on validation, or, with ``settings.fallback``, the
        parameter-free baseline where that snapshot does not beat it on validation (``kept``
        names which; ``gate`` holds the evidence, see :mod:`agents.pipelines.deployment`).
    """
    from agents.rollouts.fused import start_compiling_kernels

    # On a GPU the fused path's kernels compile on their threads from here on, beside the input
    # selection's regime fit and the env's setup.
    start_compiling_kernels(settings.device)
    selection = None
    if settings.select_inputs:
        selection = select_inputs(train)
        train, test = apply_inputs(train, selection), apply_inputs(test, selection)
    n = int(train.bars_per_instrument.min())
    n_val = max(int(round(settings.val_fraction * n)), 2)
    fit, val = train.split(float(n - n_val) / n)
    if settings.cross_fit and (resume_from is not None or checkpoint_every is not None):
        raise ValueError(
            "cross_fit=True trains a second network that checkpoints do not hold: it cannot be "
            "combined with checkpoint_every or resume_from"
        )
    choice = choose_baseline(train, config, per_year)
    if settings.fallback and selection is not None and not selection.kept:
        return _baseline_only(fit, val, test, config, settings, seed, per_year, choice, selection)
    model, env, cb, wall = train_with_snapshots(
        fit,
        val,
        config,
        settings,
        seed,
        init_from=init_from,
        checkpoint_every=checkpoint_every,
        checkpoint_dir=checkpoint_dir,
        resume_from=resume_from,
    )
    predictability = None
    if settings.predictability_level > 0.0:
        predictability = (
            features_predict_returns(train) if selection is None else selection.predictability()
        )
    runs = _judged_snapshots(cb.snapshots, choice.name, (val, test), config, per_year)
    env.close()
    cross = None
    if settings.cross_fit:
        cross = cross_fitted(
            train, n_val, config, settings, seed, per_year, choice.name, init_from=init_from
        )
        best, verdict = _gate_cross_fitted(runs, cross, choice.name, predictability, settings)
    else:
        best, verdict = _gate(runs, choice.name, predictability, settings)
    model.policy.load_state_dict(cb.snapshots[best][2])
    return _deployed(
        model, cb, runs, best, verdict, choice, selection, config, settings, wall, cross
    )


@dataclass
class _JudgedSnapshots:
    """Every snapshot and the baseline backtested on the validation and test windows."""

    val_runs: list[BacktestResult]
    test_runs: list[BacktestResult]
    base_val: BacktestResult
    base_test: BacktestResult
    evals: SnapshotEvaluations
    per_year: float


def _judged_snapshots(
    snapshots: list[Snapshot],
    baseline: str,
    windows: tuple[MarketData, MarketData],
    config: EnvConfig,
    per_year: float,
) -> _JudgedSnapshots:
    """The snapshots' and the baseline's backtests on ``windows`` (validation, test)."""
    val, test = windows
    base_action = baseline_action(baseline, config)
    (val_runs, _), (test_runs, _) = backtest_snapshots(
        snapshots, base_action, (val, test), config, per_year
    )
    base_val = baseline_backtest(baseline, val, config, per_year)
    base_test = baseline_backtest(baseline, test, config, per_year)
    evals = SnapshotEvaluations(
        timesteps=[step for step, _, _ in snapshots],
        validation=[r.strategy.sharpe for r in val_runs],
        test=[r.strategy.sharpe for r in test_runs],
    )
    return _JudgedSnapshots(val_runs, test_runs, base_val, base_test, evals, per_year)


def _gate(
    runs: _JudgedSnapshots,
    baseline: str,
    predictability: dict[str, Any] | None,
    settings: TrainSettings,
) -> tuple[int, GateVerdict]:
    """The snapshot best on validation and the fallback's verdict on it."""
    best = selected_snapshot(runs.evals.validation)
    verdict = network_beats_baseline(
        runs.val_runs[best],
        runs.base_val,
        baseline,
        runs.per_year,
        candidates=runs.val_runs,
        predictability=predictability,
        predictability_level=settings.predictability_level,
    )
    return best, verdict


def _gate_cross_fitted(
    runs: _JudgedSnapshots,
    cross: CrossFitted,
    baseline: str,
    predictability: dict[str, Any] | None,
    settings: TrainSettings,
) -> tuple[int, GateVerdict]:
    """The snapshot best on both validation windows and the fallback's verdict on it; the
    pooled Sharpe ratios go into ``runs.evals``."""
    # Snapshot j of both networks: the same point of training; the pair is judged on both
    # validation windows (the second network's first, in time order).
    pairs = min(len(runs.val_runs), len(cross.runs))
    pooled = [
        ValidationReturns(np.concatenate([cross.runs[j].returns, runs.val_runs[j].returns]))
        for j in range(pairs)
    ]
    pooled_sharpes = [sharpe(p.returns, runs.per_year) for p in pooled]
    best = selected_snapshot(pooled_sharpes)
    base_pooled = ValidationReturns(np.concatenate([cross.baseline.returns, runs.base_val.returns]))
    verdict = network_beats_baseline(
        pooled[best],
        base_pooled,
        baseline,
        runs.per_year,
        candidates=pooled,
        predictability=predictability,
        predictability_level=settings.predictability_level,
    )
    runs.evals.cross_fit_validation = [r.strategy.sharpe for r in cross.runs]
    runs.evals.pooled_validation = pooled_sharpes
    return best, verdict


def _deployed(
    model: Any,
    cb: SnapshotCallback,
    runs: _JudgedSnapshots,
    best: int,
    verdict: GateVerdict,
    choice: BaselineChoice,
    selection: InputSelection | None,
    config: EnvConfig,
    settings: TrainSettings,
    wall: float,
    cross: CrossFitted | None,
) -> TrainResult:
    """The run's result: ``model`` (holding snapshot ``best``) made the baseline where the
    fallback's ``verdict`` says so, with the deployment described."""
    # Saved with the model: new bars need the same inputs (apply_inputs) before it acts on them.
    inputs = None if selection is None else selection.to_dict()
    model.input_selection = inputs
    deployed, deployed_val = runs.test_runs[best], runs.val_runs[best]
    kept = kept_policy(verdict, settings.fallback)
    if kept != "network":
        set_baseline_policy(model, kept, config)
        deployed = runs.base_test
        deployed_val = runs.base_val
    gate = {**verdict.to_dict(), "hold_vs_flat_on_training_window": choice.hold_vs_flat}
    vs_bh = vs_buy_and_hold(runs.val_runs[best], runs.per_year)
    deflated = deflated_sharpe(runs.val_runs[best], runs.val_runs, selection, runs.per_year)
    resolution, pbo = _gate_power(runs, verdict, choice.name, settings)
    deployment = describe_deployment(
        kept,
        choice.to_dict(),
        gate=gate,
        selection=inputs,
        fallback=settings.fallback,
        deflated=None if deflated is None else deflated.to_dict(),
        vs_buy_and_hold=vs_bh,
        resolution=None if resolution is None else resolution.to_dict(),
        overfitting=pbo,
    )
    return TrainResult(
        model=model,
        test=deployed,
        network_test=runs.test_runs[best],
        kept=kept,
        deployment=deployment,
        baseline=choice,
        deflated_sharpe=deflated,
        gate=gate,
        last_test=runs.test_runs[-1],
        validation=deployed_val,
        curve=cb.curve,
        evals=runs.evals,
        selected_step=runs.evals.timesteps[best],
        validation_sharpe=runs.evals.validation[best],
        train_seconds=wall,
        timesteps=int(model.num_timesteps),
        inputs=selection,
        cross_fit=None
        if cross is None
        else CrossFitSummary(cross.fit_bars, cross.validation_bars, cross.train_seconds),
        detectable_edge=resolution,
        overfitting=pbo,
    )


def _gate_power(
    runs: _JudgedSnapshots, verdict: GateVerdict, baseline: str, settings: TrainSettings
) -> tuple[DetectableEdge | None, dict[str, Any]]:
    """The smallest edge the gate detects (over the bars it read) and the probability of
    backtest overfitting of the choice among the snapshots and baselines; with cross-fitting
    the trials and the PBO are the first network's snapshots' on its own validation bars."""
    p = None if verdict.predictability is None else verdict.predictability["p_value"]
    resolution = gate_resolution(
        int(verdict.validation_vs_flat["bars"]),
        runs.per_year,
        baseline,
        candidates=[r.returns for r in runs.val_runs],
        predictable=p is not None and p < settings.predictability_level,
    )
    bases = [np.zeros_like(runs.base_val.returns)]
    if baseline != "flat":
        bases.append(runs.base_val.returns)
    pbo = overfitting_probability([r.returns for r in runs.val_runs] + bases)
    return resolution, pbo


def _baseline_only(
    fit: MarketData,
    val: MarketData,
    test: MarketData,
    config: EnvConfig,
    settings: TrainSettings,
    seed: int,
    per_year: float,
    choice: BaselineChoice,
    selection: InputSelection,
) -> TrainResult:
    """The run where the input selection kept no input: the baseline, deployed without training
    a network (the model is an untrained dueling network made to act as the baseline)."""
    # No experience is stored: the buffer needs only the batch's room.
    room = max(settings.batch_size, settings.num_envs)
    model, env = untrained_model(fit, config, settings, seed, buffer_size=room)
    env.close()
    set_baseline_policy(model, choice.name, config)
    inputs = selection.to_dict()
    model.input_selection = inputs
    base_val = baseline_backtest(choice.name, val, config, per_year)
    base_test = baseline_backtest(choice.name, test, config, per_year)
    resolution = gate_resolution(len(base_val.returns), per_year, choice.name)
    pbo = {"pbo": None, "candidates": 1, "bars": len(base_val.returns)}
    pbo["reason"] = "no network trained, so nothing was chosen"
    deployment = describe_deployment(
        choice.name,
        choice.to_dict(),
        gate=None,
        selection=inputs,
        fallback=True,
        resolution=None if resolution is None else resolution.to_dict(),
        overfitting=pbo,
    )
    gate = {
        "kept": choice.name,
        "baseline": choice.name,
        "level": GATE_LEVEL,
        "network_minus_flat_validation_sharpe": None,
        "network_minus_baseline_validation_sharpe": None,
        "features_predict_next_return": selection.predictability(),
        "beat_flat_by": None,
        "hold_vs_flat_on_training_window": choice.hold_vs_flat,
    }
    return TrainResult(
        model=model,
        test=base_test,
        network_test=None,
        kept=choice.name,
        deployment=deployment,
        baseline=choice,
        deflated_sharpe=None,
        gate=gate,
        last_test=None,
        validation=base_val,
        curve=[],
        evals=SnapshotEvaluations(timesteps=[], validation=[], test=[]),
        selected_step=None,
        validation_sharpe=base_val.strategy.sharpe,
        train_seconds=0.0,
        timesteps=0,
        inputs=selection,
        cross_fit=None,
        detectable_edge=resolution,
        overfitting=pbo,
    )
