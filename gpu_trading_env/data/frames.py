"""Reading a pandas DataFrame of OHLCV bars into the arrays of a ``MarketData``.

:func:`arrays_from_dataframe` is the work of ``MarketData.from_dataframe`` (whose docstring
states the rules): it finds the columns (any letter case), reads the timestamps, splits the rows
by instrument, checks each instrument's bars (``validation.py``) and computes its features.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpu_trading_env.data.features import (
    FEATURE_NAMES,
    WARMUP_BARS,
    compute_features,
    normalised,
)
from gpu_trading_env.data.timestamps import (
    TS_MAX,
    TS_MIN,
    DataError,
    day_month_format,
    refuse_mixed_zones,
)
from gpu_trading_env.data.validation import OHLCV, Where, check_finite, validate_bars

# The one set of column names of bar tables (files and DataFrames), matched in any letter case:
# timestamps, then the instrument of a long-format table, then the OHLCV fields (OHLCV).
TIMESTAMP_CANDIDATES = (
    "timestamp",
    "datetime",
    "date",
    "time",
    "date_time",
    "time (utc)",
    "gmt time",
)
INSTRUMENT_CANDIDATES = ("instrument", "symbol", "ticker", "asset", "pair")


def arrays_from_dataframe(
    df: pd.DataFrame,
    *,
    timestamp_column: str | None = None,
    instrument_column: str | None = None,
    columns: dict[str, str] | None = None,
    features: str | Sequence[str] = "builtin",
    min_bars: int = 2,
    name: str = "asset",
    extra_features: Sequence[str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(arrays, metadata)``: ``MarketData`` keyword arguments (all but ``metadata``) and the
    metadata of the table's reading (``source``, ``features``, ``warmup_bars``,
    ``extra_features``).

    The arguments are those of ``MarketData.from_dataframe``.
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"from_dataframe expects a pandas DataFrame, got {type(df).__name__}")
    if int(min_bars) != min_bars or min_bars < 1:
        raise ValueError(f"min_bars must be an integer >= 1, got {min_bars!r}")
    if columns:
        unknown = [k for k in columns if k not in df.columns]
        if unknown:
            raise ValueError(f"columns= renames {unknown} but the data has no such column")
        df = df.rename(columns=columns)

    if len(df) == 0:
        raise ValueError(
            f"the table has no rows (columns {[str(c) for c in df.columns]}): allowed is at "
            f"least min_bars = {min_bars} bars per instrument after the feature warm-up"
        )
    builtin = isinstance(features, str)
    if builtin and features != "builtin":
        raise ValueError(f"features must be 'builtin' or a list of column names, got {features!r}")

    labels = column_lookup(df)
    ts = frame_timestamps(df, labels, timestamp_column)

    inst, names = _instrument_rows(df, labels, instrument_column, name)

    missing = [c for c in OHLCV if find_column(labels, c) is None]
    if missing:
        raise ValueError(
            f"missing column(s) {missing}; found {list(map(str, df.columns))} "
            "(rename with columns={'Your Name': 'volume', ...})"
        )
    ohlcv = {c: numeric_column(df[find_column(labels, c)], c) for c in OHLCV}

    feat_names, warmup, user_feats = _feature_columns(df, labels, features)
    extra = _extra_columns(df, labels, features, extra_features)

    parts: dict[str, list[np.ndarray]] = {k: [] for k in (*OHLCV, "ts", "features")}
    offsets = [0]
    for k, inst_name in enumerate(names):
        if len(names) == 1:  # views, not copies: a long series is not held twice
            rows: Any = range(len(df))
            cols, its = ohlcv, ts
        else:
            rows = np.flatnonzero(inst == k)
            cols = {c: ohlcv[c][rows] for c in OHLCV}
            its = ts[rows]
        feats = _instrument_features(
            cols, its, rows, inst_name, feat_names, warmup, user_feats, min_bars, extra
        )
        n = len(rows)
        for c in OHLCV:
            parts[c].append(cols[c][warmup:])
        parts["ts"].append(its[warmup:])
        parts["features"].append(np.asarray(feats, dtype=np.float32))
        offsets.append(offsets[-1] + n - warmup)

    arrays = _concatenated(parts, offsets, names, (*feat_names, *extra))
    meta = {
        "source": "dataframe",
        "features": "builtin" if builtin else "columns",
        "warmup_bars": warmup,
        "extra_features": list(extra),
    }
    return arrays, meta


def _instrument_rows(
    df: pd.DataFrame,
    labels: dict[str, list[Any]],
    instrument_column: str | None,
    name: str,
) -> tuple[np.ndarray | None, list[str]]:
    """``(inst, names)``: each row's instrument as an index into ``names`` (``None`` for a table
    of one instrument, then named ``name``) and the instruments in order of first appearance."""
    inst_col = None
    if instrument_column is not None:
        inst_col = find_column(labels, instrument_column)
        if inst_col is None:
            raise ValueError(f"missing instrument column {instrument_column!r}")
    else:
        for cand in INSTRUMENT_CANDIDATES:
            inst_col = find_column(labels, cand)
            if inst_col is not None:
                break
    if inst_col is None:
        return None, [str(name)]
    raw_inst = df[inst_col]
    missing_inst = raw_inst.isna().to_numpy()
    if missing_inst.any():
        i = int(np.argmax(missing_inst))
        raise ValueError(f"instrument column {inst_col!r} is missing a value at row {i}")
    # Codes, not an array of strings: one Python object per row would outweigh the bars.
    if not isinstance(raw_inst.dtype, pd.CategoricalDtype):
        raw_inst = raw_inst.astype(str)
    codes, uniques = pd.factorize(raw_inst)
    return codes, [str(u) for u in uniques]


def _feature_columns(
    df: pd.DataFrame,
    labels: dict[str, list[Any]],
    features: str | Sequence[str],
) -> tuple[tuple[str, ...], int, dict[str, np.ndarray] | None]:
    """``(feature_names, warmup_bars, user_features)``: the built-in features (``features`` is
    ``"builtin"``, ``user_features`` ``None``) or the table's named columns, read as numbers."""
    if isinstance(features, str):
        return FEATURE_NAMES, WARMUP_BARS, None
    feat_names = tuple(str(x) for x in features)
    if not feat_names:
        raise ValueError("features= is an empty list")
    absent = [c for c in feat_names if c not in df.columns and find_column(labels, c) is None]
    if absent:
        raise ValueError(f"missing feature column(s) {absent}")
    user_feats = {
        c: numeric_column(df[c if c in df.columns else find_column(labels, c)], c)
        for c in feat_names
    }
    return feat_names, 0, user_feats


