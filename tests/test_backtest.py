"""Backtests side by side (``backtest_batch``) are the one-policy backtests, to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_trading_env import MarketData
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.reports.backtest import backtest, backtest_batch

FIELDS = ("equity", "exposure", "traded", "costs")


def _random(seed: int, n_actions: int):
    rng = np.random.default_rng(seed)
    return lambda obs, bar: rng.integers(0, n_actions, size=1)


@pytest.mark.parametrize("episode_length", [7, 500])
def test_batch_rows_are_the_single_backtests(episode_length: int) -> None:
    # Tight barriers and short episodes: episodes end at different bars in different rows,
    # many of them holding a position (closed at the market order's cost).
    data = MarketData.synthetic(kind="regime", n_bars=1500, n_instruments=1, seed=3)
    config = EnvConfig.source_design(
        episode_length=episode_length, profit_target_bps=40.0, stop_loss_bps=30.0
    )
    k = 4
    singles = [
        backtest(_random(s, config.n_actions), data, config, per_year=8766) for s in range(k)
    ]
    policies = [_random(s, config.n_actions) for s in range(k)]
    rows = backtest_batch(
        lambda obs, bar: np.concatenate(
            [p(o[None], bar) for p, o in zip(policies, obs, strict=True)]
        ),
        k,
        data,
        config,
        per_year=8766,
    )
    assert len(rows) == k
    assert len({r.episodes for r in singles}) > 1  # the rows' episodes did end apart
    for single, row in zip(singles, rows, strict=True):
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(row, name), getattr(single, name), err_msg=name)
        assert row.episodes == single.episodes
        assert row.strategy.to_dict() == single.strategy.to_dict()
        assert row.benchmark.to_dict() == single.benchmark.to_dict()
    assert sum(float(r.costs.sum()) for r in singles) > 0


def test_flat_policy_keeps_the_capital() -> None:
    data = MarketData.synthetic(kind="regime", n_bars=300, n_instruments=1, seed=1)
    config = EnvConfig()
    flat = config.encode_action(config.exposure_levels.index(0.0))
    (row,) = backtest_batch(lambda obs, bar: np.full(1, flat), 1, data, config, per_year=8766)
    np.testing.assert_array_equal(row.equity, np.ones(300))
    assert not row.traded.any() and not row.costs.any() and not row.exposure.any()


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "2"])
def test_batch_rejects_a_bad_k(k) -> None:
    data = MarketData.synthetic(kind="regime", n_bars=50, n_instruments=1, seed=1)
    with pytest.raises(ValueError, match=r"k = .* is invalid: allowed is an int >= 1"):
        backtest_batch(lambda obs, bar: np.zeros(1), k, data)


def _crash_then_triple() -> tuple[MarketData, EnvConfig]:
    """Closes 100, a -60% crash to 40, then a tripling to 120; equity sizing at 3x leverage."""
    from hand_market import hand_market

    close = [100.0] * 3 + [40.0] * 3 + list(np.linspace(40.0, 120.0, 30))
    config = EnvConfig(
        sizing="equity",
        leverage=3.0,
        max_leverage=3.0,
        initial_capital=1000.0,
        curiosity_state_dims=7,
    )
    return hand_market(close), config


def test_ruin_ends_the_backtest_at_zero() -> None:
    # Held long at 3x, the crash costs 180% of the capital at bar 3: the account is ruined
    # there. The backtest used to restart from the negative equity, so the tripling after it
    # booked as a loss (-1984%, Sharpe +12.8).
    data, config = _crash_then_triple()
    long = config.encode_action(config.exposure_levels.index(1.0))
    (row,) = backtest_batch(lambda obs, bar: np.full(1, long), 1, data, config, per_year=252)
    assert row.ruined_at_bar == 3
    assert row.ruin_value == pytest.approx(1.0 - 3 * 0.6, abs=1e-3)
    assert row.equity[2] > 0.99 and not row.equity[3:].any()
    assert row.strategy.total_return == -1.0 and row.strategy.max_drawdown == 1.0
    assert row.strategy.sharpe < 0 and row.strategy.annual_return == -1.0
    np.testing.assert_array_equal(row.returns[3:], 0.0)
    assert row.returns[2] == -1.0
    assert row.episodes == 1
    assert not row.traded[3:].any() and not row.costs[3:].any() and not row.exposure[3:].any()
    assert (row.costs >= 0).all()
    d = row.to_dict()
    assert d["ruined_at_bar"] == 3 and d["ruin_value"] == row.ruin_value
    assert d["strategy"]["total_return"] == -1.0


def test_a_ruin_leaves_the_other_backtests_alone() -> None:
    # Row 0 holds long (ruined), row 1 stays flat, row 2 goes long after the crash: each is
    # the backtest of its policy alone, and only row 0 is ruined.
    data, config = _crash_then_triple()
    long = config.encode_action(config.exposure_levels.index(1.0))
    flat = config.encode_action(config.exposure_levels.index(0.0))
    plans = [
        np.full(data.n_bars, long),
        np.full(data.n_bars, flat),
        np.where(np.arange(data.n_bars) >= 5, long, flat),
    ]
    rows = backtest_batch(
        lambda obs, bar: np.array([p[bar] for p in plans]), 3, data, config, per_year=252
    )
    singles = [
        backtest(lambda obs, bar, p=p: p[bar : bar + 1], data, config, per_year=252) for p in plans
    ]
    for single, row in zip(singles, rows, strict=True):
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(row, name), getattr(single, name), err_msg=name)
        assert row.ruined_at_bar == single.ruined_at_bar
    assert [r.ruined_at_bar for r in rows] == [3, None, None]
    np.testing.assert_array_equal(rows[1].equity, 1.0)
    assert rows[2].strategy.total_return > 3.0  # 3x leverage on a tripling, from 40


def _bars_file(name: str, close: np.ndarray) -> None:
    """A daily bar file ``name`` of these closes (each bar opens at its close)."""
    import pandas as pd

    times = pd.bdate_range("2015-01-01", periods=len(close))
    pd.DataFrame(
        {"Date": times.strftime("%Y-%m-%d"), "Open": close, "High": close * 1.001}
        | {"Low": close * 0.999, "Close": close, "Volume": 1000.0}
    ).to_csv(name, index=False)


def test_backtest_command_reports_the_ruin(tmp_path, monkeypatch, capsys) -> None:
    import json

    from agents import cli
    from gpu_trading_env.data.features import WARMUP_BARS

    monkeypatch.chdir(tmp_path)
    close = np.r_[np.full(WARMUP_BARS + 20, 100.0), np.full(10, 40.0), np.linspace(40, 120, 60)]
    _bars_file("CRASH.csv", close)
    argv = ["backtest", "--data", "CRASH.csv", "--rule", "buy_and_hold", "--train-fraction", "0"]
    argv += ["--env", "sizing=equity", "leverage=3", "max_leverage=3", "--out", "r"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert m["strategy"]["total_return"] == -1.0 and m["ruined_at_bar"] is not None
    assert m["strategy"]["sharpe"] < 0
    assert "RUINED at bar" in out and "RUINED at bar" in (tmp_path / "r" / "index.html").read_text()


def test_rule_buy_and_hold_is_named_for_its_sizing(tmp_path, monkeypatch, capsys) -> None:
    # The rule held a fixed number of units (capital / median close) beside buy-and-hold's
    # compounding capital, both rows named alike: +50% against +74% with no reason given.
    import json

    from agents import cli
    from gpu_trading_env.data.features import WARMUP_BARS

    monkeypatch.chdir(tmp_path)
    close = 100.0 * 1.004 ** np.arange(WARMUP_BARS + 150)
    _bars_file("UP.csv", close)
    argv = ["backtest", "--data", "UP.csv", "--rule", "buy_and_hold", "--train-fraction", "0"]
    assert cli.main([*argv, "--out", "units"]) == 0
    out = capsys.readouterr().out
    m = json.loads((tmp_path / "units" / "metrics.json").read_text())
    units = m["max_position"]
    # The env's default: the capital over the median close of the evaluated bars (after warm-up).
    assert units == np.floor(EnvConfig().initial_capital / np.median(close[WARMUP_BARS:]))
    assert f"strategy, {units:g} units " in out and "buy and hold, all capital " in out
    assert f"a fixed {units:g} units" in out
    assert f"a fixed {units:g} units" in (tmp_path / "units" / "index.html").read_text()
    assert m["strategy"]["total_return"] < m["buy_and_hold"]["total_return"] - 0.05
    # Sized on the equity at leverage 1, the rule is buy and hold (up to the costs' rounding).
    assert cli.main([*argv, "--env", "sizing=equity", "--out", "equity"]) == 0
    out = capsys.readouterr().out
    m = json.loads((tmp_path / "equity" / "metrics.json").read_text())
    assert "strategy, 1x equity " in out and "a fixed" not in out and m["max_position"] is None
    assert m["strategy"]["total_return"] == pytest.approx(
        m["buy_and_hold"]["total_return"], abs=1e-5
    )
