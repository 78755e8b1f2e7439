"""The market zoo: ``train``'s defaults judged on seeded markets whose best rule is known.

Each market is drawn by one of the project's generators (``gpu_trading_env.data.synthetic``)
with known parameters, so the rule those parameters imply is known too:

| market | generator | reference (exposure per bar, from bars <= t) |
| --- | --- | --- |
| planted AR(1), phi 0.30 (the built-in market), 0.10, 0.05 | ``planted_signal`` | ``sign(phi r_t)``, or the conviction-sized rule where its Sharpe is higher |
| built-in at 5x costs | ``planted_signal`` | the same |
| mean-reverting AR(1), phi -0.20 | ``planted_signal`` | the same |
| regime switching | ``regime_switching`` | the Bayes filter's expected return: its sign, or sized by it |
| driftless GBM | ``gbm`` | flat |
| GBM with drift | ``gbm`` | hold long |

A run (one market, one seed) draws the market with that seed, trains exactly as
``gpu-trading-env train --seed SEED`` does with every default (its split, validation window,
model selection and fallback), and backtests the kept policy and the references on the same
held-back bars with the same env, costs included. Where a market has two candidate references,
the one with the higher out-of-sample Sharpe is the reference: the agent is held to the better.

Per run: the agent's and the reference's out-of-sample Sharpe, return, turnover, costs paid,
their Sharpe ratio, and the block-bootstrap test of the agent's Sharpe against flat and against
buy-and-hold (``sharpe_difference_interval``). Per market: the mean, spread and range over
seeds, and the market's target. Runs go to worker processes, ``runs_per_device`` per device,
like ``sweep``'s.

The real suite (``REAL_MARKETS``, ``gpu-trading-env zoo --real``) holds markets whose best rule
is not known or not constant:

| market | data | reference | target |
| --- | --- | --- | --- |
| real series (``gpu_trading_env.data.real_series``) | the package's bars | flat or buy-and-hold | mean return >= the chosen baseline's - 2%, no run 10% below it |
| vanishing edge | ``vanishing_edge`` | flat | mean return >= -3% |
| appearing edge | ``appearing_edge`` | the true rule's sign exposure | Sharpe ratio >= 0.5 |
| flipping drift | ``flipping_drift`` | flat | mean return >= -3% |
| regime markets of other families (where ``gpu_trading_env.data.regime_markets`` exists) | its generators | the true filter | Sharpe ratio >= 0.6 |

(``gpu_trading_env.data.shifting_markets`` states where each change lies in the training bars.)
Each of its rows also holds the baseline that ``train`` chose on the training bars (the gate's
``baseline``) and that baseline's out-of-sample backtest, flat's, and the deployed policy's
Sharpe and total-return differences against the baseline with 95% block-bootstrap intervals.
A real series' bars are the same for every seed; the seed changes the training only. A run's
row is a :class:`~agents.pipelines.zoo_result.ZooRun`, or a
:class:`~agents.pipelines.zoo_result.FailedZooRun` where it raised.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.pipelines.zoo_result import FailedZooRun, ZooRow, ZooRun

if TYPE_CHECKING:
    from agents.files.saved_inputs import InputSelection
    from agents.pipelines.train_result import TrainResult
    from gpu_trading_env.core.config import EnvConfig
    from gpu_trading_env.data.market_data import MarketData

__all__ = [
    "MARKETS",
    "REAL_MARKETS",
    "SMALL",
    "SMALL_REAL_MARKETS",
    "SUITES",
    "Market",
    "ZooBudget",
    "market_data",
    "reference_exposures",
    "run_one",
    "run_zoo",
    "train_args",
]

ZOO_BARS = 20_000  # bars after the feature warm-up, as the built-in market


@dataclass(frozen=True)
class Market:
    """One market of the zoo.

    :param name: short name (folder and CSV key).
    :param title: what the market is, in words.
    :param kind: ``MarketData.synthetic`` kind (planted, gbm, regime, a shifting market's), or
        ``"real"``: ``load_real_series(params["series"])``.
    :param params: the generator's parameters (a real series: ``{"series": name}``).
    :param reference: ``"planted"``, ``"regime"``, ``"regime_family"`` (the true filter of a
        ``regime_markets`` kind), ``"flat"``, ``"hold"``, ``"shifting"`` (the true rule of a
        shifting market) or ``"real"`` (flat and buy-and-hold).
    :param target: ``(measure, threshold)``: ``("sharpe_ratio", x)`` mean agent/reference
        Sharpe >= x; ``("return", x)`` mean agent return >= x and an edge over flat claimed in
        at most one seed in five; ``("mean_return", x)`` mean agent return >= x;
        ``("buy_and_hold_fraction", x)`` mean agent return >= x times buy-and-hold's;
        ``("baseline_return", x)`` mean agent return >= the chosen baseline's mean + x and no
        run more than ``REAL_RUN_SHORTFALL`` below its baseline.
    :param cost_multiplier: the market's order costs as a multiple of the train defaults'
        (or of the ``--env order_cost_bps`` given).
    """

    name: str
    title: str
    kind: str
    params: dict[str, Any]
    reference: str
    target: tuple[str, float]
    cost_multiplier: float = 1.0


MARKETS: tuple[Market, ...] = (
    Market("builtin", "built-in: planted AR(1), phi 0.30", "planted", {}, "planted",
           ("sharpe_ratio", 0.85)),
    Market("costs_x5", "built-in at 5x costs", "planted", {}, "planted",
           ("sharpe_ratio", 0.7), cost_multiplier=5.0),
    Market("phi_0.10", "planted AR(1), phi 0.10", "planted", {"phi": 0.10}, "planted",
           ("sharpe_ratio", 0.6)),
    Market("phi_0.05", "planted AR(1), phi 0.05", "planted", {"phi": 0.05}, "planted",
           ("sharpe_ratio", 0.4)),
    Market("mean_reverting", "mean-reverting AR(1), phi -0.20", "planted", {"phi": -0.20},
           "planted", ("sharpe_ratio", 0.6)),
    Market("regime", "regime switching (bull / bear / sideways)", "regime", {}, "regime",
           ("sharpe_ratio", 0.6)),
    Market("gbm_flat", "driftless GBM (no edge)", "gbm", {"mu": 0.0}, "flat", ("return", -0.03)),
    Market("gbm_drift", "GBM with drift (1 bp a bar, volatility 20 bps)", "gbm",
           {"mu": 1e-4, "sigma": 0.002}, "hold", ("buy_and_hold_fraction", 0.8)),
)  # fmt: skip

REAL_RUN_SHORTFALL = 0.10  # the most a real-series run may return below its chosen baseline


def _real_markets() -> tuple[Market, ...]:
    from gpu_trading_env.data.real_series import REAL_SERIES

    return tuple(
        Market(name, f"{s.title} ({s.package}, {s.licence})", "real", {"series": name}, "real",
               ("baseline_return", -0.02))
        for name, s in REAL_SERIES.items()
    )  # fmt: skip


SHIFTING_MARKETS: tuple[Market, ...] = (
    Market("vanishing_edge", "AR(1) edge, phi 0.10, gone after half of the training bars",
           "vanishing_edge", {}, "flat", ("mean_return", -0.03)),
    Market("appearing_edge", "AR(1) edge, phi 0.10, from 45% of the training bars on",
           "appearing_edge", {}, "shifting", ("sharpe_ratio", 0.5)),
    Market("flipping_drift", "GBM drift +1 bp a bar, -1 bp after half of the training bars",
           "flipping_drift", {}, "flat", ("mean_return", -0.03)),
)  # fmt: skip


def regime_family_markets() -> tuple[Market, ...]:
    """The regime markets of other families, one ``Market`` per kind of
    ``gpu_trading_env.data.regime_markets.KINDS`` (kind -> generator, each registered in
    ``MarketData.synthetic``); none where that module is absent.

    Each is held to its true filter (reference ``"regime_family"``: the forecast of
    ``regime_markets.true_filter_expected_return``, its sign or sized by it), as the zoo's
    regime market is to its own.
    """
    import importlib

    try:
        regime_markets = importlib.import_module("gpu_trading_env.data.regime_markets")
    except ImportError:
        return ()
    return tuple(
        Market(kind, f"regime market of another family: {kind}", kind, {}, "regime_family",
               ("sharpe_ratio", 0.6))
        for kind in getattr(regime_markets, "KINDS", {})
    )  # fmt: skip


REAL_MARKETS: tuple[Market, ...] = (*_real_markets(), *SHIFTING_MARKETS, *regime_family_markets())
SMALL_REAL_MARKETS = ("googl", "vanishing_edge", "appearing_edge", "flipping_drift")
SUITES: dict[str, tuple[Market, ...]] = {"zoo": MARKETS, "real": REAL_MARKETS}
MARKETS_BY_NAME = {m.name: m for m in (*MARKETS, *REAL_MARKETS)}


@dataclass(frozen=True)
class ZooBudget:
    """Size of a zoo run. The defaults are the GPU zoo; ``SMALL`` is the CPU check in CI.

    :param bars: bars per market after the warm-up.
    :param train_args: extra ``train`` options of every run (budgets), e.g. ``("--timesteps",
        "3000")``; empty for ``train``'s defaults.
    """

    bars: int = ZOO_BARS
    train_args: tuple[str, ...] = ()


SMALL = ZooBudget(
    bars=1_500,
    train_args=("--timesteps", "2000", "--num-envs", "4", "--batch-size", "32",
                "--episode-length", "100", "--eval-every", "1000"),
)  # fmt: skip


def market_data(market: Market, seed: int, bars: int = ZOO_BARS) -> Any:
    """The market's ``MarketData`` for ``seed`` (the built-in market's seed 0 is the default
    data; a real series is the package's bars, whatever the seed and ``bars``)."""
    from gpu_trading_env.data.market_data import MarketData

    if market.kind == "real":
        from gpu_trading_env.data.real_series import load_real_series

        return load_real_series(market.params["series"])

    return MarketData.synthetic(market.kind, bars, seed=int(seed), **market.params)


def reference_exposures(market: Market, data: Any) -> dict[str, np.ndarray]:
    """Candidate references of ``market`` on ``data``: name -> exposure float64 [n_bars] in
    [-1, 1], row ``t`` from bars <= t (see the module doc)."""
    from gpu_trading_env.data.shifting_markets import shifting_rule_exposure
    from gpu_trading_env.data.synthetic import (
        planted_conviction_exposure,
        planted_rule_exposure,
        regime_filter_expected_return,
    )

    meta = data.metadata
    if market.reference == "planted":
        phi, sigma = float(meta["phi"]), float(meta["sigma"])
        return {
            "sign rule": math.copysign(1.0, phi) * planted_rule_exposure(data),
            "conviction rule": planted_conviction_exposure(data, phi, sigma),
        }
    if market.reference == "regime":
        mus = meta["mus"]
        m = regime_filter_expected_return(data, mus, meta["sigmas"], meta["persistence"])
        return {
            "filter sign": np.sign(m),
            "filter conviction": np.clip(m / max(abs(float(x)) for x in mus), -1.0, 1.0),
        }
    if market.reference == "flat":
        return {"flat": np.zeros(data.n_bars)}
    if market.reference == "hold":
        return {"hold": np.ones(data.n_bars)}
    if market.reference == "regime_family":
        from gpu_trading_env.data.regime_markets import true_filter_expected_return

        m = true_filter_expected_return(data)
        scale = max(abs(float(x)) for x in meta["mus"])
        return {"filter sign": np.sign(m), "filter conviction": np.clip(m / scale, -1.0, 1.0)}
    if market.reference == "shifting":
        return {"true rule": shifting_rule_exposure(data)}
    if market.reference == "real":
        return {"flat": np.zeros(data.n_bars), "buy-and-hold": np.ones(data.n_bars)}
    raise ValueError(f"reference = {market.reference!r} is invalid")


def train_args(
    market: Market, seed: int, device: str, budget: ZooBudget, extra: Sequence[str]
) -> Any:
    """The checked ``train`` options of one run (argparse Namespace): the defaults a user gets
    (:class:`~agents.pipelines.train_config.TrainConfig`'s), the budget's and the caller's
    options; ``config``: the commands' EnvConfig with the market's costs.

    :param seed: the run's seed (``train_selected`` takes it; the options hold no seed).
    :raises ValueError: on a bad option (``SystemExit`` from argparse on an unknown one).
    """
    from agents.pipelines.train_config import (
        TrainConfig,
        train_env_config,
        train_options_parser,
    )

    argv = ["--device", device, "--no-progress"]
    args = train_options_parser().parse_args([*argv, *budget.train_args, *extra])
    if not 0.0 < args.train_fraction < 1.0:
        raise ValueError(
            f"--train-fraction {args.train_fraction} is invalid: allowed is a number in (0, 1)"
        )
    TrainConfig.from_options(args)  # checks the training options
    args.config = train_env_config(args.episode_length, args.env)
    if market.cost_multiplier != 1.0:
        costs = tuple(market.cost_multiplier * c for c in args.config.order_cost_bps)
        args.config = args.config.replace(order_cost_bps=costs)
    return args


def _thin(x: np.ndarray, n: int = 600) -> list[float]:
    """At most ``n`` evenly spaced points of a curve, its last included (for plots)."""
    x = np.asarray(x, dtype=np.float64)
    idx = np.unique(np.linspace(0, len(x) - 1, min(n, len(x))).round().astype(int))
    return [float(v) for v in x[idx]]


def return_difference_interval(
    returns_a: np.ndarray,
    returns_b: np.ndarray,
    *,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, float]:
    """Circular block bootstrap of the total-return difference of two paired per-bar return
    series (float64 [T], fractions a bar): ``prod(1 + a) - prod(1 + b)``, blocks of
    ``ceil(T ** (1/3))`` bars, the same blocks for both.

    :returns: ``{"difference", "low", "high", "level", "block", "n_boot"}`` (fractions).
    :raises ValueError: series of other shapes, fewer than 4 bars, a return <= -1.
    """
    a = np.asarray(returns_a, dtype=np.float64)
    b = np.asarray(returns_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 4:
        raise ValueError(
            f"paired returns must be 1-D of one length >= 4, got {a.shape} and {b.shape}"
        )
    if not (np.isfinite(a).all() and np.isfinite(b).all() and (a > -1).all() and (b > -1).all()):
        raise ValueError("returns must be finite and > -1 (a value cannot go below zero)")
    t = len(a)
    blk = max(1, math.ceil(t ** (1.0 / 3.0)))
    starts = np.random.default_rng(seed).integers(0, t, size=(n_boot, math.ceil(t / blk)))
    lengths = np.full(starts.shape[1], blk)
    lengths[-1] = t - blk * (starts.shape[1] - 1)

    def totals(x: np.ndarray) -> np.ndarray:
        # Sums of log growth over the blocks, from prefix sums of the series wrapped in a circle.
        g = np.concatenate([[0.0], np.cumsum(np.log1p(np.concatenate([x, x[:blk]])))])
        return np.expm1((g[starts + lengths] - g[starts]).sum(axis=1))

    diff = totals(a) - totals(b)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(diff, [tail, 1.0 - tail])
    point = float(np.expm1(np.log1p(a).sum()) - np.expm1(np.log1p(b).sum()))
    return {
        "difference": point,
        "low": float(lo),
        "high": float(hi),
        "level": float(level),
        "block": int(blk),
        "n_boot": int(n_boot),
    }


def run_one(
    market_name: str,
    seed: int,
    device: str = "cpu",
    budget: ZooBudget = ZooBudget(),
    extra_train_args: Sequence[str] = (),
    inputs: Callable[[Any, Any], tuple[Any, Any]] | None = None,
) -> ZooRun:
    """One zoo run: draw, train as ``train`` does, backtest agent and references out of sample.

    :param inputs: ``(train, test) -> (train, test)``, the split's bars with the network's
        inputs changed (features fitted on ``train`` appended, for instance: a candidate input
        measured beside the default, ``experiments/regime_features_lab.py``); None: ``train``'s.
        The references and costs stay the market's.
    :returns: the run's figures per series, tests, learning curve and thinned curves.
    """
    from agents.pipelines.model_selection import train_selected
    from agents.pipelines.train_config import TrainConfig, set_torch_threads
    from gpu_trading_env.reports.metrics import bars_per_year

    t0 = time.perf_counter()
    market = MARKETS_BY_NAME[market_name]
    args = train_args(market, seed, device, budget, extra_train_args)
    settings = TrainConfig.from_options(args)
    set_torch_threads(settings)
    data = market_data(market, seed, budget.bars)
    train, test = data.split(args.train_fraction)
    if inputs is not None:
        train, test = inputs(train, test)
    per_year = bars_per_year(test.timestamps)
    run = train_selected(train, test, args.config, settings, seed=seed, per_year=per_year)
    where = _RunPlace(int(seed), device, int(train.n_bars), t0)
    return _judged_run(run, market, test, args.config, per_year, where)


@dataclass(frozen=True)
class _RunPlace:
    """Which run is judged: its seed and device, its training bars, and when it started
    (``time.perf_counter()``)."""

    seed: int
    device: str
    train_bars: int
    started: float


def _judged_run(
    run: TrainResult,
    market: Market,
    test: MarketData,
    config: EnvConfig,
    per_year: float,
    where: _RunPlace,
) -> ZooRun:
    """One trained run judged on the test bars: the agent beside the market's references,
    flat, buy-and-hold and the chosen baseline, with their intervals, and the run's records."""
    from agents.pipelines.baseline_policies import baseline_backtest, baseline_config
    from gpu_trading_env.reports.backtest import backtest, exposure_policy
    from gpu_trading_env.reports.significance import sharpe_difference_interval

    agent = run.test
    # Flat and buy-and-hold as references act as train's baselines do (no barrier, equity sized).
    ref_config = baseline_config(config) if market.reference == "real" else config
    refs = {
        name: backtest(exposure_policy(x, ref_config), test, ref_config, per_year=per_year)
        for name, x in reference_exposures(market, test).items()
    }
    ref_name = max(refs, key=lambda k: refs[k].strategy.sharpe)
    ref = refs[ref_name]
    flat = np.zeros(len(agent.returns))
    bh = agent.buy_and_hold_returns
    vs_flat = sharpe_difference_interval(agent.returns, flat, per_year)
    vs_bh = sharpe_difference_interval(agent.returns, bh, per_year)
    a, r = agent.strategy, ref.strategy
    chosen = run.baseline.name
    base = baseline_backtest(chosen, test, config, per_year)
    vs_base = sharpe_difference_interval(agent.returns, base.returns, per_year)
    network = run.network_test
    return ZooRun(
        market=market.name,
        suite="real" if market in REAL_MARKETS else "zoo",
        seed=where.seed,
        device=where.device,
        kept=run.kept,
        agent=a,
        network=None if network is None else network.strategy,
        reference_name=ref_name,
        reference=r,
        references={k: v.strategy for k, v in refs.items()},
        buy_and_hold=agent.benchmark,
        sharpe_ratio=a.sharpe / r.sharpe if r.sharpe > 0 else None,
        network_sharpe_ratio=(
            network.strategy.sharpe / r.sharpe if r.sharpe > 0 and network is not None else None
        ),
        deployment=run.deployment,
        baseline=chosen,
        chosen_baseline=base.strategy,
        flat=baseline_backtest("flat", test, config, per_year).strategy,
        vs_baseline=vs_base,
        return_vs_baseline=return_difference_interval(agent.returns, base.returns),
        vs_flat=vs_flat,
        vs_buy_and_hold=vs_bh,
        edge_over_flat_claimed=bool(vs_flat["low"] > 0.0),
        gate=run.gate,
        selected_step=run.selected_step,
        inputs=None if run.inputs is None else _inputs_entry(run.inputs),
        evaluations=run.evals,
        learning_curve=run.curve,
        train_seconds=run.train_seconds,
        timesteps=run.timesteps,
        seconds=time.perf_counter() - where.started,
        train_bars=where.train_bars,
        test_bars=int(test.n_bars),
        curves={
            "agent": _thin(agent.equity),
            "reference": _thin(ref.equity),
            "buy_and_hold": _thin(agent.buy_and_hold),
            "baseline": _thin(base.equity),
        },
    )


def _inputs_entry(selection: InputSelection) -> dict[str, Any]:
    """The row's record of the input selection: the inputs kept and the two p-values."""
    sel = selection.to_dict()
    return {k: sel[k] for k in ("kept", "regime_p_value", "p_value")}


# ------------------------------------------------------------------ the whole zoo


def _init_worker(slots: Any) -> None:
    device = slots.get()
    os.environ["GPU_TRADING_ENV_ZOO_DEVICE"] = device
    if device.startswith("cuda:"):
        # Each worker sees its GPU alone, before torch or CuPy initialise CUDA.
        os.environ["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]


def _worker_run(market: str, seed: int, budget: ZooBudget, extra: tuple[str, ...]) -> ZooRow:
    device = os.environ["GPU_TRADING_ENV_ZOO_DEVICE"]
    return _guarded_run(
        market, seed, "cuda" if device.startswith("cuda") else device, budget, extra
    )


def _guarded_run(
    market: str, seed: int, device: str, budget: ZooBudget, extra: tuple[str, ...]
) -> ZooRow:
    try:
        return run_one(market, seed, device, budget, extra)
    except Exception as exc:  # a failed run is a row, the others go on
        import traceback

        return FailedZooRun(
            market=market,
            seed=seed,
            device=device,
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
        )


def run_zoo(
    markets: Sequence[str],
    seeds: Sequence[int],
    devices: Sequence[str],
    *,
    runs_per_device: int = 1,
    budget: ZooBudget = ZooBudget(),
    extra_train_args: Sequence[str] = (),
    on_done: Callable[[ZooRow], None] | None = None,
) -> list[ZooRow]:
    """Every (market, seed) run, in worker processes (``runs_per_device`` per device), or in
    this process where the only worker would be one on the CPU.

    Workers are started with ``spawn`` and live for the whole zoo, so each pays the imports and
    the one-time kernel compilations once. Rows come back in (market, seed) order.
    """
    unknown = [m for m in markets if m not in MARKETS_BY_NAME]
    if unknown:
        raise ValueError(f"markets {unknown} are invalid: allowed are {list(MARKETS_BY_NAME)}")
    if runs_per_device < 1:
        raise ValueError(f"runs_per_device = {runs_per_device!r} is invalid: allowed is >= 1")
    workers = [d for d in devices for _ in range(runs_per_device)]
    jobs = [(m, int(s)) for m in markets for s in seeds]
    rows: dict[tuple[str, int], ZooRow] = {}
    if workers == ["cpu"]:
        # One CPU worker runs the jobs one after another, as this process can: no spawned
        # process to pay the imports again, no manager process for the device slots.
        for m, s in jobs:
            rows[(m, s)] = _guarded_run(m, s, "cpu", budget, tuple(extra_train_args))
            if on_done is not None:
                on_done(rows[(m, s)])
        return [rows[j] for j in jobs]
    ctx = mp.get_context("spawn")
    slots = ctx.Manager().Queue()
    for d in workers:
        slots.put(d)
    with ProcessPoolExecutor(
        len(workers), mp_context=ctx, initializer=_init_worker, initargs=(slots,)
    ) as pool:
        # The first run goes alone: it compiles the kernels and the train step into the host's
        # on-disk caches (CuPy's, Inductor's, Triton's), which every other worker then reads:
        # workers compiling the same code at once on a fresh host run past the zoo's time a run.
        first, rest = jobs[0], jobs[1:]
        rows[first] = pool.submit(_worker_run, *first, budget, tuple(extra_train_args)).result()
        if on_done is not None:
            on_done(rows[first])
        futures = {
            pool.submit(_worker_run, m, s, budget, tuple(extra_train_args)): (m, s) for m, s in rest
        }
        for fut in as_completed(futures):
            row = fut.result()
            rows[futures[fut]] = row
            if on_done is not None:
                on_done(row)
    return [rows[j] for j in jobs]
