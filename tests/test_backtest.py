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
    config = EnvConfig(episode_length=episode_length, profit_target_bps=40.0, stop_loss_bps=30.0)
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
