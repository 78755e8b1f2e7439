"""One reader of bar files: ``MarketData.from_csv``, ``make_vec(data=path)`` and the command line.

A file that loads through one of them loads to the same arrays through the other two, and a
file that fails fails through all three with one message naming the file, the column and what
is allowed. (Before, ``from_csv`` and ``data=path`` read with ``pandas.read_csv`` and
``from_dataframe``'s rules while the CLI had its own: an epoch-millisecond export or a
``Gmt time`` column loaded in the CLI and failed in Python.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from random_bars import random_ohlcv

from agents import cli
from agents.cli.data import load_data
from agents.cli.options import UsageError
from gpu_trading_env import MarketData, TradingVectorEnv
from gpu_trading_env.data.features import WARMUP_BARS

N = WARMUP_BARS + 30


def through_all_three(path: Path) -> list[MarketData]:
    """The file's MarketData from ``from_csv``, ``TradingVectorEnv(data=path)`` and the CLI."""
    args = cli.build_parser().parse_args(["backtest", "--data", str(path)])
    return [
        MarketData.from_csv(path),
        TradingVectorEnv(2, "cpu", data=str(path), episode_length=8).data,
        load_data(args),
    ]


def errors_of_all_three(path: Path) -> list[str]:
    """The message each of the three raises for the file."""
    messages = []
    for read in (
        lambda: MarketData.from_csv(path),
        lambda: TradingVectorEnv(2, "cpu", data=str(path), episode_length=8),
        lambda: load_data(cli.build_parser().parse_args(["backtest", "--data", str(path)])),
    ):
        with pytest.raises((ValueError, UsageError)) as exc:
            read()
        messages.append(str(exc.value))
    return messages


def yahoo(path: Path) -> None:
    df = random_ohlcv(N, capitalised=True)
    df.insert(0, "Date", pd.bdate_range("2019-01-02", periods=N).strftime("%Y-%m-%d"))
    df.insert(5, "Adj Close", df["Close"].round(2))
    df.to_csv(path, index=False)


def epoch_ms(path: Path) -> None:
    df = random_ohlcv(N, seed=2)
    stamps = pd.date_range("2021-03-01", periods=N, freq="1h").as_unit("ms")
    df.insert(0, "open_time", stamps.asi8)
    df.to_csv(path, index=False)


def gmt_time_long_format(path: Path) -> None:
    parts = []
    for k, pair in enumerate(("EURUSD", "GBPUSD")):
        df = random_ohlcv(N, seed=3 + k, capitalised=True)
        ts = pd.date_range("2017-01-01 22:00", periods=N, freq="1h")
        df.insert(0, "Gmt time", ts.strftime("%d.%m.%Y %H:%M:%S.000"))
        df.insert(1, "Pair", pair)
        parts.append(df)
    pd.concat(parts).to_csv(path, index=False)


@pytest.mark.parametrize("write", [yahoo, epoch_ms, gmt_time_long_format], ids=lambda f: f.__name__)
def test_a_file_loads_the_same_through_every_reader(tmp_path, write):
    path = tmp_path / f"{write.__name__}.csv"
    write(path)
    first, *others = through_all_three(path)
    assert first.n_bars > 0
    for other in others:
        assert other.instruments == first.instruments
        np.testing.assert_array_equal(other.timestamps, first.timestamps)
        np.testing.assert_array_equal(other.instrument_offsets, first.instrument_offsets)
        for column in ("open", "high", "low", "close", "volume", "features"):
            np.testing.assert_array_equal(getattr(other, column), getattr(first, column))


def test_epoch_milliseconds_read_as_utc_times(tmp_path):
    path = tmp_path / "crypto.csv"
    epoch_ms(path)
    md = MarketData.from_csv(path)
    expected = pd.date_range("2021-03-01", periods=N, freq="1h")[WARMUP_BARS:]
    np.testing.assert_array_equal(md.timestamps, expected.to_numpy())


def _broken(path: Path, **changes) -> None:
    df = random_ohlcv(N)
    df.insert(0, "date", pd.bdate_range("2019-01-02", periods=N).strftime("%Y-%m-%d"))
    for column, value in changes.items():
        if value is None:
            df = df.drop(columns=column)
        else:
            df[column] = df[column].astype(object)
            df.loc[4, column] = value
    df.to_csv(path, index=False)


def test_a_missing_column_fails_the_same_naming_file_and_column(tmp_path):
    path = tmp_path / "no_close.csv"
    _broken(path, close=None)
    messages = errors_of_all_three(path)
    assert len(set(messages)) == 1, messages
    assert "no_close.csv" in messages[0] and "'close'" in messages[0]
    assert "['date', 'open', 'high', 'low', 'volume']" in messages[0]  # what the file has


def test_a_bad_value_fails_the_same_naming_file_line_and_column(tmp_path):
    path = tmp_path / "bad_value.csv"
    _broken(path, close="n/a?")
    messages = errors_of_all_three(path)
    assert len(set(messages)) == 1, messages
    assert "bad_value.csv, line 6, column 'close': 'n/a?' is not a number" in messages[0]
    assert messages[0].endswith("write a plain number there (such as 1234.5), or delete that line")


def test_an_unknown_file_type_fails_the_same_naming_what_is_allowed(tmp_path):
    path = tmp_path / "bars.xlsx"
    path.write_bytes(b"PK\x03\x04")
    messages = errors_of_all_three(path)
    assert len(set(messages)) == 1, messages
    assert (
        "bars.xlsx: unknown file type '.xlsx': allowed is .csv, .csv.gz or .parquet"
        in (messages[0])
    )


def test_from_csv_renames_only_to_ohlcv_fields(tmp_path):
    path = tmp_path / "yahoo.csv"
    yahoo(path)
    adj = MarketData.from_csv(path, columns={"Adj Close": "close"})
    np.testing.assert_allclose(adj.close, pd.read_csv(path)["Adj Close"].to_numpy()[WARMUP_BARS:])
    with pytest.raises(ValueError, match=r"columns = \{'Adj Close': 'adj'\} is invalid for a fi"):
        MarketData.from_csv(path, columns={"Adj Close": "adj"})
