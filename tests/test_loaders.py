"""Loading the layouts real exports have: Yahoo, a day-first FX export, epoch-ms crypto, long format."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from random_bars import random_ohlcv

from gpu_trading_env.data.features import WARMUP_BARS
from gpu_trading_env.data.loaders import DataError, load_bars
from gpu_trading_env.data.market_data import MarketData

N = WARMUP_BARS + 30


def test_yahoo_daily(tmp_path):
    df = random_ohlcv(N, capitalised=True)
    dates = pd.bdate_range("2019-01-02", periods=N)
    df.insert(0, "Date", dates.strftime("%Y-%m-%d"))
    df.insert(5, "Adj Close", df["Close"].round(2))
    path = tmp_path / "GOOGL.csv"
    df.to_csv(path, index=False)
    md = load_bars(path, prices="raw")
    assert md.instruments == ("GOOGL",)
    assert md.n_bars == N - WARMUP_BARS
    assert pd.Timestamp(md.timestamps[0]) == dates[WARMUP_BARS]
    np.testing.assert_allclose(md.close, df["Close"].to_numpy()[WARMUP_BARS:])
    adj = load_bars(path, columns={"close": "Adj Close"})
    np.testing.assert_allclose(adj.close, df["Adj Close"].to_numpy()[WARMUP_BARS:])


def _yahoo_with_dividends_and_a_split(path):
    """A Yahoo export whose Adj Close is below Close: a 2:1 split at bar 100 and a 3% dividend
    at bar 200 (the factor multiplies every earlier bar)."""
    df = random_ohlcv(N, seed=3, capitalised=True)
    df.insert(0, "Date", pd.bdate_range("2019-01-02", periods=N).strftime("%Y-%m-%d"))
    bar = np.arange(N)
    factor = np.where(bar < 100, 0.5, 1.0) * np.where(bar < 200, 0.97, 1.0)
    df.insert(5, "Adj Close", df["Close"] * factor)
    df.to_csv(path, index=False)
    return df, factor


def test_yahoo_adjusted_prices_scale_open_high_and_low(tmp_path):
    path = tmp_path / "SPY.csv"
    df, factor = _yahoo_with_dividends_and_a_split(path)
    kept = slice(WARMUP_BARS, None)
    for md in (
        load_bars(path),  # the default where the file has an Adj Close column
        load_bars(path, prices="adjusted"),
        load_bars(path, columns={"close": "Adj Close"}),  # README's fix
        MarketData.from_csv(path, prices="adjusted"),
    ):
        np.testing.assert_allclose(md.close, df["Adj Close"].to_numpy()[kept], rtol=1e-12)
        for c in ("open", "high", "low"):
            want = (df[c.capitalize()] * factor).to_numpy()[kept]
            np.testing.assert_allclose(getattr(md, c), want, rtol=1e-12)
        np.testing.assert_array_equal(md.volume, df["Volume"].to_numpy()[kept])
        assert md.price_basis.startswith("adjusted: close is 'Adj Close'")
        assert "scaled by 'Adj Close' / 'Close'" in md.price_basis
        assert md.instrument(0).price_basis == md.price_basis  # kept by every selection
    raw = MarketData.from_csv(path, prices="raw")
    np.testing.assert_allclose(raw.close, df["Close"].to_numpy()[kept])
    assert (
        raw.price_basis
        == "raw: close is 'Close' as in the file (its 'Adj Close' unused: --prices raw)"
    )
    assert MarketData.synthetic(n_bars=64).price_basis is None
    df.drop(columns=["Adj Close"]).to_csv(path, index=False)
    assert load_bars(path).price_basis == "raw: close is 'Close' as in the file"
    with pytest.raises(
        DataError, match=r"--prices adjusted .* needs an adjusted close .*--prices raw"
    ):
        load_bars(path, prices="adjusted")
    with pytest.raises(DataError, match=r"prices = 'adj' is invalid: allowed is one of"):
        load_bars(path, prices="adj")


def _fx_frame(start: str, freq: str = "1h") -> pd.DataFrame:
    df = random_ohlcv(N, seed=1, capitalised=True)
    ts = pd.date_range(start, periods=N, freq=freq)
    df.insert(0, "Time", ts.strftime("%d.%m.%Y %H:%M:%S.000"))
    return df


def test_day_first_hourly_fx_export(tmp_path):
    # gym-anytrading's FOREX_EURUSD_1H_ASK.csv layout; 1 Jan 22:00 onwards reaches day 13.
    df = _fx_frame("2017-01-01 22:00")
    assert df["Time"].iloc[0] == "01.01.2017 22:00:00.000"
    path = tmp_path / "FOREX_EURUSD_1H_ASK.csv"
    df.to_csv(path, index=False)
    md = load_bars(path)
    expected = pd.date_range("2017-01-01 22:00", periods=N, freq="1h")[WARMUP_BARS:]
    np.testing.assert_array_equal(md.timestamps, expected.to_numpy())
    # The same frame with its text index named Time, straight into from_dataframe.
    direct = MarketData.from_dataframe(df.set_index("Time"))
    np.testing.assert_array_equal(direct.timestamps, md.timestamps)


def test_ambiguous_day_month_is_refused_with_both_formats(tmp_path):
    df = _fx_frame("2017-01-01 00:00", freq="30min")  # days 1..8 only: 1..12 either way
    path = tmp_path / "fx.csv"
    df.to_csv(path, index=False)
    with pytest.raises(DataError) as exc:
        load_bars(path)
    msg = str(exc.value)
    assert "fx.csv" in msg and "'Time'" in msg
    assert "--date-format '%d.%m.%Y %H:%M:%S.%f'" in msg
    assert "--date-format '%m.%d.%Y %H:%M:%S.%f'" in msg
    md = load_bars(path, date_format="%d.%m.%Y %H:%M:%S.%f")
    last = pd.Timestamp("2017-01-01") + (N - 1) * pd.Timedelta("30min")
    assert pd.Timestamp(md.timestamps[-1]) == last


def test_epoch_milliseconds_crypto_export(tmp_path):
    df = random_ohlcv(N, seed=2, capitalised=True)
    ts = pd.date_range("2021-03-01", periods=N, freq="1min")
    df.insert(0, "open_time", (ts - pd.Timestamp("1970-01-01")) // pd.Timedelta("1ms"))
    df.columns = [c.lower() for c in df.columns]
    path = tmp_path / "BTCUSDT-1m.csv"
    df.to_csv(path, index=False)
    md = load_bars(path)
    np.testing.assert_array_equal(md.timestamps, ts[WARMUP_BARS:].to_numpy())
    seconds = df.assign(open_time=df["open_time"] // 1000)
    seconds.to_csv(path, index=False)
    np.testing.assert_array_equal(load_bars(path).timestamps, md.timestamps)


def test_numbers_that_are_no_epoch_name_the_options(tmp_path):
    df = random_ohlcv(N, capitalised=True)
    dates = pd.bdate_range("2019-01-02", periods=N)
    df.insert(0, "date", dates.strftime("%Y%m%d").astype(int))
    path = tmp_path / "ymd.csv"
    df.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"--timestamp-unit .* --date-format"):
        load_bars(path)
    md = load_bars(path, date_format="%Y%m%d")
    assert pd.Timestamp(md.timestamps[0]) == dates[WARMUP_BARS]


def test_long_format_multi_symbol_file(tmp_path):
    dates = pd.bdate_range("2020-01-01", periods=N)
    frames = []
    for k, sym in enumerate(["AAPL", "MSFT", "SPY"]):
        f = random_ohlcv(N, seed=10 + k, capitalised=True)
        f.insert(0, "Symbol", sym)
        f.insert(0, "Date", dates.strftime("%Y-%m-%d"))
        frames.append(f)
    long = pd.concat(frames).sort_values(["Date", "Symbol"], kind="stable")
    path = tmp_path / "prices_long.csv"
    long.to_csv(path, index=False)
    md = load_bars(path)
    assert md.instruments == ("AAPL", "MSFT", "SPY")
    assert list(md.bars_per_instrument) == [N - WARMUP_BARS] * 3
    np.testing.assert_allclose(
        md.instrument("MSFT").close, frames[1]["Close"].to_numpy()[WARMUP_BARS:]
    )


def test_several_files_are_several_instruments(tmp_path):
    paths = []
    for k, sym in enumerate(["EURUSD", "GBPUSD"]):
        df = random_ohlcv(N, seed=20 + k, capitalised=True)
        df.insert(0, "timestamp", pd.date_range("2022-01-03", periods=N, freq="1h"))
        paths.append(tmp_path / f"{sym}.csv")
        df.to_csv(paths[-1], index=False)
    md = load_bars(paths)
    assert md.instruments == ("EURUSD", "GBPUSD")
    (tmp_path / "copy").mkdir()
    twin = tmp_path / "copy" / "EURUSD.csv"
    twin.write_bytes(paths[0].read_bytes())
    with pytest.raises(DataError, match="also in"):
        load_bars([paths[0], twin])


def test_errors_name_file_line_and_column(tmp_path):
    df = random_ohlcv(N, capitalised=True)
    df.insert(0, "Date", pd.bdate_range("2019-01-02", periods=N).strftime("%Y-%m-%d"))
    bad = df.astype({"Close": object})
    bad.loc[7, "Close"] = "n/a?"
    path = tmp_path / "bad.csv"
    bad.to_csv(path, index=False)
    with pytest.raises(
        DataError, match=r"bad\.csv, line 9, column 'Close': 'n/a\?' is not a number"
    ):
        load_bars(path)
    unsorted = df.copy()
    unsorted.loc[[10, 11], "Date"] = unsorted.loc[[11, 10], "Date"].to_numpy()
    unsorted.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"bad\.csv, line 13: .* earlier than line 12's .*--sort"):
        load_bars(path)
    df.drop(columns=["Volume"]).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"no 'volume' column .* --column volume=NAME"):
        load_bars(path)
    df.rename(columns={"Date": "When"}).to_csv(path, index=False)
    with pytest.raises(DataError, match="--time-column"):
        load_bars(path)
    assert load_bars(path, time_column="when").n_bars == N - WARMUP_BARS
    with pytest.raises(DataError, match="no such file"):
        load_bars(tmp_path / "absent.csv")
    with pytest.raises(DataError, match="line 5: '2019-13-45' does not match --date-format"):
        d = df.copy()
        d.loc[3, "Date"] = "2019-13-45"
        d.to_csv(path, index=False)
        load_bars(path, date_format="%Y-%m-%d")


# docs/RELIABILITY.md: load_bars' peak memory (traced Python allocations plus Arrow's pool) is at
# most this many times the CSV's size (the measured multiples are there).
MEMORY_BOUND = 10.0

_PEAK_OF_LOADING = """
import sys, tracemalloc
from gpu_trading_env.data.loaders import load_bars
try:
    import pyarrow
    pool = pyarrow.default_memory_pool()
