"""Train GpuDQN and judge it out of sample: one split (``train_selected``) or rolling folds
(``walk_forward``).

Model selection never looks at the out-of-sample window: the last ``val_fraction`` of a training
window is held out as a validation window; every ``eval_every`` env steps the weights are kept
as a snapshot, and after training every snapshot's greedy policy is backtested on it (costs in,
all snapshots side by side: ``backtest_batch``); the weights with the best validation Sharpe
are kept. The out-of-sample window is evaluated for the same snapshots, for the learning curve
only.

Walk-forward: fold k trains on the ``train_bars`` bars before its test window and is tested on
the next ``test_bars`` bars (``MarketData.walk_forward``); each fold starts from scratch, or with
``warm_start`` from the previous fold's kept weights. Several seeds run per fold. The test
windows' per-bar returns are stitched into one out-of-sample curve per seed; the seeds' mean
return per bar is the "ensemble" curve (an equal-weight portfolio of the seeds' agents). Beside
it: buy-and-hold with the same costs, a uniformly random policy through the same env, and on
synthetic planted data the known rule.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np

from agents.pipelines.baseline_policies import (
    baseline_action,
    baseline_backtest,
    choose_baseline,
    network_beats_baseline,
    set_constant_policy,
)
from agents.pipelines.train_settings import TrainSettings
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.backtest import (
    BacktestResult,
    BatchPolicy,
    Policy,
    backtest,
    backtest_batch,
    exposure_policy,
)
from gpu_trading_env.reports.metrics import curve_metrics, sharpe_difference_interval

__all__ = [
    "TrainSettings",
    "greedy_batch_policy",
    "greedy_policy",
    "has_known_rule",
    "random_policy",
    "train_selected",
    "walk_forward",
]

# The known rule of the planted market is held at full exposure, as the zoo's reference is
# (agents.pipelines.zoo): without barriers and the risk penalty (the commands' env defaults) the agent can
# hold every exposure level at no penalty.
RULE_EXPOSURE = 1.0


def greedy_batch_policy(q_nets: list[Any]) -> BatchPolicy:
    """Greedy actions of several Q-networks, one observation each (``backtest_batch``'s policy),
    from CPU copies of the networks taken now.

    A backtest asks for one action per bar: a one-row forward. On the GPU each is a host round
    trip, and torch's CPU thread pool on a busy machine made each one slow (figures in
    docs/PERFORMANCE.md). So the forwards run on the CPU: for dueling networks, their trunks and
    advantage heads in NumPy (:class:`agents.rollouts.acting.NumpyGreedy`, without torch's
    per-operator dispatch); otherwise through torch with one intra-op thread, the caller's thread setting restored
    after each call.
    """
    import torch as th

    from agents.rollouts.acting import NumpyGreedy

    fast = NumpyGreedy.of(list(q_nets))
    if fast is not None:

        def numpy_policy(obs: np.ndarray, bar: int) -> np.ndarray:
            return fast(obs)

        return numpy_policy
    nets = [copy.deepcopy(q).to("cpu").eval() for q in q_nets]

    def policy(obs: np.ndarray, bar: int) -> np.ndarray:
        threads = th.get_num_threads()
        th.set_num_threads(1)
        try:
            with th.inference_mode():
                x = th.as_tensor(np.asarray(obs, dtype=np.float32)).reshape(len(nets), 1, -1)
                return np.array([int(q(x[j]).argmax()) for j, q in enumerate(nets)], np.int64)
        finally:
            th.set_num_threads(threads)

    return policy


def greedy_policy(model: Any) -> Policy:
    """The model's greedy action per bar (``backtest``'s policy), from a CPU copy of its
    Q-network taken now; see :func:`greedy_batch_policy`."""
    batch = greedy_batch_policy([model.q_net])

    def policy(obs: np.ndarray, bar: int) -> np.ndarray:
        return batch(np.asarray(obs, dtype=np.float32).reshape(1, -1), bar)

    return policy


def random_policy(n_actions: int, seed: int) -> Callable[[np.ndarray, int], np.ndarray]:
    """Uniform random actions from ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)

    def policy(obs: np.ndarray, bar: int) -> np.ndarray:
        return rng.integers(0, n_actions, size=1)

    return policy


