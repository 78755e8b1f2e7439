"""One portfolio training run (``train_portfolio``): GpuDQN with the branching dueling head on
``GpuPortfolio-v0``, its snapshots judged on validation bars against the baseline portfolio,
the kept policy on the test bars.

The aligned bars are split in time (:class:`PortfolioSplits`): the network trains on the first
part, a snapshot of its weights is taken every ``snapshot_every`` env steps and each is
backtested on the validation bars after it. The baseline is chosen per instrument on its
training bars (flat, hold long or hold short) and the best snapshot is kept only where it
passes ``train``'s gate against that baseline portfolio (:mod:`agents.pipelines.deployment`,
step 5). Otherwise the run keeps the baseline, and the saved model acts its levels. The test
bars come last and judge nothing.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.pipelines.deployment import (
    Deployment,
    GateVerdict,
    PortfolioBaseline,
    ValidationReturns,
    choose_portfolio_baseline,
    describe_portfolio_deployment,
    kept_policy,
    network_beats_baseline,
)
from agents.pipelines.portfolio_backtest import (
    GreedyDevicePolicy,
    LevelPolicy,
    PortfolioBacktest,
    backtest_portfolio,
    backtest_portfolios,
    buy_and_hold_portfolio,
    flat_level,
)
from agents.pipelines.portfolio_inputs import PortfolioInputs, select_portfolio_inputs
from agents.pipelines.portfolio_train_config import (
    PortfolioTrainConfig,
    PortfolioTrainConfigError,
)
from agents.pipelines.snapshot_selection import (
    deflated_sharpe,
    gate_resolution,
    overfitting_probability,
)
from gpu_trading_env.data.portfolio_data import PortfolioData
from gpu_trading_env.reports.metrics import bars_per_year

__all__ = [
    "MIN_WINDOW_BARS",
    "PortfolioBacktest",
    "PortfolioSplits",
    "PortfolioTrainConfig",
    "PortfolioTrainConfigError",
    "PortfolioTrainResult",
    "backtest_portfolio",
    "backtest_portfolios",
    "baseline_levels",
    "buy_and_hold_portfolio",
    "check_portfolio_run",
    "greedy_level_policy",
    "hold_returns",
    "portfolio_reward_scale",
    "portfolio_splits",
    "set_flat_branches",
    "set_flat_policy",
    "slice_portfolio",
    "train_portfolio",
    "training_baseline",
    "write_portfolio_run",
]

# Bars of the validation and the test window at least: the validation test splits its returns
# in halves of at least four (the bootstrap's minimum).
MIN_WINDOW_BARS = 10


@dataclass(frozen=True)
class PortfolioSplits:
    """Chronological windows of the aligned bars: fit ``[0, fit_stop)``, validation
    ``[fit_stop, val_stop)``, test ``[val_stop, n_bars)``."""

    fit_stop: int
    val_stop: int
    n_bars: int

    def to_dict(self) -> dict[str, list[int]]:
        return {
            "fit": [0, self.fit_stop],
            "validation": [self.fit_stop, self.val_stop],
            "test": [self.val_stop, self.n_bars],
        }


def portfolio_splits(n_bars: int, train_fraction: float, val_fraction: float) -> PortfolioSplits:
    """The windows of ``n_bars`` bars: the first ``floor(train_fraction · n)`` train, the last
    ``floor(val_fraction · that)`` of them validate.

    :raises ValueError: where a window has fewer than :data:`MIN_WINDOW_BARS` bars.
    """
    train = int(math.floor(train_fraction * n_bars))
    fit = train - int(math.floor(val_fraction * train))
    sizes = {"fit": fit, "validation": train - fit, "test": n_bars - train}
    for name, size in sizes.items():
        if size < MIN_WINDOW_BARS:
            raise ValueError(
                f"the data's {n_bars} aligned bars leave the {name} window {size} bars "
                f"(train_fraction = {train_fraction}, val_fraction = {val_fraction}): allowed is "
                f"at least {MIN_WINDOW_BARS} bars in each of fit, validation and test (more bars "
                "or other fractions)"
            )
    return PortfolioSplits(fit_stop=fit, val_stop=train, n_bars=int(n_bars))


def check_portfolio_run(data: PortfolioData, config: PortfolioTrainConfig) -> PortfolioSplits:
    """The run's windows, checked before any training: each long enough, the fit window at
    least one training episode and its mark, and one cost rate per instrument where given.

    :raises ValueError: naming the setting, its value and what the data allows.
    """
    config.env.cost_rates(data.n_instruments)
    splits = portfolio_splits(data.n_bars, config.train_fraction, config.val_fraction)
    if config.env.episode_length + 1 > splits.fit_stop:
        raise ValueError(
            f"PortfolioConfig.episode_length = {config.env.episode_length} is invalid for the "
            f"{splits.fit_stop} bars of the fit window (of {data.n_bars}): allowed is at most "
            f"{splits.fit_stop - 1} (one episode and the bar it is marked to); a shorter "
            "episode or more bars"
        )
    return splits


def slice_portfolio(data: PortfolioData, start: int, stop: int) -> PortfolioData:
    """Bars ``start:stop`` of ``data`` (the features as computed on the whole history: causal)."""
    if not 0 <= start < stop <= data.n_bars:
        raise ValueError(
            f"slice start = {start}, stop = {stop} is invalid: allowed is 0 <= start < stop <= "
            f"{data.n_bars}"
        )

    def part(a: np.ndarray) -> np.ndarray:
        out = np.ascontiguousarray(a[start:stop])
        out.flags.writeable = False
        return out

    return PortfolioData(
        open=part(data.open),
        high=part(data.high),
        low=part(data.low),
        close=part(data.close),
        volume=part(data.volume),
        features=part(data.features),
        timestamps=part(data.timestamps),
        instruments=data.instruments,
        feature_names=data.feature_names,
        filled=part(data.filled),
    )


def portfolio_reward_scale(data: PortfolioData) -> float:
    """One over the standard deviation of the equal-weight portfolio's close-to-close returns
    (the mean of the K instruments' returns): the reward scale at which a step's reward at full
    gross exposure has a standard deviation of about 1. 1.0 where the closes never move."""
    close = np.asarray(data.close, dtype=np.float64)
    if close.shape[0] < 3:
        return 1.0
    sd = float(np.std((close[1:] / close[:-1] - 1.0).mean(axis=1)))
    return 1.0 / sd if sd > 0.0 and math.isfinite(1.0 / sd) else 1.0


def greedy_level_policy(net: Any, device: str = "cpu") -> LevelPolicy:
    """``policy(obs [D], bar) -> int64 [K]``: the per-branch argmax of a branching Q-network
    (``net(obs [1, D]) -> Q [1, K, L]``).

    On ``"cpu"`` the policy reads NumPy observations with one intra-op thread (the caller's
    setting restored after each call), as the single env's backtest policies; on a CUDA device
    it is a :class:`GreedyDevicePolicy` of a copy of ``net`` moved there, which reads the CUDA
    backtest's torch rows and returns the levels on the device (:func:`backtest_portfolios`
    with that ``device`` runs several such policies in one CUDA graph a bar).
    """
    import torch as th

    if str(device) != "cpu":
        return GreedyDevicePolicy(copy.deepcopy(net).to(th.device(device)).eval())

    def policy(obs: np.ndarray, bar: int) -> np.ndarray:
        # A batch of one gains nothing from more threads, and the zoo's workers share the cores.
        threads = th.get_num_threads()
        th.set_num_threads(1)
        try:
            with th.inference_mode():
                q = net(th.as_tensor(np.asarray(obs, dtype=np.float32)[None, :]))
        finally:
            th.set_num_threads(threads)
        return q[0].argmax(dim=-1).numpy().astype(np.int64)

    return policy


def _last_advantage_layer(net: Any) -> Any:
    """The last linear layer of ``net.advantage_head`` (a ``BranchLinear`` or an ``nn.Linear``)."""
    import torch as th

    from agents.algorithm.policies import BranchLinear

    return [m for m in net.advantage_head if isinstance(m, BranchLinear | th.nn.Linear)][-1]


def set_flat_policy(model: Any, level: int | np.ndarray) -> None:
    """Make a branching dueling ``model`` act ``level`` on every observation: one level for
    every branch (an int), or one a branch (int [K]: a baseline portfolio's levels). Each
    branch's last advantage layer (or the one shared by the branches) becomes ``A_d =
    one_hot(level_d)`` (zero weights, a unit bias); the trunk and the value head stay as
    trained, and the model saves and loads as any other.

    :raises TypeError: where the head is not branching, or (levels differing by branch) its last
        advantage layer is shared by the branches.
    """
    import torch as th

    from agents.algorithm.policies import BranchLinear

    for net in (model.q_net, model.q_net_target):
        last = _last_advantage_layer(net)
        # Each branch's own last layer, or one that gives the L levels to every branch (the
        # instrument encoder's shared head).
        if not (isinstance(last, BranchLinear) or last.out_features == net.n_levels):
            raise TypeError("set_flat_policy needs a branching head of hidden advantage layers")
        levels = np.asarray(level, dtype=np.int64).reshape(-1)
        n = int(net.n_levels)
        if levels.size == 0 or not ((levels >= 0) & (levels < n)).all():
            raise ValueError(f"level = {level!r} is invalid: allowed is 0..{n - 1}, or K such")
        per_branch = levels.size > 1 and not (levels == levels[0]).all()
        if per_branch and not isinstance(last, BranchLinear):
            raise TypeError(
                f"level = {level!r} differs by branch: it needs each branch's own last advantage "
                "layer, not one shared by the branches"
            )
        # The other advantages added to it (the instrument encoder's shared head, the evidence
        # head) go to zero.
        shared = []
        for extra in (getattr(net, "encoder_advantage", None), getattr(net, "evidence_head", None)):
            if extra is not None:
                shared += [m for m in extra if isinstance(m, th.nn.Linear | BranchLinear)][-1:]
        with th.no_grad():
            for layer in (last, *shared):
                layer.weight.zero_()
                layer.bias.zero_()
            if per_branch:
                last.bias[th.arange(levels.size), th.as_tensor(levels)] = 1.0  # [K, L]
            else:
                last.bias[..., int(levels[0])] = 1.0  # [K, L] per branch, or [L] shared by them


# The flat level's advantage bias in a branch held flat (set_flat_branches): far above any
# advantage a trained head gives (Q-values of the scaled rewards are of the order of 1).
_FLAT_BIAS = 1.0e4


def set_flat_branches(net: Any, branches: np.ndarray, level: int) -> None:
    """Make the branches ``branches`` (bool [K]) of a branching dueling Q-network act ``level``
    on every observation: each such branch's own last advantage layer gets zero weights and a
    bias of :data:`_FLAT_BIAS` at ``level`` (above what the instrument encoder's shared head can
    add); the other branches are unchanged."""
    import torch as th

    from agents.algorithm.policies import BranchLinear

    last = _last_advantage_layer(net)
    if not isinstance(last, BranchLinear):
        raise TypeError("set_flat_branches needs each branch's own last advantage layer")
    mask = th.as_tensor(np.asarray(branches, dtype=bool), device=last.weight.device)
    with th.no_grad():
        last.weight[mask] = 0.0
        last.bias[mask] = 0.0
        last.bias[mask, int(level)] = _FLAT_BIAS


@dataclass(frozen=True, eq=False)
class PortfolioTrainResult:
    """What :func:`train_portfolio` did and found.

    Attributes:
        kept: ``"network"`` or the baseline portfolio's name (``"flat"``, ``"hold long"``,
            ``"hold short"``, or ``"baseline"`` where the instruments' differ): the policy the
            saved model acts.
        reason: one line saying why (``deployment.headline``).
        validation, test: the kept policy's backtests of the validation and test bars.
        validation_flat, test_flat: flat's there (zero returns: no trade).
        validation_network, test_network: the best snapshot's there, kept or not (flat's
            where no network was trained).
        test_buy_and_hold: equal-weight buy-and-hold of the test bars.
        validation_buy_and_hold: the same of the validation bars.
        gate: the validation test (``GateVerdict``) of the best snapshot against the baseline
            portfolio; None where no network was trained.
        baseline: each instrument's baseline on the training bars (``PortfolioBaseline``);
            ``validation_baseline``, ``test_baseline`` its backtests; ``deployment`` the
            outcome in words, per instrument; ``evidence`` the deflated Sharpe ratio, the
            smallest edge the gate detects and the probability of backtest overfitting.
        snapshot_steps: env steps of each snapshot; ``snapshot_sharpes`` their validation
            Sharpe; ``chosen_snapshot`` the best's index (None: no network trained).
        inputs: the input selection (None with ``select_inputs=False``).
        splits: the windows; ``config``: the settings, resolved for ``device``.
        reward_scale: the TD target's reward factor used.
        seconds: wall seconds of the whole run; ``train_seconds`` of ``learn`` alone.
        model: the trained GpuDQN (acting the kept policy), not in :meth:`to_dict`.
    """

    kept: str
    reason: str
    validation: PortfolioBacktest
    test: PortfolioBacktest
    validation_flat: PortfolioBacktest
    test_flat: PortfolioBacktest
    validation_network: PortfolioBacktest
    test_network: PortfolioBacktest
    validation_buy_and_hold: PortfolioBacktest
    test_buy_and_hold: PortfolioBacktest
    gate: GateVerdict | None
    snapshot_steps: tuple[int, ...]
    snapshot_sharpes: tuple[float, ...]
    chosen_snapshot: int | None
    splits: PortfolioSplits
    config: PortfolioTrainConfig
    instruments: tuple[str, ...]
    seed: int
    device: str
    reward_scale: float
    seconds: float
    train_seconds: float
    inputs: PortfolioInputs | None = None
    baseline: PortfolioBaseline | None = None
    validation_baseline: PortfolioBacktest | None = None
    test_baseline: PortfolioBacktest | None = None
    deployment: Deployment | None = None
    evidence: dict[str, Any] | None = None
    model: Any = None

    def to_dict(self) -> dict[str, Any]:
        """``metrics.json``: every figure, JSON-ready (no per-bar arrays, no model)."""
        return {
            "kind": "portfolio",
            "kept": self.kept,
            "reason": self.reason,
            "instruments": list(self.instruments),
            "seed": self.seed,
            "device": self.device,
            "splits": self.splits.to_dict(),
            "validation": {
                "kept": self.validation.to_dict(),
                "flat": self.validation_flat.to_dict(),
                "network": self.validation_network.to_dict(),
                "buy_and_hold": self.validation_buy_and_hold.to_dict(),
            },
            "test": {
                "kept": self.test.to_dict(),
                "flat": self.test_flat.to_dict(),
                "network": self.test_network.to_dict(),
                "buy_and_hold": self.test_buy_and_hold.to_dict(),
            },
            "gate": None if self.gate is None else self.gate.to_dict(),
            "baseline": self._baseline_dict(),
            "deployment": None if self.deployment is None else self.deployment.to_dict(),
            **(self.evidence or {}),
            "inputs": None if self.inputs is None else self.inputs.to_dict(),
            "snapshots": [
                {"step": s, "validation_sharpe": v}
                for s, v in zip(self.snapshot_steps, self.snapshot_sharpes, strict=True)
            ],
            "chosen_snapshot": self.chosen_snapshot,
            "reward_scale": self.reward_scale,
            "seconds": self.seconds,
            "train_seconds": self.train_seconds,
            "config": self.config.to_dict(),
        }

    def _baseline_dict(self) -> dict[str, Any] | None:
        """Each instrument's baseline and the evidence for it, with the baseline portfolio's
        validation and test backtests."""
        if self.baseline is None:
            return None
        out = self.baseline.to_dict()
        for window, run in (("validation", self.validation_baseline), ("test", self.test_baseline)):
            out[window] = None if run is None else run.to_dict()
        return out


def _model(
    fit: PortfolioData,
    config: PortfolioTrainConfig,
    seed: int,
    device: str,
    inputs: PortfolioInputs | None = None,
) -> Any:
    """A new GpuDQN with the branching dueling head on ``config.num_envs`` envs over ``fit``;
    ``inputs`` give each branch its evidence columns (``config.branch_inputs``)."""
    import gymnasium as gym

    import gpu_trading_env  # noqa: F401  (registers the envs)
    from agents import GpuDQN
    from agents.pipelines.model_builder import learning_rate_schedule

    env = gym.make_vec(
        "GpuPortfolio-v0", num_envs=config.num_envs, device=device, data=fit, config=config.env
    )
    width = int(config.net_width)
    hidden = ([width, width], [width // 2]) if width else ([], [])
    policy_kwargs: dict[str, Any] = {
        "net_arch": {"shared": hidden[0], "value": hidden[1], "advantage": hidden[1]}
    }
    if config.branch_values:
        policy_kwargs["branch_values"] = True
    if config.instrument_encoder:
        policy_kwargs["instrument_encoder"] = True
        columns = inputs.branch_columns() if config.branch_inputs and inputs else None
        if columns is not None:
            policy_kwargs["branch_columns"] = columns
    if config.weight_decay:
        policy_kwargs["optimizer_kwargs"] = {
            "weight_decay": config.weight_decay,
            "decoupled_weight_decay": True,
        }
    scale = portfolio_reward_scale(fit) if config.reward_scale is None else config.reward_scale
    return GpuDQN(
        "DuelingPolicy",
        env,
        policy_kwargs=policy_kwargs,
        learning_rate=learning_rate_schedule(config),  # type: ignore[arg-type]
        buffer_size=config.buffer_size,
        learning_starts=config.learning_starts,
        batch_size=config.batch_size,
        gamma=config.gamma,
        reward_scale=float(scale),
        train_freq=1,
        gradient_steps=config.gradient_steps,
        target_update_interval=config.target_update_interval,
        exploration_fraction=config.exploration_fraction,
        exploration_final_eps=config.exploration_final_eps,
        train_precision=config.train_precision,
        branch_rewards=config.branch_rewards,
        verbose=config.verbose,
        seed=seed,
        device=device,
    )


def _learn(model: Any, config: PortfolioTrainConfig, progress: bool) -> tuple[Any, float]:
    """Train ``model`` for ``config.timesteps`` with weight snapshots: ``(callback, seconds)``."""
    from agents.pipelines.snapshot_training import SnapshotCallback

    cb = SnapshotCallback(config.curve_every, config.snapshot_every)
    callbacks: list[Any] = [cb]
    bar = progress and sys.stdout.isatty()
    if progress and not bar:
        from agents.pipelines.progress import ProgressLines

        callbacks.append(ProgressLines(config.timesteps))
    episodes = int(config.timesteps) // max(int(config.env.episode_length), 1)
    t0 = time.perf_counter()
    model.learn(
        total_timesteps=config.timesteps,
        callback=callbacks,
        log_interval=max(4, episodes // 100),
        progress_bar=bar,
    )
    seconds = time.perf_counter() - t0
    if not cb.snapshots or cb.snapshots[-1][0] != model.num_timesteps:
        cb.snapshot()
    return cb, seconds


def _start_torch(config: PortfolioTrainConfig, device: str) -> None:
    if str(device) == "cpu" and config.torch_threads is not None:
        import torch

        torch.set_num_threads(int(config.torch_threads))


@dataclass(frozen=True)
class _Choice:
    """What the validation bars decided: the kept policy, why, and the backtests."""

    deployment: Deployment
    gate: GateVerdict | None
    chosen: int | None
    sharpes: tuple[float, ...]
    validation_network: PortfolioBacktest
    test_network: PortfolioBacktest
    validation_flat: PortfolioBacktest
    test_flat: PortfolioBacktest
    validation_baseline: PortfolioBacktest
    test_baseline: PortfolioBacktest
    evidence: dict[str, Any]


def _flat_levels(data: PortfolioData, config: PortfolioTrainConfig) -> np.ndarray:
    """int64 [T, K]: the flat level at every bar."""
    return np.full((data.n_bars, data.n_instruments), flat_level(config.env), dtype=np.int64)


def hold_returns(data: PortfolioData, config: PortfolioTrainConfig, stop: int) -> np.ndarray:
    """float64 [stop - 1, K]: each instrument's per-bar returns of holding it long over bars
    ``0 .. stop - 1``, its entry cost (the instrument's rate) paid in the first step as
    :func:`buy_and_hold_portfolio` pays it."""
    close = np.asarray(data.close[:stop], dtype=np.float64)
    equity = close / (close[0] * (1.0 + config.env.cost_rates(data.n_instruments)))
    equity[0] = 1.0
    return equity[1:] / equity[:-1] - 1.0


def training_baseline(
    data: PortfolioData, config: PortfolioTrainConfig, stop: int, per_year: float | None
) -> PortfolioBaseline:
    """Each instrument's baseline on the training bars ``0 .. stop - 1`` (fit and validation),
    by ``train``'s rule (:func:`~agents.pipelines.deployment.choose_portfolio_baseline`)."""
    year = per_year if per_year is not None else bars_per_year(np.asarray(data.timestamps[:stop]))
    return choose_portfolio_baseline(hold_returns(data, config, stop), year, data.instruments)


def baseline_levels(baseline: PortfolioBaseline, config: PortfolioTrainConfig) -> np.ndarray:
    """int64 [K]: the level each instrument's baseline acts: flat's, the top exposure level for
    hold long and the bottom one for hold short (where no level has that sign, flat's).

    With the gross-exposure cap (``max_leverage``) the held instruments share the capital
    equally, rebalanced each bar as the env trades to its targets."""
    exposures = np.asarray(config.env.exposure_levels, dtype=np.float64)
    flat = flat_level(config.env)
    top, bottom = int(np.argmax(exposures)), int(np.argmin(exposures))
    pick = {
        "flat": flat,
        "hold long": top if exposures[top] > 0.0 else flat,
        "hold short": bottom if exposures[bottom] < 0.0 else flat,
    }
    return np.array([pick[n] for n in baseline.names], dtype=np.int64)


def _untrained_choice(
    data: PortfolioData,
    config: PortfolioTrainConfig,
    splits: PortfolioSplits,
    per_year: Any,
    device: str,
    baseline: PortfolioBaseline,
) -> _Choice:
    """The baseline kept without a network (no input kept): its backtests stand for the
    network's."""
    flat = _flat_levels(data, config)
    base = np.broadcast_to(baseline_levels(baseline, config), flat.shape).copy()
    a, b, n = splits.fit_stop, splits.val_stop, splits.n_bars
    val_flat, val_base = backtest_portfolios([flat, base], data, config.env, a, b, per_year, device)
    test_flat, test_base = backtest_portfolios(
        [flat, base], data, config.env, b, n, per_year, device
    )
    deployment = describe_portfolio_deployment(baseline.name, baseline, None)
    return _Choice(
        deployment,
        None,
        None,
        (),
        val_base,
        test_base,
        val_flat,
        test_flat,
        val_base,
        test_base,
        {},
    )


def _judge(
    model: Any,
    cb: Any,
    data: PortfolioData,
    config: PortfolioTrainConfig,
    splits: PortfolioSplits,
    per_year: float | None,
    device: str,
    baseline: PortfolioBaseline,
    inputs: PortfolioInputs | None = None,
    held_flat: np.ndarray | None = None,
) -> _Choice:
    """Backtest every snapshot, flat and the baseline portfolio on the validation bars; keep the
    best snapshot where it passes the gate against the baseline (``model`` then holds its
    weights, else acts the baseline's levels), and backtest it on the test bars. ``held_flat``
    (bool [K]): branches every snapshot holds flat (``set_flat_branches``) before it is judged."""
    env, flat = config.env, _flat_levels(data, config)
    levels = baseline_levels(baseline, config)
    base = np.broadcast_to(levels, flat.shape).copy()
    a, b, n = splits.fit_stop, splits.val_stop, splits.n_bars
    nets = [net for _, net, _ in cb.snapshots]
    if held_flat is not None and held_flat.any():
        for net in nets:
            set_flat_branches(net, held_flat, flat_level(env))
    policies = [greedy_level_policy(net, device) for net in nets]
    *runs, val_flat, val_base = backtest_portfolios(
        policies + [flat, base], data, env, a, b, per_year, device
    )
    sharpes = tuple(r.sharpe for r in runs)
    chosen = _best(sharpes)
    candidates = [ValidationReturns(r.returns) for r in runs]
    gate = network_beats_baseline(
        candidates[chosen],
        ValidationReturns(val_base.returns),
        baseline.name,
        runs[chosen].per_year,
        candidates=candidates,
    )
    kept = kept_policy(gate, config.fallback)
    model.policy.load_state_dict(cb.snapshots[chosen][2])
    if held_flat is not None and held_flat.any():
        for q in (model.q_net, model.q_net_target):
            set_flat_branches(q, held_flat, flat_level(env))
    if kept != "network":
        set_flat_policy(model, levels)
    test_net, test_flat, test_base = backtest_portfolios(
        [policies[chosen], flat, base], data, env, b, n, per_year, device
    )
    evidence = _evidence(runs, chosen, val_base, baseline, inputs)
    deployment = describe_portfolio_deployment(
        kept,
        baseline,
        gate,
        fallback=config.fallback,
        validation_sharpe=sharpes[chosen],
        **evidence,
    )
    return _Choice(
        deployment,
        gate,
        chosen,
        sharpes,
        runs[chosen],
        test_net,
        val_flat,
        test_flat,
        val_base,
        test_base,
        evidence,
    )


def _evidence(
    runs: list[PortfolioBacktest],
    chosen: int,
    val_base: PortfolioBacktest,
    baseline: PortfolioBaseline,
    inputs: PortfolioInputs | None,
) -> dict[str, Any]:
    """``train``'s figures on the choice: the deflated Sharpe ratio (trials: the input
    selection's tests times the snapshots), the smallest edge the gate detects, and the
    probability of backtest overfitting among the snapshots and the baselines."""
    returns = [r.returns for r in runs]
    # As train counts each feature tested against its instrument's return, each (column,
    # instrument) test of the selection is a trial.
    tested = 1 if inputs is None else int(inputs.z.size)
    deflated = deflated_sharpe(runs[chosen], runs, None, runs[chosen].per_year, tested)
    edge = gate_resolution(len(returns[chosen]), runs[chosen].per_year, baseline.name, returns)
    bases = [np.zeros_like(val_base.returns)]
    if baseline.name != "flat":
        bases.append(val_base.returns)
    return {
        "deflated": None if deflated is None else deflated.to_dict(),
        "resolution": None if edge is None else edge.to_dict(),
        "overfitting": overfitting_probability(returns + bases),
    }


def _train_and_judge(
    model: Any,
    data: PortfolioData,
    seen: PortfolioData,
    config: PortfolioTrainConfig,
    splits: PortfolioSplits,
    per_year: float | None,
    device: str,
    baseline: PortfolioBaseline,
    inputs: PortfolioInputs | None,
    progress: bool,
) -> tuple[_Choice, Any, float]:
    """Train ``model`` and judge its snapshots (:func:`_judge`), or, where the input selection
    kept nothing, make it act the baseline untrained: ``(choice, snapshot callback or None,
    training seconds)``."""
    if inputs is not None and inputs.n_kept == 0:
        set_flat_policy(model, baseline_levels(baseline, config))
        return _untrained_choice(data, config, splits, per_year, device, baseline), None, 0.0
    cb, train_seconds = _learn(model, config, progress)
    held_flat = None
    if config.flat_unpredicted and inputs is not None:
        held_flat = ~inputs.predicted
    choice = _judge(model, cb, seen, config, splits, per_year, device, baseline, inputs, held_flat)
    return choice, cb, train_seconds


def train_portfolio(
    data: PortfolioData,
    config: PortfolioTrainConfig,
    *,
    seed: int,
    device: str,
    out: Path | None,
    progress: bool = False,
    per_year: float | None = None,
) -> PortfolioTrainResult:
    """Train, select and test one portfolio policy (the module doc's procedure).

    :param data: the aligned bars of the K instruments (all of them: the splits are made here).
    :param config: the settings; budgets left None take ``device``'s defaults.
    :param seed: the model's and the envs' seed.
    :param device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``: the model's and the training env's.
    :param out: a folder for ``model.zip`` (the kept policy) and ``metrics.json``; None writes
        nothing.
    :param progress: a progress bar on a terminal, else a line every 10 s.
    :param per_year: bars per year of the backtests' figures; None: each window's own calendar
        (``reports.metrics.bars_per_year``).
    :raises ValueError: where the data does not fit the settings (:func:`check_portfolio_run`).
    """
    t0 = time.perf_counter()
    if not isinstance(config, PortfolioTrainConfig):
        raise TypeError(
            f"config of type {type(config).__name__} is invalid: allowed is PortfolioTrainConfig"
        )
    config = config.resolved(device)
    splits = check_portfolio_run(data, config)
    _start_torch(config, device)
    inputs = select_portfolio_inputs(data, splits.val_stop) if config.select_inputs else None
    seen = data if inputs is None else inputs.apply(data)
    env, (a, b, n) = config.env, (splits.fit_stop, splits.val_stop, splits.n_bars)
    model = _model(slice_portfolio(seen, 0, splits.fit_stop), config, seed, device, inputs)
    if inputs is not None:  # the saved model's env sees these columns alone (make_env)
        model.portfolio_setup = {**model.portfolio_setup, "kept": inputs.kept_names()}
    baseline = training_baseline(data, config, splits.val_stop, per_year)
    choice, cb, train_seconds = _train_and_judge(
        model, data, seen, config, splits, per_year, device, baseline, inputs, progress
    )
    model.env.close()
    keep_network = choice.deployment.kept == "network"
    result = PortfolioTrainResult(
        kept=choice.deployment.kept,
        reason=choice.deployment.headline,
        validation=choice.validation_network if keep_network else choice.validation_baseline,
        test=choice.test_network if keep_network else choice.test_baseline,
        validation_flat=choice.validation_flat,
        test_flat=choice.test_flat,
        validation_network=choice.validation_network,
        test_network=choice.test_network,
        validation_buy_and_hold=buy_and_hold_portfolio(data, env, a, b, per_year),
        test_buy_and_hold=buy_and_hold_portfolio(data, env, b, n, per_year),
        gate=choice.gate,
        snapshot_steps=tuple(int(s) for s, _, _ in cb.snapshots) if cb is not None else (),
        snapshot_sharpes=choice.sharpes,
        chosen_snapshot=choice.chosen,
        splits=splits,
        config=config,
        instruments=data.instruments,
        seed=int(seed),
        device=str(device),
        reward_scale=float(model.reward_scale),
        seconds=time.perf_counter() - t0,
        train_seconds=float(train_seconds),
        inputs=inputs,
        baseline=baseline,
        validation_baseline=choice.validation_baseline,
        test_baseline=choice.test_baseline,
        deployment=choice.deployment,
        evidence=choice.evidence,
        model=model,
    )
    if out is not None:
        write_portfolio_run(result, Path(out))
    return result


def _best(sharpes: tuple[float, ...]) -> int:
    """The best validation Sharpe's index, the latest of equals."""
    best, value = len(sharpes) - 1, -np.inf
    for j, s in enumerate(sharpes):
        if s >= value:
            best, value = j, s
    return best


def write_portfolio_run(result: PortfolioTrainResult, out: Path) -> None:
    """``out/model.zip`` (the model acting the kept policy) and ``out/metrics.json``."""
    from gpu_trading_env.reports.report import write_json

    out.mkdir(parents=True, exist_ok=True)
    if result.model is not None:
        result.model.save(out / "model.zip")
    write_json(result.to_dict(), out / "metrics.json")