except ImportError:
    pool = None
load_bars(sys.argv[2])  # the imports and caches of a first load are not the file's
tracemalloc.start()
load_bars(sys.argv[1])
arrow = 0 if pool is None else pool.max_memory()  # pandas' strings live in Arrow's pool
print(tracemalloc.get_traced_memory()[1] + arrow)
"""


def _minute_bars_csv(path, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 1e-4, n)))
    open_ = np.r_[close[0], close[:-1]]
    frame = pd.DataFrame(
        {
            "timestamp": pd.date_range("2000-01-01", periods=n, freq="1min").strftime(
                "%Y-%m-%d %H:%M:%S"
            ),
            "open": open_.round(6),
            "high": (np.maximum(open_, close) * (1 + rng.uniform(0, 1e-4, n))).round(6),
            "low": (np.minimum(open_, close) * (1 - rng.uniform(0, 1e-4, n))).round(6),
            "close": close.round(6),
            "volume": rng.integers(1, 10_000, n),
        }
    )
    frame.to_csv(path, index=False)
    return path


def test_a_bar_file_loads_in_a_small_multiple_of_its_size(tmp_path):
    big = _minute_bars_csv(tmp_path / "big.csv", 200_000)
    small = _minute_bars_csv(tmp_path / "small.csv", WARMUP_BARS + 10)
    run = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_LOADING, str(big), str(small)],
        capture_output=True,
        text=True,
        check=True,
    )
    peak = int(run.stdout.split()[-1])
    assert peak <= MEMORY_BOUND * big.stat().st_size, peak / big.stat().st_size
