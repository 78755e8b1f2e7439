"""``gpu-trading-env zoo --portfolio``: ``train_portfolio``'s defaults on seeded portfolio
markets with known best rules.

    gpu-trading-env zoo --portfolio --device cuda --out runs/pzoo      # 6 markets x 5 seeds
    gpu-trading-env zoo --portfolio --small --device cpu --seeds 0     # the CPU check of CI
    gpu-trading-env zoo --portfolio --real --device cuda --seeds 0 1 2 # real daily series, K = 3

See :mod:`agents.pipelines.portfolio_zoo` for the markets, their rules and the targets.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time

from agents.cli.options import UsageError
from agents.cli.run_folder import claim_out
from agents.cli.run_progress import RunProgress
from agents.pipelines.portfolio_zoo import (
    SMALL_PORTFOLIO,
    FailedPortfolioZooRun,
    PortfolioZooBudget,
    PortfolioZooRow,
)

__all__ = ["cmd_portfolio_zoo", "cmd_zoo_suite"]


def cmd_zoo_suite(args: argparse.Namespace) -> int:
    """``zoo``: the portfolio suite with ``--portfolio``, else the zoo or its real suite
    (:func:`agents.cli.zoo.cmd_zoo`)."""
    from agents.cli.zoo import cmd_zoo

    if not args.portfolio and args.bars is not None:
        raise UsageError(f"--bars {args.bars} is invalid without --portfolio: the zoo's markets "
                         "have their own bars")  # fmt: skip
    return cmd_portfolio_zoo(args) if args.portfolio else cmd_zoo(args)


def _chosen_markets(args: argparse.Namespace) -> list[str]:
    """``--markets`` (else the suite, or its small part with ``--small``), each checked
    against the portfolio suite (its real suite with ``--real``, each real market's packages
    installed); raises UsageError naming the option."""
    from agents.pipelines import portfolio_zoo as pz

    if args.real:
        suite, small = [m.name for m in pz.PORTFOLIO_REAL_MARKETS], pz.SMALL_PORTFOLIO_REAL_MARKETS
    else:
        suite, small = [m.name for m in pz.PORTFOLIO_ZOO_MARKETS], pz.SMALL_PORTFOLIO_MARKETS
    markets = args.markets or (list(small) if args.small else suite)
    bad = [m for m in markets if m not in suite]
    if bad:
        flag = "--portfolio --real" if args.real else "--portfolio"
        raise UsageError(
            f"--markets {' '.join(bad)} is invalid with {flag}: allowed are {', '.join(suite)}"
        )
    if len(set(markets)) != len(markets):
        raise UsageError(f"--markets {' '.join(markets)} is invalid: allowed are distinct names")
    if args.real:
        _check_real_packages(markets)
    return markets


def _check_real_packages(markets: list[str]) -> None:
    """One UsageError naming each real market whose series need a package not installed."""
    from gpu_trading_env.data.real_series import REAL_PORTFOLIOS, real_frame

    missing = {}
    for m in markets:
        for series in REAL_PORTFOLIOS[m].series:
            try:
                real_frame(series)
            except ImportError:
                missing[m] = ", ".join(REAL_PORTFOLIOS[m].packages)
                break
    if missing:
        raise UsageError(
            f"--markets: the real markets {', '.join(missing)} need packages that are not "
            f"installed ({'; '.join(f'{m}: {p}' for m, p in missing.items())}): "
            'pip install -e ".[real]"'
        )


def _check_options(args: argparse.Namespace) -> None:
    """Refuse the options the portfolio zoo does not take."""
    if args.real and args.bars is not None:
        raise UsageError(
            f"--bars {args.bars} is invalid with --real: the real markets have their own bars"
        )
    if args.train_args:
        raise UsageError(
            f"--train-args {args.train_args!r} is invalid with --portfolio: the portfolio zoo "
            "runs train_portfolio's defaults (--small for the CPU check)"
        )


def _budget(args: argparse.Namespace) -> PortfolioZooBudget:
    """The runs' budget: ``--small``'s or the zoo's, with ``--bars``; raises UsageError where
    the bars leave the training env's episodes no room in the fit window."""
    from agents.pipelines.portfolio_training import portfolio_splits

    budget = SMALL_PORTFOLIO if args.small else PortfolioZooBudget()
    if args.bars is None:
        return budget
    config = budget.config()
    need = config.env.episode_length + 1
    try:
        fit = portfolio_splits(args.bars, config.train_fraction, config.val_fraction).fit_stop
    except ValueError:
        fit = 0
    if fit < need:
        raise UsageError(
            f"--bars {args.bars} is invalid: allowed are bars whose fit window (the first "
            f"{config.train_fraction:g} of them less the last {config.val_fraction:g} of those) "
            f"holds at least {need} bars, an episode and the bar it is marked to"
        )
    return dataclasses.replace(budget, bars=int(args.bars))


