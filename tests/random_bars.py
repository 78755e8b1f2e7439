"""A random-walk OHLCV DataFrame for tests of loading and validation.

``from random_bars import random_ohlcv`` works from any test module (tests/ is on sys.path in
pytest's default import mode, as for ``hand_market``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def random_ohlcv(n: int, seed: int = 0, *, capitalised: bool = False) -> pd.DataFrame:
    """``n`` bars: close a 1%-a-bar log random walk from 100, open the previous close, high and
    low 0.2% beyond the body, integer volumes. Columns ``open`` ... ``volume``, or ``Open`` ...
    ``Volume`` (as Yahoo and brokers export them) with ``capitalised``."""
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    open_ = np.r_[close[0], close[:-1]]
    high = np.maximum(open_, close) * 1.002
    low = np.minimum(open_, close) * 0.998
    vol = rng.integers(1_000, 5_000, n).astype(float)
    cols = {"open": open_, "high": high, "low": low, "close": close, "volume": vol}
    return pd.DataFrame({(k.capitalize() if capitalised else k): v for k, v in cols.items()})


def write_daily_bar_csv(path, n: int, seed: int = 0):
    """``random_ohlcv(n, seed, capitalised=True)`` with a ``Date`` column of business days from
    2015-01-01, written to ``path`` as CSV (what a broker's daily export looks like); returns
    ``path``."""
    frame = random_ohlcv(n, seed, capitalised=True)
    frame.insert(0, "Date", pd.bdate_range("2015-01-01", periods=n).strftime("%Y-%m-%d"))
    frame.to_csv(path, index=False)
    return path
