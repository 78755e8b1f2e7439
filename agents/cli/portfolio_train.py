"""``gpu-trading-env train --portfolio``: one policy over the instruments of ``--data`` (one
per file) on ``GpuPortfolio-v0``, trained, selected and tested by
:func:`agents.pipelines.portfolio_training.train_portfolio`, then its report."""

from __future__ import annotations

import argparse
from typing import Any

from agents.cli.data import is_synthetic, load_data
from agents.cli.options import UsageError
from agents.cli.report import describe_data
from agents.cli.run_folder import claim_out

__all__ = ["SINGLE_ENV_OPTIONS", "cmd_train_portfolio", "portfolio_data_of"]

# train's options that the portfolio run has no use for, and their defaults: given with
# --portfolio they are refused rather than ignored.
SINGLE_ENV_OPTIONS: dict[str, tuple[str, Any]] = {
    "resume": ("--resume", None),
    "checkpoint_every": ("--checkpoint-every", None),
    "instrument": ("--instrument", None),
    "cross_fit": ("--cross-fit", False),
    "curiosity": ("--curiosity", False),
}


def check_portfolio_options(args: argparse.Namespace) -> None:
    """Refuse train's single-env options with ``--portfolio``, one line naming the option."""
    from agents.pipelines.train_config import TrainConfig

    for dest, (option, default) in SINGLE_ENV_OPTIONS.items():
        if getattr(args, dest, default) != default:
            raise UsageError(
                f"{option} is invalid with --portfolio: it applies to the single-instrument "
                "train; leave it out"
            )
    default = TrainConfig().predictability_level
    if args.predictability_level != default:
        raise UsageError(
            f"--predictability-level {args.predictability_level} is invalid with --portfolio: "
            "the portfolio's validation test has no input selection; leave it out"
        )


def portfolio_data_of(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(MarketData, PortfolioData)`` of ``--data`` and ``--align``.

    :raises UsageError: without ``--data``, with fewer than two instruments, or where the
        instruments' timestamps differ (the data layer's error, naming the instrument and the
        first timestamp) and ``--align`` is not given.
    """
    from gpu_trading_env.data.portfolio_data import PortfolioData

    if not args.data:
        raise UsageError(
            "--portfolio needs --data with two or more files of bars (one instrument each): "
            "--data A.csv B.csv ..."
        )
    data = load_data(args)
    if data.n_instruments < 2:
        raise UsageError(
            f"--portfolio needs two or more instruments, --data {' '.join(args.data)} holds one "
            f"({data.instruments[0]}): pass a file per instrument, --data A.csv B.csv ..."
        )
    try:
        mf = {} if getattr(args, "max_filled", None) is None else {"max_filled": args.max_filled}
        return data, PortfolioData.from_market_data(data, align=args.align, **mf)
    except ValueError as exc:
        raise UsageError(f"--data: {exc}") from None


def cmd_train_portfolio(args: argparse.Namespace) -> int:
    """``train --portfolio``: check everything, claim ``--out``, train, write model.zip,
    metrics.json and the report; exit 0."""
    from agents.cli.portfolio_report import portfolio_report
    from agents.pipelines.portfolio_training import (
        PortfolioTrainConfig,
        PortfolioTrainConfigError,
        check_portfolio_run,
        train_portfolio,
    )

    check_portfolio_options(args)
    data, pdata = portfolio_data_of(args)
    try:
        config = PortfolioTrainConfig.from_options(args, env=args.config)
        check_portfolio_run(pdata, config.resolved(args.device))
    except (PortfolioTrainConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    out = claim_out(args, "train")
    result = train_portfolio(
        pdata,
        config,
        seed=args.seed,
        device=args.device,
        out=out,
        progress=not args.no_progress,
        per_year=args.bars_per_year,
    )
    notes = [
        describe_data(data),
        f"Instruments on one grid of {pdata.n_bars:,} bars"
        + (" (forward-filled where one had no bar: --align ffill)" if args.align else "")
        + f"; fit, validation and test bars: {result.splits.to_dict()}.",
        "Costs are in every curve: "
        f"{result.config.env.cost_bps} bps of each instrument's traded notional; buy and hold "
        "pays them once, to buy.",
        f"Sharpe ratios annualised with {result.test.per_year:,.1f} bars a year, zero risk-free "
        "rate.",
    ]
    portfolio_report(out, result, notes, synthetic=is_synthetic(data))
    return 0
