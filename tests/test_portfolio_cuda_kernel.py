"""The portfolio kernels' source, checked on the CPU: it compiles, its generated constants are
the Python values, and its host build (``portfolio_kernel_host.py``: the CUDA source compiled
by the host C++ compiler, thread blocks emulated) matches the NumPy reference on random configs
and actions, K from 1 to 64, all three autoreset modes, with 0 mismatching episodes.

The GPU run of the same comparison is ``tests/test_portfolio_cuda.py``; this file holds the
kernel's arithmetic and control flow to the reference where no GPU is.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from portfolio_kernel_host import (
    CXX,
    HostPortfolioBackend,
    HostPortfolioKernels,
    build_host_library,
)
from portfolio_parity import MODES, ParityReport, random_config, random_market, run_parity

from gpu_trading_env.core.portfolio_config import RUIN_LOG_REWARD, PortfolioConfig
from gpu_trading_env.core.portfolio_kernel_interface import (
    PORTFOLIO_FLOAT_PARAMS,
    PORTFOLIO_INT_PARAMS,
    PORTFOLIO_KERNEL_PARAMS,
    portfolio_kernel_defines,
    portfolio_param_arrays,
    portfolio_state_params,
)
from gpu_trading_env.core.portfolio_state import PortfolioState
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.portfolio_env import PortfolioVectorEnv

needs_cxx = pytest.mark.skipif(CXX is None, reason="no host C++ compiler on PATH")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> HostPortfolioKernels:
    return HostPortfolioKernels(build_host_library(tmp_path_factory.mktemp("portfolio_host")))


def host_env(
    kernels: HostPortfolioKernels, n: int, block: int = 32, **kwargs
) -> PortfolioVectorEnv:
    """A PortfolioVectorEnv whose backend is the host build of the kernels."""
    env = PortfolioVectorEnv(n, **kwargs)
    env.backend = HostPortfolioBackend(env.data, env.config, n, kernels, block)
    return env


def test_generated_constants_are_the_python_values() -> None:
    defines = dict(portfolio_kernel_defines())
    assert float(defines["PORTFOLIO_RUIN_LOG_REWARD"].strip("()")) == RUIN_LOG_REWARD
    for names, prefix in ((PORTFOLIO_FLOAT_PARAMS, "PPF_"), (PORTFOLIO_INT_PARAMS, "PPI_")):
        assert [int(defines[prefix + n.upper()]) for n in names] == list(range(len(names)))
    config = PortfolioConfig(
        reserve_pct=12.5, fill="next_open", reward="log", max_leverage=2.0, episode_length=50
    )
    data = MarketData.synthetic("gbm", n_bars=120, n_instruments=4)
    env = PortfolioVectorEnv(3, data=data, config=config)
    pf, pi = portfolio_param_arrays(env.backend.params, env.data.n_bars, env.data.n_features)
    assert pf.dtype == np.float64 and pi.dtype == np.int64
    assert dict(zip(PORTFOLIO_FLOAT_PARAMS, pf.tolist(), strict=True)) == {
        "initial_capital": 100_000.0,
        "leverage": 1.0,
        "max_leverage": 2.0,
        "reserve_frac": 0.125,
    }
    assert dict(zip(PORTFOLIO_INT_PARAMS, pi.tolist(), strict=True)) == {
        "fill_next_open": 1,
        "reward_log": 1,
        "episode_length": 50,
        "autoreset_mode": 1,
        "n_levels": 3,
        "n_bars": env.data.n_bars,
        "n_instruments": 4,
        "n_features": 51,
    }


def test_the_state_list_follows_the_state_dataclass() -> None:
    names = [name for name, _ in portfolio_state_params()]
    assert names == [f"ps_{f}" for f in PortfolioState.__dataclass_fields__]
    types = dict(portfolio_state_params())
    assert types["ps_position"] == "double*" and types["ps_seed"] == "const unsigned long long*"
    assert types["ps_done_flag"] == "unsigned char*" and types["ps_bar"] == "long long*"
    step = dict(PORTFOLIO_KERNEL_PARAMS["portfolio_step"])
    assert step["actions"] == "const long long*" and step["positions"] == "double*"


@needs_cxx
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [1, 2, 3, 8, 17, 64])
def test_host_build_matches_the_reference(kernels, k: int, mode: str) -> None:
    report = ParityReport()
    for trial in range(2 if k < 64 else 1):
        rng = np.random.default_rng([k, MODES.index(mode), trial])
        config = random_config(rng, mode, k)
        data = random_market(rng, k)
        n = 37  # two blocks of 32, the second partial
        reference = PortfolioVectorEnv(n, data=data, config=config)
        candidate = host_env(kernels, n, data=data, config=config)
        run_parity(reference, candidate, rng, 60 if k < 64 else 25, report)
    assert report.episodes > 37
    assert not report.mismatched_episodes, report.problems


@needs_cxx
def test_host_build_of_the_worked_example(kernels) -> None:
    # docs/ENV_SPEC.md's example, as tests/test_portfolio_env.py::test_worked_example checks it.
    from test_portfolio_env import EXAMPLE, LONG, SHORT, bars

    data = [bars("A", [100.0, 110.0, 99.0]), bars("B", [50.0, 50.0, 55.0])]
    env = host_env(kernels, 1, data=data, config=EXAMPLE)
    obs, _ = env.reset(seed=0, options={"start_index": 0})
    np.testing.assert_array_equal(obs[0, 4:], np.float32([1.0, 0.0, 0.0]))
    obs, reward, term, trunc, info = env.step(np.array([[LONG, LONG]]))
    np.testing.assert_array_equal(info["positions"], [[50.0, 100.0]])
    np.testing.assert_array_equal(info["costs"], [[5.0, 10.0]])
    assert info["portfolio_value"][0] == 10485.0 and reward[0] == np.float32(0.0485)
    obs, reward, term, trunc, info = env.step(np.array([[SHORT, LONG]]))
    np.testing.assert_allclose(info["positions"], [[-10485 / 220, 104.85]], rtol=1e-15)
    np.testing.assert_allclose(info["costs"], [[10.7425, 0.485]], rtol=1e-12)
    assert info["portfolio_value"][0] == pytest.approx(11522.2725, rel=1e-14)
    assert reward[0] == pytest.approx(1037.2725 / 10485, rel=1e-6)
    assert trunc[0] and not term[0] and info["episode_length"][0] == 2


@needs_cxx
def test_an_invalid_action_is_recorded_and_its_env_skips_the_step(kernels) -> None:
    data = MarketData.synthetic("gbm", n_bars=100, n_instruments=3, seed=2)
    env = host_env(kernels, 5, data=data, episode_length=20)
    env.reset(seed=1)
    backend = env.backend
    before = backend.state.bar.copy()
    actions = np.ones((5, 3), dtype=np.int64)
    actions[3, 2] = 7  # past the 3 levels: the host checks would refuse it, the kernel records
    with pytest.raises(ValueError, match=r"actions\[3, 2\] = 7"):
        backend.step(actions)
    assert backend.state.bar[3] == before[3]
    assert (np.delete(backend.state.bar, 3) == np.delete(before, 3) + 1).all()


def test_ruin_reward_literal_reads_back_exactly() -> None:
    assert float(repr(RUIN_LOG_REWARD)) == RUIN_LOG_REWARD == math.log(2.0**-52)
