"""Inputs that used to be reinterpreted or to fail with an error naming nothing: each is now
refused with a message naming the field, the value and what is allowed (docs/RELIABILITY.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpu_trading_env.data.features import WARMUP_BARS
from gpu_trading_env.data.loaders import DataError, load_bars
from gpu_trading_env.data.timestamps import parse_timestamps

N = WARMUP_BARS + 30


def _ohlcv(n: int = N, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    open_ = np.r_[close[0], close[:-1]]
    high = np.maximum(open_, close) * 1.002
    low = np.minimum(open_, close) * 0.998
    vol = rng.integers(1_000, 5_000, n).astype(float)
    return pd.DataFrame({"open": open_, "high": high, "low": low, "close": close, "volume": vol})


# ---------------------------------------------------------------------- time zones


def test_mixed_naive_and_zone_aware_text_timestamps_are_refused(tmp_path):
    df = _ohlcv()
    ts = pd.date_range("2021-01-04", periods=N, freq="1h").strftime("%Y-%m-%d %H:%M").tolist()
    ts[5] = ts[5] + "+05:00"  # this bar alone is 5 hours off UTC
    df.insert(0, "time", ts)
    path = tmp_path / "mixed.csv"
    df.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"mixed\.csv.*line 7 has a UTC offset .* line 2 has none"):
        load_bars(path)


def test_mixed_naive_and_aware_timestamp_objects_are_refused():
    col = pd.Series(
        [pd.Timestamp("2020-01-01 10:00"), pd.Timestamp("2020-01-01 11:00", tz="Europe/Berlin")],
        dtype=object,
    )
    with pytest.raises(DataError, match="mixed naive and zone-aware"):
        parse_timestamps(col)


def test_one_zone_throughout_is_converted_to_utc():
    col = pd.Series(["2020-01-01 10:00+01:00", "2020-01-01T11:00Z", "2020-01-01 12:00:00-0500"])
    got = parse_timestamps(col)
    want = ["2020-01-01T09:00", "2020-01-01T11:00", "2020-01-01T17:00"]
    np.testing.assert_array_equal(got, np.array(want, dtype="datetime64[ns]"))
    plain = parse_timestamps(pd.Series(["2020-01-01", "2020-01-02 10:30"]))
    assert plain.dtype == np.dtype("datetime64[ns]")
