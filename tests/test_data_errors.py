"""Odd data files: each gives one clear outcome. Constant prices proceed flat (nothing predicts a
constant series); a Parquet file with duplicate columns and a bad ``.csv.gz`` raise one
``DataError`` line naming the file and the problem."""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest

from agents import cli
from agents.pipelines.input_selection import select_inputs
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
