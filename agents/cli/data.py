"""The data a command reads: ``--data`` files or the built-in synthetic market, and its split."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agents.cli.options import PROG, UsageError, portfolio_env

# The options that say how to read --data files (dest names), refused without --data.
FILE_OPTIONS = (
    "features",
    "date_format",
    "timestamp_unit",
    "column",
    "fill_volume",
    "prices",
    "sort",
    "duplicates",
    "skip_empty",
    "sep",
    "decimal",
    "thousands",
)


def load_data(args: argparse.Namespace) -> Any:
    """The data of ``--data`` (or the built-in synthetic market) as MarketData."""
    from gpu_trading_env.data.market_data import MarketData

    if not args.data:
        given = [o for o in FILE_OPTIONS if getattr(args, o, None) not in (None, False)]
        if given:
            named = ", ".join("--" + o.replace("_", "-") for o in given)
            raise UsageError(f"{named}: these options apply to --data files: pass --data")
        data = MarketData.default()
    else:
        data = _load_files(args)
    if getattr(args, "instrument", None) is not None and args.instrument not in data.instruments:
        raise UsageError(
            f"--instrument {args.instrument!r}: the data has {', '.join(data.instruments)}"
        )
    return data


def _load_files(args: argparse.Namespace) -> Any:
    from gpu_trading_env.data.loaders import load_bars

    columns = dict(pair.partition("=")[::2] for pair in args.column or [])
    csv = {k: getattr(args, k) for k in ("sep", "decimal", "thousands") if getattr(args, k)}
    try:
        data = load_bars(
            args.data,
            date_format=args.date_format,
            timestamp_unit=args.timestamp_unit,
            time_column=args.time_column,
            symbol_column=args.symbol_column,
            columns={k.lower(): v for k, v in columns.items()},
            fill_volume=args.fill_volume,
            prices=args.prices,
            sort=args.sort,
            duplicates=args.duplicates,
            skip_empty=args.skip_empty,
            read_csv_kwargs=csv or None,
            extra_features=getattr(args, "features", None),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # unreadable: permissions, a vanished file, an I/O error
        raise UsageError(
            f"--data {exc.filename or ' '.join(args.data)}: {exc.strerror or exc}"
        ) from None
    notes = list(data.metadata.get("notes", []))
    if args.prices is None and str(data.price_basis).startswith("adjusted"):
        notes.insert(0, f"prices {data.price_basis} (--prices raw: the file's close as it is)")
    for note in notes:
        print(f"{PROG}: note: {note}", file=sys.stderr)
    return data


def is_synthetic(data: Any) -> bool:
    return data.metadata.get("source") == "synthetic"


def per_year_of(args: argparse.Namespace, evaluated: Any) -> float:
    """Bars a year of the evaluated instrument: ``--bars-per-year``, or inferred from its own
    calendar (hourly FX and a daily stock in one file have different ones).

    :param evaluated: one-instrument MarketData, the bars whose returns are annualised.
    :raises ValueError: if ``evaluated`` holds several instruments (whose calendar is meant?).
    """
    from gpu_trading_env.reports.metrics import bars_per_year

    if evaluated.n_instruments != 1:
        raise ValueError(
            f"per_year_of: the evaluated data has {evaluated.n_instruments} instruments "
            f"{evaluated.instruments}: pass the one instrument whose returns are annualised"
        )
    if args.bars_per_year is not None:
        return float(args.bars_per_year)
    return bars_per_year(evaluated.timestamps)


def split_data(data: Any, fraction: float, what: str) -> tuple[Any, Any]:
    try:
        return data.split(fraction)
    except ValueError as exc:
        raise UsageError(f"--train-fraction {fraction}: {exc}; {what}") from None


def runs_portfolio(args: argparse.Namespace, data: Any) -> bool:
    """Whether the command takes the K-instrument path (``GpuPortfolio-v0``): ``data`` holds
    several instruments (files, or symbols of one long-format file) and no ``--instrument``
    picks one. ``--portfolio`` is the same request, refused by :func:`portfolio_data_of` with
    one instrument. Where the data alone says so, ``args.config`` becomes its PortfolioConfig."""
    if not args.portfolio and args.instrument is None and data.n_instruments > 1:
        args.portfolio = True
        args.config = portfolio_env(args)
    return bool(args.portfolio)


def portfolio_data_of(args: argparse.Namespace, data: Any, model: str = "") -> Any:
    """The PortfolioData of ``data`` (``--data``, loaded) on one grid, ``--align`` applied.

    :param model: the instruments a model was trained on, for the message of too few.
    :raises UsageError: without ``--data``, with fewer than two instruments, or where the
        instruments' timestamps differ (the data layer's error, naming the instrument and the
        first timestamp) and ``--align`` is not given.
    """
    from gpu_trading_env.data.portfolio_data import PortfolioData

    if not args.data or data.n_instruments < 2:
        held = "no --data (the built-in market is one instrument)"
        if args.data:
            held = f"--data {' '.join(args.data)} holds one ({data.instruments[0]})"
        raise UsageError(
            f"{model or '--portfolio'} needs two or more instruments, {held}: pass a file per "
            "instrument, --data A.csv B.csv ..."
        )
    try:
        mf = {} if getattr(args, "max_filled", None) is None else {"max_filled": args.max_filled}
        return PortfolioData.from_market_data(data, align=args.align, **mf)
    except ValueError as exc:
        raise UsageError(f"--data: {exc}") from None