def _extra_columns(
    df: pd.DataFrame,
    labels: dict[str, list[Any]],
    features: str | Sequence[str],
    extra_features: Sequence[str] | None,
) -> dict[str, np.ndarray]:
    """The trader's own columns added to the built-in features, ``{name: float64 [len(df)]}``
    in the given order (raw: checked and normalised per instrument)."""
    if extra_features is None:
        return {}
    if isinstance(extra_features, str):
        extra_features = [extra_features]
    names = [str(c) for c in extra_features]
    if not isinstance(features, str):
        raise ValueError(
            f"extra_features = {names} is invalid with features = {list(features)}: the extra "
            "columns are added to the built-in features; list your own features in features="
        )
    for c in names:
        if not c.strip():
            raise ValueError(f"extra_features = {names} is invalid: a column name is empty")
        if c in FEATURE_NAMES or c.strip().lower() in OHLCV or names.count(c) > 1:
            what = "a built-in feature" if c in FEATURE_NAMES else "given twice or a bar field"
            raise ValueError(
                f"extra feature column {c!r} is invalid: it is {what}; allowed are other "
                "columns of the data, each once"
            )
    absent = [c for c in names if c not in df.columns and find_column(labels, c) is None]
    if absent:
        raise ValueError(
            f"missing extra feature column(s) {absent}; the data has {list(map(str, df.columns))}"
        )
    return {
        c: numeric_column(df[c if c in df.columns else find_column(labels, c)], c) for c in names
    }


