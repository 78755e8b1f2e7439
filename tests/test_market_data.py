"""MarketData loading and validation, the built-in features (no look-ahead), synthetic markets."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from gpu_trading_env.data import synthetic
from gpu_trading_env.data.features import FEATURE_NAMES, WARMUP_BARS, compute_features
from gpu_trading_env.data.market_data import MarketData

N_RAW = WARMUP_BARS + 200  # small but past the warm-up


def bars(n: int = N_RAW, seed: int = 0) -> pd.DataFrame:
    return synthetic.gbm(n, seed=seed)


def ohlcv(df: pd.DataFrame) -> list[np.ndarray]:
    return [df[c].to_numpy(dtype=np.float64) for c in ("open", "high", "low", "close", "volume")]


# ----------------------------------------------------------------------------- features


def test_feature_set_shape_and_names():
    assert len(FEATURE_NAMES) == 51
    assert len(set(FEATURE_NAMES)) == 51
    f = compute_features(*ohlcv(bars()))
    assert f.shape == (N_RAW, 51)
    assert f.dtype == np.float32
    assert f.flags.c_contiguous
    assert np.isnan(f[:WARMUP_BARS]).all()
    assert np.isfinite(f[WARMUP_BARS:]).all()
    assert np.abs(f[WARMUP_BARS:]).max() <= 10.0


def test_features_no_look_ahead():
    """Changing any bar after t changes no feature of bar t or earlier (bit for bit)."""
    df = bars(WARMUP_BARS + 1500, seed=3)
    o, h, lo, c, v = ohlcv(df)
    base = compute_features(o, h, lo, c, v)
    rng = np.random.default_rng(7)
    for t in (0, 5, WARMUP_BARS - 1, WARMUP_BARS, WARMUP_BARS + 1, WARMUP_BARS + 700, len(c) - 2):
        n_after = len(c) - t - 1
        # Wild but valid future: new random walk, crash and spike, new volumes.
        c2 = c.copy()
        c2[t + 1 :] = c[t] * np.exp(np.cumsum(rng.normal(0, 0.05, n_after)))
        c2[t + 1 :: 7] *= 50.0
        o2 = o.copy()
        o2[t + 1 :] = c2[t + 1 :] * np.exp(rng.normal(0, 0.01, n_after))
        h2 = h.copy()
        lo2 = lo.copy()
        h2[t + 1 :] = np.maximum(o2[t + 1 :], c2[t + 1 :]) * 1.02
        lo2[t + 1 :] = np.minimum(o2[t + 1 :], c2[t + 1 :]) * 0.97
        v2 = v.copy()
        v2[t + 1 :] = rng.lognormal(12.0, 2.0, n_after)
        pert = compute_features(o2, h2, lo2, c2, v2)
        np.testing.assert_array_equal(pert[: t + 1], base[: t + 1])
        # Truncating the future away altogether must not matter either.
        prefix = compute_features(o[: t + 1], h[: t + 1], lo[: t + 1], c[: t + 1], v[: t + 1])
        np.testing.assert_array_equal(prefix, base[: t + 1])
        # And the perturbation is real: some later feature did change.
        if t + 1 >= WARMUP_BARS:
            assert not np.array_equal(pert[WARMUP_BARS:], base[WARMUP_BARS:])


def test_market_data_rows_match_compute_features_after_warmup():
    df = bars()
    md = MarketData.from_dataframe(df)
    f = compute_features(*ohlcv(df))
    np.testing.assert_array_equal(md.features, f[WARMUP_BARS:])
    np.testing.assert_array_equal(md.close, df["close"].to_numpy()[WARMUP_BARS:])
    np.testing.assert_array_equal(md.open, df["open"].to_numpy()[WARMUP_BARS:])
    assert md.timestamps[0] == df.index[WARMUP_BARS].to_datetime64()


def test_features_handle_flat_market():
    n = WARMUP_BARS + 50
    p = np.full(n, 10.0)
    f = compute_features(p, p, p, p, np.zeros(n))
    assert np.isfinite(f[WARMUP_BARS:]).all()


def test_compute_features_on_a_long_series():
    # Speed is a benchmark's business (a time bound failed on a loaded 2-core machine); here
    # the long series must come out whole and finite after the warm-up.
    df = bars(100_000, seed=1)
    f = compute_features(*ohlcv(df))
    assert f.shape == (100_000, len(FEATURE_NAMES)) and f.dtype == np.float32
    assert np.isfinite(f[WARMUP_BARS:]).all() and np.isnan(f[:WARMUP_BARS]).any()


# ----------------------------------------------------------------------------- loading


def test_from_dataframe_datetime_index_and_timestamp_column_agree():
    df = bars()
    a = MarketData.from_dataframe(df)
    b = MarketData.from_dataframe(df.reset_index())  # auto-detected "timestamp" column
    c = MarketData.from_dataframe(
        df.reset_index().rename(columns={"timestamp": "When"}), timestamp_column="when"
    )
    for other in (b, c):
        np.testing.assert_array_equal(a.features, other.features)
        np.testing.assert_array_equal(a.timestamps, other.timestamps)
    assert a.timestamps.dtype == np.dtype("datetime64[ns]")
    for name in ("open", "high", "low", "close", "volume"):
        assert getattr(a, name).dtype == np.float64
        assert getattr(a, name).shape == (a.n_bars,)
    assert a.n_bars == len(a) == N_RAW - WARMUP_BARS
    assert a.instrument_offsets.tolist() == [0, a.n_bars]
    assert a.instruments == ("asset",)
    assert "MarketData(" in repr(a)


def test_case_insensitive_columns_and_rename_map():
    df = bars()
    upper = df.rename(columns=str.upper)
    renamed = df.rename(columns={"close": "Adj Close", "volume": "Vol"})
    a = MarketData.from_dataframe(df)
    b = MarketData.from_dataframe(upper)
    c = MarketData.from_dataframe(renamed, columns={"Adj Close": "close", "Vol": "volume"})
    np.testing.assert_array_equal(a.features, b.features)
    np.testing.assert_array_equal(a.features, c.features)


def test_string_and_tz_aware_timestamps():
    df = bars().reset_index()
    naive = MarketData.from_dataframe(df)
    s = df.copy()
    s["timestamp"] = s["timestamp"].dt.strftime("%Y-%m-%d %H:%M:%S")
    np.testing.assert_array_equal(MarketData.from_dataframe(s).timestamps, naive.timestamps)
    aware = df.copy()
    aware["timestamp"] = aware["timestamp"].dt.tz_localize("UTC").dt.tz_convert("US/Eastern")
    np.testing.assert_array_equal(MarketData.from_dataframe(aware).timestamps, naive.timestamps)


def test_csv_round_trip(tmp_path):
    df = bars()
    path = tmp_path / "btc.csv"
    df.to_csv(path)
    md = MarketData.from_csv(path)
    ref = MarketData.from_dataframe(df)
    assert md.instruments == ("btc",)
    assert md.metadata["source"] == "csv"
    np.testing.assert_allclose(md.close, ref.close, rtol=1e-15)
    np.testing.assert_array_equal(md.timestamps, ref.timestamps)
    np.testing.assert_allclose(md.features, ref.features, atol=1e-4)


def test_parquet_round_trip(tmp_path):
    pytest.importorskip("pyarrow")
    df = bars()
    p1 = tmp_path / "a.parquet"
    df.to_parquet(p1)  # DatetimeIndex stored as the index
    p2 = tmp_path / "b.parquet"
    df.reset_index().to_parquet(p2)  # timestamp as a column
    ref = MarketData.from_dataframe(df)
    for p in (p1, p2):
        md = MarketData.from_parquet(p)
        np.testing.assert_array_equal(md.features, ref.features)
        np.testing.assert_array_equal(md.timestamps, ref.timestamps)


def test_parquet_without_pyarrow_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"pip install gpu-trading-env\[parquet\]"):
        MarketData.from_parquet(tmp_path / "x.parquet")


def test_multi_instrument_offsets_and_per_instrument_features():
    a = bars(N_RAW, seed=1)
    b = bars(N_RAW + 37, seed=2)
    long = pd.concat([a.assign(symbol="AAA"), b.assign(symbol="BBB")]).reset_index()
    # Interleave rows: each instrument keeps its own order, instruments their first appearance.
    long = long.iloc[np.argsort(long["timestamp"].to_numpy(), kind="stable")]
    md = MarketData.from_dataframe(long)
    assert md.instruments == ("AAA", "BBB")
    assert md.instrument_offsets.dtype == np.int64
    assert md.instrument_offsets.tolist() == [0, 200, 437]
    assert md.bars_per_instrument.tolist() == [200, 237]
    assert md.n_instruments == 2
    for name, raw in (("AAA", a), ("BBB", b)):
        one = md.instrument(name)
        np.testing.assert_array_equal(one.features, compute_features(*ohlcv(raw))[WARMUP_BARS:])
        np.testing.assert_array_equal(one.close, raw["close"].to_numpy()[WARMUP_BARS:])
    np.testing.assert_array_equal(md.instrument(1).close, md.instrument("BBB").close)
    back = MarketData.from_dataframe(md.to_dataframe(), features=list(md.feature_names))
    np.testing.assert_array_equal(back.features, md.features)
    np.testing.assert_array_equal(back.instrument_offsets, md.instrument_offsets)
    assert back.instruments == md.instruments


def test_user_feature_columns():
    df = bars(50)
    df["f1"] = np.arange(50.0)
    df["f2"] = -np.arange(50.0)
    md = MarketData.from_dataframe(df, features=["f1", "f2"])
    assert md.feature_names == ("f1", "f2")
    assert md.n_bars == 50  # no warm-up for user features
    np.testing.assert_array_equal(md.features[:, 0], np.arange(50, dtype=np.float32))
    df.loc[df.index[9], "f2"] = np.nan
    with pytest.raises(ValueError, match=r"feature column 'f2' has NaN at row 9"):
        MarketData.from_dataframe(df, features=["f1", "f2"])


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("column", "row", "value", "pattern"),
    [
        ("close", 17, np.nan, r"column 'close' has NaN at row 17"),
        ("open", 3, np.inf, r"column 'open' has an infinite value at row 3"),
        ("volume", 40, np.nan, r"column 'volume' has NaN at row 40"),
        ("low", 11, -1.0, r"column 'low' has a non-positive price -1.0 at row 11"),
        ("close", 12, 0.0, r"column 'close' has a non-positive price 0.0 at row 12"),
        ("volume", 8, -5.0, r"column 'volume' has a negative value -5.0 at row 8"),
        ("high", 21, 1e-3, r"high < low: column 'high' 0.001 < column 'low' .* at row 21"),
        (
            "close",
            22,
            1e6,
            r"high below max\(open, close\): column 'high' .* < column 'close' 1000000.0 at row 22",
        ),
        (
            "open",
            23,
            1e-3,
            r"low above min\(open, close\): column 'low' .* > column 'open' 0.001 at row 23",
        ),
    ],
)
def test_bad_values_name_problem_column_and_row(column, row, value, pattern):
    df = bars()
    df.iloc[row, df.columns.get_loc(column)] = value
    with pytest.raises(ValueError, match=pattern) as err:
        MarketData.from_dataframe(df)
    assert "instrument 'asset'" in str(err.value)
    assert str(df.index[row]) in str(err.value)


def test_first_offending_row_is_reported():
    df = bars()
    df.iloc[[30, 5, 90], df.columns.get_loc("close")] = np.nan
    with pytest.raises(ValueError, match=r"at row 5 "):
        MarketData.from_dataframe(df)


def test_unsorted_and_repeated_timestamps():
    df = bars().reset_index()
    rep = df.copy()
    rep.loc[50, "timestamp"] = rep.loc[49, "timestamp"]
    with pytest.raises(ValueError, match=r"repeated timestamp: row 50 .* follows row 49"):
        MarketData.from_dataframe(rep)
    uns = df.copy()
    uns.loc[60, "timestamp"] = uns.loc[10, "timestamp"]
    with pytest.raises(ValueError, match=r"not sorted.*row 60"):
        MarketData.from_dataframe(uns)
    nat = df.copy()
    nat["timestamp"] = nat["timestamp"].astype(str)
    nat.loc[7, "timestamp"] = "not a date"
    with pytest.raises(ValueError, match=r"unparseable value 'not a date' at row 7"):
        MarketData.from_dataframe(nat)


def test_per_instrument_validation_names_instrument_and_input_row():
    a = bars(seed=1).assign(instrument="A")
    b = bars(seed=2).assign(instrument="B")
    df = pd.concat([a, b]).reset_index()
    df.loc[N_RAW + 4, "close"] = -2.0  # row 4 of instrument B, row N_RAW+4 of the input
    with pytest.raises(ValueError, match=rf"row {N_RAW + 4} .*instrument 'B'"):
        MarketData.from_dataframe(df)
    # Instruments may share timestamps; repeats are checked within an instrument only.
    df.loc[N_RAW + 4, "close"] = df.loc[N_RAW + 4, "open"]
    assert MarketData.from_dataframe(df).n_instruments == 2


def test_missing_columns_are_named():
    df = bars().drop(columns=["volume", "high"])
    with pytest.raises(ValueError, match=r"missing column\(s\) \['high', 'volume'\]"):
        MarketData.from_dataframe(df)
    with pytest.raises(ValueError, match=r"no timestamps"):
        MarketData.from_dataframe(bars().reset_index(drop=True))
    with pytest.raises(ValueError, match=r"missing timestamp column 'ts'"):
        MarketData.from_dataframe(bars(), timestamp_column="ts")
    with pytest.raises(ValueError, match=r"not numeric at row 2"):
        df = bars()
        df["close"] = df["close"].astype(object)
        df.iloc[2, df.columns.get_loc("close")] = "abc"
        MarketData.from_dataframe(df)


def test_too_few_bars():
    with pytest.raises(
        ValueError, match=rf"has {WARMUP_BARS + 1} bars .* at least {WARMUP_BARS + 2}"
    ):
        MarketData.from_dataframe(bars(WARMUP_BARS + 1))
    assert MarketData.from_dataframe(bars(WARMUP_BARS + 2)).n_bars == 2
    with pytest.raises(ValueError, match=r"at least"):
        MarketData.from_dataframe(bars(WARMUP_BARS + 20), min_bars=21)


def test_arrays_are_read_only():
    md = MarketData.from_dataframe(bars())
    with pytest.raises(ValueError):
        md.close[0] = 1.0
    with pytest.raises(ValueError):
        md.features[0, 0] = 1.0


# ----------------------------------------------------------------------------- split, folds


@pytest.fixture(scope="module")
def multi() -> MarketData:
    return MarketData.synthetic("gbm", n_bars=1000, n_instruments=2, seed=5)


def test_split_by_fraction(multi):
    before, after = multi.split(0.7)
    assert before.bars_per_instrument.tolist() == [700, 700]
    assert after.bars_per_instrument.tolist() == [300, 300]
    for k in range(2):
        np.testing.assert_array_equal(
            np.concatenate([before.instrument(k).close, after.instrument(k).close]),
            multi.instrument(k).close,
        )
        assert before.instrument(k).timestamps[-1] < after.instrument(k).timestamps[0]
    assert before.features.flags.c_contiguous and after.features.dtype == np.float32
    with pytest.raises(ValueError):
        multi.split(1.0)


def test_split_by_date(multi):
    when = pd.Timestamp(multi.timestamps[400])
    before, after = multi.split(str(when))
    assert (before.timestamps < when.to_datetime64()).all()
    assert (after.timestamps >= when.to_datetime64()).all()
    assert before.n_bars + after.n_bars == multi.n_bars
    assert before.bars_per_instrument.tolist() == [400, 400]
    with pytest.raises(ValueError, match="each side needs"):
        multi.split("1999-01-01")


def test_walk_forward_folds_are_ordered_and_disjoint(multi):
    folds = multi.walk_forward(4)
    assert len(folds) == 4
    for k in range(multi.n_instruments):
        prev_test_end = None
        for train, test in folds:
            tr = train.instrument(k).timestamps
            te = test.instrument(k).timestamps
            assert tr[-1] < te[0]  # train strictly before test
            # train ends right before test begins (consecutive windows)
            i = np.searchsorted(multi.instrument(k).timestamps, te[0])
            assert multi.instrument(k).timestamps[i - 1] == tr[-1]
            if prev_test_end is not None:
                assert te[0] > prev_test_end  # test windows ordered, non-overlapping
            prev_test_end = te[-1]
        assert prev_test_end == multi.instrument(k).timestamps[-1]
    assert folds[0][1].bars_per_instrument.tolist() == [200, 200]
    fixed = multi.walk_forward(3, train_bars=300, test_bars=100)
    assert [f[0].bars_per_instrument[0] for f in fixed] == [300] * 3
    expanding = multi.walk_forward(3, test_bars=100, expanding=True)
    assert [int(f[0].bars_per_instrument[0]) for f in expanding] == [700, 800, 900]
    with pytest.raises(ValueError, match="too few"):
        multi.walk_forward(3, train_bars=900, test_bars=100)


def test_slice_bars(multi):
    s = multi.slice_bars(10, -10)
    assert s.bars_per_instrument.tolist() == [980, 980]
    np.testing.assert_array_equal(s.instrument(1).close, multi.instrument(1).close[10:-10])


# ----------------------------------------------------------------------------- synthetic


@pytest.mark.parametrize("kind", ["planted", "gbm", "regime"])
def test_synthetic_deterministic_and_consistent(kind):
    a = MarketData.synthetic(kind, n_bars=500, n_instruments=2, seed=11)
    b = MarketData.synthetic(kind, n_bars=500, n_instruments=2, seed=11)
    c = MarketData.synthetic(kind, n_bars=500, n_instruments=2, seed=12)
    np.testing.assert_array_equal(a.features, b.features)
    np.testing.assert_array_equal(a.close, b.close)
    assert not np.array_equal(a.close, c.close)
    assert not np.array_equal(a.instrument(0).close, a.instrument(1).close)
    assert a.bars_per_instrument.tolist() == [500, 500]
    assert (a.low > 0).all() and (a.volume > 0).all()
    assert (a.low <= np.minimum(a.open, a.close)).all()
    assert (np.maximum(a.open, a.close) <= a.high).all()
    assert a.metadata["kind"] == kind and a.metadata["seed"] == 11


def test_generators_return_valid_frames():
    for df in (
        synthetic.gbm(1000, seed=1),
        synthetic.regime_switching(1000, seed=1),
        synthetic.planted_signal(1000, seed=1),
    ):
        assert isinstance(df.index, pd.DatetimeIndex)
        assert df.index[0] == pd.Timestamp("2020-01-01")
        assert (df["low"] <= df[["open", "close"]].min(axis=1)).all()
        assert (df["high"] >= df[["open", "close"]].max(axis=1)).all()
        assert (df["volume"] > 0).all()
    regimes = synthetic.regime_switching(5000, seed=2)["regime"]
    assert set(regimes.unique()) == {0, 1, 2}


def test_default_data():
    md = MarketData.default()
    assert MarketData.default() is md
    assert md.features.shape == (20_000, 51)
    assert md.features.dtype == np.float32
    assert md.close.dtype == np.float64
    assert md.feature_names == FEATURE_NAMES
    assert md.metadata["kind"] == "planted"
    np.testing.assert_array_equal(md.close, MarketData.synthetic().close)


def test_planted_rule_earns_documented_return():
    md = MarketData.default()
    expected = md.metadata["rule_expected_return"]
    phi, sigma = md.metadata["phi"], md.metadata["sigma"]
    assert expected == pytest.approx(synthetic.planted_rule_expected_return(phi, sigma))
    # First-order formula phi * s * sqrt(2/pi) agrees to well under 1%.
    assert expected == pytest.approx(
        synthetic.planted_rule_expected_log_return(phi, sigma), rel=1e-2
    )
    exposure = synthetic.planted_rule_exposure(md)
    assert exposure.shape == (md.n_bars,)
    assert set(np.unique(exposure)) <= {-1.0, 0.0, 1.0}
    assert exposure[0] == 0.0
    # The rule at bar t uses closes <= t: truncating the data leaves earlier exposures unchanged.
    np.testing.assert_array_equal(
        synthetic.planted_rule_exposure(md.slice_bars(0, 5000)), exposure[:5000]
    )
    # Trade at close t, mark at close t+1 (the env's fill="close").
    ret = exposure[:-1] * (md.close[1:] / md.close[:-1] - 1.0)
    ret = ret[exposure[:-1] != 0]
    se = ret.std() / np.sqrt(len(ret))
    assert ret.mean() > 0
    assert abs(ret.mean() - expected) < 4 * se
    # The edge is visible in the built-in features: logret_1 tracks the rule's sign.
    f = md.features[:, FEATURE_NAMES.index("logret_1")]
    agree = np.mean(np.sign(f[1:]) == exposure[1:])
    assert agree > 0.95


def test_planted_rule_exposure_multi_instrument():
    md = MarketData.synthetic("planted", n_bars=300, n_instruments=3, seed=4)
    e = synthetic.planted_rule_exposure(md)
    assert (e[md.instrument_offsets[:-1]] == 0.0).all()
    for k in range(3):
        one = md.instrument(k)
        np.testing.assert_array_equal(
            e[md.instrument_rows(k)], synthetic.planted_rule_exposure(one)
        )
