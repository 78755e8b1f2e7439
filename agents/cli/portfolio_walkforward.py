"""``gpu-trading-env walkforward --portfolio``: ``train --portfolio`` on the folds of
``walkforward`` (the same windows and defaults), each fold's kept policy and its reason, the test
windows stitched per seed beside flat and equal-weight buy-and-hold, in the portfolio report."""

from __future__ import annotations

import argparse
from typing import Any

from agents.cli.data import is_synthetic
from agents.cli.options import UsageError
from agents.cli.portfolio_train import check_portfolio_options, portfolio_data_of
from agents.cli.report import describe_data
from agents.cli.run_folder import claim_out

__all__ = ["cmd_walkforward_portfolio", "fold_lines"]


def _refuse_options(args: argparse.Namespace) -> None:
    for option, given in (
        ("--instrument", args.instrument is not None),
        ("--warm-start", args.warm_start),
        ("--no-confirm", getattr(args, "no_confirm", False)),
    ):
        if given:
            raise UsageError(
                f"{option} is invalid with walkforward --portfolio: every instrument of --data "
                "is traded, each fold trains from scratch and deploys what train --portfolio "
                "deploys; leave it out"
            )
    check_portfolio_options(args)


def fold_lines(result: Any) -> list[str]:
    """One line per fold and seed: the test window, the policy kept and why, its test return
    beside equal-weight buy-and-hold's of the same bars."""
    lines = []
    for run in result.runs:
        f = run.fold.to_dict(result.timestamps)
        r = run.result
        lines.append(
            f"Fold {run.fold.index + 1} (test {f['test_dates'][0][:10]} to "
            f"{f['test_dates'][1][:10]}), seed {run.seed}: {r.reason}; out of sample "
            f"{100 * r.test.total_return:+.1f}% against flat's 0.0% and equal-weight "
            f"buy-and-hold's {100 * r.test_buy_and_hold.total_return:+.1f}%."
        )
    return lines


def _verdict(result: Any) -> str:
    kept = sum(r.result.kept == "network" for r in result.runs)
    returns = ", ".join(f"{100 * bt.total_return:+.1f}%" for bt in result.stitched.values())
    # A fold keeps its baseline, flat unless an instrument's training bars held a drift.
    base = "flat" if all(r.result.kept in ("network", "flat") for r in result.runs) else "baselines"
    which = (
        f"no edge found: {base} in all {len(result.runs)} (fold, seed) pairs"
        if kept == 0
        else f"a network kept in {kept} of {len(result.runs)} (fold, seed) pairs, {base} in the others"
    )
    return (
        f"{which}; stitched out of sample {returns} (seed by seed) against equal-weight "
        f"buy-and-hold's {100 * result.buy_and_hold.total_return:+.1f}% and flat's 0.0%"
    )


def cmd_walkforward_portfolio(args: argparse.Namespace) -> int:
    """``walkforward --portfolio``: check everything (every fold's windows included), claim
    ``--out``, train and test each fold and seed, write the report; exit 0."""
    from agents.cli.portfolio_report import PortfolioPage, write_portfolio_page
    from agents.pipelines.portfolio_train_config import (
        PortfolioTrainConfig,
        PortfolioTrainConfigError,
    )
    from agents.pipelines.portfolio_walkforward import (
        check_folds,
        portfolio_folds,
        walk_forward_portfolio,
    )

    _refuse_options(args)
    data, pdata = portfolio_data_of(args)
    options = argparse.Namespace(**{**vars(args), "train_fraction": None})
    try:
        config = PortfolioTrainConfig.from_options(options, env=args.config)
    except PortfolioTrainConfigError as exc:
        raise UsageError(str(exc)) from None
    try:
        folds = portfolio_folds(
            pdata.n_bars, args.folds, args.train_bars, args.test_bars, args.rolling
        )
        check_folds(pdata, config, folds)
    except ValueError as exc:
        raise UsageError(f"{exc} (--folds, --train-bars, --test-bars)") from None
    out = claim_out(args, "walkforward")

    def done(run: Any) -> None:
        r = run.result
        print(
            f"fold {run.fold.index + 1}/{len(folds)} seed {run.seed}: {r.kept} kept, test "
            f"{100 * r.test.total_return:+.1f}% ({r.seconds:.1f} s)",
            flush=True,
        )

    result = walk_forward_portfolio(
        pdata,
        config,
        folds,
        args.seeds,
        device=args.device,
        per_year=args.bars_per_year,
        on_run=done,
    )
    rows = [(f"seed {s} (stitched)", bt) for s, bt in result.stitched.items()]
    rows += [("flat", result.flat), ("equal-weight buy and hold", result.buy_and_hold)]
    first = args.seeds[0]
    page = PortfolioPage(
        title=f"Walk-forward portfolio of {pdata.n_instruments} instruments, out-of-sample",
        heading=f"the {len(folds)} test windows stitched",
        verdict=_verdict(result),
        rows=rows,
        weights=(result.stitched[int(first)], f"seed {first}, stitched"),
        notes=[describe_data(data), *fold_lines(result)],
        metrics=result.to_dict(),
        capital=float(config.env.initial_capital),
        synthetic=is_synthetic(data),
        deployed=f"a network in {sum(r.result.kept == 'network' for r in result.runs)} of "
        f"{len(result.runs)} (fold, seed) runs, else the baseline (seed {first})",
    )
    write_portfolio_page(out, page)
    return 0
