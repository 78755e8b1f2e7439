"""One training run with snapshots of its weights (``train_with_snapshots``), and the
snapshots' greedy policies backtested side by side (``backtest_snapshots``).

Every ``eval_every`` env steps, and at the end, :class:`SnapshotCallback` keeps a copy of the
Q-network; the run can write checkpoints that hold the snapshots taken so far, and continue
from one (:mod:`agents.pipelines.run_identity` checks that it is the same run).
"""

from __future__ import annotations

import copy
import os
import sys
import time
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from agents.pipelines.backtest_policies import greedy_batch_policy
from agents.pipelines.model_builder import make_train_env, untrained_model
from agents.pipelines.run_identity import check_same_run, run_identity
from agents.pipelines.train_config import TrainSettings
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.backtest import BacktestResult, backtest_batch

__all__ = ["Snapshot", "SnapshotCallback", "backtest_snapshots", "train_with_snapshots"]

# (env steps, CPU copy of the Q-network, the policy's state dict)
Snapshot = tuple[int, Any, dict[str, Any]]


class SnapshotCallback(BaseCallback):
    """Training curve every ``curve_every`` env steps (the mean episode return); a snapshot of
    the weights every ``snapshot_every``, backtested after training.

    :param curve_every: env steps between points of :attr:`curve`.
    :param snapshot_every: env steps between :attr:`snapshots`.
    """

    def __init__(self, curve_every: int, snapshot_every: int) -> None:
        super().__init__()
        self.curve: list[tuple[int, float]] = []
        self.snapshots: list[Snapshot] = []
        self._curve_every = curve_every
        self._snapshot_every = snapshot_every
        self._next_curve = curve_every
        self._next_eval = snapshot_every

    def snapshot(self) -> None:
        """Keep the model's weights now."""
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
        """Take back a checkpoint's :meth:`state`; the Q-networks are rebuilt as ``model``'s."""
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
            self._next_curve += self._curve_every
            rets = [e["r"] for e in self.model.ep_info_buffer]
            self.curve.append((int(self.num_timesteps), float(np.mean(rets))))
        if self.num_timesteps >= self._next_eval:
            self._next_eval += self._snapshot_every
            self.snapshot()
        return True


class _TrainClock:
    """Training seconds: those of the checkpointed run resumed, plus this process's since
    :meth:`start`."""

    def __init__(self, seconds_before: float) -> None:
        self.seconds_before = seconds_before
        self._t0 = time.perf_counter()

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def seconds(self) -> float:
        return self.seconds_before + time.perf_counter() - self._t0


def _model_for_run(
    fit: MarketData,
    config: EnvConfig,
    settings: TrainSettings,
    seed: int,
    run_id: dict[str, Any],
    resume_from: str | os.PathLike[str] | None,
) -> tuple[Any, Any, dict[str, Any] | None]:
    """``(model, env, checkpoint extra)``: a new model, or the one of ``resume_from`` (its
    extra checked against ``run_id``; None for a new one)."""
    if resume_from is None:
        model, env = untrained_model(fit, config, settings, seed)
        return model, env, None
    from agents import GpuDQN
    from agents.files.checkpoint import checkpoint_extra

    env = make_train_env(fit, config, settings)
    resumed = checkpoint_extra(resume_from)
    check_same_run(resumed, run_id, resume_from)
    model = GpuDQN.load_checkpoint(
        resume_from,
        env=env,
        device=settings.device,
        total_timesteps=settings.timesteps,
        tensorboard_log=settings.tensorboard_log,
        verbose=settings.verbose,
    )
    return model, env, resumed


def _callbacks(
    cb: SnapshotCallback,
    settings: TrainSettings,
    run_id: dict[str, Any],
    clock: _TrainClock,
    checkpoint_every: int | None,
    checkpoint_dir: str | os.PathLike[str] | None,
) -> tuple[list[BaseCallback], bool]:
    """The run's callbacks (snapshots, checkpoints, plain progress lines) and whether SB3's
    progress bar is shown."""
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
                    "train_seconds": clock.seconds(),
                },
            )
        )
    # SB3's bar redraws a terminal line: piped or logged, it shows nothing until the end.
    bar = settings.progress_bar and sys.stdout.isatty()
    if settings.progress_bar and not bar:
        from agents.pipelines.progress import ProgressLines

        callbacks.append(ProgressLines(settings.timesteps))
    return callbacks, bar


def train_with_snapshots(
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
) -> tuple[Any, Any, SnapshotCallback, float]:
    """Train a GpuDQN on ``fit`` (``val``: the validation bars, in the run's identity only) with
    a snapshot of its weights every ``eval_every`` env steps and at the end: ``(model, env,
    snapshots callback, training seconds)``. The options are
    :func:`~agents.pipelines.model_selection.train_selected`'s."""
    steps = settings.timesteps
    run_id = run_identity(fit, val, config, settings, seed)
    model, env, resumed = _model_for_run(fit, config, settings, seed, run_id, resume_from)
    if init_from is not None:
        model.policy.load_state_dict(init_from)
    cb = SnapshotCallback(settings.curve_every, settings.snapshot_every)
    clock = _TrainClock(0.0)
    if resumed is not None:
        cb.restore(resumed["evaluate"], model)
        clock.seconds_before = float(resumed["train_seconds"])
    callbacks, bar = _callbacks(cb, settings, run_id, clock, checkpoint_every, checkpoint_dir)
    # SB3 dumps its logs every log_interval episodes; thousands of envs end episodes every
    # vector step, so the default (4) dumps the table and a TensorBoard event every step. About
    # 100 dumps per run are enough for the curves.
    episodes = steps // max(int(config.episode_length), 1)
    log_interval = max(4, episodes // 100)
    clock.start()
    model.learn(
        total_timesteps=steps if resumed is None else model.remaining_timesteps,
        callback=callbacks,
        log_interval=log_interval,
        progress_bar=bar,
        tb_log_name="GpuDQN",
        reset_num_timesteps=resumed is None,
    )
    wall = clock.seconds()
    if not cb.snapshots or cb.snapshots[-1][0] != model.num_timesteps:
        cb.snapshot()
    return model, env, cb, wall


def backtest_snapshots(
    snapshots: list[Snapshot],
    baseline: int,
    windows: tuple[MarketData, ...],
    config: EnvConfig,
    per_year: float,
) -> list[tuple[list[BacktestResult], BacktestResult]]:
    """Every snapshot's greedy policy and the baseline (env action ``baseline`` at every bar)
    backtested over each window: ``[(snapshot results, baseline result)]``, one per window.

    One batch per window, the baseline its last row: a step of the NumPy env for a few envs
    costs about what one env's does (``backtest_batch``'s rows equal single backtests to the
    bit).
    """
    greedy = greedy_batch_policy([net for _, net, _ in snapshots])

    def policy(obs: np.ndarray, bar: int) -> np.ndarray:
        return np.r_[np.asarray(greedy(obs[:-1], bar), dtype=np.int64).reshape(-1), baseline]

    out = []
    for window in windows:
        *runs, base = backtest_batch(policy, len(snapshots) + 1, window, config, per_year=per_year)
        out.append((runs, base))
    return out
