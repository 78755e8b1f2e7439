"""Train GpuDQN on one split and keep the weights best on a validation window
(``train_selected``), then test the kept policy against the parameter-free baselines.

Model selection never looks at the out-of-sample window: the last ``val_fraction`` of a training
window is held out as a validation window; every ``eval_every`` env steps the weights are kept
as a snapshot, and after training every snapshot's greedy policy is backtested on it (costs in,
all snapshots side by side: ``backtest_batch``); the weights with the best validation Sharpe
are kept, and the fallback of :mod:`agents.pipelines.baseline_policies` decides whether the
network or a baseline is deployed. The out-of-sample window is evaluated for the same snapshots,
for the learning curve only.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import sys
import time
from typing import Any

import numpy as np

from agents.pipelines.backtest_policies import greedy_batch_policy
from agents.pipelines.baseline_policies import (
    GATE_LEVEL,
    BaselineChoice,
    ValidationReturns,
    baseline_action,
    baseline_backtest,
    baseline_config,
    choose_baseline,
    features_predict_returns,
    network_beats_baseline,
    set_constant_policy,
)
from agents.pipelines.deployment import describe_deployment
from agents.pipelines.input_selection import InputSelection, apply_inputs, select_inputs
from agents.pipelines.train_config import TrainSettings
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.backtest import BacktestResult, backtest_batch
from gpu_trading_env.reports.metrics import returns_of, sharpe, sharpe_difference_interval

__all__ = ["auto_reward_scale", "learning_rate_schedule", "train_selected"]


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
) -> dict[str, Any]:
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

    :returns: ``{"model", "test": BacktestResult, "network_test", "kept", "gate",
        "last_test": BacktestResult, "validation": BacktestResult (the kept policy on the
        validation window), "curve", "evals", "selected_step", "train_seconds",
        "timesteps", "inputs" (the input selection's ``to_dict``, or None)}``; ``model`` holds the kept policy: the snapshot best on validation, or,
        with ``settings.fallback``, the parameter-free baseline where that snapshot does not
        beat it on validation (``kept`` names which; ``gate`` holds the evidence, see
        :mod:`agents.pipelines.baseline_policies`). ``test`` is the kept policy's out-of-sample backtest,
        ``network_test`` the snapshot's.
    """
    from agents.rollouts.fused import start_compiling_kernels

    # On a GPU the fused path's kernels compile on their threads from here on, beside the input
    # selection's regime fit and the env's setup (a new machine's first run waited ~7 s for them).
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
    model, env, cb, wall = _train_with_snapshots(
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
    base_action = baseline_action(choice.name, config)
    k = len(cb.snapshots)
    (val_runs, _), (test_runs, _) = _backtest_snapshots(
        cb.snapshots, base_action, (val, test), config, per_year
    )
    base_val = baseline_backtest(choice.name, val, config, per_year)
    base_test = baseline_backtest(choice.name, test, config, per_year)
    evals = {
        "timesteps": [step for step, _, _ in cb.snapshots],
        "validation": [r.strategy.sharpe for r in val_runs],
        "test": [r.strategy.sharpe for r in test_runs],
    }
    env.close()
    cross: dict[str, Any] | None = None
    if settings.cross_fit:
        cross = _cross_fitted(
            train, n_val, config, settings, seed, per_year, choice.name, init_from=init_from
        )
        # Snapshot j of both networks: the same point of training; the pair is judged on both
        # validation windows (the second network's first, in time order).
        pairs = min(k, len(cross["runs"]))
        pooled = [
            ValidationReturns(np.concatenate([cross["runs"][j].returns, val_runs[j].returns]))
            for j in range(pairs)
        ]
        pooled_sharpes = [sharpe(p.returns, per_year) for p in pooled]
        best = _selected(pooled_sharpes)
        base_pooled = ValidationReturns(
            np.concatenate([cross["baseline"].returns, base_val.returns])
        )
        verdict = network_beats_baseline(
            pooled[best],
            base_pooled,
            choice.name,
            per_year,
            candidates=pooled,
            predictability=predictability,
            predictability_level=settings.predictability_level,
        )
        evals["cross_fit_validation"] = [r.strategy.sharpe for r in cross["runs"]]
        evals["pooled_validation"] = pooled_sharpes
    else:
        best = _selected(evals["validation"])
        verdict = network_beats_baseline(
            val_runs[best],
            base_val,
            choice.name,
            per_year,
            candidates=val_runs,
            predictability=predictability,
            predictability_level=settings.predictability_level,
        )
    model.policy.load_state_dict(cb.snapshots[best][2])
    # Saved with the model: new bars need the same inputs (apply_inputs) before it acts on them.
    inputs = None if selection is None else selection.to_dict()
    model.input_selection = inputs
    deployed, deployed_val = test_runs[best], val_runs[best]
    if settings.fallback and not verdict.keep_network:
        set_constant_policy(model, base_action)
        model.env_config = baseline_config(config)  # the env the baseline was evaluated in
        deployed = base_test
        deployed_val = base_val
    kept = "network" if deployed is test_runs[best] else choice.name
    gate = {**verdict.to_dict(), "hold_vs_flat_on_training_window": choice.hold_vs_flat}
    vs_bh = _vs_buy_and_hold(val_runs[best], per_year)
    deflated = _deflated(val_runs[best], val_runs, selection, train, per_year)
    deployment = describe_deployment(
        kept,
        choice.to_dict(),
        gate=gate,
        selection=inputs,
        fallback=settings.fallback,
        deflated=deflated,
        vs_buy_and_hold=vs_bh,
    )
    return {
        "model": model,
        "test": deployed,
        "network_test": test_runs[best],
        "kept": kept,
        "deployment": deployment,
        "baseline": choice.to_dict(),
        "deflated_sharpe": deflated,
        "gate": gate,
        "last_test": test_runs[-1],
        "curve": cb.curve,
        "evals": evals,
        "selected_step": evals["timesteps"][best],
        "validation_sharpe": evals["validation"][best],
        "validation": deployed_val,
        "train_seconds": wall,  # the kept network's training; the second's is in cross_fit
        "timesteps": int(model.num_timesteps),
        "inputs": inputs,
        "cross_fit": None
        if cross is None
        else {
            "fit_bars": cross["fit_bars"],
            "validation_bars": cross["validation_bars"],
            "train_seconds": cross["train_seconds"],
        },
    }


def _vs_buy_and_hold(result: BacktestResult, per_year: float) -> dict[str, float] | None:
    """The validation Sharpe of ``result`` minus buy-and-hold's there (same bars, costs in)."""
    bh = result.buy_and_hold_returns
    if len(bh) < 2 or len(bh) != len(result.returns):
        return None
    return sharpe_difference_interval(result.returns, bh, per_year, level=GATE_LEVEL)


def _deflated(
    chosen: BacktestResult,
    snapshots: list[BacktestResult],
    selection: InputSelection | None,
    train: MarketData,
    per_year: float,
) -> dict[str, Any] | None:
    """The deflated Sharpe ratio of the chosen snapshot's validation returns: trials are the
    inputs the selection tested times the snapshots, the variance of the trials' Sharpe ratios
    the snapshots' (per bar); None where it cannot be computed (too few bars, no variance)."""
    try:
        from gpu_trading_env.reports.sharpe_inference import deflated_sharpe_ratio
    except ImportError:  # the module is new; a tree without it reports no deflated ratio
        return None

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
    return result.to_dict()


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
) -> dict[str, Any]:
    """The run where the input selection kept no input: the baseline, deployed without training
    a network (the model is an untrained dueling network made to act as the baseline)."""
    # No experience is stored: the buffer needs only the batch's room.
    room = max(settings.batch_size, settings.num_envs)
    model, env = _untrained_model(fit, config, settings, seed, buffer_size=room)
    env.close()
    action = baseline_action(choice.name, config)
    set_constant_policy(model, action)
    model.env_config = baseline_config(config)  # the env the baseline was evaluated in
    inputs = selection.to_dict()
    model.input_selection = inputs
    base_val = baseline_backtest(choice.name, val, config, per_year)
    base_test = baseline_backtest(choice.name, test, config, per_year)
    deployment = describe_deployment(
        choice.name, choice.to_dict(), gate=None, selection=inputs, fallback=True
    )
    return {
        "model": model,
        "test": base_test,
        "network_test": None,
        "kept": choice.name,
        "deployment": deployment,
        "baseline": choice.to_dict(),
        "deflated_sharpe": None,
        "gate": {
            "kept": choice.name,
            "baseline": choice.name,
            "level": GATE_LEVEL,
            "network_minus_flat_validation_sharpe": None,
            "network_minus_baseline_validation_sharpe": None,
            "features_predict_next_return": selection.predictability(),
            "beat_flat_by": None,
            "hold_vs_flat_on_training_window": choice.hold_vs_flat,
        },
        "last_test": None,
        "curve": [],
        "evals": {"timesteps": [], "validation": [], "test": []},
        "selected_step": None,
        "validation_sharpe": base_val.strategy.sharpe,
        "validation": base_val,
        "train_seconds": 0.0,
        "timesteps": 0,
        "inputs": inputs,
        "cross_fit": None,
    }


