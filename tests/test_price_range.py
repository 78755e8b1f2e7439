"""The price range the accounting is exact for (docs/ENV_SPEC.md, "Price range"): a default
sizing that cannot size a dear instrument is refused with the options that fix it, and the
options it names trade the same bars with sane numbers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from agents import cli
from gpu_trading_env import EnvConfig, TradingVectorEnv
from gpu_trading_env.core.config import resolve_max_positions, sizing_price_limit
from gpu_trading_env.data.market_data import MarketData

N = 1200


def _dear_bars(seed: int = 0) -> pd.DataFrame:
    """Hourly bars between 4e11 and 8e11 (inside the data bounds [1e-12, 1e12])."""
    rng = np.random.default_rng(seed)
    close = 6e11 * np.exp(np.cumsum(rng.normal(0.0, 0.01, N)))
    close = np.clip(close, 4e11, 8e11)
    open_ = np.r_[close[0], close[:-1]]
    return pd.DataFrame(
        {
            "time": pd.date_range("2022-01-03", periods=N, freq="1h"),
            "open": open_,
            "high": np.maximum(open_, close) * 1.0005,
            "low": np.minimum(open_, close) * 0.9995,
            "close": close,
            "volume": 1.0,
        }
    )


def _market() -> MarketData:
    return MarketData.from_dataframe(_dear_bars(), name="dear")


def test_sizing_price_limit_is_max_leverage_times_capital_over_the_position() -> None:
    cfg = EnvConfig(initial_capital=1000.0, max_leverage=4.0, exposure_levels=(-0.5, 0.0, 0.5))
    assert sizing_price_limit(cfg, 2.0) == pytest.approx(4.0 * 1000.0 / (2.0 * 0.5))
    assert sizing_price_limit(EnvConfig(sizing="equity"), 1.0) == math.inf


def test_the_default_sizing_refuses_a_dear_instrument_naming_the_fixes() -> None:
    md = _market()
    with pytest.raises(ValueError) as err:
        TradingVectorEnv(2, "cpu", data=md, config=EnvConfig(episode_length=100))
    msg = str(err.value)
    assert "column 'close' of instrument 'dear'" in msg
    assert "above EnvConfig.max_leverage = 10" in msg and "up to 1e+06" in msg
    assert "sizing='equity'" in msg and "max_position" in msg and "initial_capital >=" in msg
    # The limit is the rule itself: a median close at it is accepted, one just above refused.
    cfg = EnvConfig(initial_capital=100.0, max_leverage=2.0)
    offsets = np.array([0, 3])
    assert resolve_max_positions(cfg, np.full(3, 200.0), offsets).tolist() == [1.0]
    with pytest.raises(ValueError, match="instrument 0 is too dear"):
        resolve_max_positions(cfg, np.full(3, 200.0 * (1 + 1e-12)), offsets)


@pytest.mark.parametrize("overrides", [{"sizing": "equity"}, {"max_position": 1e5 / 6e11}])
def test_the_named_fixes_give_exact_accounting_on_the_same_bars(overrides) -> None:
    md = _market()
    cfg = EnvConfig(episode_length=400, barriers=False, diversity_penalty=0.0, **overrides)
    env = TradingVectorEnv(1, "cpu", data=md, config=cfg)
    env.reset(seed=0, options={"start_index": 0})
    long = env.single_action_space.n - 1  # exposure +1
    values, rewards = [], []
    for _ in range(300):
        _, rew, term, trunc, info = env.step(np.array([long]))
        assert not (term[0] or trunc[0])
        values.append(float(info["portfolio_value"][0]))
        rewards.append(float(rew[0]))
    values_rel = np.array(values) / 1e5
    # Full exposure at about 1x: the account moves like the price, never by a factor of 1e6.
    assert np.all((values_rel > 0.2) & (values_rel < 5.0)), values_rel.min()
    assert np.max(np.abs(rewards)) < 0.2


def test_backtest_on_dear_bars_is_one_line_naming_the_fix(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    _dear_bars().to_csv("dear.csv", index=False)
    assert cli.main(["backtest", "--data", "dear.csv", "--out", "r"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "too dear for the default max_position" in err[0]
    assert "sizing='equity'" in err[0]
    assert cli.main(["backtest", "--data", "dear.csv", "--out", "q", "--env", "sizing=equity"]) == 0
