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
- ``columns`` maps the OHLCV fields to the file's names, e.g. ``{"volume": "Vol."}``;
- a file with an adjusted close (``Adj Close``) is read adjusted unless ``prices="raw"``: the
  close is the adjusted one and open, high and low are scaled by ``Adj Close / Close`` (volume
  as in the file); ``BarTable.price_basis`` (``MarketData.price_basis``) says which close it is;
- each instrument's bars must rise in time: newest-first bars are read oldest first (told in
  ``notes``), other disorder needs ``sort=True``, a repeated timestamp ``duplicates="first"`` or
  ``"last"``, and a bar with no price at all ``skip_empty=True``.

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
from gpu_trading_env.data.validation import OHLCV, PRICES

__all__ = ["BarTable", "DataError", "read_bar_table"]

T = TypeVar("T")

# prices: None reads the adjusted close where the file has one, else the close.
PRICE_BASES = (None, "adjusted", "raw")
# duplicates: None refuses a repeated timestamp; "first" / "last" keep that bar of the file.
DUPLICATE_RULES = (None, "first", "last")
# Names of an adjusted close (Yahoo: "Adj Close"), matched after lower-casing.
ADJUSTED_CLOSE_NAMES = ("adj close", "adj_close", "adjclose", "adj. close", "adjusted close")


@dataclass(frozen=True)
class BarTable:
    """The bars of one or several files in one table.

    :param table: columns ``timestamp``, ``instrument``, the OHLCV fields and any named feature
        columns; rows in file order, file after file.
    :param files: the files read, in order.
    :param frames: each file with its rows of ``table``, indexed by their row in the file (to
        name a file's line in an error).
    :param price_basis: which close the prices are (``MarketData.price_basis``).
    :param notes: what was done to the rows, e.g. a newest-first file read oldest first.
    """

    table: pd.DataFrame
    files: tuple[Path, ...]
    frames: tuple[tuple[Path, pd.DataFrame], ...]
    price_basis: str = ""
    notes: tuple[str, ...] = ()

    def build(
        self,
        from_dataframe: Callable[..., T],
        *,
        features: str | Sequence[str] = "builtin",
        min_bars: int = 2,
        metadata: Mapping[str, Any] | None = None,
        extra_features: Sequence[str] | None = None,
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
                extra_features=extra_features,
                min_bars=min_bars,
                metadata={
                    "source": "file",
                    "paths": [str(p) for p in files],
                    "price_basis": self.price_basis,
                    "notes": list(self.notes),
                    **(metadata or {}),
                },
            )
        except ValueError as exc:
            # from_dataframe counts rows of the combined table from 0; a file's line is its row
            # in the file (the frame's index) + 2.
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
    prices: str | None = None,
    sort: bool = False,
    duplicates: str | None = None,
    skip_empty: bool = False,
    extra_features: Sequence[str] | None = None,
) -> BarTable:
    """The bars of one or several CSV / Parquet files in one table (the options are
    :func:`~gpu_trading_env.data.loaders.load_bars`').

    :raises DataError: on anything the file does not say clearly; the message names the fix.
    """
    files = [Path(paths)] if isinstance(paths, str | Path) else [Path(p) for p in paths]
    feature_columns, mapping = _checked_options(
        files, name, features, timestamp_unit, columns, fill_volume, prices, duplicates
    )
    if extra_features is not None:
        # The trader's own columns are read as the named feature columns are (line, column).
        extra = [extra_features] if isinstance(extra_features, str) else extra_features
        feature_columns = [*(feature_columns or []), *map(str, extra)]
    rows = _RowRules(prices, sort, duplicates, skip_empty, fill_volume, feature_columns)
    frames, bases, notes = [], [], []
    for path in files:
        df = _read(path, read_csv_kwargs)
        frame, basis = _normalise(
            df, path, date_format, timestamp_unit, time_column, symbol_column, mapping, rows, notes
        )
        del df  # the file's own table: free it before the next file is read
        if "instrument" not in frame.columns:
            # A categorical: one byte a row, not a string.
            label = path.stem if name is None else str(name)
            frame.insert(
                0, "instrument", pd.Categorical.from_codes(np.zeros(len(frame), np.int8), [label])
            )
        frame = _ordered(frame, path, rows, notes)
        frames.append((path, frame))
        bases.append(basis)
    _refuse_shared_instruments(frames)
    if len(frames) > 1:
        df = pd.concat([f for _, f in frames], ignore_index=True)
    else:
        df = frames[0][1].reset_index(drop=True)
    if len(set(bases)) == 1:
        basis = bases[0]
    else:
        basis = "; ".join(f"{p.name}: {b}" for p, b in zip(files, bases, strict=True))
    return BarTable(df, tuple(files), tuple(frames), basis, tuple(notes))


