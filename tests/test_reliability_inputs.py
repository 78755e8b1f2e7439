"""Inputs that used to be reinterpreted or to fail with an error naming nothing: each is now
refused with a message naming the field, the value and what is allowed (docs/RELIABILITY.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from random_bars import random_ohlcv

from gpu_trading_env.data.features import WARMUP_BARS
from gpu_trading_env.data.loaders import DataError, load_bars
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.data.timestamps import parse_timestamps

N = WARMUP_BARS + 30


# ---------------------------------------------------------------------- time zones


def test_mixed_naive_and_zone_aware_text_timestamps_are_refused(tmp_path):
    df = random_ohlcv(N)
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
    df = random_ohlcv(N)
    df.insert(0, "time", pd.date_range("2021-01-04", periods=N, freq="1h"))
    df.loc[200, ["high", "close"]] = df.loc[200, "close"] * 1e40
    path = tmp_path / "spike.csv"
    df.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"spike\.csv.*column 'high' has a price .*e\+4\d"):
        load_bars(path)


@pytest.mark.filterwarnings("ignore:position sizing implies")
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


# ---------------------------------------------------------------------- actions and start_index


def _vector_env(device: str = "cpu", n: int = 4):
    from gpu_trading_env import TradingVectorEnv

    env = TradingVectorEnv(n, device, episode_length=20)
    env.reset(seed=0)
    return env


def test_actions_of_another_shape_with_n_elements_are_refused():
    env = _vector_env()
    with pytest.raises(ValueError, match=r"shape \(2, 2\) are invalid: allowed is \(4,\) or"):
        env.step(np.array([[1, 2], [3, 4]]))
    with pytest.raises(ValueError, match=r"shape \(1, 4\)"):
        env.step(np.array([[1, 2, 3, 4]]))
    env.step(np.array([[1], [2], [0], [1]]))  # the (N, 1) column of some RL libraries


def test_integral_float_actions_are_refused_by_the_vector_and_the_single_env():
    import gymnasium as gym

    import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)

    env = _vector_env()
    with pytest.raises(TypeError, match="dtype float64 are invalid: allowed is an integer"):
        env.step(np.array([0.0, 1.0, 2.0, 3.0]))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="dtype float32 are invalid"):
        env.step(torch.tensor([0.0, 1.0, 2.0, 3.0]))
    single = gym.make("GpuTrading-v0", episode_length=20).unwrapped
    single.reset(seed=0)
    with pytest.raises(ValueError, match="action = 2.0 is invalid: allowed is an int"):
        single.step(2.0)
    with pytest.raises(ValueError, match="is invalid: allowed is an int"):
        single.step(np.float32(2.0))


@pytest.mark.parametrize(
    "start",
    [
        np.full(4, 2**64 - 1, dtype=np.uint64),  # wrapped to -1 ("draw a random start")
        2**64 - 1,  # raised a bare OverflowError
        np.uint64(2**64 - 1),
        2**70,
    ],
)
def test_out_of_range_unsigned_start_index_is_refused_as_a_scalar_and_as_an_array(start):
    env = _vector_env()
    value = int(np.asarray(start, dtype=object).reshape(-1)[0])
    with pytest.raises(ValueError, match=rf"start_index\[0\] = {value} is invalid: allowed is -1"):
        env.reset(seed=0, options={"start_index": start})


def test_in_range_unsigned_start_index_still_works():
    env = _vector_env()
    obs, _ = env.reset(seed=0, options={"start_index": np.array([0, 1, 2, 3], dtype=np.uint64)})
    bars = env.backend.state.bar - env.backend.lo_host
    np.testing.assert_array_equal(bars, [0, 1, 2, 3])


@pytest.mark.gpu
def test_cuda_refuses_the_same_actions_without_a_host_sync():
    import torch

    env = _vector_env("cuda")
    with pytest.raises(ValueError, match=r"shape \(2, 2\) are invalid"):
        env.step(torch.zeros((2, 2), dtype=torch.int64, device="cuda"))
    with pytest.raises(TypeError, match="dtype torch.float32 are invalid"):
        env.step(torch.zeros(4, dtype=torch.float32, device="cuda"))
    with pytest.raises(TypeError, match="dtype float64 are invalid"):
        env.step(np.zeros(4))
    with pytest.raises(ValueError, match=r"shape \(2, 2\) are invalid"):
        env.step(np.zeros((2, 2), dtype=np.int64))
    env.step(torch.zeros((4, 1), dtype=torch.int64, device="cuda"))


# ---------------------------------------------------------------------- unclear errors made clear


def test_envconfig_overflow_names_the_field():
    from gpu_trading_env import EnvConfig
    from gpu_trading_env.core.config import _FLOAT_FIELDS

    for name in _FLOAT_FIELDS:  # 10**400 raised a bare OverflowError naming no field
        with pytest.raises(ValueError, match=rf"EnvConfig\.{name} = <an integer of 401 digits>"):
            EnvConfig(**{name: 10**400})
    with pytest.raises(ValueError, match=r"EnvConfig\.exposure_levels = <an integer of 401"):
        EnvConfig(exposure_levels=(0.0, 10**400))


def test_header_only_csv_and_zero_row_frame_say_so(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("time,open,high,low,close,volume\n")
    with pytest.raises(DataError, match=r"empty\.csv: has a header but no rows"):
        MarketData.from_csv(path)
    frame = pd.DataFrame({c: [] for c in ("time", "open", "high", "low", "close", "volume")})
    with pytest.raises(ValueError, match=r"the table has no rows \(columns \['time', 'open'"):
        MarketData.from_dataframe(frame)


def test_semicolon_csv_with_decimal_commas_gets_a_hint(tmp_path):
    df = random_ohlcv(N)
    df.insert(0, "date", pd.bdate_range("2019-01-02", periods=N).strftime("%Y-%m-%d"))
    path = tmp_path / "export.csv"
    df.to_csv(path, index=False, sep=";", decimal=",")
    hint = r"export\.csv: the header 'date;open;high;low;close;volume' is separated by ';'"
    with pytest.raises(DataError, match=hint):
        load_bars(path)
    with pytest.raises(DataError, match=hint):
        MarketData.from_csv(path)
    # The hint's own fix works.
    md = MarketData.from_csv(path, read_csv_kwargs={"sep": ";", "decimal": ","})
    np.testing.assert_allclose(md.close, df["close"].to_numpy()[WARMUP_BARS:])


def test_reset_options_that_are_not_a_mapping_are_refused():
    from gpu_trading_env.env import TradingEnv

    env = _vector_env()
    with pytest.raises(TypeError, match=r"options = 'x' \(str\) is invalid: allowed is None or"):
        env.reset(options="x")
    single = TradingEnv(episode_length=20)
    with pytest.raises(TypeError, match=r"options = 'x' \(str\) is invalid"):
        single.reset(options="x")


def test_single_env_seed_out_of_range_is_a_value_error_not_a_gymnasium_error():
    from gpu_trading_env.env import TradingEnv

    single = TradingEnv(episode_length=20)
    with pytest.raises(ValueError, match=r"seed = -1 is out of range: allowed is an int in \[0"):
        single.reset(seed=-1)
    with pytest.raises(TypeError, match=r"seed = 1.5 \(float\) is invalid"):
        single.reset(seed=1.5)
    single.reset(seed=np.int64(3))


def test_a_set_of_seeds_is_refused_since_its_order_is_arbitrary():
    env = _vector_env()
    with pytest.raises(
        TypeError, match=r"seed = \{1, 2, 3, 4\} \(set\) is invalid: it has no order"
    ):
        env.reset(seed={1, 2, 3, 4})
    env.reset(seed=[1, 2, 3, 4])


def test_closing_the_single_env_closes_its_vector_env():
    from gpu_trading_env.env import TradingEnv

    single = TradingEnv(episode_length=20)
    single.reset(seed=0)
    single.step(0)
    closed = single._venv
    single.close()
    assert closed.closed
    with pytest.raises(RuntimeError, match=r"step\(\) called after close\(\): call reset"):
        single.step(0)
    single.reset(seed=0)  # reopens, as Gymnasium's own envs do (SB3's check_env relies on it)
    assert single._venv is not closed and not single._venv.closed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gamma": 2.0}, r"gamma = 2.0 is invalid: allowed is a number in \[0, 1\]"),
        ({"gamma": float("nan")}, r"gamma = nan is invalid"),
        ({"tau": 5.0}, r"tau = 5.0 is invalid: allowed is a number in \(0, 1\]"),
        ({"tau": 0.0}, r"tau = 0.0 is invalid"),
        ({"exploration_final_eps": -1}, r"exploration_final_eps = -1 is invalid: allowed is a"),
        ({"exploration_initial_eps": float("nan")}, r"exploration_initial_eps = nan"),
        ({"train_freq": 0}, r"train_freq = 0 is invalid: allowed is an int >= 1"),
        ({"train_freq": (4, "epoch")}, r"train_freq = \(4, 'epoch'\) is invalid"),
        ({"learning_rate": float("inf")}, r"learning_rate = inf is invalid"),
        ({"max_grad_norm": float("nan")}, r"max_grad_norm = nan is invalid"),
    ],
)
def test_gpu_dqn_refuses_hyperparameters_out_of_range_when_built(kwargs, message):
    from agents import GpuDQN

    env = _vector_env()
    with pytest.raises(ValueError, match=rf"GpuDQN {message}"):
        GpuDQN("MlpPolicy", env, device="cpu", buffer_size=100, **kwargs)


def test_predict_refuses_a_nan_observation():
    from agents import GpuDQN

    env = _vector_env()
    model = GpuDQN("MlpPolicy", env, device="cpu", buffer_size=100)
    obs = np.full((4, env.single_observation_space.shape[0]), np.nan, dtype=np.float32)
    for deterministic in (True, False):
        with pytest.raises(ValueError, match=r"observation has nan at index \(0, 0\)"):
            model.predict(obs, deterministic=deterministic)
    good, _ = env.reset(seed=0)
    actions, _ = model.predict(good, deterministic=True)
    assert actions.shape == (4,)


@pytest.mark.parametrize(
    ("option", "value"),
    [("--bars-per-year", "inf"), ("--bars-per-year", "nan"), ("--learning-rate", "inf")],
)
def test_cli_refuses_non_finite_numbers(tmp_path, monkeypatch, capsys, option, value):
    from agents import cli

    monkeypatch.chdir(tmp_path)
    command = "train" if option == "--learning-rate" else "backtest"
    assert cli.main([command, option, value]) == 2  # inf ended in ZeroDivisionError
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"gpu-trading-env {command}: error: {option} {value} is invalid: allowed is a finite "
        "number > 0"
    ]
    assert not any(tmp_path.iterdir())
