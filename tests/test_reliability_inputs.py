"""Inputs that used to be reinterpreted or to fail with an error naming nothing: each is now
refused with a message naming the field, the value and what is allowed (docs/RELIABILITY.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpu_trading_env.data.features import WARMUP_BARS
from gpu_trading_env.data.loaders import DataError, load_bars
from gpu_trading_env.data.market_data import MarketData
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


# ---------------------------------------------------------------------- price bounds


def _bars(close: np.ndarray, n_features: int = 3) -> dict:
    """MarketData arguments with exactly these closes (open = previous close, high/low = body)."""
    close = np.asarray(close, dtype=np.float64)
    open_ = np.r_[close[0], close[:-1]]
    t = len(close)
    return dict(
        features=np.full((t, n_features), 0.5, dtype=np.float32),
        open=open_,
        high=np.maximum(open_, close),
        low=np.minimum(open_, close),
        close=close,
        volume=np.full(t, 10.0),
        timestamps=np.datetime64("2024-01-01", "ns") + np.arange(t) * np.timedelta64(1, "h"),
        instrument_offsets=[0, t],
        instruments=("x",),
        feature_names=tuple(f"f{j}" for j in range(n_features)),
    )


@pytest.mark.parametrize(
    ("close", "row", "value"),
    [
        (np.r_[np.full(20, 100.0), 1e42, np.full(20, 100.0)], 20, "1e+42"),  # one bar x1e40
        (np.full(40, 1e302), 0, "1e+302"),
        (np.full(40, 1e-13), 0, "1e-13"),
    ],
)
def test_prices_outside_the_bounds_are_refused_naming_column_row_and_range(close, row, value):
    with pytest.raises(ValueError) as err:
        MarketData(**_bars(close))
    msg = str(err.value)
    assert f"has a price {value} at row {row} " in msg
    assert "outside the allowed range [1e-12, 1e+12]" in msg and "ENV_SPEC" in msg


def test_a_spike_in_a_csv_is_refused_with_its_line(tmp_path):
    df = _ohlcv()
    df.insert(0, "time", pd.date_range("2021-01-04", periods=N, freq="1h"))
    df.loc[200, ["high", "close"]] = df.loc[200, "close"] * 1e40
    path = tmp_path / "spike.csv"
    df.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"spike\.csv.*column 'high' has a price .*e\+4\d"):
        load_bars(path)


def test_env_outputs_stay_finite_at_the_price_bounds():
    from gpu_trading_env import EnvConfig, TradingVectorEnv

    # The widest swings the bounds allow, bar after bar (1e-12 <-> 1e12), with the most units
    # and the least capital EnvConfig allows. (sizing="equity" compounds the account's value
    # from bar to bar; ENV_SPEC's "Data bounds" says why no price bound can cover that.)
    close = np.where(np.arange(60) % 2 == 0, 1e-12, 1e12)
    md = MarketData(**_bars(close))
    cfg = EnvConfig(
        episode_length=50,
        initial_capital=0.01,
        max_position=1e15,
        barriers=False,
        curiosity_state_dims=4,
    )
    env = TradingVectorEnv(4, "cpu", data=md, config=cfg)
    obs, _ = env.reset(seed=0)
    n = env.single_action_space.n
    rng = np.random.default_rng(0)
    for _ in range(40):
        obs, rew, *_ = env.step(rng.integers(0, n, size=4))
        assert np.isfinite(obs).all() and np.isfinite(rew).all()
