"""``MarketData``: validated OHLCV bars of one or several instruments plus their float32 features.

All instruments live in one set of concatenated arrays so that a backend uploads them to the GPU
once; instrument ``k`` owns rows ``instrument_offsets[k]:instrument_offsets[k + 1]``. Row ``t`` of
an instrument is its bar ``t`` after the feature warm-up rows were dropped, so ``features[t]``,
``open[t]`` and ``close[t]`` describe the same bar and ``features[t]`` uses bars <= t only.

Nothing is dropped, filled or clamped silently: bad input raises ``ValueError`` naming the problem,
the column, the first offending row (0-based position in the input table), its timestamp and the
instrument.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_trading_env.data.features import FEATURE_NAMES, WARMUP_BARS, compute_features
from gpu_trading_env.data.synthetic import gbm, planted_signal, regime_switching

__all__ = ["MarketData"]

_OHLCV = ("open", "high", "low", "close", "volume")
_PRICES = ("open", "high", "low", "close")
_TIMESTAMP_CANDIDATES = ("timestamp", "datetime", "date", "time")
_INSTRUMENT_CANDIDATES = ("instrument", "symbol", "ticker")
# One env step needs bar t and bar t+1, so a piece made by split/walk_forward needs two bars.
_MIN_PIECE_BARS = 2

_GENERATORS = {
    "planted": planted_signal,
    "planted_signal": planted_signal,
    "gbm": gbm,
    "regime": regime_switching,
    "regime_switching": regime_switching,
}

DEFAULT_SYNTHETIC_BARS = 20_000


def _readonly(a: np.ndarray) -> np.ndarray:
    # A view, so that freezing it never freezes an array the caller still owns.
    v = a.view()
    v.flags.writeable = False
    return v


class MarketData:
    """Bars and features of one or several instruments, concatenated along the row axis.

    Attributes (all read-only NumPy arrays):
        features: float32 [T, F], C-contiguous; dimensionless (see ``gpu_trading_env.data.features``).
        open, high, low, close: float64 [T], prices in the data's currency unit.
        volume: float64 [T], traded units per bar.
        timestamps: datetime64[ns] [T], naive UTC; increasing within each instrument.
        instrument_offsets: int64 [I + 1]; instrument k owns rows offsets[k]:offsets[k+1].
        instruments: tuple of I instrument names.
        feature_names: tuple of F names.
        metadata: dict (source, warm-up, generator parameters, ...), copied into derived data.

    Build it with ``from_dataframe``, ``from_csv``, ``from_parquet``, ``synthetic`` or ``default``;
    the constructor takes ready arrays and checks their shapes, types and values as
    ``from_dataframe`` does (finite, positive prices, high >= max(open, close) >= min >= low,
    volume >= 0, increasing timestamps, finite float32 features), naming the first bad row.
    """

    __slots__ = (
        "features",
        "open",
        "high",
        "low",
        "close",
        "volume",
        "timestamps",
        "instrument_offsets",
        "instruments",
        "feature_names",
        "metadata",
    )

    def __init__(
        self,
        *,
        features: np.ndarray,
        open: np.ndarray,
        high: np.ndarray,
        low: np.ndarray,
        close: np.ndarray,
        volume: np.ndarray,
        timestamps: np.ndarray,
        instrument_offsets: np.ndarray | Sequence[int],
        instruments: Sequence[str],
        feature_names: Sequence[str],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        raw_features = np.asarray(features)
        with np.errstate(over="ignore"):  # overflow to inf is reported below, with its row
            feats = np.ascontiguousarray(raw_features, dtype=np.float32)
        if feats.ndim != 2:
            raise ValueError(f"features must be 2-D [T, F], got shape {feats.shape}")
        t, f = feats.shape
        cols = {}
        for name, arr in zip(_OHLCV, (open, high, low, close, volume), strict=True):
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
        if len(fnames) != f:
            raise ValueError(f"{len(fnames)} feature_names for {f} feature columns")
        # The same bar checks as from_dataframe: arrays built by hand must not slip NaN or
        # non-positive prices past the loaders (they would turn into NaN rewards in the env).
        rows = np.arange(t, dtype=np.int64)
        for k, name in enumerate(names):
            sl = slice(int(offsets[k]), int(offsets[k + 1]))
            where = _Where(rows[sl], ts[sl], name)
            _validate_bars({c: cols[c][sl] for c in _OHLCV}, ts[sl], where)
            bad = ~np.isfinite(feats[sl])
            if bad.any():
                i, j = np.argwhere(bad)[0]
                raise ValueError(
                    f"features has a non-finite value {raw_features[sl][i, j]} in column "
                    f"{fnames[j]!r} "
                    f"at {where(int(i))} (float32: finite, |x| < 3.4e38)"
                )

        self.features = _readonly(feats)
        self.open = _readonly(cols["open"])
        self.high = _readonly(cols["high"])
        self.low = _readonly(cols["low"])
        self.close = _readonly(cols["close"])
        self.volume = _readonly(cols["volume"])
        self.timestamps = _readonly(ts)
        self.instrument_offsets = _readonly(offsets)
        self.instruments = names
        self.feature_names = fnames
        self.metadata = dict(metadata or {})

    # ------------------------------------------------------------------ properties

    @property
    def n_bars(self) -> int:
        """Total rows over all instruments."""
        return int(self.features.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def n_instruments(self) -> int:
        return len(self.instruments)

    @property
    def bars_per_instrument(self) -> np.ndarray:
        """int64 [I]: rows of each instrument."""
        return np.diff(self.instrument_offsets)

    def __len__(self) -> int:
        return self.n_bars

    def __repr__(self) -> str:
        if self.n_bars:
            span = (
                f", start={pd.Timestamp(self.timestamps.min())}, "
                f"end={pd.Timestamp(self.timestamps.max())}"
            )
        else:
            span = ""
        names = self.instruments if self.n_instruments <= 4 else self.instruments[:4] + ("...",)
        return (
            f"MarketData(n_instruments={self.n_instruments}, n_bars={self.n_bars}, "
            f"n_features={self.n_features}, instruments={names}{span})"
        )

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_dataframe(
        cls,
        df: pd.DataFrame,
        *,
        timestamp_column: str | None = None,
        instrument_column: str | None = None,
        columns: dict[str, str] | None = None,
        features: str | Sequence[str] = "builtin",
        min_bars: int = 2,
        name: str = "asset",
        metadata: dict[str, Any] | None = None,
    ) -> MarketData:
        """Validate OHLCV bars and compute their features.

        Args:
            df: one row per bar. Columns ``open``, ``high``, ``low``, ``close``, ``volume`` (any
                letter case) and timestamps as a ``DatetimeIndex`` or a column.
            timestamp_column: the timestamp column; if None, a ``DatetimeIndex`` or an index
                named timestamp / datetime / date / time (any case) is used, else a column so
                named. ``dd.mm.yyyy``-style text is read day-first or month-first as the data
                shows, and refused when it cannot tell. Time-zone-aware timestamps are
                converted to UTC; naive ones are kept as they are.
            instrument_column: a column naming the instrument of each row; if None, a column named
                instrument / symbol / ticker is used when present, else all rows are one instrument
                called ``name``. Instruments keep their order of first appearance and their rows
                their order in ``df``; each is validated and featurised on its own.
            columns: a rename map applied first, e.g. ``{"Adj Close": "close", "Vol": "volume"}``.
            features: ``"builtin"`` for the 51 built-in features (the first ``WARMUP_BARS`` bars of
                every instrument are dropped after computing them), or a list of column names to
                use as the features instead (no rows dropped; you vouch that they are causal).
            min_bars: rows each instrument must keep after the warm-up.
            name: the instrument name when there is no instrument column.
            metadata: extra entries for ``MarketData.metadata``.

        Raises:
            ValueError: on missing columns, non-numeric, NaN or inf values, non-positive prices,
                negative volume, high < low, an open or close outside [low, high], missing,
                unsorted or repeated timestamps, or too few bars.
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

        builtin = isinstance(features, str)
        if builtin and features != "builtin":
            raise ValueError(
                f"features must be 'builtin' or a list of column names, got {features!r}"
            )

        labels = _column_lookup(df)
        ts = _timestamps(df, labels, timestamp_column)

        inst_col = None
        if instrument_column is not None:
            inst_col = _find(labels, instrument_column)
            if inst_col is None:
                raise ValueError(f"missing instrument column {instrument_column!r}")
        else:
            for cand in _INSTRUMENT_CANDIDATES:
                inst_col = _find(labels, cand)
                if inst_col is not None:
                    break
        if inst_col is not None:
            raw_inst = df[inst_col]
            missing_inst = raw_inst.isna().to_numpy()
            if missing_inst.any():
                i = int(np.argmax(missing_inst))
                raise ValueError(f"instrument column {inst_col!r} is missing a value at row {i}")
            inst = raw_inst.astype(str).to_numpy()
            names = list(pd.unique(inst))
        else:
            inst = None
            names = [str(name)]

        missing = [c for c in _OHLCV if _find(labels, c) is None]
        if missing:
            raise ValueError(
                f"missing column(s) {missing}; found {list(map(str, df.columns))} "
                "(rename with columns={'Your Name': 'volume', ...})"
            )
        ohlcv = {c: _numeric(df[_find(labels, c)], c) for c in _OHLCV}

        if builtin:
            feat_names = FEATURE_NAMES
            warmup = WARMUP_BARS
            user_feats = None
        else:
            feat_names = tuple(str(x) for x in features)
            if not feat_names:
                raise ValueError("features= is an empty list")
            absent = [c for c in feat_names if c not in df.columns and _find(labels, c) is None]
            if absent:
                raise ValueError(f"missing feature column(s) {absent}")
            user_feats = {
                c: _numeric(df[c if c in df.columns else _find(labels, c)], c) for c in feat_names
            }
            warmup = 0

        parts: dict[str, list[np.ndarray]] = {k: [] for k in (*_OHLCV, "ts", "features")}
        offsets = [0]
        for inst_name in names:
            rows = np.arange(len(df)) if inst is None else np.flatnonzero(inst == inst_name)
            cols = {c: ohlcv[c][rows] for c in _OHLCV}
            its = ts[rows]
            where = _Where(rows, its, inst_name)
            _validate_bars(cols, its, where)
            if user_feats is not None:
                for c, vals in user_feats.items():
                    _check_finite(vals[rows].astype(np.float32), f"feature column {c!r}", where)
            n = len(rows)
            need = warmup + min_bars
            if n < need:
                what = (
                    f"the built-in features need {warmup} warm-up bars plus min_bars={min_bars}"
                    if builtin
                    else f"min_bars={min_bars}"
                )
                raise ValueError(
                    f"instrument {inst_name!r} has {n} bars but {what}: at least {need} bars"
                )
            if builtin:
                feats = compute_features(*(cols[c] for c in _OHLCV))[warmup:]
            else:
                feats = np.column_stack([user_feats[c][rows] for c in feat_names])
            for c in _OHLCV:
                parts[c].append(cols[c][warmup:])
            parts["ts"].append(its[warmup:])
            parts["features"].append(np.asarray(feats, dtype=np.float32))
            offsets.append(offsets[-1] + n - warmup)

        features_arr = np.ascontiguousarray(np.concatenate(parts["features"]), dtype=np.float32)
        if not np.isfinite(features_arr).all():  # compute_features promises this; keep it honest
            raise RuntimeError("non-finite feature after the warm-up: please report this bug")
        meta = {
            "source": "dataframe",
            "features": "builtin" if builtin else "columns",
            "warmup_bars": warmup,
            **(metadata or {}),
        }
        return cls(
            features=features_arr,
            **{c: np.concatenate(parts[c]) for c in _OHLCV},
            timestamps=np.concatenate(parts["ts"]),
            instrument_offsets=np.asarray(offsets, dtype=np.int64),
            instruments=names,
            feature_names=feat_names,
            metadata=meta,
        )

    @classmethod
    def from_csv(
        cls, path: str | Path, *, read_csv_kwargs: dict[str, Any] | None = None, **kwargs: Any
    ) -> MarketData:
        """Read a CSV with ``pandas.read_csv(path, **read_csv_kwargs)``, then ``from_dataframe``.

        The timestamp column is found by name (see ``from_dataframe``); a single instrument is
        named after the file's stem unless ``name=`` is given.
        """
        df = pd.read_csv(path, **(read_csv_kwargs or {}))
        kwargs.setdefault("name", Path(path).stem)
        meta = {"source": "csv", "path": str(path), **(kwargs.pop("metadata", None) or {})}
        return cls.from_dataframe(df, metadata=meta, **kwargs)

    @classmethod
    def from_parquet(cls, path: str | Path, **kwargs: Any) -> MarketData:
        """Read a Parquet file (needs pyarrow: ``pip install gpu-trading-env[parquet]``).

        A stored ``DatetimeIndex`` or a timestamp column both work; keywords go to
        ``from_dataframe``.
        """
        try:
            import pyarrow  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "reading Parquet needs pyarrow: pip install gpu-trading-env[parquet]"
            ) from exc
        df = pd.read_parquet(path, engine="pyarrow")
        kwargs.setdefault("name", Path(path).stem)
        meta = {"source": "parquet", "path": str(path), **(kwargs.pop("metadata", None) or {})}
        return cls.from_dataframe(df, metadata=meta, **kwargs)

    def to_dataframe(self) -> pd.DataFrame:
        """All rows as a DataFrame: ``DatetimeIndex`` named timestamp, then columns ``instrument``,
        open, high, low, close, volume and one column per feature (float32).

        ``from_dataframe(md.to_dataframe(), features=list(md.feature_names))`` rebuilds ``md``.
        """
        inst = np.repeat(np.asarray(self.instruments, dtype=object), self.bars_per_instrument)
        data: dict[str, Any] = {"instrument": inst}
        for c in _OHLCV:
            data[c] = np.array(getattr(self, c))
        for j, fname in enumerate(self.feature_names):
            data[fname] = np.array(self.features[:, j])
        index = pd.DatetimeIndex(np.array(self.timestamps), name="timestamp")
        return pd.DataFrame(data, index=index)

    # ------------------------------------------------------------------ synthetic data

    @classmethod
    def synthetic(
        cls,
        kind: str = "planted",
        n_bars: int = DEFAULT_SYNTHETIC_BARS,
        n_instruments: int = 1,
        seed: int = 0,
        **kwargs: Any,
    ) -> MarketData:
        """Seeded synthetic market (see ``gpu_trading_env.data.synthetic``).

        Args:
            kind: ``"planted"`` (AR(1) momentum with a known rule and return), ``"gbm"`` or
                ``"regime"`` (Markov regime switching).
            n_bars: rows per instrument AFTER the warm-up (``n_bars + WARMUP_BARS`` are drawn).
            n_instruments: independent instruments named ``f"{kind}_{k}"``; instrument k is drawn
                with ``numpy.random.default_rng((seed, k))``.
            seed: integer seed; the same seed gives the same data.
            kwargs: generator parameters (e.g. ``phi``, ``sigma``, ``mu``, ``start``, ``freq``).

        ``metadata`` holds the generator parameters; for ``"planted"`` also ``rule``,
        ``rule_expected_return`` and ``rule_expected_log_return`` (per bar, close to close).
        """
        if kind not in _GENERATORS:
            raise ValueError(f"unknown synthetic kind {kind!r}; choose planted, gbm or regime")
        if int(n_instruments) != n_instruments or n_instruments < 1:
            raise ValueError(f"n_instruments must be an integer >= 1, got {n_instruments!r}")
        if int(n_bars) != n_bars or n_bars < _MIN_PIECE_BARS:
            raise ValueError(f"n_bars must be an integer >= {_MIN_PIECE_BARS}, got {n_bars!r}")
        gen = _GENERATORS[kind]
        frames = []
        params: dict[str, Any] = {}
        for k in range(int(n_instruments)):
            frame = gen(int(n_bars) + WARMUP_BARS, (int(seed), k), **kwargs)
            params = dict(frame.attrs.get("synthetic", {}))
            frame = frame.drop(columns=[c for c in frame.columns if c not in _OHLCV])
            frame.insert(0, "instrument", f"{params.get('kind', kind)}_{k}")
            frames.append(frame)
        df = pd.concat(frames) if len(frames) > 1 else frames[0]
        meta = {
            "source": "synthetic",
            **params,
            "seed": int(seed),
            "n_instruments": int(n_instruments),
        }
        return cls.from_dataframe(df, instrument_column="instrument", metadata=meta)

    @classmethod
    @functools.cache
    def default(cls) -> MarketData:
        """The embedded default data: ``synthetic()`` with its defaults (planted signal, 20,000
        bars after warm-up, one instrument, seed 0). Built once per process and shared; its arrays
        are read-only."""
        return cls.synthetic()

    # ------------------------------------------------------------------ selection

    def _take(self, ranges: Sequence[tuple[int, int, int]]) -> MarketData:
        """Rows ``[start, stop)`` (local to instrument k) for each ``(k, start, stop)``."""
        spans = []
        names = []
        offsets = [0]
        for k, start, stop in ranges:
            base = int(self.instrument_offsets[k])
            spans.append((base + start, base + stop))
            names.append(self.instruments[k])
            offsets.append(offsets[-1] + stop - start)

        def cat(a: np.ndarray) -> np.ndarray:
            if len(spans) == 1:
                return a[spans[0][0] : spans[0][1]]
            return np.concatenate([a[s:e] for s, e in spans])

        return MarketData(
            features=cat(self.features),
            **{c: cat(getattr(self, c)) for c in _OHLCV},
            timestamps=cat(self.timestamps),
            instrument_offsets=np.asarray(offsets, dtype=np.int64),
            instruments=names,
            feature_names=self.feature_names,
            metadata=self.metadata,
        )

    def _local(self, k: int) -> slice:
        return slice(int(self.instrument_offsets[k]), int(self.instrument_offsets[k + 1]))

    def instrument(self, key: int | str) -> MarketData:
        """The rows of one instrument, by index or name, as a one-instrument ``MarketData``."""
        if isinstance(key, str):
            if key not in self.instruments:
                raise KeyError(f"no instrument {key!r}; have {self.instruments}")
            k = self.instruments.index(key)
        else:
            k = int(key)
            if not -self.n_instruments <= k < self.n_instruments:
                raise IndexError(f"instrument index {key} out of range for {self.n_instruments}")
            k %= self.n_instruments
        return self._take([(k, 0, int(self.bars_per_instrument[k]))])

    def slice_bars(self, start: int | None = None, stop: int | None = None) -> MarketData:
        """Rows ``start:stop`` (Python slice rules, negative counts from the end) of EVERY
        instrument, positions local to each instrument."""
        ranges = []
        for k, n in enumerate(self.bars_per_instrument):
            r = range(int(n))[slice(start, stop)]
            if len(r) == 0:
                raise ValueError(
                    f"slice_bars({start}, {stop}) leaves instrument {self.instruments[k]!r} "
                    f"({n} bars) empty"
                )
            ranges.append((k, r.start, r.stop))
        return self._take(ranges)

    def split(
        self, at: float | str | pd.Timestamp | np.datetime64
    ) -> tuple[MarketData, MarketData]:
        """Split every instrument in two: ``(before, after)``.

        Args:
            at: a fraction in (0, 1): instrument k's first ``floor(at * n_k)`` rows go before; or a
                date/time (str, ``pd.Timestamp``, ``datetime64``): rows with timestamp < at go
                before, the rest after (aware times are compared in UTC).

        Features of ``after`` keep using the history in ``before`` (causal, as live trading would);
        no bar of ``after`` informs any feature of ``before``.

        Raises:
            ValueError: if a side would hold fewer than 2 bars of some instrument.
        """
        if isinstance(at, float | np.floating) and not isinstance(at, bool):
            if not 0.0 < float(at) < 1.0:
                raise ValueError(f"split fraction must be in (0, 1), got {at}")
            cuts = [int(math.floor(float(at) * int(n))) for n in self.bars_per_instrument]
        elif isinstance(at, int | np.integer):
            raise TypeError("split(at): pass a float fraction or a date, not an integer")
        else:
            when = pd.Timestamp(at)
            if when.tzinfo is not None:
                when = when.tz_convert("UTC").tz_localize(None)
            t64 = np.datetime64(when.as_unit("ns").to_datetime64(), "ns")
            cuts = [
                int(np.searchsorted(self.timestamps[self._local(k)], t64, side="left"))
                for k in range(self.n_instruments)
            ]
        before, after = [], []
        for k, (cut, n) in enumerate(zip(cuts, self.bars_per_instrument, strict=True)):
            n = int(n)
            if cut < _MIN_PIECE_BARS or n - cut < _MIN_PIECE_BARS:
                raise ValueError(
                    f"split at {at!r} leaves instrument {self.instruments[k]!r} with {cut} bars "
                    f"before and {n - cut} after; each side needs at least {_MIN_PIECE_BARS}"
                )
            before.append((k, 0, cut))
            after.append((k, cut, n))
        return self._take(before), self._take(after)

    def walk_forward(
        self,
        n_folds: int,
        train_bars: int | None = None,
        test_bars: int | None = None,
        *,
        expanding: bool = False,
    ) -> list[tuple[MarketData, MarketData]]:
        """Walk-forward folds: ``n_folds`` pairs ``(train, test)`` of consecutive windows.

        Per instrument with ``n`` bars: test windows are ``n_folds`` consecutive, disjoint blocks
        of ``test_bars`` that end at the last bar; fold k trains on the ``train_bars`` bars just
        before its test block (or on everything before it with ``expanding=True``). Defaults:
        ``test_bars = n // (n_folds + 1)`` (or ``(n - train_bars) // n_folds``) and
        ``train_bars = n - n_folds * test_bars``. Given counts apply to every instrument.

        Raises:
            ValueError: if an instrument is too short for the windows, or a window < 2 bars.
        """
        if int(n_folds) != n_folds or n_folds < 1:
            raise ValueError(f"n_folds must be an integer >= 1, got {n_folds!r}")
        n_folds = int(n_folds)
        per_inst = []
        for k, n in enumerate(self.bars_per_instrument):
            n = int(n)
            test = test_bars
            train = train_bars
            if test is None:
                test = n // (n_folds + 1) if train is None else (n - train) // n_folds
            if train is None:
                train = n - n_folds * test
            if test < _MIN_PIECE_BARS or train < _MIN_PIECE_BARS or train + n_folds * test > n:
                raise ValueError(
                    f"walk_forward: instrument {self.instruments[k]!r} has {n} bars, too few for "
                    f"train_bars={train} + {n_folds} x test_bars={test} "
                    f"(each window needs at least {_MIN_PIECE_BARS} bars)"
                )
            per_inst.append((n - (train + n_folds * test), int(train), int(test)))
        folds = []
        for fold in range(n_folds):
            train_r, test_r = [], []
            for k, (skip, train, test) in enumerate(per_inst):
                test_start = skip + train + fold * test
                train_start = 0 if expanding else test_start - train
                train_r.append((k, train_start, test_start))
                test_r.append((k, test_start, test_start + test))
            folds.append((self._take(train_r), self._take(test_r)))
        return folds


