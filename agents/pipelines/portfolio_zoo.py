"""The portfolio zoo: ``train_portfolio``'s defaults judged on seeded portfolio markets whose
best rule is known (``gpu_trading_env.data.portfolio_markets``).

| market | K | rule | target (mean over seeds) |
| --- | --- | --- | --- |
| ``ar1_k8``, ``ar1_k32`` | 8, 32 | each instrument's sign of its last return | agent / rule test Sharpe >= 0.8 (K = 8), >= 0.6 (K = 32) |
| ``lead_lag_k8``, ``lead_lag_k32`` | 8, 32 | each follower on its leader's last return, leaders flat | the same |
| ``common_factor_k8``, ``common_factor_k32`` | 8, 32 | flat | agent test return >= -3% |

and every run (drawing, training, backtests) within :data:`RUN_SECONDS_TARGET` seconds.

Its real suite (``zoo --portfolio --real``, :data:`PORTFOLIO_REAL_MARKETS`) holds the real daily
series of ``gpu_trading_env.data.real_series.REAL_PORTFOLIOS``, the same bars for every seed.
Their reference is the run's own **baseline**: per instrument, the one ``train`` holds that
series to alone (``deployment.choose_portfolio_baseline`` on the instrument's training bars:
hold long, hold short or flat), all held at once in the portfolio env (a constant level each,
the gross cap sharing the capital). The target is the single real series': the deployed policy's mean test return
>= the baseline's mean - 2%, and no run more than ``REAL_RUN_SHORTFALL`` below its baseline.

A run (one market, one seed) draws the market with that seed, trains ``train_portfolio`` with
every default of :class:`~agents.pipelines.portfolio_train_config.PortfolioTrainConfig` (its
split, validation and fallback), and backtests the rule and flat on the agent's test bars with
the same env, costs included (``backtest_portfolios``). Runs go to worker processes,
``runs_per_device`` per device, as the single-instrument zoo's do.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpu_trading_env.atomic_file import atomic_write, atomic_write_text

__all__ = [
    "PORTFOLIO_REAL_MARKETS",
    "PORTFOLIO_ZOO_BY_NAME",
    "PORTFOLIO_ZOO_MARKETS",
    "RUN_SECONDS_TARGET",
    "SMALL_PORTFOLIO",
    "SMALL_PORTFOLIO_MARKETS",
    "SMALL_PORTFOLIO_REAL_MARKETS",
    "FailedPortfolioZooRun",
    "PortfolioTargetCheck",
    "PortfolioZooBudget",
    "PortfolioZooMarket",
    "PortfolioZooFiles",
    "PortfolioZooRow",
    "PortfolioZooRun",
    "baseline_lines",
    "check_targets",
    "markdown_table",
    "portfolio_zoo_lead",
    "rule_and_flat_levels",
    "run_portfolio_one",
    "run_portfolio_zoo",
    "write_portfolio_report",
]

PORTFOLIO_ZOO_BARS = 20_000  # bars of the grid after the feature warm-up, as the zoo's markets
RUN_SECONDS_TARGET = 60.0


@dataclass(frozen=True)
class PortfolioZooMarket:
    """One market of the portfolio zoo.

    :param name: short name (CSV key).
    :param kind: a key of ``portfolio_markets.PORTFOLIO_MARKETS``, or ``"real"``: the
        ``REAL_PORTFOLIOS`` entry of the market's name.
    :param n_instruments: K.
    :param measure: ``"sharpe_ratio"``: the mean over seeds of agent / rule test Sharpe must be
        >= ``threshold``; ``"return"``: the mean agent test return must be >= ``threshold``;
        ``"baseline_return"``: the mean agent test return must be >= the baseline's mean +
        ``threshold``, and no run more than ``REAL_RUN_SHORTFALL`` below its baseline.
    :param threshold: the target's bound (a ratio, or a fraction of the capital).
    """

    name: str
    kind: str
    n_instruments: int
    measure: str
    threshold: float

    @property
    def title(self) -> str:
        from gpu_trading_env.data.portfolio_markets import PORTFOLIO_MARKETS
        from gpu_trading_env.data.real_series import REAL_PORTFOLIOS

        if self.kind == "real":
            return f"{REAL_PORTFOLIOS[self.name].title}, K = {self.n_instruments}"
        return f"{PORTFOLIO_MARKETS[self.kind].title}, K = {self.n_instruments}"

    @property
    def target(self) -> str:
        """The target in words."""
        from agents.pipelines.zoo import REAL_RUN_SHORTFALL

        if self.measure == "sharpe_ratio":
            return f"agent / rule Sharpe >= {self.threshold:g}"
        if self.measure == "baseline_return":
            return (
                f"agent return >= baseline's {self.threshold:+.0%}, no run below it by more "
                f"than {REAL_RUN_SHORTFALL:.0%}"
            )
        return f"agent return >= {self.threshold:.0%}"


PORTFOLIO_ZOO_MARKETS: tuple[PortfolioZooMarket, ...] = (
    PortfolioZooMarket("ar1_k8", "ar1", 8, "sharpe_ratio", 0.8),
    PortfolioZooMarket("ar1_k32", "ar1", 32, "sharpe_ratio", 0.6),
    PortfolioZooMarket("lead_lag_k8", "lead_lag", 8, "sharpe_ratio", 0.8),
    PortfolioZooMarket("lead_lag_k32", "lead_lag", 32, "sharpe_ratio", 0.6),
    PortfolioZooMarket("common_factor_k8", "common_factor", 8, "return", -0.03),
    PortfolioZooMarket("common_factor_k32", "common_factor", 32, "return", -0.03),
)


def _real_markets() -> tuple[PortfolioZooMarket, ...]:
    from gpu_trading_env.data.real_series import REAL_PORTFOLIOS

    return tuple(
        PortfolioZooMarket(p.name, "real", len(p.series), "baseline_return", -0.02)
        for p in REAL_PORTFOLIOS.values()
    )


PORTFOLIO_REAL_MARKETS = _real_markets()
PORTFOLIO_ZOO_BY_NAME = {m.name: m for m in (*PORTFOLIO_ZOO_MARKETS, *PORTFOLIO_REAL_MARKETS)}
SMALL_PORTFOLIO_MARKETS = ("ar1_k8", "lead_lag_k8", "common_factor_k8")
# The real suite's CPU check: the set whose packages CI installs.
SMALL_PORTFOLIO_REAL_MARKETS = ("us_daily_k3",)


@dataclass(frozen=True)
class PortfolioZooBudget:
    """Size of a portfolio zoo run. The defaults are the zoo's; :data:`SMALL_PORTFOLIO` is the
    CPU check of CI.

    :param bars: bars of each market's grid after the warm-up.
    :param settings: ``PortfolioTrainConfig`` fields set over its defaults, as ``(name,
        value)`` pairs; empty for ``train_portfolio``'s defaults.
    :param episode_length: the training env's episode length; None: the config's default.
    """

    bars: int = PORTFOLIO_ZOO_BARS
    settings: tuple[tuple[str, Any], ...] = ()
    episode_length: int | None = None

    def config(self) -> Any:
        """The runs' ``PortfolioTrainConfig`` (validated)."""
        from agents.pipelines.portfolio_train_config import PortfolioTrainConfig

        config = PortfolioTrainConfig(**dict(self.settings))
        if self.episode_length is not None:
            config = config.replace(env=config.env.replace(episode_length=self.episode_length))
        return config


