"""Judge GpuDQN out of sample on rolling folds (``walk_forward``), each trained by
:func:`agents.pipelines.model_selection.train_selected`.

Walk-forward: fold k trains on every bar before its test window (``expanding``, the default;
the first fold on ``train_bars``) or on the ``train_bars`` bars just before it, and is tested on
the next ``test_bars`` bars (``MarketData.walk_forward``); each fold starts from scratch, or with
``warm_start`` from the previous fold's kept weights. Each fold and seed records the policy
deployed and why (:class:`~agents.pipelines.deployment.Deployment`), and that baseline's
out-of-sample return beside the deployed policy's. With ``confirm`` (the default) a network
``train`` would deploy on fold k is deployed only where the same seed's network of fold k - 1
beat its baseline on fold k - 1's test bars, bars the fold k network trained on, in return and
in Sharpe at the one-sided 20% level (:func:`confirm_deployment`): an edge must have held out
of sample once before it is traded, and otherwise the fold deploys its baseline. Several seeds
run per fold. The test windows' per-bar returns are stitched into one out-of-sample curve per
seed; the seeds' mean return per bar is the "ensemble" curve (an equal-weight portfolio of the
seeds' agents). Beside it: buy-and-hold with the same costs, a uniformly random policy through
the same env, and on synthetic planted data the known rule.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from agents.pipelines.backtest_policies import known_rule, random_policy
from agents.pipelines.baseline_policies import baseline_backtest, set_baseline_policy
from agents.pipelines.deployment import HOLD_PART_LEVEL, describe_unconfirmed
from agents.pipelines.model_selection import TrainResult, train_selected
from agents.pipelines.train_settings import TrainSettings
from agents.pipelines.walkforward_result import StitchedCurves, WalkForwardFold, WalkForwardResult
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.backtest import (
    BacktestResult,
    backtest,
)
from gpu_trading_env.reports.metrics import curve_metrics
from gpu_trading_env.reports.sharpe_inference import detectable_edge
from gpu_trading_env.reports.significance import sharpe_difference_interval

__all__ = [
    "CONFIRM_LEVEL",
    "OutOfSampleRecord",
    "StitchedCurves",
    "WalkForwardFold",
    "WalkForwardResult",
    "confirm_deployment",
    "walk_forward",
]


# The two-sided level of the out-of-sample check's interval: its lower end above zero is a
# one-sided 20% test, as the gate's test of the validation window's last third.
CONFIRM_LEVEL = 1.0 - 2.0 * HOLD_PART_LEVEL


@dataclass(frozen=True)
class OutOfSampleRecord:
    """A fold's network out of sample, for the next fold's check (:func:`confirm_deployment`).

    :param network_return: the fold's network's test return (the selected snapshot, deployed
        or not); None where the fold trained no network.
    :param baseline_return: the fold's baseline's test return.
    :param edge: :func:`sharpe_difference_interval` of the network's per-bar test returns
        against the baseline's at :data:`CONFIRM_LEVEL`; None where no network was trained.
    """

    network_return: float | None
    baseline_return: float
    edge: dict[str, float] | None = None

    @property
    def returned_baseline(self) -> bool:
        """The network returned at least its baseline on its test bars."""
        return self.network_return is not None and self.network_return >= self.baseline_return

    @property
    def confirmed(self) -> bool:
        """:attr:`returned_baseline`, and the network's Sharpe edge over the baseline is above
        zero at the one-sided 20% level: a return a little above the baseline's over a year or
        two of bars is what luck alone gives."""
        return self.returned_baseline and self.edge is not None and self.edge["low"] > 0.0


def confirm_deployment(
    run: TrainResult,
    previous: OutOfSampleRecord | None,
    baseline_test: BacktestResult,
    config: EnvConfig,
) -> TrainResult:
    """``run`` as deployed on a walk-forward fold: unchanged where it keeps a baseline or where
    ``previous`` (the same seed's record of the fold before; None on the first fold) confirms
    a network; otherwise its baseline, as ``train``'s fallback deploys it (the model acts the
    baseline's constant action; ``test`` becomes ``baseline_test``, the baseline's backtest of
    the fold's test window), with the reason in ``deployment``. ``network_test``,
    ``validation`` and ``gate`` stay the network's: the evidence that passed the gate."""
    if run.kept != "network" or (previous is not None and previous.confirmed):
        return run
    name = run.baseline.name
    set_baseline_policy(run.model, name, config)
    deployment = describe_unconfirmed(
        run.deployment,
        name,
        None if previous is None else previous.network_return,
        None if previous is None else previous.baseline_return,
        first_fold=previous is None,
        previous_edge=None if previous is None else previous.edge,
    )
    return dataclasses.replace(
        run,
        test=baseline_test,
        kept=name,
        deployment=deployment,
    )


def _stitch(results: list[BacktestResult]) -> tuple[np.ndarray, np.ndarray]:
    """Per-bar returns [sum(T_k - 1)] of consecutive test windows and their end timestamps."""
    rets = np.concatenate([r.returns for r in results])
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
    expanding: bool = True,
    confirm: bool = True,
    log: Callable[[str], None] = print,
) -> WalkForwardResult:
    """Rolling-fold training and out-of-sample evaluation of one instrument (``data``).

    :param confirm: deploy a fold's network only where the previous fold's network beat its
        baseline out of sample, in return and in Sharpe (:func:`confirm_deployment`); False:
        ``train``'s deployment as it is.
    :returns: the folds (per-fold figures and runs), the curves stitched over all test windows
        (per seed, ensemble, buy-and-hold, random, rule), their metrics (costs in) and the
        block-bootstrap interval of the ensemble's Sharpe minus buy-and-hold's
        (:class:`~agents.pipelines.walkforward_result.WalkForwardResult`).
    """
    pieces = data.walk_forward(folds, train_bars, test_bars, expanding=expanding)
    fold_out: list[WalkForwardFold] = []
    by_seed: dict[int, list[BacktestResult]] = {s: [] for s in seeds}
    bench: dict[str, list[BacktestResult]] = {"buy_and_hold": [], "random": [], "rule": []}
    warm: dict[int, Any] = {}
    records: dict[int, OutOfSampleRecord] = {}
    for k, (train, test) in enumerate(pieces):
        runs, bases = [], []
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
            if warm_start:  # the trained weights, whatever the check below deploys
                warm[s] = copy.deepcopy(run.model.policy.state_dict())
            base = baseline_backtest(run.baseline.name, test, config, per_year)
            if confirm:
                run = confirm_deployment(run, records.get(s), base, config)
            records[s] = _record(run, base, per_year)
            by_seed[s].append(run.test)
            runs.append(run)
            bases.append(base)
        rnd = backtest(random_policy(config.n_actions, 10_000 + k), test, config, per_year=per_year)
        rule = known_rule(test, config)
        bench["random"].append(rnd)
        bench["buy_and_hold"].append(runs[0].test)  # its buy_and_hold curve
        if rule is not None:
            bench["rule"].append(rule)
        fold_out.append(_fold_record(k, train, test, seeds, runs, bases, rnd, rule))
    stitched, ensemble, bh_rets = _stitched(pieces, seeds, by_seed, bench)
    ci = sharpe_difference_interval(ensemble, bh_rets, per_year)
    beats = [
        all(f.results[j].test.equity[-1] > f.results[j].test.buy_and_hold[-1] for f in fold_out)
        for j in range(len(seeds))
    ]
    return WalkForwardResult(
        folds=fold_out,
        stitched=stitched,
        aggregate=_aggregate(stitched, per_year),
        sharpe_vs_buy_and_hold=ci,
        beats_buy_and_hold_every_fold=dict(zip(map(str, seeds), beats, strict=True)),
        settings=asdict(settings),
        expanding=bool(expanding),
        confirm=bool(confirm),
        detectable_edge=detectable_edge(len(ensemble), per_year, level=(1 - ci["level"]) / 2),
    )


