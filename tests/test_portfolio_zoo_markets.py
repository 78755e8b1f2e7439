"""The portfolio zoo's markets: seeded, on one grid, and their rules causal and earning as the
generators' laws say (gpu_trading_env/data/portfolio_markets.py)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from gpu_trading_env.data.portfolio_markets import (
    PORTFOLIO_MARKETS,
    exposure_levels,
    lead_lag_rule,
    portfolio_market,
    rule_exposures,
)
from gpu_trading_env.portfolio_env import PortfolioVectorEnv

KINDS = tuple(PORTFOLIO_MARKETS)


def _rule_returns(data, exposures: np.ndarray) -> np.ndarray:
    """The env's per-bar returns of holding ``exposures`` row by row from bar 0 (default
    costs of 1 bp, gross cap 1): float64 [T - 2]."""
    env = PortfolioVectorEnv(1, data=data, episode_length=data.n_bars - 2)
    levels = exposure_levels(exposures, env.config.exposure_levels)
    env.reset(seed=0, options={"start_index": np.array([0])})
    rewards = []
    for t in range(data.n_bars - 2):
        _, reward, terminated, truncated, _ = env.step(levels[t][None])
        rewards.append(float(reward[0]))
        assert not terminated[0]
    assert truncated[0]
    return np.asarray(rewards)


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_bars_other_seed_other_bars(kind: str) -> None:
    a = portfolio_market(kind, 400, 4, seed=3)
    b = portfolio_market(kind, 400, 4, seed=3)
    c = portfolio_market(kind, 400, 4, seed=4)
    for field in ("open", "high", "low", "close", "volume", "features", "timestamps"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.close, c.close)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [8, 32])
def test_shapes_and_grid(kind: str, k: int) -> None:
    data = portfolio_market(kind, 300, k, seed=0)
    assert data.close.shape == (300, k)
    assert data.features.shape == (300, k, 51)
    assert data.features.dtype == np.float32
    assert len(set(data.instruments)) == k
    assert not data.filled.any()
    assert np.all(np.diff(data.timestamps) == np.timedelta64(1, "h"))
    x = rule_exposures(kind, data)
    assert x.shape == (300, k) and x.dtype == np.float64
    assert set(np.unique(x)) <= {-1.0, 0.0, 1.0}
    assert not x[0].any()


def test_lead_lag_layout_and_odd_count_refused() -> None:
    data = portfolio_market("lead_lag", 300, 4, seed=0)
    assert data.instruments == ("lead_0", "lag_0", "lead_1", "lag_1")
    x = rule_exposures("lead_lag", data)
    assert not x[:, 0::2].any() and (x[1:, 1::2] != 0).all()
    with pytest.raises(ValueError, match="n_instruments = 5 is invalid: allowed is an even"):
        portfolio_market("lead_lag", 300, 5)
    odd = dataclasses.replace(data, close=data.close[:, :3])
    with pytest.raises(ValueError, match="3 instruments: allowed is an even number"):
        lead_lag_rule(odd)


def test_bad_parameters_name_the_field() -> None:
    with pytest.raises(ValueError, match="kind = 'nope' is invalid: allowed is one of ar1"):
        portfolio_market("nope", 300, 4)
    with pytest.raises(ValueError, match=r"phi = 1.0 is invalid: allowed is a number in \(-1, 1\)"):
        portfolio_market("ar1", 300, 4, phi=1.0)
    with pytest.raises(ValueError, match="idio_sigma = 0.0 is invalid"):
        portfolio_market("common_factor", 300, 4, idio_sigma=0.0)
    with pytest.raises(ValueError, match="n_instruments = 0 is invalid"):
        portfolio_market("ar1", 300, 0)


@pytest.mark.parametrize("kind", KINDS)
def test_rule_is_causal(kind: str) -> None:
    """Changing the bars after t leaves the rule's rows <= t as they were."""
    data = portfolio_market(kind, 500, 8, seed=1)
    before = rule_exposures(kind, data)
    t = 250
    rng = np.random.default_rng(0)
    close = np.array(data.close)
    close[t + 1 :] *= np.exp(0.05 * rng.standard_normal(close[t + 1 :].shape))
    changed = dataclasses.replace(data, close=close)
    after = rule_exposures(kind, changed)
    np.testing.assert_array_equal(after[: t + 1], before[: t + 1])
    if kind != "common_factor":
        assert not np.array_equal(after[t + 1 :], before[t + 1 :])


def test_exposure_levels_maps_and_refuses() -> None:
    x = np.array([[-1.0, 0.0], [1.0, -1.0]])
    np.testing.assert_array_equal(exposure_levels(x, (-1.0, 0.0, 1.0)), [[0, 1], [2, 0]])
    with pytest.raises(ValueError, match=r"exposures\[1, 0\] = 1.0 is invalid: allowed"):
        exposure_levels(x, (-1.0, 0.0))


@pytest.mark.parametrize(("kind", "params"), [("ar1", {"phi": 0.10}), ("lead_lag", {"rho": 0.10})])
def test_rule_earns_its_edge_after_costs(kind: str, params: dict) -> None:
    """The rule's per-bar return in the env, 1 bp costs included, is the law's edge less its
    costs: ``0.10 * s * sqrt(2/pi)`` gross (about 4.0 bps) less about 1 bp, and its Sharpe
    clearly > 0 (t-statistic over 3,000 bars above 6)."""
    data = portfolio_market(kind, 3000, 8, seed=2, **params)
    r = _rule_returns(data, rule_exposures(kind, data, **params))
    s = 0.005 / math.sqrt(1.0 - 0.01) if kind == "ar1" else 0.005
    gross = 0.10 * s * math.sqrt(2.0 / math.pi)
    assert gross - 2e-4 < r.mean() < gross
    assert r.mean() / r.std() * math.sqrt(len(r)) > 6.0


def test_lead_lag_followers_own_sign_has_no_edge() -> None:
    """Trading a follower on its own last return (not its leader's) earns nothing but costs."""
    data = portfolio_market("lead_lag", 3000, 8, seed=2)
    own = rule_exposures("ar1", data)
    own[:, 0::2] = 0.0
    r = _rule_returns(data, own)
    assert r.mean() / r.std() * math.sqrt(len(r)) < 2.0


def test_common_factor_rule_is_flat_and_momentum_has_no_edge() -> None:
    data = portfolio_market("common_factor", 3000, 8, seed=2)
    flat = _rule_returns(data, rule_exposures("common_factor", data))
    assert not flat.any()
    for exposures in (rule_exposures("ar1", data), np.ones(data.close.shape)):
        r = _rule_returns(data, exposures)
        assert abs(r.mean() / r.std() * math.sqrt(len(r))) < 3.0