def _cross_fitted(
    train: MarketData,
    n_val: int,
    config: EnvConfig,
    settings: TrainSettings,
    seed: int,
    per_year: float,
    baseline: str,
    init_from: Any = None,
) -> dict[str, Any]:
    """The second network of ``settings.cross_fit``: trained on the last ``n - n_val`` bars of
    each instrument of ``train`` and backtested, every snapshot, on the first ``n_val`` (which
    the first network trained on): ``{"runs": [BacktestResult per snapshot], "baseline":
    baseline's backtest there, "fit_bars", "validation_bars", "train_seconds"}``.

    It doubles the validation bars of the fallback's test (the test's power by window length:
    docs/ZOO.md, "Validation window and actions") for one more training; the deployed network
    stays the first, which never saw a bar after its validation window. It starts from ``init_from`` as the
    first does (a walk-forward warm start), so that the test judges the same procedure.
    """
    n = int(train.bars_per_instrument.min())
    early, late = train.split(float(n_val) / n)
    model, env, cb, wall = _train_with_snapshots(
        late, early, config, settings, seed, init_from=init_from
    )
    env.close()
    ((runs, _),) = _backtest_snapshots(
        cb.snapshots, baseline_action(baseline, config), (early,), config, per_year
    )
    base = baseline_backtest(baseline, early, config, per_year)
    del model
    return {
        "runs": runs,
        "baseline": base,
        "fit_bars": int(late.bars_per_instrument.min()),
        "validation_bars": int(early.bars_per_instrument.min()),
        "train_seconds": wall,
    }


