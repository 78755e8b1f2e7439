"""train_portfolio on a CUDA device: a tiny run end to end, and the default budget's wall time
at K = 8 and K = 32 (``python3 -m pytest -q -m gpu tests/test_portfolio_train_gpu.py -s``
prints each run's seconds and test Sharpe beside the rule's)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from agents.pipelines.portfolio_training import (
    PortfolioTrainConfig,
    backtest_portfolio,
    train_portfolio,
)
from gpu_trading_env.data.portfolio_markets import (
    exposure_levels,
    portfolio_market,
    rule_exposures,
)

pytestmark = pytest.mark.gpu

# The portfolio zoo's bars per market (agents/pipelines/portfolio_zoo.py).
ZOO_BARS = 20_000


@pytest.mark.gpu
def test_tiny_run_on_cuda_saves_a_model_that_loads(tmp_path) -> None:
    from agents import GpuDQN

    data = portfolio_market("ar1", 2_000, 8, seed=0)
    config = PortfolioTrainConfig(num_envs=256, timesteps=20_000, batch_size=256)
    result = train_portfolio(data, config, seed=0, device="cuda", out=tmp_path)
    assert result.kept in ("network", "flat") and result.reason
    assert result.config.num_envs == 256 and result.device == "cuda"
    model = GpuDQN.load(tmp_path / "model.zip", device="cuda")
    obs = np.zeros((3, model.observation_space.shape[0]), dtype=np.float32)
    actions, _ = model.predict(obs, deterministic=True)
    assert actions.shape == (3, 8)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [8, 32])
def test_default_budget_runs_within_a_minute(k: int) -> None:
    data = portfolio_market("ar1", ZOO_BARS, k, seed=0)
    result = train_portfolio(data, PortfolioTrainConfig(), seed=0, device="cuda", out=None)
    env = result.config.env
    rule = exposure_levels(rule_exposures("ar1", data), env.exposure_levels)
    s = result.splits
    rule_test = backtest_portfolio(rule, data, env, s.val_stop, s.n_bars)
    print(
        f"K = {k}: {result.seconds:.1f} s ({result.train_seconds:.1f} s learn), kept "
        f"{result.kept}, test Sharpe {result.test.sharpe:.2f} (network {result.test_network.sharpe:.2f}), "
        f"rule {rule_test.sharpe:.2f}; {result.reason}"
    )
    assert result.seconds <= 60.0


@pytest.mark.gpu
def test_cuda_backtest_equals_the_numpy_one() -> None:
    """``backtest_portfolios(device="cuda")``, which ``train_portfolio`` and the zoo use on a
    GPU, gives the NumPy env's paths: level arrays bit for bit, and a network's greedy policy
    acting on the device the same levels as on the host."""
    import torch as th

    from agents.pipelines.portfolio_training import backtest_portfolios, greedy_level_policy

    data = portfolio_market("lead_lag", 1_200, 4, seed=3)
    config = PortfolioTrainConfig(num_envs=16, timesteps=2_000, batch_size=64)
    result = train_portfolio(data, config, seed=0, device="cuda", out=None)
    env = result.config.env
    net = result.model.q_net.to("cpu").float().eval()
    th.manual_seed(0)
    with th.no_grad():  # random weights: a policy whose levels move (not a kept flat)
        for p in net.parameters():
            p.normal_(0.0, 0.3)
    rule = exposure_levels(rule_exposures("lead_lag", data), env.exposure_levels)
    rng = np.random.default_rng(0)
    noise = rng.integers(0, env.n_levels, size=rule.shape)
    other = copy.deepcopy(net)
    with th.no_grad():  # a second network, as the snapshots: both act in one CUDA graph
        for p in other.parameters():
            p.normal_(0.0, 0.3)
    start, stop = 300, 1_100
    host = backtest_portfolios(
        [greedy_level_policy(net), rule, greedy_level_policy(other), noise],
        data,
        env,
        start,
        stop,
    )
    dev = backtest_portfolios(
        [greedy_level_policy(net, "cuda"), rule, greedy_level_policy(other, "cuda"), noise],
        data,
        env,
        start,
        stop,
        device="cuda",
    )
    for h, d in zip(host, dev, strict=True):
        np.testing.assert_array_equal(d.levels, h.levels)
        np.testing.assert_array_equal(d.equity, h.equity)
        np.testing.assert_array_equal(d.positions, h.positions)
        np.testing.assert_array_equal(d.costs, h.costs)
        assert d.ruined == h.ruined
    assert len({tuple(r.levels.ravel()) for r in dev}) == 4
    assert len(np.unique(dev[0].levels)) > 1, "the network's levels never move"
