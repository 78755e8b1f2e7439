"""``gpu-trading-env backtest --portfolio``: a constant exposure in every instrument of
``--data`` (``--rule buy_and_hold``), backtested through the portfolio env on the bars after
``--train-fraction`` beside flat and equal-weight buy-and-hold, with the report of
``train --portfolio``.

The env rebalances each instrument to the rule's exposure every bar (under the gross cap
``max_leverage``), with its costs; equal-weight buy-and-hold buys once and holds the units.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from agents.cli.data import is_synthetic
from agents.cli.options import UsageError
from agents.cli.portfolio_train import portfolio_data_of
from agents.cli.report import describe_data
from agents.cli.run_folder import claim_out

__all__ = ["cmd_backtest_portfolio", "exposure_level"]


def exposure_level(exposure: float, levels: tuple[float, ...]) -> int:
    """The index of ``exposure`` among the env's ``exposure_levels``.

    :raises UsageError: where it is not one of them (the portfolio env acts in levels).
    """
    for i, level in enumerate(levels):
        if float(level) == float(exposure):
            return i
    raise UsageError(
        f"--exposure {exposure} is invalid with --portfolio: allowed is one of the env's "
        f"exposure levels {list(levels)} (--env exposure_levels=... sets them)"
    )


def _refuse_options(args: argparse.Namespace) -> str:
    """The rule to run; UsageError for the single-instrument options."""
    if args.instrument is not None:
        raise UsageError(
            "--instrument is invalid with backtest --portfolio: every instrument of --data is "
            "traded; leave it out"
        )
    rule = args.rule or "buy_and_hold"
    if rule != "buy_and_hold":
        raise UsageError(
            f"--rule {rule} is invalid with --portfolio: allowed is buy_and_hold (a planted "
            "rule belongs to the built-in single-instrument market)"
        )
    return rule


def cmd_backtest_portfolio(args: argparse.Namespace) -> int:
    """``backtest --portfolio``: check the options, backtest the rule, flat and equal-weight
    buy-and-hold on the evaluated bars, write the report; exit 0."""
    from agents.cli.portfolio_report import PortfolioPage, write_portfolio_page
    from agents.pipelines.portfolio_backtest import (
        backtest_portfolios,
        buy_and_hold_portfolio,
        flat_level,
    )

    rule = _refuse_options(args)
    env = args.config
    level = exposure_level(args.exposure, tuple(env.exposure_levels))
    data, pdata = portfolio_data_of(args)
    start = int(math.floor(args.train_fraction * pdata.n_bars))
    if pdata.n_bars - start < 3:
        raise UsageError(
            f"--train-fraction {args.train_fraction} leaves {pdata.n_bars - start} of the "
            f"{pdata.n_bars} bars: allowed is a fraction that leaves at least 3"
        )
    shape = (pdata.n_bars, pdata.n_instruments)
    rule_levels = np.full(shape, level, dtype=np.int64)
    flat = np.full(shape, flat_level(env), dtype=np.int64)
    rule_bt, flat_bt = backtest_portfolios(
        [rule_levels, flat], pdata, env, start, pdata.n_bars, args.bars_per_year
    )
    bh = buy_and_hold_portfolio(pdata, env, start, pdata.n_bars, args.bars_per_year)
    out = claim_out(args, "backtest")
    what = "every bar" if start == 0 else f"the bars after the first {args.train_fraction:.0%}"
    name = f"rule {rule} (exposure {args.exposure:g} each)"
    page = PortfolioPage(
        title=f"Portfolio backtest, {pdata.n_instruments} instruments",
        heading=f"backtest of {what}",
        verdict=f"{name}, rebalanced every bar under the gross cap, on {what}",
        rows=[(name, rule_bt), ("flat", flat_bt), ("equal-weight buy and hold", bh)],
        weights=(rule_bt, "rule"),
        notes=[describe_data(data)],
        metrics={
            "kind": "portfolio",
            "rule": rule,
            "exposure": float(args.exposure),
            "instruments": list(pdata.instruments),
            "window": [start, pdata.n_bars],
            "rule_backtest": rule_bt.to_dict(),
            "flat": flat_bt.to_dict(),
            "buy_and_hold": bh.to_dict(),
        },
        capital=float(env.initial_capital),
        synthetic=is_synthetic(data),
        deployed=name,
        window=f"on {what}",
    )
    write_portfolio_page(out, page)
    return 0