SMALL_PORTFOLIO = PortfolioZooBudget(
    bars=1_500,
    settings=(("timesteps", 2_000), ("num_envs", 4), ("batch_size", 32), ("eval_every", 1_000)),
    episode_length=100,
)


@dataclass(frozen=True)
class PortfolioZooRun:
    """One market and seed: the agent beside the rule and flat on the same test bars.

    Sharpe ratios are annualised (the test bars' ``bars_per_year``), returns are fractions of
    the capital, costs in.

    :param market: the market's name; ``kind``: its ``PORTFOLIO_MARKETS`` kind; ``n_instruments``: K.
    :param seed: the run's seed; ``device``: where it trained.
    :param kept: ``"network"`` or ``"flat"``, the deployed policy; ``reason``: why.
    :param agent_sharpe, agent_return: the deployed policy's test figures; ``network_sharpe``,
        ``network_return``: the selected snapshot's, deployed or not.
    :param rule_sharpe, rule_return: the market's rule's (a real market's: its baseline's);
        ``flat_sharpe``, ``flat_return``: flat's; ``hold_sharpe``, ``hold_return``:
        equal-weight buy-and-hold's.
    :param sharpe_ratio: agent / rule Sharpe; None where the rule's Sharpe is <= 0.
    :param test_start, test_stop: the test bars of the grid.
    :param seconds: the whole run's wall-clock seconds (drawing, training and backtests);
        ``train_seconds``: of the network's training alone.
    :param baseline: a real market's baseline per instrument (``"sp500 hold long, ..."``);
        ``baseline_reason``: each one's evidence on the training bars; empty elsewhere.
    :param return_vs_baseline, return_vs_baseline_low, return_vs_baseline_high: a real
        market's agent minus baseline test return and its 95% block-bootstrap interval
        (``return_difference_interval``); None elsewhere.
    """

    market: str
    kind: str
    n_instruments: int
    seed: int
    device: str
    kept: str
    reason: str
    agent_sharpe: float
    agent_return: float
    network_sharpe: float
    network_return: float
    rule_sharpe: float
    rule_return: float
    flat_sharpe: float
    flat_return: float
    hold_sharpe: float
    hold_return: float
    sharpe_ratio: float | None
    test_start: int
    test_stop: int
    seconds: float
    train_seconds: float
    baseline: str = ""
    baseline_reason: str = ""
    return_vs_baseline: float | None = None
    return_vs_baseline_low: float | None = None
    return_vs_baseline_high: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field (JSON-ready)."""
        return asdict(self)


@dataclass(frozen=True)
class FailedPortfolioZooRun:
    """A run that raised: its market, seed, device, the error and its traceback."""

    market: str
    seed: int
    device: str
    error: str
    traceback: str = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Every field (JSON-ready)."""
        return asdict(self)


