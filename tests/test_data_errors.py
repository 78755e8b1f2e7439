"""Odd data files: each gives one clear outcome. Constant prices proceed flat (nothing predicts a
constant series); a Parquet file with duplicate columns and a bad ``.csv.gz`` raise one
``DataError`` line naming the file and the problem."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest
from random_bars import random_ohlcv

from agents import cli
from agents.pipelines.input_selection import select_inputs
from gpu_trading_env.data.features import WARMUP_BARS
from gpu_trading_env.data.loaders import DataError, load_bars
from gpu_trading_env.data.market_data import MarketData

N = 1500


def _bars(close: np.ndarray, volume: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "time": pd.date_range("2021-01-04", periods=len(close), freq="1h"),
            "open": close,
            "high": close,
            "low": close,
            "close": close,
            "volume": volume,
        }
    )


def _constant_prices() -> pd.DataFrame:
    # The volume moves, so the volume features vary while every next return is 0.
    return _bars(np.full(N, 100.0), np.random.default_rng(1).uniform(1.0, 100.0, N))


def test_constant_prices_keep_no_input() -> None:
    sel = select_inputs(MarketData.from_dataframe(_constant_prices()))
    assert sel.kept == () and sel.regime is None
    assert sel.p_value == 1.0 and set(sel.feature_p_values.values()) == {1.0}


def test_train_on_constant_prices_proceeds_flat(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    _constant_prices().to_csv("flat.csv", index=False)
    args = ["train", "--data", "flat.csv", "--out", "r", "--device", "cpu", "--timesteps", "500"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "0 of 51 features" in out and "stays flat" in out


def test_train_on_a_yahoo_file_says_which_close_it_used(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    df = _bars(np.exp(np.linspace(4.0, 4.2, N)), np.full(N, 1e6))
    df.insert(5, "Adj Close", df["close"] * np.where(np.arange(N) < N // 2, 0.8, 1.0))
    df.to_csv("spy.csv", index=False)
    args = ["train", "--data", "spy.csv", "--out", "r", "--device", "cpu", "--timesteps", "500"]
    assert cli.main(args) == 0
    basis = json.loads((tmp_path / "r" / "metrics.json").read_text())["data"]["price_basis"]
    assert basis.startswith("adjusted: close is 'Adj Close'; open, high and low scaled by")
    err = capsys.readouterr().err
    assert f"note: prices {basis} (--prices raw: the file's close as it is)" in err
    assert cli.main([*args[:-4], "--out", "raw", "--prices", "raw", *args[-4:]]) == 0
    basis = json.loads((tmp_path / "raw" / "metrics.json").read_text())["data"]["price_basis"]
    assert basis == "raw: close is 'close' as in the file (its 'Adj Close' unused: --prices raw)"


def _parquet_with_duplicate_close(path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    c = np.linspace(100.0, 110.0, 400)
    ts = pd.date_range("2021-01-04", periods=len(c), freq="1h")
    names = ["time", "open", "high", "low", "close", "close", "volume"]
    cols = [pa.array(ts)] + [pa.array(c)] * 5 + [pa.array(np.ones(len(c)))]
    pq.write_table(pa.table(cols, names=names), path)


def test_duplicate_parquet_columns_name_the_file_and_the_columns(tmp_path) -> None:
    path = tmp_path / "dup.parquet"
    _parquet_with_duplicate_close(path)
    with pytest.raises(DataError, match=r"dup\.parquet: duplicate column names \['close'\]"):
        load_bars(path)


def test_a_corrupt_parquet_file_names_the_file(tmp_path) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / "junk.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"junk\.parquet: not a readable Parquet file"):
        load_bars(path)


def _truncated_gz(path) -> None:
    raw = gzip.compress(_bars(np.linspace(1, 2, 400), np.ones(400)).to_csv(index=False).encode())
    path.write_bytes(raw[: len(raw) // 2])


@pytest.mark.parametrize(
    ("write", "detail"),
    [
        (lambda p: p.write_text("time,open\n1,2\n"), "BadGzipFile"),  # plain text named .gz
        (_truncated_gz, "EOFError"),
    ],
)
def test_a_bad_csv_gz_names_the_file(tmp_path, write, detail) -> None:
    path = tmp_path / "bars.csv.gz"
    write(path)
    with pytest.raises(DataError, match=r"bars\.csv\.gz: not a readable gzip-compressed CSV "):
        load_bars(path)
    with pytest.raises(DataError, match=detail):
        load_bars(path)


def test_the_cli_prints_one_line_for_a_bad_file(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    _parquet_with_duplicate_close(tmp_path / "dup.parquet")
    assert cli.main(["backtest", "--data", "dup.parquet", "--out", "r"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dup.parquet: duplicate column names ['close']" in err[0]


def test_the_wald_test_of_a_constant_series_is_no_evidence() -> None:
    # --all-inputs tests the features' slopes on the next return with the same regression.
    from gpu_trading_env.reports.significance import regression_slopes_test

    x = np.random.default_rng(2).normal(size=(200, 3))
    test = regression_slopes_test(x, np.zeros(200))
    assert test["statistic"] == 0.0 and test["p_value"] == 1.0 and test["df"] == 3


# ---------------------------------------------------------------- row order, gaps, number formats

ROWS = WARMUP_BARS + 40


def _daily(seed: int = 0) -> pd.DataFrame:
    df = random_ohlcv(ROWS, seed, capitalised=True)
    df.insert(0, "Date", pd.bdate_range("2019-01-02", periods=ROWS).strftime("%Y-%m-%d"))
    return df


def _same_bars(a: MarketData, b: MarketData) -> None:
    for c in ("open", "high", "low", "close", "volume", "timestamps", "features"):
        np.testing.assert_array_equal(getattr(a, c), getattr(b, c))


def test_a_newest_first_file_is_read_oldest_first(tmp_path) -> None:
    df = _daily()
    df.to_csv(tmp_path / "a.csv", index=False)
    df[::-1].to_csv(tmp_path / "b.csv", index=False)
    read = load_bars(tmp_path / "b.csv", name="a")
    _same_bars(read, load_bars(tmp_path / "a.csv"))
    assert read.metadata["notes"] == [f"{tmp_path / 'b.csv'}: newest-first bars read oldest first"]


def test_bars_out_of_order_name_sort(tmp_path) -> None:
    df = _daily()
    df.to_csv(tmp_path / "a.csv", index=False)
    df.sample(frac=1.0, random_state=0).to_csv(tmp_path / "b.csv", index=False)
    with pytest.raises(DataError, match=r"b\.csv, line \d+: timestamp .* is earlier than line "):
        load_bars(tmp_path / "b.csv")
    with pytest.raises(DataError, match=r"out of order; pass --sort \(sort=True\)"):
        load_bars(tmp_path / "b.csv")
    _same_bars(load_bars(tmp_path / "b.csv", sort=True, name="a"), load_bars(tmp_path / "a.csv"))


def test_repeated_timestamps_name_duplicates(tmp_path) -> None:
    df = _daily()
    r = ROWS - 10
    again = df.iloc[[r]].assign(Close=lambda d: d["Close"] * 1.0001, High=lambda d: d["High"] * 2)
    pd.concat([df.iloc[: r + 1], again, df.iloc[r + 1 :]]).to_csv(tmp_path / "d.csv", index=False)
    with pytest.raises(
        DataError,
        match=rf"d\.csv, line {r + 3}: repeated timestamp {df['Date'][r]} 00:00:00 \(also line "
        rf"{r + 2}\): pass --duplicates first or --duplicates last",
    ):
        load_bars(tmp_path / "d.csv")
    first = load_bars(tmp_path / "d.csv", duplicates="first")
    last = load_bars(tmp_path / "d.csv", duplicates="last")
    k = r - WARMUP_BARS
    assert first.n_bars == last.n_bars == ROWS - WARMUP_BARS
    assert first.close[k] == df["Close"][r] and last.close[k] == again["Close"].iloc[0]
    assert "1 bar of a repeated timestamp left out (--duplicates last)" in last.metadata["notes"][0]


def test_empty_bars_name_skip_empty(tmp_path) -> None:
    df = _daily().astype({"Volume": float})
    df.loc[150, ["Open", "High", "Low", "Close", "Volume"]] = np.nan  # Yahoo's "null" holiday
    df.to_csv(tmp_path / "e.csv", index=False, na_rep="null")
    with pytest.raises(
        DataError,
        match=r"e\.csv, line 152, column 'Open': no value .*the bar has no prices .*pass "
        r"--skip-empty \(skip_empty=True\)",
    ):
        load_bars(tmp_path / "e.csv")
    md = load_bars(tmp_path / "e.csv", skip_empty=True)
    assert md.n_bars == ROWS - 1 - WARMUP_BARS
    assert df["Date"][150] not in set(pd.DatetimeIndex(md.timestamps).strftime("%Y-%m-%d"))
    assert md.metadata["notes"] == [
        f"{tmp_path / 'e.csv'}: 1 bar with no price left out (--skip-empty)"
    ]
    df.loc[150, ["Open", "High", "Low", "Close"]] = 1.0
    df.loc[151, "High"] = np.nan  # one price missing: not an empty bar
    df.to_csv(tmp_path / "e.csv", index=False)
    with pytest.raises(DataError, match=r"line 153, column 'High': .*fill in the value or delete"):
        load_bars(tmp_path / "e.csv", skip_empty=True)


def test_comma_grouped_volumes_name_thousands(tmp_path) -> None:
    df = _daily()
    plain = df.assign(Volume=df["Volume"] * 1000)
    plain.to_csv(tmp_path / "plain.csv", index=False)
    plain.assign(Volume=plain["Volume"].map(lambda v: f"{int(v):,}")).to_csv(
        tmp_path / "grouped.csv", index=False
    )
    with pytest.raises(
        DataError,
        match=r"grouped\.csv, line 2, column 'Volume': '\d,\d{3},000' is not a number; pass "
        r"--thousands ','",
    ):
        load_bars(tmp_path / "grouped.csv")
    read = load_bars(tmp_path / "grouped.csv", read_csv_kwargs={"thousands": ","}, name="plain")
    _same_bars(read, load_bars(tmp_path / "plain.csv"))


def _cli_data(argv: list[str]) -> MarketData:
    from agents.cli.data import load_data
    from agents.cli.options import validate

    args = cli.build_parser().parse_args(["backtest", *argv])
    validate(args)
    return load_data(args)


def test_a_european_csv_names_and_takes_sep_and_decimal(tmp_path, capsys) -> None:
    df = _daily()
    df.to_csv(tmp_path / "a.csv", index=False)
    eu = tmp_path / "eu.csv"
    df.to_csv(eu, index=False, sep=";", decimal=",")
    with pytest.raises(DataError, match=r"eu\.csv: the header .* pass --sep ';' --decimal ','"):
        load_bars(eu)
    read = _cli_data(["--data", str(eu), "--sep", ";", "--decimal", ","])
    np.testing.assert_allclose(read.close, load_bars(tmp_path / "a.csv").close, rtol=1e-15)
    # thousands dots and decimal commas, newest first, with a repeated bar and an empty one
    grouped = df.assign(Volume=df["Volume"] * 1000).astype({"Volume": object})
    grouped["Volume"] = grouped["Volume"].map(lambda v: f"{int(v):,}".replace(",", "."))
    grouped.loc[5, ["Open", "High", "Low", "Close"]] = np.nan
    messy = pd.concat([grouped, grouped.iloc[[9]]])[::-1]
    messy.to_csv(eu, index=False, sep=";", decimal=",")
    argv = ["--data", str(eu), "--sep", ";", "--decimal", ","]
    with pytest.raises(cli.UsageError, match=r"line 357, column 'Open': .* pass --skip-empty"):
        _cli_data(argv)
    with pytest.raises(cli.UsageError, match=r"is not a number; pass --thousands \. --decimal ','"):
        _cli_data([*argv, "--skip-empty"])
    capsys.readouterr()
    argv = ["--sep", ";", "--decimal", ",", "--thousands", ".", "--duplicates", "first"]
    read = _cli_data(["--data", str(eu), *argv, "--skip-empty", "--sort"])
    assert read.n_bars == ROWS - 1 - WARMUP_BARS
    err = capsys.readouterr().err
    assert "note:" in err and "1 bar with no price left out" in err and "bars sorted" in err
    with pytest.raises(cli.UsageError, match=r"--sep ';;' is invalid: allowed is one character"):
        _cli_data(["--data", str(eu), "--sep", ";;"])
    with pytest.raises(cli.UsageError, match=r"--skip-empty: these options apply to --data files"):
        _cli_data(["--skip-empty"])


@pytest.mark.parametrize(
    ("last", "shown"),
    [
        ("2300-01-01", "'2300-01-01'"),
        ("01.01.2300", "'01.01.2300'"),
        ("1600-01-03", "'1600-01-03'"),
    ],
)
def test_timestamps_outside_the_range_name_file_line_and_range(tmp_path, last, shown) -> None:
    df = _daily()
    if "." in last:
        df["Date"] = pd.to_datetime(df["Date"]).dt.strftime("%d.%m.%Y")
    df.loc[ROWS - 1, "Date"] = last
    df.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(
        DataError,
        match=rf"t\.csv, column 'Date', line {ROWS + 1}: the timestamp {shown} is outside the "
        r"allowed range 1677-09-22 to 2262-04-11",
    ):
        load_bars(tmp_path / "t.csv")


def test_a_dataframe_timestamp_outside_the_range_names_its_row() -> None:
    df = _daily().rename(columns={"Date": "time"})
    df.loc[ROWS - 1, "time"] = "2300-01-01"
    with pytest.raises(
        ValueError,
        match=rf"timestamp column 'time' has 2300-01-01 00:00:00 at row {ROWS - 1}, outside the "
        r"allowed range 1677-09-22 to 2262-04-11",
    ):
        MarketData.from_dataframe(df)


def test_epoch_timestamps_outside_the_range_name_the_line(tmp_path) -> None:
    df = _daily()
    df["Date"] = pd.to_datetime(df["Date"]).astype("int64") // 10**6  # epoch ms
    df.loc[7, "Date"] = 10**16
    df.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(DataError, match=r"line 9: the timestamp 10000000000000000 is outside"):
        load_bars(tmp_path / "t.csv")
