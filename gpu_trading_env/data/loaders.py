"""``load_bars``: one ``MarketData`` from the bar files people have (CSV or Parquet exports of
brokers, exchanges and Yahoo). The column and timestamp rules are those of the one reader of bar
files, :mod:`gpu_trading_env.data.bar_files`; every error is a ``DataError`` naming the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpu_trading_env.data.bar_files import DataError, read_bar_table
from gpu_trading_env.data.market_data import MarketData

__all__ = ["DataError", "load_bars"]


def load_bars(
    paths: str | Path | Sequence[str | Path],
    *,
    date_format: str | None = None,
    timestamp_unit: str | None = None,
    time_column: str | None = None,
    symbol_column: str | None = None,
    columns: Mapping[str, str] | None = None,
    fill_volume: float | None = None,
    features: str | Sequence[str] = "builtin",
    min_bars: int = 2,
    name: str | None = None,
    read_csv_kwargs: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    prices: str | None = None,
    sort: bool = False,
    duplicates: str | None = None,
    skip_empty: bool = False,
    extra_features: Sequence[str] | None = None,
) -> MarketData:
    """One ``MarketData`` from one or several CSV / Parquet files of OHLCV bars.

    :param paths: a file or a list of files; instruments of several files are named after each
        file's stem unless the file has a symbol column.
    :param date_format: ``strftime`` format of text timestamps, e.g. ``"%d.%m.%Y %H:%M:%S.%f"``.
    :param timestamp_unit: ``s``, ``ms``, ``us`` or ``ns`` for numeric epoch timestamps.
    :param time_column: the timestamp column (default: found by name, see the module doc).
    :param symbol_column: the instrument column of a long-format file (default: found by name).
    :param columns: ``{field: column}`` for fields named otherwise in the file.
    :param fill_volume: the volume of bars whose volume is missing (empty, NaN, N/A), e.g. 0 for
        FX or index files that leave it out on some bars, and of every bar of a file with no
        volume column; None (the default) refuses them.
    :param features: ``"builtin"`` or a list of the file's columns to use as the features (see
        ``MarketData.from_dataframe``).
    :param extra_features: the file's columns to add to the built-in features (a signal, a
        sentiment score, another market's series), each known at its bar's close (see
        ``MarketData.from_dataframe``).
    :param min_bars: rows each instrument must keep after the feature warm-up.
    :param name: the instrument of a single file without a symbol column (default: its stem).
    :param read_csv_kwargs: extra ``pandas.read_csv`` keywords for CSV files, e.g.
        ``{"sep": ";", "decimal": ","}``.
    :param metadata: extra entries for ``MarketData.metadata``.
    :param prices: ``"adjusted"``: the close is the file's adjusted close (``Adj Close``) and
        open, high and low are scaled by ``Adj Close / Close`` (dividends and splits; volume as
        in the file); ``"raw"``: the close as in the file; None (the default): adjusted where
        the file has an adjusted close, else raw. ``MarketData.price_basis`` says which.
    :param sort: sort bars that are out of order by time (a newest-first file, whose
        timestamps never rise, is read oldest first without it).
    :param duplicates: ``"first"`` or ``"last"``: keep that bar (in file order) of a repeated
        timestamp; None (the default) refuses a repeated timestamp.
    :param skip_empty: leave out bars with no price at all (holidays or gaps of an export);
        by default they are refused.
    :raises DataError: on anything the file does not say clearly; the message names the fix.
    """
    table = read_bar_table(
        paths,
        date_format=date_format,
        timestamp_unit=timestamp_unit,
        time_column=time_column,
        symbol_column=symbol_column,
        columns=columns,
        fill_volume=fill_volume,
        features=features,
        name=name,
        read_csv_kwargs=read_csv_kwargs,
        prices=prices,
        sort=sort,
        duplicates=duplicates,
        skip_empty=skip_empty,
        extra_features=extra_features,
    )
    return table.build(
        MarketData.from_dataframe,
        features=features,
        min_bars=min_bars,
        metadata=metadata,
        extra_features=extra_features,
    )