PortfolioZooRow = PortfolioZooRun | FailedPortfolioZooRun


def rule_and_flat_levels(
    market: PortfolioZooMarket, data: Any, exposure_levels: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """The market's rule and flat as the env's levels: int64 [T, K] each, row t from bars <= t.

    :raises ValueError: where ``exposure_levels`` lacks -1, 0 or 1 (the rule's exposures).
    """
    from gpu_trading_env.data.portfolio_markets import exposure_levels as to_levels
    from gpu_trading_env.data.portfolio_markets import rule_exposures

    rule = to_levels(rule_exposures(market.kind, data), exposure_levels)
    flat = to_levels(np.zeros(rule.shape), exposure_levels)
    return rule, flat


def _references(
    market: PortfolioZooMarket, data: Any, result: Any, device: str
) -> tuple[Any, Any, dict[str, Any]]:
    """The market's rule (a real market's: the run's own per-instrument baseline) and flat on
    the agent's test bars, and the run's baseline fields (a real market's; none elsewhere)."""
    from agents.pipelines.portfolio_backtest import backtest_portfolios
    from agents.pipelines.zoo import return_difference_interval

    agent, env = result.test, result.config.env
    if market.kind == "real":
        # The run's own baseline: each instrument's, chosen on its training bars by the rule
        # train holds one instrument to (agents/pipelines/deployment.py).
        rule, flat = result.test_baseline, result.test_flat
        diff = return_difference_interval(agent.returns, rule.returns)
        return (
            rule,
            flat,
            {
                "baseline": result.baseline.words(),
                "baseline_reason": "; ".join(result.deployment.details[: len(data.instruments)]),
                "return_vs_baseline": diff["difference"],
                "return_vs_baseline_low": diff["low"],
                "return_vs_baseline_high": diff["high"],
            },
        )
    rule_levels, flat_levels = rule_and_flat_levels(market, data, env.exposure_levels)
    rule, flat = backtest_portfolios(
        [rule_levels, flat_levels], data, env, agent.start, agent.stop, agent.per_year, device
    )
    return rule, flat, {}


def run_portfolio_one(
    market_name: str,
    seed: int,
    device: str = "cpu",
    budget: PortfolioZooBudget = PortfolioZooBudget(),
) -> PortfolioZooRun:
    """One run: draw (a real market: load its series, the budget's bars aside),
    ``train_portfolio`` with the budget's config, backtest the rule (a real market: the
    baseline) and flat on the agent's test bars.

    :raises KeyError: an unknown market name.
    """
    from agents.pipelines.portfolio_training import train_portfolio
    from gpu_trading_env.data.portfolio_markets import portfolio_market
    from gpu_trading_env.data.real_series import load_real_portfolio

    t0 = time.perf_counter()
    market = PORTFOLIO_ZOO_BY_NAME[market_name]
    config = budget.config()
    if market.kind == "real":
        data = load_real_portfolio(market.name)
    else:
        data = portfolio_market(market.kind, budget.bars, market.n_instruments, int(seed))
    result = train_portfolio(data, config, seed=int(seed), device=device, out=None, progress=False)
    agent = result.test
    rule, flat, baseline_fields = _references(market, data, result, device)
    return PortfolioZooRun(
        market=market.name,
        kind=market.kind,
        n_instruments=market.n_instruments,
        seed=int(seed),
        device=device,
        kept=str(result.kept),
        reason=str(result.reason),
        agent_sharpe=float(agent.sharpe),
        agent_return=float(agent.total_return),
        network_sharpe=float(result.test_network.sharpe),
        network_return=float(result.test_network.total_return),
        rule_sharpe=float(rule.sharpe),
        rule_return=float(rule.total_return),
        flat_sharpe=float(flat.sharpe),
        flat_return=float(flat.total_return),
        hold_sharpe=float(result.test_buy_and_hold.sharpe),
        hold_return=float(result.test_buy_and_hold.total_return),
        sharpe_ratio=float(agent.sharpe / rule.sharpe) if rule.sharpe > 0 else None,
        test_start=int(agent.start),
        test_stop=int(agent.stop),
        seconds=time.perf_counter() - t0,
        train_seconds=float(result.train_seconds),
        **baseline_fields,
    )


def _guarded_run(
    market: str, seed: int, device: str, budget: PortfolioZooBudget
) -> PortfolioZooRow:
    try:
        return run_portfolio_one(market, seed, device, budget)
    except Exception as exc:  # a failed run is a row, the others go on
        import traceback

        return FailedPortfolioZooRun(
            market, int(seed), device, f"{type(exc).__name__}: {exc}", traceback.format_exc()
        )


def _init_worker(slots: Any) -> None:
    device = slots.get()
    os.environ["GPU_TRADING_ENV_ZOO_DEVICE"] = device
    if device.startswith("cuda:"):
        # Each worker sees its GPU alone, before torch or CuPy initialise CUDA.
        os.environ["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]


def _worker_run(market: str, seed: int, budget: PortfolioZooBudget) -> PortfolioZooRow:
    device = os.environ["GPU_TRADING_ENV_ZOO_DEVICE"]
    return _guarded_run(market, seed, "cuda" if device.startswith("cuda") else device, budget)


def run_portfolio_zoo(
    markets: Sequence[str],
    seeds: Sequence[int],
    devices: Sequence[str],
    *,
    runs_per_device: int = 1,
    budget: PortfolioZooBudget = PortfolioZooBudget(),
    on_done: Callable[[PortfolioZooRow], None] | None = None,
) -> list[PortfolioZooRow]:
    """Every (market, seed) run, in worker processes (``runs_per_device`` per device), or in
    this process where the only worker would be one on the CPU; rows in (market, seed) order.

    The first run goes alone, so that it alone compiles into the host's caches.

    :raises ValueError: an unknown market, or ``runs_per_device`` < 1.
    """
    unknown = [m for m in markets if m not in PORTFOLIO_ZOO_BY_NAME]
    if unknown:
        raise ValueError(
            f"markets {unknown} are invalid: allowed are {list(PORTFOLIO_ZOO_BY_NAME)}"
        )
    if runs_per_device < 1:
        raise ValueError(f"runs_per_device = {runs_per_device!r} is invalid: allowed is >= 1")
    budget.config()  # a bad setting fails here, not in every run
    workers = [d for d in devices for _ in range(runs_per_device)]
    jobs = [(m, int(s)) for m in markets for s in seeds]
    rows: dict[tuple[str, int], PortfolioZooRow] = {}

    def done(job: tuple[str, int], row: PortfolioZooRow) -> None:
        rows[job] = row
        if on_done is not None:
            on_done(row)

    if workers == ["cpu"]:
        for job in jobs:
            done(job, _guarded_run(*job, "cpu", budget))
        return [rows[j] for j in jobs]
    ctx = mp.get_context("spawn")
    slots = ctx.Manager().Queue()
    for d in workers:
        slots.put(d)
    with ProcessPoolExecutor(
        len(workers), mp_context=ctx, initializer=_init_worker, initargs=(slots,)
    ) as pool:
        done(jobs[0], pool.submit(_worker_run, *jobs[0], budget).result())
        futures = {pool.submit(_worker_run, *job, budget): job for job in jobs[1:]}
        for fut in as_completed(futures):
            done(futures[fut], fut.result())
    return [rows[j] for j in jobs]


# ------------------------------------------------------------------ the targets


@dataclass(frozen=True)
class PortfolioTargetCheck:
    """One market's figures over its seeds and whether its targets hold.

    :param market, title: the market; ``target``: its target in words.
    :param seeds: finished runs; ``failed_runs``: runs that raised.
    :param agent_sharpe, rule_sharpe, flat_sharpe: mean test Sharpe over the finished runs.
    :param agent_return, rule_return, hold_return: mean test return (fractions).
    :param sharpe_ratio: mean agent / rule Sharpe over the runs where the rule's is > 0.
    :param kept: runs whose network was deployed.
    :param value: the target's measure (``sharpe_ratio``, ``agent_return``, or for
        ``"baseline_return"`` the mean agent return minus the baseline's (``rule_return``)).
    :param met: whether the target holds; None where a run failed or none finished.
    :param worst_vs_baseline: a real market's lowest agent minus baseline return of a run
        (None elsewhere): the target's bound on every run.
    :param max_seconds: the longest run; ``seconds_met``: every run within
        :data:`RUN_SECONDS_TARGET` (None as ``met``).
    """

    market: str
    title: str
    target: str
    seeds: int
    failed_runs: int
    agent_sharpe: float | None
    rule_sharpe: float | None
    flat_sharpe: float | None
    agent_return: float | None
    rule_return: float | None
    hold_return: float | None
    sharpe_ratio: float | None
    kept: int
    value: float | None
    met: bool | None
    max_seconds: float | None
    seconds_met: bool | None
    worst_vs_baseline: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field (JSON-ready)."""
        return asdict(self)


def _mean(values: Sequence[float | None]) -> float | None:
    v = [x for x in values if x is not None and math.isfinite(x)]
    return float(np.mean(v)) if v else None


def check_targets(rows: Sequence[PortfolioZooRow]) -> list[PortfolioTargetCheck]:
    """Per market with rows, in the zoo's order: the means over seeds and the targets."""
    from agents.pipelines.zoo import REAL_RUN_SHORTFALL

    out = []
    for market in (*PORTFOLIO_ZOO_MARKETS, *PORTFOLIO_REAL_MARKETS):
        mine = [r for r in rows if isinstance(r, PortfolioZooRun) and r.market == market.name]
        failed = [
            r for r in rows if isinstance(r, FailedPortfolioZooRun) and r.market == market.name
        ]
        if not mine and not failed:
            continue
        ratio = _mean([r.sharpe_ratio for r in mine])
        agent_return = _mean([r.agent_return for r in mine])
        value = ratio if market.measure == "sharpe_ratio" else agent_return
        worst = None
        met = value is not None and value >= market.threshold
        if market.measure == "baseline_return" and mine:
            value = agent_return - _mean([r.rule_return for r in mine])  # type: ignore[operator]
            worst = min(r.agent_return - r.rule_return for r in mine)
            met = value >= market.threshold and worst >= -REAL_RUN_SHORTFALL
        judged = bool(mine) and not failed
        max_seconds = max((r.seconds for r in mine), default=None)
        out.append(
            PortfolioTargetCheck(
                market=market.name,
                title=market.title,
                target=market.target,
                seeds=len(mine),
                failed_runs=len(failed),
                agent_sharpe=_mean([r.agent_sharpe for r in mine]),
                rule_sharpe=_mean([r.rule_sharpe for r in mine]),
                flat_sharpe=_mean([r.flat_sharpe for r in mine]),
                agent_return=agent_return,
                rule_return=_mean([r.rule_return for r in mine]),
                hold_return=_mean([r.hold_return for r in mine]),
                sharpe_ratio=ratio,
                kept=sum(r.kept == "network" for r in mine),
                value=value,
                met=met if judged else None,
                max_seconds=max_seconds,
                seconds_met=(
                    max_seconds is not None and max_seconds <= RUN_SECONDS_TARGET
                    if judged
                    else None
                ),
                worst_vs_baseline=worst,
            )
        )
    return out


# ------------------------------------------------------------------ the report

_RUN_COLUMNS = tuple(PortfolioZooRun.__dataclass_fields__)
CSV_COLUMNS = (*_RUN_COLUMNS, "error")


@dataclass(frozen=True)
class PortfolioZooFiles:
    """The report's files: every run (``csv``), the targets' table (``markdown``), and both
    with the run's settings (``json``)."""

    csv: Path
    markdown: Path
    json: Path


def _cell(x: Any, fmt: str = "{:.2f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return fmt.format(x)


def _met(x: bool | None) -> str:
    return "n/a" if x is None else ("met" if x else "missed")


def markdown_table(checks: Sequence[PortfolioTargetCheck]) -> str:
    """The targets as a markdown table: one row per market, its means over seeds, the
    target, met / missed, and the run-time target."""
    head = (
        "| market | seeds | agent Sharpe | rule Sharpe | agent / rule | agent return | "
        "rule return | hold return | network kept | target | met | longest run | "
        f"<= {RUN_SECONDS_TARGET:g} s |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for c in checks:
        seeds = f"{c.seeds}" + (f" ({c.failed_runs} failed)" if c.failed_runs else "")
        lines.append(
            f"| {c.title} | {seeds} | {_cell(c.agent_sharpe)} | {_cell(c.rule_sharpe)} | "
            f"{_cell(c.sharpe_ratio)} | {_cell(c.agent_return, '{:.1%}')} | "
            f"{_cell(c.rule_return, '{:.1%}')} | {_cell(c.hold_return, '{:.1%}')} | "
            f"{c.kept} of {c.seeds} | {c.target} | "
            f"{_met(c.met)} | {_cell(c.max_seconds, '{:.1f} s')} | {_met(c.seconds_met)} |"
        )
    return "\n".join(lines) + "\n"


def baseline_lines(rows: Sequence[PortfolioZooRow]) -> str:
    """Markdown lines, one per real-market run: the deployed policy, its return beside its
    baseline's with the interval of the difference, and which baseline per instrument and why
    (empty where no run is of a real market)."""
    real = [r for r in rows if isinstance(r, PortfolioZooRun) and r.baseline]
    if not real:
        return ""
    lines = [
        "\nThe baseline (real markets): per instrument, the one `train` would hold that "
        "series to alone, chosen on the run's training bars (`choose_portfolio_baseline`); the table's "
        "rule columns are its figures.\n"
    ]
    for r in real:
        lines.append(
            f"- {r.market} seed {r.seed}: {r.kept} deployed, return {r.agent_return:+.1%} vs "
            f"baseline {r.rule_return:+.1%} (difference {_cell(r.return_vs_baseline, '{:+.1%}')}"
            f", 95% [{_cell(r.return_vs_baseline_low, '{:+.1%}')}, "
            f"{_cell(r.return_vs_baseline_high, '{:+.1%}')}]), flat {r.flat_return:+.1%}, "
            f"equal-weight buy-and-hold {r.hold_return:+.1%}; baseline {r.baseline} "
            f"({r.baseline_reason})"
        )
    return "\n".join(lines) + "\n"


def portfolio_zoo_lead(rows: Sequence[PortfolioZooRow]) -> str:
    """The report's first sentence (``reports.report.lead_sentence``): how many runs deployed
    a network, and the deployed policy's mean test figures over the finished runs beside flat,
    equal-weight buy-and-hold and the reference (the known rule; a real market's baseline)."""
    from gpu_trading_env.reports.report import FLAT_FIGURES, lead_sentence

    ok = [r for r in rows if isinstance(r, PortfolioZooRun)]
    if not ok:
        return f"No run finished: all {len(rows)} failed (see portfolio_zoo.csv)."

    def mean(policy: str) -> dict[str, float | None]:
        return {
            "total_return": _mean([getattr(r, f"{policy}_return") for r in ok]),
            "sharpe": _mean([getattr(r, f"{policy}_sharpe") for r in ok]),
        }

    real = sum(bool(r.baseline) for r in ok)
    reference = "baseline" if real == len(ok) else "known rule" if not real else "rule/baseline"
    networks = sum(r.kept == "network" for r in ok)
    markets = len({r.market for r in ok})
    deployed = f"a network in {networks} of {len(ok)} runs, {markets} markets"
    against = {"flat": FLAT_FIGURES, "buy-and-hold": mean("hold"), reference: mean("rule")}
    return lead_sentence(deployed, mean("agent"), against, window="mean out of sample")


def write_portfolio_report(
    rows: Sequence[PortfolioZooRow], out: str | Path, command: str, meta: dict[str, Any]
) -> PortfolioZooFiles:
    """``portfolio_zoo.csv`` (every run, a failed one with its error), ``portfolio_zoo.md``
    (its first sentence, :func:`portfolio_zoo_lead`, the command and the targets' table) and ``portfolio_zoo.json`` (``meta``, runs and
    targets) in the folder ``out``."""
    import csv
    import json

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    checks = check_targets(rows)
    files = PortfolioZooFiles(
        folder / "portfolio_zoo.csv", folder / "portfolio_zoo.md", folder / "portfolio_zoo.json"
    )
    with atomic_write(files.csv, "w") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for r in rows:
            d = r.to_dict()
            d.pop("traceback", None)
            writer.writerow({k: d.get(k, "") for k in CSV_COLUMNS})
    text = (
        f"# Portfolio zoo\n\n{portfolio_zoo_lead(rows)}\n\n```bash\n{command}\n```\n\n{markdown_table(checks)}"
        f"{baseline_lines(rows)}"
    )
    atomic_write_text(files.markdown, text)
    payload = {
        "command": command,
        "meta": meta,
        "runs": [r.to_dict() for r in rows],
        "targets": [c.to_dict() for c in checks],
    }
    atomic_write_text(files.json, json.dumps(payload, indent=1))
    return files
