"""Tiny hand-made markets with exact prices, for tests that check formulas by hand.

``from hand_market import hand_market`` works from any test module: pytest's default
("prepend") import mode puts ``tests/`` on ``sys.path`` because the folder has no
``__init__.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpu_trading_env.data.market_data import MarketData


def hand_feature(t: int, j: int) -> float:
    """The value of feature ``j`` at (global) row ``t``: a small exact float32."""
    return float(np.float32(0.01 * (j + 1) + 0.001 * t))


def hand_market(
    close: Sequence[float],
    open: Sequence[float] | None = None,
    n_features: int = 4,
    n_instruments: int = 1,
) -> MarketData:
    """``MarketData`` whose closes (and opens) are exactly the given numbers.

    Args:
        close: closes of one instrument; with ``n_instruments > 1`` every instrument gets the
            same closes (instrument k's rows are ``k*len(close) .. (k+1)*len(close) - 1``).
        open: opens of one instrument (default: the previous close, the first bar's own close).
        n_features: feature columns; ``features[t, j] = hand_feature(t, j)`` (t the global row).
        n_instruments: how many instruments to concatenate.

    High and low bracket open and close by 1 (high = max + 1, low = max(min - 1, min / 2)),
    volume is 1000, timestamps are hourly from 2024-01-01.
    """
    c1 = np.asarray(close, dtype=np.float64)
    if c1.ndim != 1 or c1.size < 2:
        raise ValueError("close must be 1-D with at least 2 bars")
    if open is None:
        o1 = np.concatenate([c1[:1], c1[:-1]])
    else:
        o1 = np.asarray(open, dtype=np.float64)
        if o1.shape != c1.shape:
            raise ValueError("open must have the shape of close")
    c = np.tile(c1, n_instruments)
    o = np.tile(o1, n_instruments)
    t = c.size
    high = np.maximum(o, c) + 1.0
    lo = np.minimum(o, c)
    low = np.maximum(lo - 1.0, lo / 2.0)
    feats = np.array(
        [[hand_feature(i, j) for j in range(n_features)] for i in range(t)], dtype=np.float32
    ).reshape(t, n_features)
    ts = np.datetime64("2024-01-01T00:00", "ns") + np.arange(t) * np.timedelta64(1, "h")
    n = c1.size
    return MarketData(
        features=feats,
        open=o,
        high=high,
        low=low,
        close=c,
        volume=np.full(t, 1000.0),
        timestamps=ts.astype("datetime64[ns]"),
        instrument_offsets=np.arange(n_instruments + 1, dtype=np.int64) * n,
        instruments=tuple(f"inst{k}" for k in range(n_instruments)),
        feature_names=tuple(f"f{j}" for j in range(n_features)),
    )
