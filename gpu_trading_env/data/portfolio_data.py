"""``PortfolioData``: K instruments on one timestamp grid, the market of the portfolio env.

Built from one-instrument ``MarketData`` objects, one ``MarketData`` of several instruments, or
bar files. Instruments whose timestamps differ are refused (naming the instrument and the first
timestamp where it disagrees) unless ``align="ffill"`` puts them on the union of their
timestamps, or ``align="inner"`` keeps the timestamps they all share (docs/ENV_SPEC.md,
"Portfolio env": Data).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_trading_env.data.loaders import load_bars
from gpu_trading_env.data.market_data import MarketData

ALIGN_MODES = (None, "ffill", "inner")
# The largest share of an instrument's bars that align="ffill" fills by default: calendars of
# different exchanges differ by a few holidays a year; instruments whose dates barely overlap
# would be traded on stale prices.
MAX_FILLED = 0.1


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class PortfolioData:
    """Bars of K instruments on one grid of T timestamps (read-only arrays).

    Attributes:
        open, high, low, close: float64 [T, K], prices in each instrument's currency unit.
        volume: float64 [T, K], traded units per bar (0 on a forward-filled bar).
        features: float32 [T, K, F], each instrument's causal features of the bar.
        timestamps: datetime64[ns] [T], increasing.
        instruments: the K instrument names.
        feature_names: the F feature names (the same for every instrument).
        filled: bool [T, K], where a bar was forward-filled (all False unless aligned).
    """

    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    features: np.ndarray
    timestamps: np.ndarray
    instruments: tuple[str, ...]
    feature_names: tuple[str, ...]
    filled: np.ndarray

    @property
    def n_bars(self) -> int:
        """T: bars of the grid."""
        return int(self.close.shape[0])

    @property
    def n_instruments(self) -> int:
        """K."""
        return int(self.close.shape[1])

    @property
    def n_features(self) -> int:
        """F: features per instrument."""
        return int(self.features.shape[2])

    @classmethod
    def from_market_data(
        cls,
        data: MarketData | Sequence[MarketData],
        align: str | None = None,
        max_filled: float = MAX_FILLED,
    ) -> PortfolioData:
        """The instruments of ``data`` (one ``MarketData`` or several, in order) on one grid.

        :param align: None: every instrument must have the same timestamps; ``"ffill"``: the
            grid is the union of their timestamps from the latest first one on, and a missing
            bar of an instrument is its previous close as open, high, low and close, volume 0,
            and its previous bar's features; ``"inner"``: the grid is the timestamps every
            instrument has (each instrument's features as computed on its own whole history).
        :param max_filled: with ``"ffill"``, the largest share of an instrument's grid bars that
            may be filled (default :data:`MAX_FILLED`, 0.1); 1.0 accepts any.
        :raises ValueError: naming the instrument and the first timestamp where its timestamps
            and the first instrument's disagree (``align=None``), an instrument filled on more
            than ``max_filled`` of its bars (naming its share), no timestamp common to every
            instrument (``"inner"``, naming each one's span), an ``align`` value not allowed,
            repeated instrument names, or feature names that differ.
        """
        if align not in ALIGN_MODES:
            raise ValueError(f"align = {align!r} is invalid: allowed is one of {ALIGN_MODES}")
        if not 0.0 <= max_filled <= 1.0:
            raise ValueError(
                f"max_filled = {max_filled!r} is invalid: allowed is a share in [0, 1]"
            )
        items = [data] if isinstance(data, MarketData) else list(data)
        if not items or not all(isinstance(d, MarketData) for d in items):
            raise TypeError(
                f"data = {data!r} is invalid: allowed is a MarketData or a non-empty sequence "
                "of MarketData"
            )
        parts = [d.instrument(k) for d in items for k in range(d.n_instruments)]
        names = tuple(p.instruments[0] for p in parts)
        if len(set(names)) != len(names):
            repeated = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(
                f"instruments {repeated} appear more than once: allowed are distinct names"
            )
        fnames = parts[0].feature_names
        for p, name in zip(parts[1:], names[1:], strict=True):
            if tuple(p.feature_names) != tuple(fnames):
                raise ValueError(
                    f"instrument {name!r} has features {list(p.feature_names)}, instrument "
                    f"{names[0]!r} {list(fnames)}: allowed are the same features for every "
                    "instrument"
                )
        stamps = [np.asarray(p.timestamps, dtype="datetime64[ns]") for p in parts]
        grid = _grid(align, names, stamps)
        cols = {c: np.empty((grid.size, len(parts))) for c in ("open", "high", "low", "close")}
        volume = np.empty((grid.size, len(parts)))
        features = np.empty((grid.size, len(parts), len(fnames)), dtype=np.float32)
        filled = np.zeros((grid.size, len(parts)), dtype=bool)
        for k, (p, ts) in enumerate(zip(parts, stamps, strict=True)):
            # The last bar at or before each grid time: the bar itself where it exists.
            idx = np.searchsorted(ts, grid, side="right") - 1
            present = ts[idx] == grid
            close = np.asarray(p.close)[idx]
            cols["close"][:, k] = close
            for c in ("open", "high", "low"):
                cols[c][:, k] = np.where(present, np.asarray(getattr(p, c))[idx], close)
            volume[:, k] = np.where(present, np.asarray(p.volume)[idx], 0.0)
            features[:, k] = np.asarray(p.features)[idx]
            filled[:, k] = ~present
        _check_filled(names, stamps, grid, filled, max_filled)
        return cls(
            **{c: _readonly(v) for c, v in cols.items()},
            volume=_readonly(volume),
            features=_readonly(features),
            timestamps=_readonly(grid),
            instruments=names,
            feature_names=tuple(fnames),
            filled=_readonly(filled),
        )

    @classmethod
    def from_files(
        cls,
        paths: Sequence[str | Path],
        align: str | None = None,
        max_filled: float = MAX_FILLED,
        **load_kwargs: Any,
    ) -> PortfolioData:
        """One instrument per CSV/Parquet file (``loaders.load_bars`` of each, with
        ``load_kwargs``), on one grid as :meth:`from_market_data` puts them."""
        if isinstance(paths, str | Path):
            paths = [paths]
        parts = [load_bars(Path(p), **load_kwargs) for p in paths]
        return cls.from_market_data(parts, align, max_filled)


def _check_filled(
    names: Sequence[str],
    stamps: Sequence[np.ndarray],
    grid: np.ndarray,
    filled: np.ndarray,
    max_filled: float,
) -> None:
    """Raise ValueError naming the first instrument filled on more than ``max_filled`` of the
    grid's bars (``filled`` bool [T, K]), its share and its own first and last timestamps."""
    share = filled.mean(axis=0) if grid.size else np.zeros(len(names))
    for k in np.flatnonzero(share > max_filled):
        own, on = (pd.Timestamp(stamps[k][0]), pd.Timestamp(stamps[k][-1])), grid[[0, -1]]
        raise ValueError(
            f"align='ffill' fills {share[k]:.1%} of the {grid.size:,} bars of instrument "
            f"{names[k]!r} ({int(filled[:, k].sum()):,} bars of previous closes; its own bars "
            f"run {own[0]} to {own[1]}, the grid {pd.Timestamp(on[0])} to {pd.Timestamp(on[1])}): "
            f"allowed is at most {max_filled:.1%} (max_filled, --max-filled); give instruments "
            "whose dates overlap, or a larger max_filled to trade the stale prices"
        )


def _grid(align: str | None, names: Sequence[str], stamps: Sequence[np.ndarray]) -> np.ndarray:
    """The timestamps of the grid (datetime64[ns], increasing) that ``align`` puts the
    instruments on (:meth:`PortfolioData.from_market_data`)."""
    if align is None:
        _check_same_timestamps(names, stamps)
        return stamps[0]
    if align == "inner":
        return _common_timestamps(names, stamps)
    start = max(ts[0] for ts in stamps)
    grid = np.unique(np.concatenate(stamps))
    return grid[grid >= start]


def _common_timestamps(names: Sequence[str], stamps: Sequence[np.ndarray]) -> np.ndarray:
    """The timestamps every instrument has (datetime64[ns], increasing); raise ValueError
    naming each instrument's span where there is none."""
    grid = stamps[0]
    for ts in stamps[1:]:
        grid = np.intersect1d(grid, ts)
    if grid.size < 2:
        spans = ", ".join(
            f"{n!r} {pd.Timestamp(ts[0])} to {pd.Timestamp(ts[-1])}"
            for n, ts in zip(names, stamps, strict=True)
        )
        raise ValueError(
            f"align='inner' leaves {grid.size} timestamp(s) common to every instrument ({spans}): "
            "allowed are instruments that share at least 2 timestamps"
        )
    return grid


def _check_same_timestamps(names: Sequence[str], stamps: Sequence[np.ndarray]) -> None:
    """Raise ValueError naming the first instrument whose timestamps differ from the first
    instrument's, and the first timestamp where they disagree."""
    for name, ts in zip(names[1:], stamps[1:], strict=True):
        if ts.shape == stamps[0].shape and np.array_equal(ts, stamps[0]):
            continue
        first = np.setxor1d(ts, stamps[0])[0]
        where = (
            "it has no bar there"
            if np.isin(first, stamps[0])
            else f"it has a bar there, {names[0]!r} has none"
        )
        raise ValueError(
            f"instrument {name!r} disagrees with instrument {names[0]!r} at timestamp "
            f"{np.datetime_as_string(first)} ({where}): allowed are the same timestamps for "
            "every instrument, or align='ffill' (forward-fill of closes, volume 0)"
        )


def as_portfolio_data(data: Any, align: str | None = None) -> PortfolioData:
    """``PortfolioData`` from itself, a ``MarketData``, a sequence of ``MarketData``, a sequence
    of bar file paths, or None (two instruments of the built-in synthetic market)."""
    if isinstance(data, PortfolioData):
        return data
    if data is None:
        return PortfolioData.from_market_data(MarketData.synthetic(n_instruments=2))
    if isinstance(data, MarketData):
        return PortfolioData.from_market_data(data, align)
    if isinstance(data, str | Path):
        return PortfolioData.from_files([data], align)
    if isinstance(data, Sequence) and data and all(isinstance(d, str | Path) for d in data):
        return PortfolioData.from_files(data, align)
    if isinstance(data, Sequence) and data and all(isinstance(d, MarketData) for d in data):
        return PortfolioData.from_market_data(data, align)
    raise TypeError(
        f"data of type {type(data).__name__} is invalid: allowed is PortfolioData, MarketData, "
        "a sequence of MarketData or of bar file paths, or None"
    )
