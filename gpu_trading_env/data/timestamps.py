"""Timestamps of bar files: text in ISO, day-first or month-first order, or epoch numbers.

``parse_timestamps`` turns a column into datetime64[ns] (naive UTC) or raises ``DataError`` with
the line (``row + 2`` of a CSV with a header) and the command-line option that fixes it:

- text in ISO order (``2017-01-01 22:00``) parses as it is;
- ``dd.mm.yyyy``-style dates (any of ``.``, ``/``, ``-``; two- or four-digit years; an optional
  time of day) are read day-first or month-first when a field above 12 says which, and refused
  otherwise, naming the two ``--date-format`` values to choose from;
- numbers are epoch seconds, milliseconds, microseconds or nanoseconds by their magnitude
  (``unit`` overrides), and refused when they are none of these;
- ``date_format`` always wins;
- a timestamp outside datetime64[ns]'s range (1677-09-22 to 2262-04-11) is refused, naming it;
- text with a UTC offset (``2017-01-01 22:00+01:00``, ``...Z``) is converted to UTC; a column that
  mixes such timestamps with ones without an offset is refused, naming a line of each, since
  the naive ones would silently be taken as UTC and shift by hours.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["DataError", "day_month_format", "parse_timestamps", "refuse_mixed_zones"]

# Epoch magnitudes for dates between 1973 and 2286: seconds ~1e9, ms ~1e12, us ~1e15, ns ~1e18.
_EPOCH_UNITS = (("s", 1e8, 1e10), ("ms", 1e11, 1e13), ("us", 1e14, 1e16), ("ns", 1e17, 1e19))
_DMY = re.compile(r"^\s*(\d{1,2})([./-])(\d{1,2})\2(\d{4}|\d{2})(.*)$")
# A time of day followed by a UTC offset or Z: "22:00+01:00", "22:00:00.5-0500", "22:00Z".
# A plain pattern (no flags), so that pyarrow's regex engine runs it on Arrow strings.
_ZONED = r"\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?\s*(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$"
_TIME_PARTS = ("", " %H:%M", " %H:%M:%S", " %H:%M:%S.%f", "T%H:%M:%S", "T%H:%M:%S.%f")
# datetime64[ns]'s range, whole days (the arrays of MarketData are nanosecond timestamps).
TS_MIN = pd.Timestamp("1677-09-22")
TS_MAX = pd.Timestamp("2262-04-11")
_NS_PER = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}


class DataError(ValueError):
    """Bad input data; the message names the file and, where it can, the line and the column."""


def parse_timestamps(
    raw: pd.Series,
    date_format: str | None = None,
    unit: str | None = None,
    where: str = "data",
    column: Any = "timestamp",
) -> np.ndarray:
    """datetime64[ns] [len(raw)], naive UTC, from text or epoch numbers (see the module doc)."""
    label = f"{where}, column {str(column)!r}"
    if pd.api.types.is_datetime64_any_dtype(raw):
        idx = pd.DatetimeIndex(raw)
        return _naive_utc(idx, raw, label)
    if pd.api.types.is_numeric_dtype(raw) and not pd.api.types.is_bool_dtype(raw):
        if date_format is not None:
            return _with_format(raw.astype("Int64").astype(str), date_format, label)
        return _epoch(raw, unit, label)
    text = raw.astype("string").str.strip()
    missing = text.isna().to_numpy() | (text == "").fillna(True).to_numpy()
    if missing.any():
        i = int(np.argmax(missing))
        raise DataError(f"{label}, line {i + 2}: no timestamp")
    if date_format is not None:
        return _with_format(text, date_format, label)
    if text.str.fullmatch(r"-?\d+(\.\d+)?").all():
        return _epoch(pd.to_numeric(text), unit, label)
    fmt = day_month_format(text, label)
    if fmt is not None:
        return _with_format(text, fmt, label)
    refuse_mixed_zones(text, label)
    parsed = pd.to_datetime(text, errors="coerce", format="ISO8601", utc=True)
    bad = parsed.isna().to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(
            f"{label}, line {i + 2}: cannot read the timestamp {text.iloc[i]!r}; "
            "pass --date-format, e.g. --date-format '%Y-%m-%d %H:%M'"
        )
    return _naive_utc(pd.DatetimeIndex(parsed), raw, label)


def refuse_mixed_zones(
    text: pd.Series, label: str, position: Callable[[int], str] = lambda i: f"line {i + 2}"
) -> None:
    """Raise DataError when some timestamps carry a UTC offset and others do not.

    :param text: the timestamps as text, one per row.
    :param position: names row ``i`` in the message (a CSV's line by default).
    """
    zoned = text.astype("string").str.contains(_ZONED).fillna(False).to_numpy(dtype=bool)
    if zoned.any() and not zoned.all():
        i, j = int(np.argmax(zoned)), int(np.argmax(~zoned))
        raise DataError(
            f"{label}: {position(i)} has a UTC offset ({str(text.iloc[i])!r}) but {position(j)} "
            f"has none ({str(text.iloc[j])!r}); mixed naive and zone-aware timestamps are "
            "ambiguous (the naive ones would be taken as UTC): give every timestamp an offset, "
            "or none"
        )


def _naive_utc(idx: pd.DatetimeIndex, raw: pd.Series, label: str) -> np.ndarray:
    if idx.hasnans:
        i = int(np.argmax(pd.isna(idx)))
        raise DataError(f"{label}, line {i + 2}: no timestamp")
    if idx.tz is not None:
        idx = idx.tz_convert("UTC").tz_localize(None)
    _check_range(np.asarray((idx < TS_MIN) | (idx > TS_MAX)), raw, label)
    return idx.as_unit("ns").to_numpy()


def _check_range(bad: np.ndarray, raw: Any, label: str) -> None:
    """DataError naming the first timestamp outside [TS_MIN, TS_MAX] (``bad`` marks them)."""
    if bad.any():
        i = int(np.argmax(bad))
        value = raw.iloc[i]
        shown = repr(value) if isinstance(value, str) else str(value)
        raise DataError(
            f"{label}, line {i + 2}: the timestamp {shown} is outside the allowed range "
            f"{TS_MIN.date()} to {TS_MAX.date()} (datetime64[ns]): fix the value, or pass "
            "--timestamp-unit / --date-format if it is read in the wrong unit or order"
        )


def _epoch(values: pd.Series, unit: str | None, label: str) -> np.ndarray:
    v = values.to_numpy(dtype=np.float64, na_value=np.nan)
    if np.isnan(v).any():
        i = int(np.argmax(np.isnan(v)))
        raise DataError(f"{label}, line {i + 2}: no timestamp")
    if unit is None:
        mag = float(np.median(np.abs(v)))
        unit = next((u for u, lo, hi in _EPOCH_UNITS if lo <= mag < hi), None)
        if unit is None:
            raise DataError(
                f"{label}: numbers like {values.iloc[0]!r} are not epoch seconds, ms, us or ns: "
                "pass --timestamp-unit s|ms|us|ns, or --date-format (e.g. '%Y%m%d')"
            )
    ns = v * _NS_PER[unit]
    _check_range((ns < TS_MIN.value) | (ns > TS_MAX.value), values, label)
    return pd.to_datetime(v, unit=unit).as_unit("ns").to_numpy()


def day_month_format(text: pd.Series, label: str) -> str | None:
    """The explicit format of ``dd.mm.yyyy``-style dates, or None if they are not of that kind.

    The order is read from the data: a first field above 12 means day-first, a second field
    above 12 month-first; neither (or both) is refused with the two formats to choose from.
    """
    if len(text) == 0 or not _DMY.match(str(text.iloc[0])):
        return None  # not of that kind (checked on one value: extract is slow on millions)
    parts = text.str.extract(_DMY)
    if parts[0].isna().any():
        return None
    first = parts[0].astype(int)
    second = parts[2].astype(int)
    sep = parts[1].iloc[0]
    year = "%Y" if len(parts[3].iloc[0]) == 4 else "%y"
    rest = parts[4].iloc[0]
    time_fmt = next((t for t in _TIME_PARTS if _fits(rest, t)), None)
    if time_fmt is None:
        return None
    day_first = f"%d{sep}%m{sep}{year}{time_fmt}"
    month_first = f"%m{sep}%d{sep}{year}{time_fmt}"
    if (first > 12).any() and not (second > 12).any():
        return day_first
    if (second > 12).any() and not (first > 12).any():
        return month_first
    example = text.iloc[0]
    raise DataError(
        f"{label}: dates like {example!r} could be day-first or month-first: pass "
        f"--date-format '{day_first}' or --date-format '{month_first}'"
    )


def _fits(rest: str, time_fmt: str) -> bool:
    try:
        pd.to_datetime("01.01.2000" + rest, format="%d.%m.%Y" + time_fmt)
    except (ValueError, TypeError):
        return False
    return True


def _with_format(text: pd.Series, fmt: str, label: str) -> np.ndarray:
    parsed = pd.to_datetime(text, format=fmt, errors="coerce", utc=True)
    bad = parsed.isna().to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(
            f"{label}, line {i + 2}: {text.iloc[i]!r} does not match --date-format {fmt!r}"
        )
    return _naive_utc(pd.DatetimeIndex(parsed), text, label)
