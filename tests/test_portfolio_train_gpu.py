"""train_portfolio on a CUDA device: a tiny run end to end, and the default budget's wall time
at K = 8 and K = 32 (``python3 -m pytest -q -m gpu tests/test_portfolio_train_gpu.py -s``
prints each run's seconds and test Sharpe beside the rule's)."""

from __future__ import annotations

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