@dataclass(frozen=True)
class _RowRules:
    """The options of :func:`read_bar_table` that decide which rows and prices are read."""

    prices: str | None
    sort: bool
    duplicates: str | None
    skip_empty: bool
    fill_volume: float | None
    feature_columns: list[str] | None


def _checked_options(
    files: list[Path],
    name: str | None,
    features: str | Sequence[str],
    timestamp_unit: str | None,
    columns: Mapping[str, str] | None,
    fill_volume: float | None,
    prices: str | None = None,
    duplicates: str | None = None,
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
    if prices not in PRICE_BASES:
        raise DataError(f"prices = {prices!r} is invalid: allowed is one of {PRICE_BASES}")
    if duplicates not in DUPLICATE_RULES:
        raise DataError(
            f"duplicates = {duplicates!r} is invalid: allowed is one of {DUPLICATE_RULES}"
        )
    return feature_columns, mapping


def _ordered(frame: pd.DataFrame, path: Path, rows: _RowRules, notes: list[str]) -> pd.DataFrame:
    """``frame`` with each instrument's bars oldest first and one bar per timestamp.

    A newest-first instrument (timestamps never rising) is read oldest first; other disorder
    needs ``rows.sort``, a repeated timestamp ``rows.duplicates``; each change is told in
    ``notes``. Otherwise a DataError names the two lines and the option.
    """
    ts = frame["timestamp"].to_numpy().view(np.int64)
    codes, names = pd.factorize(frame["instrument"])  # codes: no Python string per row
    groups = (
        [np.arange(len(frame))]
        if len(names) == 1
        else [np.flatnonzero(codes == k) for k in range(len(names))]
    )
    parts, changed = [], False
    for name, idx in zip(names, groups, strict=True):
        t = ts[idx]
        down = t[1:] < t[:-1]
        label = f"{path}" + (f", instrument {name!r}" if len(names) > 1 else "")
        if down.any():
            if not (t[1:] <= t[:-1]).all() and not rows.sort:
                i = int(np.argmax(down))
                raise DataError(
                    f"{label}, line {_line(frame, idx[i + 1])}: timestamp "
                    f"{pd.Timestamp(t[i + 1])} is earlier than line {_line(frame, idx[i])}'s "
                    f"({pd.Timestamp(t[i])}): the bars are out of order; pass --sort (sort=True) "
                    "to sort them by time"
                )
            newest_first = bool((t[1:] <= t[:-1]).all())
            what = "newest-first bars read oldest first" if newest_first else "bars sorted by time"
            notes.append(f"{label}: {what}")
            idx = idx[np.argsort(t, kind="stable")]  # equal timestamps keep their file order
            t = ts[idx]
            changed = True
        same = t[1:] == t[:-1]
        if same.any():
            if rows.duplicates is None:
                i = int(np.argmax(same))
                raise DataError(
                    f"{label}, line {_line(frame, idx[i + 1])}: repeated timestamp "
                    f"{pd.Timestamp(t[i])} (also line {_line(frame, idx[i])}): pass --duplicates "
                    "first or --duplicates last (duplicates='first' / 'last') to keep that bar "
                    "of each timestamp"
                )
            keep = np.r_[True, ~same] if rows.duplicates == "first" else np.r_[~same, True]
            n = int(same.sum())
            notes.append(
                f"{label}: {n} bar{'s' * (n != 1)} of a repeated timestamp left out "
                f"(--duplicates {rows.duplicates})"
            )
            idx = idx[keep]
            changed = True
        parts.append(idx)
    return frame.iloc[np.concatenate(parts)] if changed else frame


def _line(frame: pd.DataFrame, row: int) -> int:
    """The file's line of ``frame``'s row ``row`` (its index is the row in the file)."""
    return int(frame.index[row]) + 2


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
            f"{path}: {what} feature column {column!r}; the file has {list(map(str, df.columns))}: "
            "name one of them (--features COL, features= or extra_features=)"
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
    rows: _RowRules,
    notes: list[str],
) -> tuple[pd.DataFrame, str]:
    """``(frame, price_basis)``: a frame with columns timestamp (datetime64), [instrument], open,
    high, low, close, volume and the named feature columns, indexed by the row in the file."""
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
        out["instrument"] = sym.astype(str).astype("category").array
    if "volume" not in lower and "volume" not in mapping and rows.fill_volume is not None:
        # A file with no volume at all (FX, an index) takes --fill-volume as empty cells do.
        df, lower = df.assign(volume=np.nan), {**lower, "volume": "volume"}
        notes.append(f"{path}: no volume column: every volume is {rows.fill_volume:g}")
    cols = {field: _field_column(df, lower, path, mapping, field) for field in OHLCV}
    adj, raw_close = _adjusted_close(df, lower, path, mapping, rows.prices, cols["close"])
    if adj is not None:
        cols["close"] = raw_close  # read the close the adjusted one scales (its ratio's base)
    prices = [cols[f] for f in PRICES] + ([adj] if adj is not None else [])
    empty = np.logical_and.reduce([df[c].isna().to_numpy() for c in prices])
    skip = empty if rows.skip_empty else None
    for field in OHLCV:
        values = df[cols[field]]
        if field == "volume" and rows.fill_volume is not None:
            values = values.where(values.notna(), rows.fill_volume)
        out[field] = _numbers(values, path, cols[field], _missing_hint(field, empty), skip)
    for column in rows.feature_columns or ():
        out[column] = _numbers(df[_feature_column(df, path, column)], path, column, "", skip)
    adjusted = None if adj is None else _numbers(df[adj], path, adj, "", skip)
    if skip is not None and skip.any():
        n = int(skip.sum())
        notes.append(f"{path}: {n} bar{'s' * (n != 1)} with no price left out (--skip-empty)")
        out = out[~skip]
        adjusted = None if adjusted is None else adjusted[~skip]
    if adjusted is None:
        unused = _adjusted_name(lower)
        return out, f"raw: close is {str(cols['close'])!r} as in the file" + (
            f" (its {str(unused)!r} unused: --prices raw)" if unused is not None else ""
        )
    _adjust(out, adjusted, path, adj, raw_close)
    return out, (
        f"adjusted: close is {str(adj)!r}; open, high and low scaled by {str(adj)!r} / "
        f"{str(raw_close)!r}; volume as in the file"
    )