def _done_line(row: PortfolioZooRow) -> str:
    """One run's progress line: its error, or the agent's test Sharpe and return beside the
    rule's."""
    if isinstance(row, FailedPortfolioZooRun):
        return f"{row.market} seed {row.seed}: error {row.error}"
    ref = "baseline" if row.baseline else "rule"  # a real market's reference is its baseline
    return (
        f"{row.market} seed {row.seed}: agent Sharpe {row.agent_sharpe:.2f} vs {ref} "
        f"{row.rule_sharpe:.2f} ({row.kept} kept), return {row.agent_return:+.1%} vs {ref} "
        f"{row.rule_return:+.1%}, {row.seconds:.1f} s"
    )


def cmd_portfolio_zoo(args: argparse.Namespace) -> int:
    """``zoo --portfolio``: every market x seed run, the report; exit 1 where a run failed."""
    from agents.cli.sweep import resolve_devices
    from agents.cli.zoo import _check_seeds_and_runs
    from agents.pipelines.portfolio_zoo import (
        baseline_lines,
        check_targets,
        markdown_table,
        portfolio_zoo_lead,
        run_portfolio_zoo,
        write_portfolio_report,
    )

    _check_options(args)
    markets = _chosen_markets(args)
    _check_seeds_and_runs(args)
    devices = resolve_devices([args.device] if args.device != "auto" else ["auto"])
    budget = _budget(args)
    out = claim_out(args, "portfolio-zoo")
    total = len(markets) * len(args.seeds)
    if args.small:
        print(
            "portfolio zoo, smoke test: --small checks the pipeline on a tiny budget, not a "
            "learning result: the targets are the full zoo's",
            flush=True,
        )
    print(
        f"portfolio zoo{' (real)' if args.real else ''}: {len(markets)} markets x {len(args.seeds)} seeds = {total} runs on "
        f"{', '.join(devices)} ({args.runs_per_device} at a time each); report in {out}",
        flush=True,
    )
    progress = RunProgress(total, "portfolio zoo", bar=not args.no_progress)
    start = time.perf_counter()
    rows = run_portfolio_zoo(
        markets,
        args.seeds,
        devices,
        runs_per_device=args.runs_per_device,
        budget=budget,
        on_done=lambda row: progress.done(_done_line(row)),
    )
    progress.close()
    command = "gpu-trading-env " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    meta = {
        "markets": markets,
        "seeds": list(args.seeds),
        "devices": devices,
        "runs_per_device": args.runs_per_device,
        "small": bool(args.small),
        "suite": "real" if args.real else "portfolio",
        "bars": None if args.real else budget.bars,
        "settings": [list(s) for s in budget.settings],
        "wall_seconds": time.perf_counter() - start,
    }
    files = write_portfolio_report(rows, out, command, meta)
    print(portfolio_zoo_lead(rows))
    print(markdown_table(check_targets(rows)) + baseline_lines(rows), end="")
    print(f"report: {files.markdown}  (every run: {files.csv}, {files.json})")
    return 1 if any(isinstance(r, FailedPortfolioZooRun) for r in rows) else 0