def has_known_rule(data: MarketData) -> bool:
    """Whether ``data`` is the planted synthetic market, whose best rule is known."""
    return "rule_expected_return" in data.metadata


def known_rule(data: MarketData, config: EnvConfig) -> BacktestResult | None:
    """The planted rule's backtest on ``data``, or None if the data is not the planted market."""
    if not has_known_rule(data):
        return None
    from gpu_trading_env.data.synthetic import planted_rule_exposure

    return backtest(
        exposure_policy(RULE_EXPOSURE * planted_rule_exposure(data), config), data, config
    )


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
    :returns: ``{"model", "test": BacktestResult, "network_test", "kept", "gate",
        "last_test": BacktestResult, "validation": BacktestResult (the kept policy on the
        validation window), "curve", "evals", "selected_step", "train_seconds",
        "timesteps"}``; ``model`` holds the kept policy: the snapshot best on validation, or,
        with ``settings.fallback``, the parameter-free baseline where that snapshot does not
        beat it on validation (``kept`` names which; ``gate`` holds the evidence, see
        :mod:`agents.pipelines.baseline_policies`). ``test`` is the kept policy's out-of-sample backtest,
        ``network_test`` the snapshot's.
    """
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback

    import gpu_trading_env  # noqa: F401  (registers the env)
    from agents import GpuDQN

    n = int(train.bars_per_instrument.min())
    n_val = max(int(round(settings.val_fraction * n)), 2)
    fit, val = train.split(float(n - n_val) / n)
    env = gym.make_vec(
        "GpuTrading-v0",
        num_envs=settings.num_envs,
        device=settings.device,
        data=fit,
        config=config,
    )
    steps = settings.timesteps
    eval_every = settings.eval_every or max(steps // 10, settings.num_envs)
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
    run_id = _run_identity(fit, val, config, settings, seed)
    resumed: dict[str, Any] | None = None
    if resume_from is not None:
        from agents.files.checkpoint import checkpoint_extra

        resumed = checkpoint_extra(resume_from)
        _check_same_run(resumed, run_id, resume_from)
        model = GpuDQN.load_checkpoint(
            resume_from,
            env=env,
            device=settings.device,
            tensorboard_log=settings.tensorboard_log,
            verbose=settings.verbose,
        )
    else:
        model = GpuDQN(
            "DuelingPolicy",
            env,
            policy_kwargs=policy_kwargs,
            learning_rate=learning_rate_schedule(settings),
            buffer_size=settings.buffer_size,
            learning_starts=max(10 * settings.num_envs, 1000),
            batch_size=settings.batch_size,
            gamma=settings.gamma,
            reward_scale=reward_scale,
            train_freq=1,
            gradient_steps=1,
            target_update_interval=max(steps // 50, settings.num_envs),
            exploration_fraction=0.3,
            exploration_final_eps=0.02,
            curiosity=settings.curiosity,
            train_precision=settings.train_precision,
            tensorboard_log=settings.tensorboard_log,
            verbose=settings.verbose,
            seed=seed,
            device=settings.device,  # cpu, cuda or cuda:N, as the env
        )
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
            self._next_curve = max(steps // 100, settings.num_envs)
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
                self._next_curve += max(steps // 100, settings.num_envs)
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
    # One backtest per window for all snapshots: a step of the NumPy env for a few envs costs
    # about what one env's does, and the backtests were most of the quickstart's time on a GPU.
    policy = greedy_batch_policy([net for _, net, _ in cb.snapshots])
    k = len(cb.snapshots)
    val_runs = backtest_batch(policy, k, val, config, per_year=per_year)
    test_runs = backtest_batch(policy, k, test, config, per_year=per_year)
    evals = {
        "timesteps": [step for step, _, _ in cb.snapshots],
        "validation": [r.strategy.sharpe for r in val_runs],
        "test": [r.strategy.sharpe for r in test_runs],
    }
    best = _selected(evals["validation"])
    model.policy.load_state_dict(cb.snapshots[best][2])
    env.close()
    choice = choose_baseline(train, config, per_year)
    base_val = baseline_backtest(choice.name, val, config, per_year)
    verdict = network_beats_baseline(val_runs[best], base_val, choice.name, per_year)
    deployed, deployed_val = test_runs[best], val_runs[best]
    if settings.fallback and not verdict.keep_network:
        set_constant_policy(model, baseline_action(choice.name, config))
        deployed = baseline_backtest(choice.name, test, config, per_year)
        deployed_val = base_val
    return {
        "model": model,
        "test": deployed,
        "network_test": test_runs[best],
        "kept": "network" if deployed is test_runs[best] else choice.name,
        "gate": {**verdict.to_dict(), "hold_vs_flat_on_training_window": choice.hold_vs_flat},
        "last_test": test_runs[-1],
        "curve": cb.curve,
        "evals": evals,
        "selected_step": evals["timesteps"][best],
        "validation_sharpe": evals["validation"][best],
        "validation": deployed_val,
        "train_seconds": wall,
        "timesteps": int(model.num_timesteps),
    }


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
    returns = []
    for k in range(data.n_instruments):
        lo, hi = int(data.instrument_offsets[k]), int(data.instrument_offsets[k + 1])
        close = np.asarray(data.close[lo:hi], dtype=np.float64)
        if len(close) > 1:
            returns.append(close[1:] / close[:-1] - 1.0)
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


def _stitch(results: list[BacktestResult]) -> tuple[np.ndarray, np.ndarray]:
    """Per-bar returns [sum(T_k - 1)] of consecutive test windows and their end timestamps."""
    rets = np.concatenate([r.equity[1:] / r.equity[:-1] - 1.0 for r in results])
    ts = np.concatenate([r.timestamps[1:] for r in results])
    return rets, ts


def _curve(rets: np.ndarray) -> np.ndarray:
    return np.concatenate([[1.0], np.cumprod(1.0 + rets)])


def walk_forward(
    data: MarketData,
    config: EnvConfig,
    settings: TrainSettings,
    *,
    folds: int,
    train_bars: int | None,
    test_bars: int | None,
    seeds: list[int],
    warm_start: bool,
    per_year: float,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Rolling-fold training and out-of-sample evaluation of one instrument (``data``).

    :returns: a dict with ``folds`` (per-fold figures and curves), ``stitched`` (curves over all
        test windows: per seed, ensemble, buy-and-hold, random, rule), ``aggregate`` (metrics of
        the stitched curves, costs in) and ``sharpe_vs_buy_and_hold`` (block-bootstrap interval
        of the ensemble's Sharpe minus buy-and-hold's).
    """
    pieces = data.walk_forward(folds, train_bars, test_bars)
    fold_out: list[dict[str, Any]] = []
    by_seed: dict[int, list[BacktestResult]] = {s: [] for s in seeds}
    bench: dict[str, list[BacktestResult]] = {"buy_and_hold": [], "random": [], "rule": []}
    warm: dict[int, Any] = {}
    for k, (train, test) in enumerate(pieces):
        runs = []
        for s in seeds:
            log(
                f"fold {k + 1}/{folds}, seed {s}: training on {train.n_bars} bars "
                f"({_span(train)}), testing on {test.n_bars} ({_span(test)})"
            )
            run = train_selected(
                train,
                test,
                config,
                settings,
                seed=s,
                per_year=per_year,
                init_from=warm.get(s) if warm_start else None,
            )
            if warm_start:
                warm[s] = copy.deepcopy(run["model"].policy.state_dict())
            by_seed[s].append(run["test"])
            runs.append(run)
        rnd = backtest(random_policy(config.n_actions, 10_000 + k), test, config, per_year=per_year)
        rule = known_rule(test, config)
        bench["random"].append(rnd)
        bench["buy_and_hold"].append(runs[0]["test"])  # its buy_and_hold curve
        if rule is not None:
            bench["rule"].append(rule)
        fold_out.append(
            {
                "fold": k,
                "train": _window(train),
                "test": _window(test),
                "seeds": [
                    {
                        "seed": s,
                        "strategy": r["test"].strategy.to_dict(),
                        "last_model_strategy": r["last_test"].strategy.to_dict(),
                        "selected_step": r["selected_step"],
                        "validation_sharpe": r["validation_sharpe"],
                        "train_seconds": r["train_seconds"],
                        "timesteps": r["timesteps"],
                        "learning_curve": r["curve"],
                        "evaluations": r["evals"],
                    }
                    for s, r in zip(seeds, runs, strict=True)
                ],
                "buy_and_hold": runs[0]["test"].benchmark.to_dict(),
                "random": rnd.strategy.to_dict(),
                "rule": rule.strategy.to_dict() if rule is not None else None,
                "_results": runs,
                "_random": rnd,
                "_rule": rule,
            }
        )
    stitched: dict[str, Any] = {}
    seed_rets = {}
    for s in seeds:
        seed_rets[s], ts = _stitch(by_seed[s])
    ts = np.concatenate([[pieces[0][1].timestamps[0]], ts])
    ensemble = np.mean([seed_rets[s] for s in seeds], axis=0)
    bh_rets = np.concatenate(
        [r.buy_and_hold[1:] / r.buy_and_hold[:-1] - 1.0 for r in bench["buy_and_hold"]]
    )
    rnd_rets, _ = _stitch(bench["random"])
    stitched["timestamps"] = ts
    stitched["ensemble"] = _curve(ensemble)
    stitched["seeds"] = {s: _curve(seed_rets[s]) for s in seeds}
    stitched["buy_and_hold"] = _curve(bh_rets)
    stitched["random"] = _curve(rnd_rets)
    if bench["rule"]:
        stitched["rule"] = _curve(_stitch(bench["rule"])[0])
    stitched["exposure"] = np.concatenate([r.exposure for r in by_seed[seeds[0]]])
    stitched["boundaries"] = [p[1].timestamps[0] for p in pieces]

    def m(curve: np.ndarray) -> dict[str, Any]:
        return curve_metrics(curve, per_year, costs_included=True).to_dict()

    aggregate = {
        "ensemble": m(stitched["ensemble"]),
        "seeds": {str(s): m(c) for s, c in stitched["seeds"].items()},
        "buy_and_hold": m(stitched["buy_and_hold"]),
        "random": m(stitched["random"]),
    }
    if "rule" in stitched:
        aggregate["rule"] = m(stitched["rule"])
    ci = sharpe_difference_interval(ensemble, bh_rets, per_year)
    beats = [
        all(
            f["_results"][j]["test"].equity[-1] > f["_results"][j]["test"].buy_and_hold[-1]
            for f in fold_out
        )
        for j in range(len(seeds))
    ]
    return {
        "folds": fold_out,
        "stitched": stitched,
        "aggregate": aggregate,
        "sharpe_vs_buy_and_hold": ci,
        "beats_buy_and_hold_every_fold": dict(zip(map(str, seeds), beats, strict=True)),
        "settings": asdict(settings),
    }


def _span(md: MarketData) -> str:
    import pandas as pd

    return f"{pd.Timestamp(md.timestamps[0])} to {pd.Timestamp(md.timestamps[-1])}"


def _window(md: MarketData) -> dict[str, Any]:
    import pandas as pd

    return {
        "start": str(pd.Timestamp(md.timestamps[0])),
        "end": str(pd.Timestamp(md.timestamps[-1])),
        "bars": int(md.n_bars),
    }