def _record(run: TrainResult, baseline_test: BacktestResult, per_year: float) -> OutOfSampleRecord:
    """A fold's record for the same seed's next fold (its network and baseline out of sample)."""
    if run.network_test is None:
        return OutOfSampleRecord(None, baseline_test.strategy.total_return)
    net, base = run.network_test.returns, baseline_test.returns
    edge = None
    if len(net) >= 4:  # the bootstrap needs 4 paired returns
        edge = sharpe_difference_interval(net, base, per_year, level=CONFIRM_LEVEL)
    return OutOfSampleRecord(
        run.network_test.strategy.total_return, baseline_test.strategy.total_return, edge
    )


def _fold_record(
    k: int,
    train: MarketData,
    test: MarketData,
    seeds: list[int],
    runs: list[TrainResult],
    bases: list[BacktestResult],
    rnd: BacktestResult,
    rule: BacktestResult | None,
) -> WalkForwardFold:
    """Fold ``k``: its windows, each seed's deployed policy and figures (``bases``: each seed's
    baseline on the test window), the benchmarks'."""
    return WalkForwardFold(
        fold=k,
        train=_window(train),
        test=_window(test),
        seeds=[
            {
                "seed": s,
                "kept": r.kept,
                "verdict": r.deployment.headline,
                "deployment": r.deployment.to_dict(),
                "baseline": r.baseline.name,
                "baseline_strategy": base.strategy.to_dict(),
                "strategy": r.test.strategy.to_dict(),
                "last_model_strategy": None
                if r.last_test is None
                else r.last_test.strategy.to_dict(),
                "selected_step": r.selected_step,
                "validation_sharpe": r.validation_sharpe,
                "train_seconds": r.train_seconds,
                "timesteps": r.timesteps,
                "learning_curve": r.curve,
                "evaluations": r.evals.to_dict(),
                "detectable_edge": None
                if r.detectable_edge is None
                else r.detectable_edge.to_dict(),
                "overfitting_probability": r.overfitting,
            }
            for s, r, base in zip(seeds, runs, bases, strict=True)
        ],
        buy_and_hold=runs[0].test.benchmark.to_dict(),
        random=rnd.strategy.to_dict(),
        rule=rule.strategy.to_dict() if rule is not None else None,
        results=runs,
        random_result=rnd,
        rule_result=rule,
    )