def _field_column(
    df: pd.DataFrame, lower: dict[str, Any], path: Path, mapping: dict[str, str], field: str
) -> Any:
    """The file's column of OHLCV ``field``: ``mapping``'s, else the one so named (any case)."""
    name = mapping.get(field)
    if name is not None:
        if name not in df.columns:
            raise DataError(
                f"{path}: no column {name!r} for {field} (--column {field}={name}); "
                f"the file has {list(map(str, df.columns))}"
            )
        return name
    col = lower.get(field)
    if col is None:
        raise DataError(
            f"{path}: no {field!r} column among {list(map(str, df.columns))}: "
            f"pass --column {field}=NAME"
            + (", or --fill-volume 0 if the file has none (fill_volume=0)" * (field == "volume"))
        )
    return col


def _adjusted_name(lower: dict[str, Any]) -> Any:
    """The file's adjusted-close column (``Adj Close`` and the like), or None."""
    return next((lower[n] for n in ADJUSTED_CLOSE_NAMES if n in lower), None)


def _adjusted_close(
    df: pd.DataFrame,
    lower: dict[str, Any],
    path: Path,
    mapping: dict[str, str],
    prices: str | None,
    close_col: Any,
) -> tuple[Any, Any]:
    """``(adjusted close column, raw close column)`` when the prices are adjusted, else
    ``(None, None)``: ``prices="adjusted"``, or by default a file with an adjusted close (a
    ``--column close=...`` naming it counts as asking for it)."""
    if prices == "raw":
        return None, None
    mapped = mapping.get("close")
    if mapped is not None and str(mapped).strip().lower() in ADJUSTED_CLOSE_NAMES:
        adj, raw = mapped, lower.get("close")
    else:
        adj, raw = _adjusted_name(lower), close_col
        if prices is None and mapped is not None:
            return None, None  # --column close=NAME of an unadjusted close: read as it is
    if adj is None or raw is None:
        if prices is None:
            return None, None
        raise DataError(
            f"{path}: --prices adjusted (prices='adjusted') needs an adjusted close (e.g. "
            f"'Adj Close') and the close it adjusts; the file has {list(map(str, df.columns))}: "
            "pass --prices raw"
        )
    return adj, raw