def _backtest_snapshots(
    snapshots: list[tuple[int, Any, dict[str, Any]]],
    baseline: int,
    windows: tuple[MarketData, ...],
    config: EnvConfig,
    per_year: float,
) -> list[tuple[list[BacktestResult], BacktestResult]]:
    """Every snapshot's greedy policy and the baseline (env action ``baseline`` at every bar)
    backtested over each window: ``[(snapshot results, baseline result)]``, one per window.

    One batch per window, the baseline its last row: a step of the NumPy env for a few envs
    costs about what one env's does, and the backtests were most of the quickstart's time on a
    GPU (``backtest_batch``'s rows equal single backtests to the bit).
    """
    greedy = greedy_batch_policy([net for _, net, _ in snapshots])

    def policy(obs: np.ndarray, bar: int) -> np.ndarray:
        return np.r_[np.asarray(greedy(obs[:-1], bar), dtype=np.int64).reshape(-1), baseline]

    out = []
    for window in windows:
        *runs, base = backtest_batch(policy, len(snapshots) + 1, window, config, per_year=per_year)
        out.append((runs, base))
    return out


def _make_env(fit: MarketData, config: EnvConfig, settings: TrainSettings) -> Any:
    import gymnasium as gym

    import gpu_trading_env  # noqa: F401  (registers the env)

    return gym.make_vec(
        "GpuTrading-v0",
        num_envs=settings.num_envs,
        device=settings.device,
        data=fit,
        config=config,
    )