def _stitched(
    pieces: list[tuple[MarketData, MarketData]],
    seeds: list[int],
    by_seed: dict[int, list[BacktestResult]],
    bench: dict[str, list[BacktestResult]],
) -> tuple[StitchedCurves, np.ndarray, np.ndarray]:
    """The test windows' curves stitched, with the ensemble's and buy-and-hold's per-bar
    returns."""
    seed_rets = {}
    for s in seeds:
        seed_rets[s], ts = _stitch(by_seed[s])
    ts = np.concatenate([[pieces[0][1].timestamps[0]], ts])
    ensemble = np.mean([seed_rets[s] for s in seeds], axis=0)
    bh_rets = np.concatenate([r.buy_and_hold_returns for r in bench["buy_and_hold"]])
    rnd_rets, _ = _stitch(bench["random"])
    stitched = StitchedCurves(
        timestamps=ts,
        ensemble=_curve(ensemble),
        seeds={s: _curve(seed_rets[s]) for s in seeds},
        buy_and_hold=_curve(bh_rets),
        random=_curve(rnd_rets),
        rule=_curve(_stitch(bench["rule"])[0]) if bench["rule"] else None,
        exposure=np.concatenate([r.exposure for r in by_seed[seeds[0]]]),
        boundaries=[p[1].timestamps[0] for p in pieces],
    )
    return stitched, ensemble, bh_rets


def _aggregate(stitched: StitchedCurves, per_year: float) -> dict[str, Any]:
    """Metrics of the stitched curves (costs in)."""

    def m(curve: np.ndarray) -> dict[str, Any]:
        return curve_metrics(curve, per_year, costs_included=True).to_dict()

    aggregate = {
        "ensemble": m(stitched.ensemble),
        "seeds": {str(s): m(c) for s, c in stitched.seeds.items()},
        "buy_and_hold": m(stitched.buy_and_hold),
        "random": m(stitched.random),
    }
    if stitched.rule is not None:
        aggregate["rule"] = m(stitched.rule)
    return aggregate


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
