"""Checks of OHLCV bars and their features, naming the first bad row.

Nothing is dropped, filled or clamped silently: a problem raises ``ValueError`` naming it, the
column, the first offending row (0-based position in the input table), its timestamp and the
instrument. :class:`~gpu_trading_env.data.market_data.MarketData` runs these checks on every
instrument, whether its arrays come from a table (``frames.py``) or are built by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

OHLCV = ("open", "high", "low", "close", "volume")
PRICES = ("open", "high", "low", "close")
# Prices whose float32 outputs stay finite under any EnvConfig (docs/ENV_SPEC.md, "Price range",
# limit 3): a step's portfolio features and pnl are at most max_position x PRICE_MAX /
# initial_capital <= 1e15 x 1e12 / 0.01 = 1e29 and a close-to-close ratio at most 1e24, far below
# float32's 3.4e38; the config's own limit is checked where the env meets the data (config.py).
PRICE_MIN = 1e-12
PRICE_MAX = 1e12


class Where:
    """Formats 'row i (timestamp ..., instrument ...)' for positions within one instrument."""

    def __init__(self, rows: np.ndarray, ts: np.ndarray, instrument: str) -> None:
        self.rows = rows
        self.ts = ts
        self.instrument = instrument

    def __call__(self, i: int) -> str:
        return (
            f"row {int(self.rows[i])} (timestamp {pd.Timestamp(self.ts[i])}, "
            f"instrument {self.instrument!r})"
        )


def check_finite(values: np.ndarray, label: str, where: Where) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.argmax(bad))
        kind = "NaN" if np.isnan(values[i]) else "an infinite value"
        raise ValueError(f"{label} has {kind} at {where(i)}")


def _first(mask: np.ndarray) -> int | None:
    return int(np.argmax(mask)) if mask.any() else None


def validate_bars(cols: dict[str, np.ndarray], ts: np.ndarray, where: Where) -> None:
    """Raise ValueError on the first problem in one instrument's bars (in input row order)."""
    for c in OHLCV:
        check_finite(cols[c], f"column {c!r}", where)
    for c in PRICES:
        i = _first(cols[c] <= 0.0)
        if i is not None:
            raise ValueError(
                f"column {c!r} has a non-positive price {float(cols[c][i])} at {where(i)}"
            )
    out = np.stack([(cols[c] < PRICE_MIN) | (cols[c] > PRICE_MAX) for c in PRICES])
    i = _first(out.any(axis=0))  # the earliest bad bar, then its first bad column
    if i is not None:
        c = PRICES[int(np.argmax(out[:, i]))]
        raise ValueError(
            f"column {c!r} has a price {float(cols[c][i]):g} at {where(i)} outside the allowed "
            f"range [{PRICE_MIN:g}, {PRICE_MAX:g}], which keeps the env's float32 observations "
            "and rewards finite (docs/ENV_SPEC.md, 'Data bounds'): fix the bad bar, or quote "
            "the series in another unit (e.g. thousands)"
        )
    i = _first(cols["volume"] < 0.0)
    if i is not None:
        raise ValueError(
            f"column 'volume' has a negative value {float(cols['volume'][i])} at {where(i)}"
        )
    o, h, lo, c = cols["open"], cols["high"], cols["low"], cols["close"]
    i = _first(h < lo)
    if i is not None:
        raise ValueError(
            f"high < low: column 'high' {float(h[i])} < column 'low' {float(lo[i])} at {where(i)}"
        )
    i = _first(h < np.maximum(o, c))
    if i is not None:
        col = "open" if o[i] > h[i] else "close"
        raise ValueError(
            f"high below max(open, close): column 'high' {float(h[i])} < column {col!r} "
            f"{float(cols[col][i])} at {where(i)}"
        )
    i = _first(lo > np.minimum(o, c))
    if i is not None:
        col = "open" if o[i] < lo[i] else "close"
        raise ValueError(
            f"low above min(open, close): column 'low' {float(lo[i])} > column {col!r} "
            f"{float(cols[col][i])} at {where(i)}"
        )
    if len(ts) > 1:
        d = np.diff(ts.astype(np.int64))
        i = _first(d <= 0)
        if i is not None:
            j = i + 1
            problem = (
                "repeated timestamp"
                if d[i] == 0
                else "timestamps not sorted (earlier than the row before)"
            )
            raise ValueError(
                f"{problem}: {where(j)} follows row {int(where.rows[i])} ({pd.Timestamp(ts[i])})"
            )