def _extra_block(
    extra: dict[str, np.ndarray], rows: Any, n: int, where: Where, warmup: int
) -> np.ndarray:
    """One instrument's extra columns, float64 ``(n - warmup, E)``: each checked (finite, not
    constant) and z-scored causally as the built-in features are (``features.normalised``)."""
    out = np.empty((n - warmup, len(extra)))
    for j, (c, values) in enumerate(extra.items()):
        vals = values[rows]
        check_finite(vals, f"extra feature column {c!r}", where)
        if np.ptp(vals) == 0.0:
            raise ValueError(
                f"extra feature column {c!r} is constant ({float(vals[0])!r}) from {where(0)} to "
                f"{where(n - 1)}: it carries no information; allowed is a column that varies"
            )
        with np.errstate(divide="ignore", invalid="ignore"):
            out[:, j] = normalised(vals)[warmup:]
    return out


def _instrument_features(
    cols: dict[str, np.ndarray],
    its: np.ndarray,
    rows: np.ndarray,
    inst_name: str,
    feat_names: tuple[str, ...],
    warmup: int,
    user_feats: dict[str, np.ndarray] | None,
    min_bars: int,
    extra: dict[str, np.ndarray] | None = None,
) -> np.ndarray:
    """One instrument's bars checked and its features after the warm-up, ``(n - warmup, F)``
    (float32 built-in features then the ``extra`` columns, the user columns' dtype
    otherwise)."""
    where = Where(rows, its, inst_name)
    validate_bars(cols, its, where)
    if user_feats is not None:
        for c, vals in user_feats.items():
            check_finite(vals[rows].astype(np.float32), f"feature column {c!r}", where)
    n = len(rows)
    need = warmup + min_bars
    if n < need:
        what = (
            f"the built-in features need {warmup} warm-up bars plus min_bars={min_bars}"
            if user_feats is None
            else f"min_bars={min_bars}"
        )
        raise ValueError(f"instrument {inst_name!r} has {n} bars but {what}: at least {need} bars")
    if user_feats is None:
        builtin = compute_features(*(cols[c] for c in OHLCV))[warmup:]
        if not extra:
            return builtin
        # float32 like the built-in block: a float64 stack would double a long file's features.
        extra_block = _extra_block(extra, rows, n, where, warmup).astype(np.float32)
        return np.column_stack([builtin, extra_block])
    return np.column_stack([user_feats[c][rows] for c in feat_names])


def _concatenated(
    parts: dict[str, list[np.ndarray]],
    offsets: list[int],
    names: list[str],
    feat_names: tuple[str, ...],
) -> dict[str, Any]:
    """The instruments' parts joined into ``MarketData``'s arrays (features float32, C order)."""

    def joined(p: list[np.ndarray]) -> np.ndarray:
        return p[0] if len(p) == 1 else np.concatenate(p)  # one instrument: its rows, no copy

    features_arr = np.ascontiguousarray(joined(parts["features"]), dtype=np.float32)
    if not np.isfinite(features_arr).all():  # compute_features promises this; keep it honest
        raise RuntimeError("non-finite feature after the warm-up: please report this bug")
    return {
        "features": features_arr,
        **{c: joined(parts[c]) for c in OHLCV},
        "timestamps": joined(parts["ts"]),
        "instrument_offsets": np.asarray(offsets, dtype=np.int64),
        "instruments": names,
        "feature_names": feat_names,
    }


def check_separator(df: pd.DataFrame, where: str) -> None:
    """DataError when a CSV read with commas was written with ';' (a European spreadsheet's
    export, often with decimal commas): its header lands in one column whose name holds ';'."""
    semi = [str(c) for c in df.columns if ";" in str(c)]
    if semi:
        raise DataError(
            f"{where}: the header {semi[0]!r} is separated by ';', not ','; such files often "
            "write decimal commas (1,5) too: pass --sep ';' --decimal ',' (in Python "
            "read_csv_kwargs={'sep': ';', 'decimal': ','})"
        )


def column_lookup(df: pd.DataFrame) -> dict[str, list[Any]]:
    labels: dict[str, list[Any]] = {}
    for col in df.columns:
        labels.setdefault(str(col).strip().lower(), []).append(col)
    return labels