def _adjust(out: pd.DataFrame, adjusted: np.ndarray, path: Path, adj: Any, raw: Any) -> None:
    """Scale open, high and low of ``out`` by ``adjusted / close`` and make ``adjusted`` the
    close, in place; volume stays as in the file."""
    close = out["close"].to_numpy()
    bad = ~((close > 0) & np.isfinite(close) & (adjusted > 0) & np.isfinite(adjusted))
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(
            f"{path}, line {int(out.index[i]) + 2}: column {str(raw)!r} {close[i]} and column "
            f"{str(adj)!r} {adjusted[i]} give no adjustment ratio (allowed: both finite and "
            "> 0); fix the line, or pass --prices raw to read the close as it is"
        )
    ratio = adjusted / close
    o, h, lo = (out[c].to_numpy() for c in ("open", "high", "low"))
    o2, h2, l2 = (np.where(x == close, adjusted, x * ratio) for x in (o, h, lo))
    # Rounding of the products must not break high >= max(open, close) and low <= min(...)
    # where the file's bar keeps them (a bar that breaks them is still refused, naming it).
    h2 = np.where(h >= np.maximum(o, close), np.maximum(h2, np.maximum(o2, adjusted)), h2)
    l2 = np.where(lo <= np.minimum(o, close), np.minimum(l2, np.minimum(o2, adjusted)), l2)
    out["open"], out["high"], out["low"], out["close"] = o2, h2, l2, adjusted


def _missing_hint(field: str, empty: np.ndarray) -> Callable[[int], str]:
    """The fix named after a missing value of ``field`` at row ``i``."""

    def hint(i: int) -> str:
        if empty[i]:
            return (
                "; the bar has no prices (a holiday or gap of the export): pass --skip-empty "
                "(skip_empty=True) to leave out such bars"
            )
        if field == "volume":
            return "; pass --fill-volume 0 to count missing volumes as 0 (fill_volume=0)"
        return "; fill in the value or delete the line"

    return hint


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


def _numbers(
    col: pd.Series,
    path: Path,
    name: Any,
    hint: str | Callable[[int], str] = "",
    skip: np.ndarray | None = None,
) -> np.ndarray:
    """float64 [N] of a column; a missing value raises DataError naming its line, plus ``hint``
    (of the row, if a function); rows ``skip`` marks may miss their value (they are NaN)."""
    missing = col.isna().to_numpy()
    if skip is not None:
        missing = missing & ~skip
    if missing.any():
        i = int(np.argmax(missing))
        tail = hint(i) if callable(hint) else hint
        raise DataError(
            f"{path}, line {i + 2}, column {str(name)!r}: no value (empty, NaN or N/A){tail}"
        )
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        return col.to_numpy(dtype=np.float64, na_value=np.nan)
    conv = pd.to_numeric(col, errors="coerce")
    bad = (pd.isna(conv) & ~pd.isna(col)).to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(
            f"{path}, line {i + 2}, column {str(name)!r}: {col.iloc[i]!r} is not a number"
            f"{_number_fix(str(col.iloc[i]))}"
        )
    return conv.to_numpy(dtype=np.float64, na_value=np.nan)


def _number_fix(text: str) -> str:
    """The option that reads ``text`` as a number, where one does; else the edit that fixes it."""
    text = text.strip()
    if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", text):
        return "; pass --thousands ',' (read_csv_kwargs={'thousands': ','})"
    if re.fullmatch(r"[-+]?\d{1,3}(\.\d{3})+(,\d+)?", text):
        return (
            "; pass --thousands . --decimal ',' (read_csv_kwargs={'thousands': '.', "
            "'decimal': ','})"
        )
    if re.fullmatch(r"[-+]?\d+,\d+", text):
        return "; pass --decimal ',' (read_csv_kwargs={'decimal': ','})"
    return ": write a plain number there (such as 1234.5), or delete that line"


def _with_lines(message: str, frames: list[tuple[Path, pd.DataFrame]]) -> str:
    """Rewrite 'row N' of the combined table as 'line L' (of file F when there are several)."""
    ends = np.cumsum([len(f) for _, f in frames])

    def line(m: re.Match) -> str:
        row = int(m.group(1))
        k = int(np.searchsorted(ends, row, side="right"))
        local = int(frames[k][1].index[row - (int(ends[k - 1]) if k else 0)])
        return f"line {local + 2}" if len(frames) == 1 else f"{frames[k][0]} line {local + 2}"

    return re.sub(r"\brow (\d+)\b", line, message)