def validate_instruments(
    cols: dict[str, np.ndarray],
    ts: np.ndarray,
    feats: np.ndarray,
    raw_features: np.ndarray,
    offsets: np.ndarray,
    names: Sequence[str],
    feature_names: Sequence[str],
) -> None:
    """The bar checks of :func:`validate_bars` and finite float32 features, per instrument.

    :param cols: OHLCV columns, float64 [T] each; ``ts`` datetime64[ns] [T].
    :param feats: float32 [T, F]; ``raw_features`` the array it was converted from (for the
        message, which shows the value before the conversion).
    :param offsets: int64 [I + 1], instrument k owns rows ``offsets[k]:offsets[k + 1]``.
    """
    rows = np.arange(len(ts), dtype=np.int64)
    for k, name in enumerate(names):
        sl = slice(int(offsets[k]), int(offsets[k + 1]))
        where = Where(rows[sl], ts[sl], name)
        validate_bars({c: cols[c][sl] for c in OHLCV}, ts[sl], where)
        bad = ~np.isfinite(feats[sl])
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise ValueError(
                f"features has a non-finite value {raw_features[sl][i, j]} in column "
                f"{feature_names[j]!r} "
                f"at {where(int(i))} (float32: finite, |x| < 3.4e38)"
            )


def check_names(names: Sequence[str], what: str) -> None:
    """Refuse an empty name or one with a line break, a tab or another control character: names
    come from file names and columns and go into reports, plots and messages, where a line
    break would start a new line of the file's choosing."""
    for name in names:
        if not name or not name.isprintable():
            raise ValueError(
                f"{what} name {name!r} is invalid: allowed are printable characters and spaces "
                "(no line break, tab or other control character), at least one; rename the file "
                "or the column, or the value in the symbol column"
            )


def checked_arrays(
    features: Any,
    ohlcv: Sequence[Any],
    timestamps: Any,
    instrument_offsets: Any,
    instruments: Sequence[str],
    feature_names: Sequence[str],
) -> tuple[
    np.ndarray, dict[str, np.ndarray], np.ndarray, np.ndarray, tuple[str, ...], tuple[str, ...]
]:
    """The arrays of a ``MarketData``, converted and checked (the constructor's work).

    :return: ``(features float32 [T, F] C-contiguous, {OHLCV name: float64 [T]},
        timestamps datetime64[ns] [T], offsets int64 [I + 1], instrument names, feature names)``.
    :raises ValueError: on a shape, an offset or a name that does not fit, and on the first bad
        bar or feature (:func:`validate_instruments`).
    """
    raw_features = np.asarray(features)
    with np.errstate(over="ignore"):  # overflow to inf is reported below, with its row
        feats = np.ascontiguousarray(raw_features, dtype=np.float32)
    if feats.ndim != 2:
        raise ValueError(f"features must be 2-D [T, F], got shape {feats.shape}")
    t, f = feats.shape
    cols = {}
    for name, arr in zip(OHLCV, ohlcv, strict=True):
        a = np.ascontiguousarray(arr, dtype=np.float64)
        if a.shape != (t,):
            raise ValueError(f"{name} must have shape ({t},) like features, got {a.shape}")
        cols[name] = a
    ts = np.asarray(timestamps)
    if ts.dtype != np.dtype("datetime64[ns]"):
        ts = pd.DatetimeIndex(ts).as_unit("ns").to_numpy()
    if ts.shape != (t,):
        raise ValueError(f"timestamps must have shape ({t},), got {ts.shape}")
    offsets = np.asarray(instrument_offsets, dtype=np.int64)
    names = tuple(str(x) for x in instruments)
    if offsets.ndim != 1 or len(offsets) != len(names) + 1 or len(names) == 0:
        raise ValueError(
            f"instrument_offsets must be [I + 1] for I = {len(names)} instruments, "
            f"got shape {offsets.shape}"
        )
    if offsets[0] != 0 or offsets[-1] != t or (np.diff(offsets) <= 0).any():
        raise ValueError(
            f"instrument_offsets must rise strictly from 0 to {t}, got {offsets.tolist()}"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"instrument names must be unique, got {names}")
    fnames = tuple(str(x) for x in feature_names)
    check_names(names, "instrument")
    check_names(fnames, "feature")
    if len(fnames) != f:
        raise ValueError(f"{len(fnames)} feature_names for {f} feature columns")
    # The same bar checks as from_dataframe: arrays built by hand must not slip NaN or
    # non-positive prices past the loaders (they would turn into NaN rewards in the env).
    validate_instruments(cols, ts, feats, raw_features, offsets, names, fnames)
    return feats, cols, ts, offsets, names, fnames