def _untrained_model(
    fit: MarketData,
    config: EnvConfig,
    settings: TrainSettings,
    seed: int,
    buffer_size: int | None = None,
) -> tuple[Any, Any]:
    """A new GpuDQN for ``settings`` on an env over ``fit``: ``(model, env)``.

    :param buffer_size: the replay buffer's size; None: ``settings.buffer_size``.
    """
    from agents import GpuDQN

    env = _make_env(fit, config, settings)
    width = int(settings.net_width)
    hidden = ([width, width], [width // 2]) if width else ([], [])  # 0: Q linear in the obs
    policy_kwargs: dict[str, Any] = {
        "net_arch": {"shared": hidden[0], "value": hidden[1], "advantage": hidden[1]}
    }
    reward_scale = (
        auto_reward_scale(fit) if settings.reward_scale is None else float(settings.reward_scale)
    )
    if settings.weight_decay:
        policy_kwargs["optimizer_kwargs"] = {
            "weight_decay": settings.weight_decay,
            "decoupled_weight_decay": True,
        }
    model = GpuDQN(
        "DuelingPolicy",
        env,
        policy_kwargs=policy_kwargs,
        learning_rate=learning_rate_schedule(settings),
        buffer_size=settings.buffer_size if buffer_size is None else int(buffer_size),
        learning_starts=settings.learning_starts,
        batch_size=settings.batch_size,
        gamma=settings.gamma,
        reward_scale=reward_scale,
        train_freq=1,
        gradient_steps=settings.gradient_steps,
        target_update_interval=settings.target_update_interval,
        exploration_fraction=settings.exploration_fraction,
        exploration_final_eps=settings.exploration_final_eps,
        curiosity=settings.curiosity,
        train_precision=settings.train_precision,
        tensorboard_log=settings.tensorboard_log,
        verbose=settings.verbose,
        seed=seed,
        device=settings.device,  # cpu, cuda or cuda:N, as the env
    )
    return model, env


def _train_with_snapshots(
    fit: MarketData,
    val: MarketData,
    config: EnvConfig,
    settings: TrainSettings,
    seed: int,
    *,
    init_from: Any = None,
    checkpoint_every: int | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    resume_from: str | os.PathLike[str] | None = None,
) -> tuple[Any, Any, Any, float]:
    """Train a GpuDQN on ``fit`` (``val``: the validation bars, in the run's identity only) with
    a snapshot of its weights every ``eval_every`` env steps and at the end: ``(model, env,
    snapshots callback, training seconds)``. The options are :func:`train_selected`'s."""
    from stable_baselines3.common.callbacks import BaseCallback

    from agents import GpuDQN

    steps = settings.timesteps
    eval_every = settings.snapshot_every
    run_id = _run_identity(fit, val, config, settings, seed)
    resumed: dict[str, Any] | None = None
    if resume_from is not None:
        from agents.files.checkpoint import checkpoint_extra

        env = _make_env(fit, config, settings)
        resumed = checkpoint_extra(resume_from)
        _check_same_run(resumed, run_id, resume_from)
        model = GpuDQN.load_checkpoint(
            resume_from,
            env=env,
            device=settings.device,
            total_timesteps=steps,
            tensorboard_log=settings.tensorboard_log,
            verbose=settings.verbose,
        )
    else:
        model, env = _untrained_model(fit, config, settings, seed)
    if init_from is not None:
        model.policy.load_state_dict(init_from)

    class Evaluate(BaseCallback):
        """Training curve every 1% of the run; a snapshot of the weights every eval_every,
        backtested after training (validation and test windows, all snapshots side by side)."""

        def __init__(self) -> None:
            super().__init__()
            self.curve: list[tuple[int, float]] = []
            # (env steps, CPU copy of the Q-network, the policy's state dict)
            self.snapshots: list[tuple[int, Any, dict[str, Any]]] = []
            self._next_curve = settings.curve_every
            self._next_eval = eval_every

        def snapshot(self) -> None:
            self.snapshots.append(
                (
                    int(self.model.num_timesteps),
                    copy.deepcopy(self.model.q_net).to("cpu"),
                    copy.deepcopy(self.model.policy.state_dict()),
                )
            )

        def state(self) -> dict[str, Any]:
            """What a checkpoint keeps of this callback: the curve and the snapshots so far."""
            return {
                "curve": self.curve,
                "snapshots": [{"step": s, "policy": sd} for s, _, sd in self.snapshots],
                "next_curve": self._next_curve,
                "next_eval": self._next_eval,
            }

        def restore(self, state: dict[str, Any], model: Any) -> None:
            self.curve = [(int(s), float(r)) for s, r in state["curve"]]
            self._next_curve, self._next_eval = state["next_curve"], state["next_eval"]
            for snap in state["snapshots"]:
                net = copy.deepcopy(model.q_net).to("cpu")
                prefix = "q_net."
                net.load_state_dict(
                    {k[len(prefix) :]: v for k, v in snap["policy"].items() if k.startswith(prefix)}
                )
                self.snapshots.append((int(snap["step"]), net, snap["policy"]))

        def _on_step(self) -> bool:
            if self.num_timesteps >= self._next_curve and len(self.model.ep_info_buffer) > 0:
                self._next_curve += settings.curve_every
                rets = [e["r"] for e in self.model.ep_info_buffer]
                self.curve.append((int(self.num_timesteps), float(np.mean(rets))))
            if self.num_timesteps >= self._next_eval:
                self._next_eval += eval_every
                self.snapshot()
            return True

    cb = Evaluate()
    seconds_before = 0.0
    if resumed is not None:
        cb.restore(resumed["evaluate"], model)
        seconds_before = float(resumed["train_seconds"])
    callbacks: list[BaseCallback] = [cb]
    if checkpoint_every is not None:
        from agents.files.checkpoint import CheckpointEvery

        if checkpoint_dir is None:
            raise ValueError("checkpoint_every needs checkpoint_dir: the folder to write into")
        callbacks.append(
            CheckpointEvery(
                checkpoint_every,
                checkpoint_dir,
                extra=lambda: {
                    "run": run_id,
                    "evaluate": cb.state(),
                    "train_seconds": seconds_before + time.perf_counter() - t0,
                },
            )
        )
    # SB3's bar redraws a terminal line: piped or logged, it shows nothing until the end.
    bar = settings.progress_bar and sys.stdout.isatty()
    if settings.progress_bar and not bar:
        from agents.pipelines.progress import ProgressLines

        callbacks.append(ProgressLines(steps))
    # SB3 dumps its logs every log_interval episodes; thousands of envs end episodes every
    # vector step, so the default (4) dumps the table and a TensorBoard event every step. About
    # 100 dumps per run are enough for the curves (their cost per dump was not measured).
    episodes = steps // max(int(config.episode_length), 1)
    log_interval = max(4, episodes // 100)
    t0 = time.perf_counter()
    model.learn(
        total_timesteps=steps if resumed is None else model.remaining_timesteps,
        callback=callbacks,
        log_interval=log_interval,
        progress_bar=bar,
        tb_log_name="GpuDQN",
        reset_num_timesteps=resumed is None,
    )
    wall = seconds_before + time.perf_counter() - t0
    if not cb.snapshots or cb.snapshots[-1][0] != model.num_timesteps:
        cb.snapshot()
    return model, env, cb, wall


def learning_rate_schedule(settings: TrainSettings) -> Any:
    """``settings.learning_rate``, or SB3's ``LinearSchedule`` from it to
    ``settings.final_learning_rate`` over the run (a plain class: saved with the model)."""
    if settings.final_learning_rate is None:
        return settings.learning_rate
    from stable_baselines3.common.utils import LinearSchedule

    return LinearSchedule(settings.learning_rate, settings.final_learning_rate, 1.0)


def auto_reward_scale(data: MarketData) -> float:
    """One over the standard deviation of the close-to-close returns of ``data`` (every
    instrument's bars, no return across an instrument boundary): the reward scale with which a
    bar's reward at full exposure has a standard deviation of about 1. 1.0 where the closes
    never move."""
    returns = [
        returns_of(np.asarray(data.close[data.instrument_rows(k)], dtype=np.float64))
        for k in range(data.n_instruments)
        if data.bars_per_instrument[k] > 1
    ]
    sd = float(np.std(np.concatenate(returns))) if returns else 0.0
    return 1.0 / sd if sd > 0.0 and math.isfinite(1.0 / sd) else 1.0


def _run_identity(
    fit: MarketData, val: MarketData, config: EnvConfig, settings: TrainSettings, seed: int
) -> dict[str, Any]:
    """What a resumed run must share with the checkpointed one: data, config, budget, seed."""
    digest = hashlib.sha256()
    for part in (fit, val):
        digest.update(np.ascontiguousarray(part.close, dtype=np.float64).tobytes())
        digest.update(np.ascontiguousarray(part.features, dtype=np.float32).tobytes())
    kept = (
        "timesteps",
        "num_envs",
        "batch_size",
        "buffer_size",
        "gradient_steps",
        "learning_rate",
        "final_learning_rate",
        "gamma",
        "net_width",
        "weight_decay",
        "reward_scale",
    )
    return {
        **{k: getattr(settings, k) for k in kept},
        "eval_every": settings.eval_every,
        "val_fraction": settings.val_fraction,
        "curiosity": settings.curiosity,
        "seed": int(seed),
        "config": repr(config),
        "data_sha256": digest.hexdigest(),
    }


def _check_same_run(resumed: Any, run_id: dict[str, Any], where: Any) -> None:
    if not isinstance(resumed, dict) or "run" not in resumed or "evaluate" not in resumed:
        raise ValueError(f"{str(where)!r} is not a checkpoint written by a train run")
    saved = resumed["run"]
    differ = sorted(k for k in run_id if saved.get(k) != run_id[k])
    if differ:
        details = "; ".join(
            f"{k}: checkpoint {saved.get(k)!r}, now {run_id[k]!r}"
            for k in differ
            if k not in ("config", "data_sha256")
        )
        raise ValueError(
            f"cannot resume from {str(where)!r}: the run differs in {differ}"
            + (f" ({details})" if details else "")
            + "; pass the options and data of the run that wrote it"
        )


def _selected(validation: list[float]) -> int:
    """The kept snapshot: the best validation Sharpe, the latest of equals; the latest snapshot
    when no Sharpe is a number (a flat equity curve)."""
    best, best_value = len(validation) - 1, -np.inf
    for j, v in enumerate(validation):
        if v >= best_value:  # NaN compares false: never kept over a number
            best, best_value = j, v
    return best
