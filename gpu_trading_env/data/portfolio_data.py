"""``PortfolioData``: K instruments on one timestamp grid, the market of the portfolio env.

Built from one-instrument ``MarketData`` objects, one ``MarketData`` of several instruments, or
bar files. Instruments whose timestamps differ are refused (naming the instrument and the first
timestamp where it disagrees) unless ``align="ffill"`` puts them on the union of their
timestamps (docs/ENV_SPEC.md, "Portfolio env": Data).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpu_trading_env.data.loaders import load_bars
from gpu_trading_env.data.market_data import MarketData

ALIGN_MODES = (None, "ffill")


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
        cls, data: MarketData | Sequence[MarketData], align: str | None = None
    ) -> PortfolioData:
        """The instruments of ``data`` (one ``MarketData`` or several, in order) on one grid.

        :param align: None: every instrument must have the same timestamps; ``"ffill"``: the
            grid is the union of their timestamps from the latest first one on, and a missing
            bar of an instrument is its previous close as open, high, low and close, volume 0,
            and its previous bar's features.
        :raises ValueError: naming the instrument and the first timestamp where its timestamps
            and the first instrument's disagree (``align=None``), an ``align`` value not
            allowed, repeated instrument names, or feature names that differ.
        """
        if align not in ALIGN_MODES:
            raise ValueError(f"align = {align!r} is invalid: allowed is one of {ALIGN_MODES}")
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
        if align is None:
            _check_same_timestamps(names, stamps)
            grid = stamps[0]
        else:
            start = max(ts[0] for ts in stamps)
            grid = np.unique(np.concatenate(stamps))
            grid = grid[grid >= start]
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
        cls, paths: Sequence[str | Path], align: str | None = None, **load_kwargs: Any
    ) -> PortfolioData:
        """One instrument per CSV/Parquet file (``loaders.load_bars`` of each, with
        ``load_kwargs``), on one grid as :meth:`from_market_data` puts them."""
        if isinstance(paths, str | Path):
            paths = [paths]
        return cls.from_market_data([load_bars(Path(p), **load_kwargs) for p in paths], align)


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