# ---------------------------------------------------------------------- validation helpers


class _Where:
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


def _column_lookup(df: pd.DataFrame) -> dict[str, list[Any]]:
    labels: dict[str, list[Any]] = {}
    for col in df.columns:
        labels.setdefault(str(col).strip().lower(), []).append(col)
    return labels


def _find(labels: dict[str, list[Any]], name: str) -> Any:
    hits = labels.get(str(name).strip().lower(), [])
    if len(hits) > 1:
        raise ValueError(f"ambiguous column {name!r}: the data has {hits}")
    return hits[0] if hits else None


def _timestamps(df: pd.DataFrame, labels: dict[str, list[Any]], column: str | None) -> np.ndarray:
    """datetime64[ns] [len(df)], naive UTC for aware input."""
    if column is not None:
        col = _find(labels, column)
        if col is None:
            raise ValueError(f"missing timestamp column {column!r}")
        raw: Any = df[col]
        label = f"timestamp column {col!r}"
    elif isinstance(df.index, pd.DatetimeIndex):
        raw = df.index
        label = "the DatetimeIndex"
    elif str(df.index.name).strip().lower() in _TIMESTAMP_CANDIDATES:
        raw = df.index.to_series(index=pd.RangeIndex(len(df)))
        label = f"timestamp index {df.index.name!r}"
    else:
        col = next(
            (_find(labels, c) for c in _TIMESTAMP_CANDIDATES if _find(labels, c) is not None), None
        )
        if col is None:
            raise ValueError(
                "no timestamps: give the DataFrame a DatetimeIndex, or a column named "
                "timestamp/datetime/date/time, or pass timestamp_column="
            )
        raw = df[col]
        label = f"timestamp column {col!r}"

    if not isinstance(raw, pd.DatetimeIndex):
        if pd.api.types.is_numeric_dtype(raw) or pd.api.types.is_bool_dtype(raw):
            raise ValueError(
                f"{label} is numeric; convert it first, e.g. pd.to_datetime(col, unit='s')"
            )
        missing = pd.isna(raw).to_numpy()
        from gpu_trading_env.data.timestamps import day_month_format

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
    return idx.as_unit("ns").to_numpy()


