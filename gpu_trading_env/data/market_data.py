"""``MarketData``: validated OHLCV bars of one or several instruments plus their float32 features.

All instruments live in one set of concatenated arrays so that a backend uploads them to the GPU
once; instrument ``k`` owns rows ``instrument_offsets[k]:instrument_offsets[k + 1]``. Row ``t`` of
an instrument is its bar ``t`` after the feature warm-up rows were dropped, so ``features[t]``,
``open[t]`` and ``close[t]`` describe the same bar and ``features[t]`` uses bars <= t only.

Nothing is dropped, filled or clamped silently: bad input raises ``ValueError`` naming the problem,
the column, the first offending row (0-based position in the input table), its timestamp and the
instrument.

This module is the container; beside it are the bar checks (``validation.py``), the reading of a
DataFrame (``frames.py``) and the row ranges of ``slice_bars``, ``split`` and ``walk_forward``
(``splits.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_trading_env.data.features import WARMUP_BARS
from gpu_trading_env.data.frames import arrays_from_dataframe
from gpu_trading_env.data.regime_markets import KINDS as REGIME_KINDS
from gpu_trading_env.data.shifting_markets import SHIFTING_KINDS
from gpu_trading_env.data.splits import (
    MIN_PIECE_BARS,
    slice_ranges,
    split_ranges,
    walk_forward_ranges,
)
from gpu_trading_env.data.synthetic import (
    exogenous_signal,
    gbm,
    planted_signal,
    regime_switching,
)
from gpu_trading_env.data.validation import OHLCV, checked_arrays

__all__ = ["MarketData"]

_GENERATORS = {
    "planted": planted_signal,
    "planted_signal": planted_signal,
    "gbm": gbm,
    "regime": regime_switching,
    "regime_switching": regime_switching,
    "exogenous": exogenous_signal,
    **SHIFTING_KINDS,
    **REGIME_KINDS,
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
        feats, cols, ts, offsets, names, fnames = checked_arrays(
            features,
            (open, high, low, close, volume),
            timestamps,
            instrument_offsets,
            instruments,
            feature_names,
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

    def instrument_log_returns(self) -> list[tuple[int, int, np.ndarray]]:
        """``(start, stop, r)`` per instrument: rows ``[start, stop)`` and the close-to-close
        log returns of those rows, float64, ``r[j] = log(close_j / close_{j-1})`` (``r[0] = 0``:
        an instrument's first row has no previous close here)."""
        close = np.asarray(self.close, dtype=np.float64)
        offsets = np.asarray(self.instrument_offsets)
        out = []
        for k in range(len(offsets) - 1):
            a, b = int(offsets[k]), int(offsets[k + 1])
            r = np.zeros(b - a)
            r[1:] = np.diff(np.log(close[a:b]))
            out.append((a, b, r))
        return out

    def features_and_next_returns(self) -> tuple[np.ndarray, np.ndarray]:
        """Each row's features against the log return from that row's close to the next, within
        its instrument (an instrument's last row has no next return here and is left out):
        features float64 [N, F] and returns float64 [N], N = n_bars - n_instruments."""
        rows = self.instrument_log_returns()
        features = np.asarray(self.features, dtype=np.float64)
        x = np.concatenate([features[a : b - 1] for a, b, _ in rows])
        return x, np.concatenate([r[1:] for _, _, r in rows])

    @property
    def price_basis(self) -> str | None:
        """Which close the prices are, for a file: ``"adjusted: close is 'Adj Close'; ..."``
        or ``"raw: close is 'Close' as in the file"`` (several files that differ: each named);
        None for data not read from a file."""
        return self.metadata.get("price_basis")

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
        extra_features: Sequence[str] | None = None,
    ) -> MarketData:
        """Validate OHLCV bars and compute their features.

        Args:
            df: one row per bar. Columns ``open``, ``high``, ``low``, ``close``, ``volume`` (any
                letter case) and timestamps as a ``DatetimeIndex`` or a column.
            timestamp_column: the timestamp column; if None, a ``DatetimeIndex`` or an index
                named timestamp / datetime / date / time (any case) is used, else a column so
                named. ``dd.mm.yyyy``-style text is read day-first or month-first as the data
                shows, and refused when it cannot tell. Time-zone-aware timestamps are
                converted to UTC; naive ones are kept as they are; a column mixing both is
                refused (the naive ones would silently be taken as UTC).
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
            extra_features: the trader's own columns (a signal, a sentiment score, another
                market's series) added after the 51 built-in features, under their own names.
                The value on bar ``t``'s row must be known at bar ``t``'s close: the agent
                sees it before it acts from that close to the next. Each is refused when
                missing, non-numeric, NaN/inf (naming the row) or constant, and is z-scored
                causally as the built-in features are (``features.normalised``).

        Raises:
            ValueError: on missing columns, non-numeric, NaN or inf values, non-positive prices,
                negative volume, high < low, an open or close outside [low, high], missing,
                unsorted or repeated timestamps, or too few bars.
        """
        arrays, meta = arrays_from_dataframe(
            df,
            timestamp_column=timestamp_column,
            instrument_column=instrument_column,
            columns=columns,
            features=features,
            min_bars=min_bars,
            name=name,
            extra_features=extra_features,
        )
        return cls(**arrays, metadata={**meta, **(metadata or {})})

    @classmethod
    def from_csv(
        cls,
        path: str | Path,
        *,
        read_csv_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> MarketData:
        """Read a CSV file of bars with the one reader of bar files,
        :func:`gpu_trading_env.data.loaders.load_bars` (its column rules: the command line and
        ``make_vec(data=path)`` read files the same way).

        :param read_csv_kwargs: extra ``pandas.read_csv`` keywords, e.g. ``{"sep": ";"}``.
        :param kwargs: ``from_dataframe``'s ``timestamp_column``, ``instrument_column``,
            ``columns`` (a rename map ``{file column: field}``), ``features``,
            ``extra_features``, ``min_bars``, ``name`` (default: the file's stem) and
            ``metadata``; or ``load_bars``' own
            keywords (``date_format``, ``timestamp_unit``, ``fill_volume``, ``prices``,
            ``sort``, ``duplicates``, ``skip_empty``).
        """
        return _read_bar_file(cls, path, "csv", read_csv_kwargs=read_csv_kwargs, **kwargs)

    @classmethod
    def from_parquet(cls, path: str | Path, **kwargs: Any) -> MarketData:
        """Read a Parquet file of bars (needs pyarrow: ``pip install gpu-trading-env[parquet]``)
        with the reader and keywords of :meth:`from_csv`; a stored ``DatetimeIndex`` or a
        timestamp column both work."""
        try:
            import pyarrow  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "reading Parquet needs pyarrow: pip install gpu-trading-env[parquet]"
            ) from exc
        return _read_bar_file(cls, path, "parquet", **kwargs)

    def to_dataframe(self) -> pd.DataFrame:
        """All rows as a DataFrame: ``DatetimeIndex`` named timestamp, then columns ``instrument``,
        open, high, low, close, volume and one column per feature (float32).

        ``from_dataframe(md.to_dataframe(), features=list(md.feature_names))`` rebuilds ``md``.
        """
        inst = np.repeat(np.asarray(self.instruments, dtype=object), self.bars_per_instrument)
        data: dict[str, Any] = {"instrument": inst}
        for c in OHLCV:
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
                ``"regime"`` (Markov regime switching), ``"exogenous"`` (the edge in an extra
                feature column, ``signal``), or a non-stationary market of
                ``gpu_trading_env.data.shifting_markets`` (``"vanishing_edge"``,
                ``"appearing_edge"``, ``"flipping_drift"``).
            n_bars: rows per instrument AFTER the warm-up (``n_bars + WARMUP_BARS`` are drawn).
            n_instruments: independent instruments named ``f"{kind}_{k}"``; instrument k is drawn
                with ``numpy.random.default_rng((seed, k))``.
            seed: integer seed; the same seed gives the same data.
            kwargs: generator parameters (e.g. ``phi``, ``sigma``, ``mu``, ``start``, ``freq``).

        ``metadata`` holds the generator parameters; for ``"planted"`` also ``rule``,
        ``rule_expected_return`` and ``rule_expected_log_return`` (per bar, close to close).
        """
        if kind not in _GENERATORS:
            raise ValueError(
                f"unknown synthetic kind {kind!r}; choose one of {', '.join(_GENERATORS)}"
            )
        if int(n_instruments) != n_instruments or n_instruments < 1:
            raise ValueError(f"n_instruments must be an integer >= 1, got {n_instruments!r}")
        if int(n_bars) != n_bars or n_bars < MIN_PIECE_BARS:
            raise ValueError(f"n_bars must be an integer >= {MIN_PIECE_BARS}, got {n_bars!r}")
        gen = _GENERATORS[kind]
        frames = []
        params: dict[str, Any] = {}
        for k in range(int(n_instruments)):
            frame = gen(int(n_bars) + WARMUP_BARS, (int(seed), k), **kwargs)
            params = dict(frame.attrs.get("synthetic", {}))
            extra = list(params.get("extra_features", []))
            frame = frame.drop(columns=[c for c in frame.columns if c not in (*OHLCV, *extra)])
            frame.insert(0, "instrument", f"{params.get('kind', kind)}_{k}")
            frames.append(frame)
        df = pd.concat(frames) if len(frames) > 1 else frames[0]
        meta = {
            "source": "synthetic",
            **params,
            "seed": int(seed),
            "n_instruments": int(n_instruments),
        }
        return cls.from_dataframe(
            df,
            instrument_column="instrument",
            metadata=meta,
            extra_features=params.get("extra_features"),
        )

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
            **{c: cat(getattr(self, c)) for c in OHLCV},
            timestamps=cat(self.timestamps),
            instrument_offsets=np.asarray(offsets, dtype=np.int64),
            instruments=names,
            feature_names=self.feature_names,
            metadata=self.metadata,
        )

    def instrument_rows(self, k: int) -> slice:
        """The rows of instrument ``k`` (an index) in the concatenated arrays."""
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
        return self._take(slice_ranges(self, start, stop))

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
        before, after = split_ranges(self, at)
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
        return [
            (self._take(train), self._take(test))
            for train, test in walk_forward_ranges(self, n_folds, train_bars, test_bars, expanding)
        ]


# from_dataframe's names of the options load_bars also takes.
_RENAMED_OPTIONS = {"timestamp_column": "time_column", "instrument_column": "symbol_column"}


def _read_bar_file(cls: type[MarketData], path: str | Path, kind: str, **kwargs: Any) -> MarketData:
    """``from_csv`` / ``from_parquet``: the bar-file reader with ``from_dataframe``'s option names."""
    from gpu_trading_env.data.bar_files import read_bar_table

    options = {_RENAMED_OPTIONS.get(k, k): v for k, v in kwargs.items()}
    rename = options.pop("columns", None) or {}
    fields = {}
    for column, field in rename.items():
        if str(field).strip().lower() not in OHLCV:
            raise ValueError(
                f"columns = {{{column!r}: {field!r}}} is invalid for a file: allowed targets are "
                f"{list(OHLCV)} (other columns are read by their own names, e.g. features=[...])"
            )
        fields[str(field).strip().lower()] = column
    meta = {"source": kind, "path": str(path), **(options.pop("metadata", None) or {})}
    min_bars = options.pop("min_bars", 2)
    table = read_bar_table(path, columns=fields, **options)
    return table.build(
        cls.from_dataframe,
        features=options.get("features", "builtin"),
        min_bars=min_bars,
        metadata=meta,
        extra_features=options.get("extra_features"),
    )