def find_column(labels: dict[str, list[Any]], name: str) -> Any:
    hits = labels.get(str(name).strip().lower(), [])
    if len(hits) > 1:
        raise ValueError(f"ambiguous column {name!r}: the data has {hits}")
    return hits[0] if hits else None


def frame_timestamps(
    df: pd.DataFrame, labels: dict[str, list[Any]], column: str | None
) -> np.ndarray:
    """datetime64[ns] [len(df)], naive UTC for aware input."""
    if column is not None:
        col = find_column(labels, column)
        if col is None:
            raise ValueError(f"missing timestamp column {column!r}")
        raw: Any = df[col]
        label = f"timestamp column {col!r}"
    elif isinstance(df.index, pd.DatetimeIndex):
        raw = df.index
        label = "the DatetimeIndex"
    elif str(df.index.name).strip().lower() in TIMESTAMP_CANDIDATES:
        raw = df.index.to_series(index=pd.RangeIndex(len(df)))
        label = f"timestamp index {df.index.name!r}"
    else:
        col = next(
            (
                find_column(labels, c)
                for c in TIMESTAMP_CANDIDATES
                if find_column(labels, c) is not None
            ),
            None,
        )
        if col is None:
            raise ValueError(
                "no timestamps: give the DataFrame a DatetimeIndex, or a column named "
                "timestamp/datetime/date/time, or pass timestamp_column="
            )
        raw = df[col]
        label = f"timestamp column {col!r}"

    if pd.api.types.is_datetime64_any_dtype(raw) and not isinstance(raw, pd.DatetimeIndex):
        raw = pd.DatetimeIndex(raw)  # parsed already (a bar file's table): no text to read
    if not isinstance(raw, pd.DatetimeIndex):
        if pd.api.types.is_numeric_dtype(raw) or pd.api.types.is_bool_dtype(raw):
            raise ValueError(
                f"{label} is numeric; convert it first, e.g. pd.to_datetime(col, unit='s')"
            )
        missing = pd.isna(raw).to_numpy()
        refuse_mixed_zones(raw.astype("string").str.strip(), label, lambda i: f"row {i}")
        # Day-first text ("01.02.2017 22:00") would be read month-first by "mixed".
        fmt = None if missing.any() else day_month_format(raw.astype(str), label)
        parsed = pd.to_datetime(raw, errors="coerce", utc=True, format=fmt or "mixed")
        bad = pd.isna(parsed).to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            what = "a missing value" if missing[i] else f"an unparseable value {raw.iloc[i]!r}"
            raise ValueError(f"{label} has {what} at row {i}")
        idx = pd.DatetimeIndex(parsed)
    else:
        idx = raw
        if idx.hasnans:
            i = int(np.argmax(pd.isna(idx)))
            raise ValueError(f"{label} has a missing value (NaT) at row {i}")
    if idx.tz is not None:
        idx = idx.tz_convert("UTC").tz_localize(None)
    out = np.asarray((idx < TS_MIN) | (idx > TS_MAX))
    if out.any():
        i = int(np.argmax(out))
        raise ValueError(
            f"{label} has {idx[i]} at row {i}, outside the allowed range {TS_MIN.date()} to "
            f"{TS_MAX.date()} (datetime64[ns])"
        )
    return np.array(idx.as_unit("ns").to_numpy())  # a copy: MarketData owns its arrays


def numeric_column(col: pd.Series, name: str) -> np.ndarray:
    """float64 [len(col)], a copy (MarketData keeps it: the caller's frame may change); NaN/inf
    pass through (the caller reports them with their row)."""
    if pd.api.types.is_bool_dtype(col):
        raise ValueError(f"column {name!r} is boolean, not numeric")
    if pd.api.types.is_numeric_dtype(col):
        return col.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
    conv = pd.to_numeric(col, errors="coerce")
    bad = (pd.isna(conv) & ~pd.isna(col)).to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"column {name!r} is not numeric at row {i} (value {col.iloc[i]!r})")
    return conv.to_numpy(dtype=np.float64, na_value=np.nan)