def _numeric(col: pd.Series, name: str) -> np.ndarray:
    """float64 [len(col)]; NaN/inf pass through (the caller reports them with their row)."""
    if pd.api.types.is_bool_dtype(col):
        raise ValueError(f"column {name!r} is boolean, not numeric")
    if pd.api.types.is_numeric_dtype(col):
        return col.to_numpy(dtype=np.float64, na_value=np.nan)
    conv = pd.to_numeric(col, errors="coerce")
    bad = (pd.isna(conv) & ~pd.isna(col)).to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"column {name!r} is not numeric at row {i} (value {col.iloc[i]!r})")
    return conv.to_numpy(dtype=np.float64, na_value=np.nan)


def _check_finite(values: np.ndarray, label: str, where: _Where) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.argmax(bad))
        kind = "NaN" if np.isnan(values[i]) else "an infinite value"
        raise ValueError(f"{label} has {kind} at {where(i)}")


def _first(mask: np.ndarray) -> int | None:
    return int(np.argmax(mask)) if mask.any() else None


def _validate_bars(cols: dict[str, np.ndarray], ts: np.ndarray, where: _Where) -> None:
    """Raise ValueError on the first problem in one instrument's bars (in input row order)."""
    for c in _OHLCV:
        _check_finite(cols[c], f"column {c!r}", where)
    for c in _PRICES:
        i = _first(cols[c] <= 0.0)
        if i is not None:
            raise ValueError(
                f"column {c!r} has a non-positive price {float(cols[c][i])} at {where(i)}"
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
