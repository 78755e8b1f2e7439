"""Bars from the files people have: CSV or Parquet exports of brokers, exchanges and Yahoo.

``read_bar_table`` is the one reader of bar files: ``load_bars``, ``MarketData.from_csv`` /
``from_parquet``, ``make_vec(data=path)`` (``TradingVectorEnv(data=path)``) and the command line
all read files through it, with one set of column rules. It reads one or several files into one
table of bars, which :meth:`BarTable.build` turns into a ``MarketData``:

- the timestamps come from a column or index named like time or date, in any letter case
  (``Date``, ``Time``, ``timestamp``, ``Open time``, ``Gmt time``), or the one ``time_column``;
- text timestamps in ISO order parse as they are; ``d.m.Y`` / ``m/d/Y`` style dates are read
  day-first or month-first when a field above 12 says which, and refused otherwise with the
  ``--date-format`` to pass; ``date_format`` always wins;
- numeric timestamps are epoch seconds, milliseconds, microseconds or nanoseconds by their
  magnitude (``timestamp_unit`` overrides), and refused when they are none of these;
- several instruments come from a symbol column (long format: ``instrument``, ``symbol``,
  ``ticker``, ``asset`` or ``pair``) or from several files (each named after its file);
- ``columns`` maps the OHLCV fields to the file's names, e.g. ``{"close": "Adj Close"}``.

Every error is a ``DataError`` (a ``ValueError``) naming the file, and the line and column where
the file has them. Timestamp parsing is ``gpu_trading_env.data.timestamps``.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from gpu_trading_env.data.frames import (
    INSTRUMENT_CANDIDATES,
    TIMESTAMP_CANDIDATES,
    check_separator,
)
from gpu_trading_env.data.timestamps import DataError, parse_timestamps
from gpu_trading_env.data.validation import OHLCV

__all__ = ["BarTable", "DataError", "read_bar_table"]

T = TypeVar("T")


@dataclass(frozen=True)
class BarTable:
    """The bars of one or several files in one table.

    :param table: columns ``timestamp``, ``instrument``, the OHLCV fields and any named feature
        columns; rows in file order, file after file.
    :param files: the files read, in order.
    :param frames: each file with its rows of ``table`` (to name a file's line in an error).
    """

    table: pd.DataFrame
    files: tuple[Path, ...]
    frames: tuple[tuple[Path, pd.DataFrame], ...]

    def build(
        self,
        from_dataframe: Callable[..., T],
        *,
        features: str | Sequence[str] = "builtin",
        min_bars: int = 2,
        metadata: Mapping[str, Any] | None = None,
    ) -> T:
        """``from_dataframe(table, ...)`` (``MarketData.from_dataframe``), its errors as a
        DataError naming the file and line."""
        files = self.files
        where = str(files[0]) if len(files) == 1 else ", ".join(map(str, files))
        try:
            return from_dataframe(
                self.table,
                timestamp_column="timestamp",
                instrument_column="instrument",
                features=features,
                min_bars=min_bars,
                metadata={"source": "file", "paths": [str(p) for p in files], **(metadata or {})},
            )
        except ValueError as exc:
            # from_dataframe counts rows of the combined table from 0; a file's line is row + 2.
            raise DataError(f"{where}: {_with_lines(str(exc), list(self.frames))}") from None


def read_bar_table(
    paths: str | Path | Sequence[str | Path],
    *,
    date_format: str | None = None,
    timestamp_unit: str | None = None,
    time_column: str | None = None,
    symbol_column: str | None = None,
    columns: Mapping[str, str] | None = None,
    fill_volume: float | None = None,
    features: str | Sequence[str] = "builtin",
    name: str | None = None,
    read_csv_kwargs: Mapping[str, Any] | None = None,
) -> BarTable:
    """The bars of one or several CSV / Parquet files in one table (the options are
    :func:`~gpu_trading_env.data.loaders.load_bars`').

    :raises DataError: on anything the file does not say clearly; the message names the fix.
    """
    files = [Path(paths)] if isinstance(paths, str | Path) else [Path(p) for p in paths]
    feature_columns, mapping = _checked_options(
        files, name, features, timestamp_unit, columns, fill_volume
    )
    frames = []
    for path in files:
        df = _read(path, read_csv_kwargs)
        frame = _normalise(
            df, path, date_format, timestamp_unit, time_column, symbol_column, mapping, fill_volume
        )
        for column in feature_columns or ():
            frame[column] = _numbers(df[_feature_column(df, path, column)], path, column)
        if "instrument" not in frame.columns:
            frame.insert(0, "instrument", path.stem if name is None else str(name))
        frames.append((path, frame))
    _refuse_shared_instruments(frames)
    df = pd.concat([f for _, f in frames], ignore_index=True) if len(frames) > 1 else frames[0][1]
    return BarTable(df, tuple(files), tuple(frames))


def _checked_options(
    files: list[Path],
    name: str | None,
    features: str | Sequence[str],
    timestamp_unit: str | None,
    columns: Mapping[str, str] | None,
    fill_volume: float | None,
) -> tuple[list[str] | None, dict[str, str]]:
    """``(feature_columns, mapping)``: the named feature columns (None for the built-in
    features) and the lower-cased ``{field: column}`` mapping, once :func:`read_bar_table`'s options
    are checked (DataError naming the first bad one)."""
    if not files:
        raise DataError("no data file given")
    if name is not None and len(files) > 1:
        raise DataError(
            f"name = {name!r} is invalid with {len(files)} files: allowed is one file (several "
            "are named after their files or their symbol columns)"
        )
    feature_columns = None if isinstance(features, str) else [str(c) for c in features]
    if timestamp_unit is not None and timestamp_unit not in ("s", "ms", "us", "ns"):
        raise DataError(f"timestamp unit {timestamp_unit!r} is invalid: allowed is s, ms, us, ns")
    mapping = {k.lower(): v for k, v in (columns or {}).items()}
    bad_fields = sorted(set(mapping) - set(OHLCV))
    if bad_fields:
        raise DataError(f"column mapping names {bad_fields}: allowed fields are {list(OHLCV)}")
    if fill_volume is not None and not (np.isfinite(fill_volume) and fill_volume >= 0):
        raise DataError(f"fill_volume = {fill_volume!r} is invalid: allowed is a number >= 0")
    return feature_columns, mapping


def _refuse_shared_instruments(frames: list[tuple[Path, pd.DataFrame]]) -> None:
    """DataError when two files hold bars of the same instrument name."""
    seen: dict[str, Path] = {}
    for path, frame in frames:
        for name in pd.unique(frame["instrument"]):
            if name in seen and seen[name] != path:
                raise DataError(
                    f"{path}: instrument {name!r} is also in {seen[name]}; give the files "
                    "distinct names or symbol columns"
                )
            seen[name] = path


def _feature_column(df: pd.DataFrame, path: Path, column: str) -> Any:
    """The file's column of feature ``column`` (exact name first, then any letter case)."""
    if column in df.columns:
        return column
    hits = [c for c in df.columns if str(c).strip().lower() == column.strip().lower()]
    if len(hits) != 1:
        what = "no" if not hits else f"an ambiguous ({hits})"
        raise DataError(
            f"{path}: {what} feature column {column!r}; the file has {list(map(str, df.columns))}"
        )
    return hits[0]


def _read(path: Path, read_csv_kwargs: Mapping[str, Any] | None = None) -> pd.DataFrame:
    if not path.exists():
        raise DataError(f"{path}: no such file")
    if path.is_dir():
        raise DataError(f"{path}: is a folder, not a CSV or Parquet file")
    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            if read_csv_kwargs:
                raise DataError(f"{path}: read_csv_kwargs apply to CSV files, not Parquet")
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise DataError(
                    f"{path}: reading Parquet needs pyarrow (pip install 'gpu-trading-env[parquet]')"
                ) from None
            df = _read_parquet(path)
            if isinstance(df.index, pd.DatetimeIndex) and df.index.name is None:
                df.index.name = "timestamp"  # a stored index holds the timestamps
            if not isinstance(df.index, pd.RangeIndex):
                df = df.reset_index()
            return df
        if suffix in (".csv", ".txt") or path.name.lower().endswith(".csv.gz"):
            df = pd.read_csv(path, **(read_csv_kwargs or {}))
            check_separator(df, str(path))
            return df
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        # A truncated or mislabelled .gz fails inside the decompressor, which names no file.
        raise DataError(
            f"{path}: not a readable gzip-compressed CSV ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})"
        ) from None
    raise DataError(f"{path}: unknown file type {suffix!r}: allowed is .csv, .csv.gz or .parquet")


def _read_parquet(path: Path) -> pd.DataFrame:
    """The table of a Parquet file; duplicate column names and unreadable files raise
    ``DataError`` naming the file (pyarrow's own messages name neither)."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except (pyarrow.ArrowException, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"{path}: not a readable Parquet file ({first})") from None
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise DataError(
            f"{path}: duplicate column names {dupes} in the Parquet file: allowed is one "
            "column per name (rename or drop the copies)"
        )
    try:
        return pd.read_parquet(path)
    except (pyarrow.ArrowException, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"{path}: not a readable Parquet file ({first})") from None


def _normalise(
    df: pd.DataFrame,
    path: Path,
    date_format: str | None,
    unit: str | None,
    time_column: str | None,
    symbol_column: str | None,
    mapping: dict[str, str],
    fill_volume: float | None = None,
) -> pd.DataFrame:
    """A frame with columns timestamp (datetime64), [instrument], open, high, low, close, volume."""
    if len(df) == 0:
        raise DataError(f"{path}: has a header but no rows")
    if not isinstance(df.index, pd.RangeIndex):
        df = df.reset_index()
    lower = {str(c).strip().lower(): c for c in df.columns}
    time_col = _pick(
        df, lower, path, time_column, TIMESTAMP_CANDIDATES, "timestamp", "--time-column"
    )
    if time_col is None:
        guess = [c for c in df.columns if re.search(r"time|date", str(c), re.IGNORECASE)]
        if len(guess) == 1:
            time_col = guess[0]
        else:
            raise DataError(
                f"{path}: no timestamp column among {list(map(str, df.columns))}: "
                "pass --time-column NAME"
            )
    out = pd.DataFrame(
        {"timestamp": parse_timestamps(df[time_col], date_format, unit, f"{path}", time_col)}
    )
    sym_col = _pick(
        df, lower, path, symbol_column, INSTRUMENT_CANDIDATES, "symbol", "--symbol-column"
    )
    if sym_col is not None:
        sym = df[sym_col]
        if sym.isna().any():
            i = int(np.argmax(sym.isna().to_numpy()))
            raise DataError(f"{path}, line {i + 2}, column {sym_col!r}: no instrument name")
        out["instrument"] = sym.astype(str).to_numpy()
    for field in OHLCV:
        name = mapping.get(field)
        if name is not None:
            if name not in df.columns:
                raise DataError(
                    f"{path}: no column {name!r} for {field} (--column {field}={name}); "
                    f"the file has {list(map(str, df.columns))}"
                )
            col = name
        else:
            col = lower.get(field)
            if col is None:
                raise DataError(
                    f"{path}: no {field!r} column among {list(map(str, df.columns))}: "
                    f"pass --column {field}=NAME"
                )
        values = df[col]
        hint = ""
        if field == "volume":
            if fill_volume is not None:
                values = values.where(values.notna(), fill_volume)
            hint = "; pass --fill-volume 0 to count missing volumes as 0 (fill_volume=0)"
        out[field] = _numbers(values, path, col, hint)
    return out


def _pick(
    df: pd.DataFrame,
    lower: dict[str, Any],
    path: Path,
    given: str | None,
    names: Sequence[str],
    what: str,
    option: str,
) -> Any:
    if given is not None:
        if given in df.columns:
            return given
        if given.strip().lower() in lower:
            return lower[given.strip().lower()]
        raise DataError(
            f"{path}: no {what} column {given!r} ({option}); the file has "
            f"{list(map(str, df.columns))}"
        )
    for name in names:
        if name in lower:
            return lower[name]
    return None


def _numbers(col: pd.Series, path: Path, name: Any, hint: str = "") -> np.ndarray:
    """float64 [N] of a column; a missing value raises DataError naming its line, plus ``hint``."""
    missing = col.isna().to_numpy()
    if missing.any():
        i = int(np.argmax(missing))
        raise DataError(
            f"{path}, line {i + 2}, column {str(name)!r}: no value (empty, NaN or N/A){hint}"
        )
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        return col.to_numpy(dtype=np.float64, na_value=np.nan)
    conv = pd.to_numeric(col, errors="coerce")
    bad = (pd.isna(conv) & ~pd.isna(col)).to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(
            f"{path}, line {i + 2}, column {str(name)!r}: {col.iloc[i]!r} is not a number"
        )
    return conv.to_numpy(dtype=np.float64, na_value=np.nan)


def _with_lines(message: str, frames: list[tuple[Path, pd.DataFrame]]) -> str:
    """Rewrite 'row N' of the combined table as 'line L' (of file F when there are several)."""
    ends = np.cumsum([len(f) for _, f in frames])

    def line(m: re.Match) -> str:
        row = int(m.group(1))
        k = int(np.searchsorted(ends, row, side="right"))
        local = row - (int(ends[k - 1]) if k else 0)
        return f"line {local + 2}" if len(frames) == 1 else f"{frames[k][0]} line {local + 2}"

    return re.sub(r"\brow (\d+)\b", line, message)
