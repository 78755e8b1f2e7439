"""GPU tier: the portfolio env's CUDA backend against the NumPy reference, the single env's CUDA
backend at K = 1, the worked example, and the device-side API a fused rollout uses.

Run with ``pytest -m gpu`` on a machine with CUDA and CuPy; skipped elsewhere. Tolerance (as in
``portfolio_parity.py``): bit for bit, but with ``reward="log"`` the reward and episode returns,
held to 2^-23 relative plus 1e-12 absolute (CUDA's log and NumPy's may differ in the last bit).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from portfolio_parity import MODES, ParityReport, random_config, random_market, run_parity

from gpu_runtime.device import to_numpy
from gpu_trading_env.core.portfolio_config import single_instrument_config
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.portfolio_env import PortfolioVectorEnv
from gpu_trading_env.vector_env import TradingVectorEnv

pytestmark = pytest.mark.gpu


def _torch_actions(a: np.ndarray):
    import torch

    return torch.as_tensor(a, device="cuda")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [1, 2, 3, 8, 17, 64])
def test_cuda_matches_numpy(k: int, mode: str) -> None:
    report = ParityReport()
    for trial in range(2):
        rng = np.random.default_rng([k, MODES.index(mode), trial, 7])
        config = random_config(rng, mode, k)
        data = random_market(rng, k, n_bars=240)
        n = 300  # more than one block, the last partial
        reference = PortfolioVectorEnv(n, data=data, config=config)
        candidate = PortfolioVectorEnv(n, device="cuda", data=data, config=config)
        # Trial 0 hands over CUDA tensors (read in place), trial 1 host arrays (copied).
        to_device = _torch_actions if trial == 0 else None
        run_parity(reference, candidate, rng, 120 if k < 64 else 60, report, to_device)
    assert report.episodes > 300
    assert not report.mismatched_episodes, report.problems


@pytest.mark.parametrize("mode", MODES)
def test_one_instrument_equals_the_single_env_on_cuda(mode: str) -> None:
    rng = np.random.default_rng([MODES.index(mode), 11])
    config = random_config(rng, mode, 1).replace(reward="simple", cost_bps=7.5)
    levels = config.exposure_levels
    # The single env refuses leverage x max|e| above max_leverage: the cap never binds at K = 1.
    config = config.replace(max_leverage=config.leverage * max(abs(x) for x in levels))
    data = MarketData.synthetic("planted", n_bars=300, seed=3)
    n = 200
    port = PortfolioVectorEnv(n, device="cuda", data=data, config=config)
    single = TradingVectorEnv(n, device="cuda", data=data, config=single_instrument_config(config))
    d = port.backend.obs_dim
    po, _ = port.reset(seed=5)
    so, _ = single.reset(seed=5)
    np.testing.assert_array_equal(to_numpy(po), to_numpy(so)[:, :d])
    for step in range(150):
        a = rng.integers(0, config.n_levels, n)
        if mode == "disabled" and step % 9 == 8:
            mask = rng.random(n) < 0.5
            mask[0] = True
            po, _ = port.reset(options={"reset_mask": mask})
            so, _ = single.reset(options={"reset_mask": mask})
            np.testing.assert_array_equal(to_numpy(po), to_numpy(so)[:, :d])
            continue
        po, pr, pte, ptr, pi = port.step(_torch_actions(a[:, None]))
        so, sr, ste, s_tr, si = single.step(_torch_actions(a))
        pairs = [
            ("obs", po, to_numpy(so)[:, :d]),
            ("reward", pr, sr),
            ("terminated", pte, ste),
            ("truncated", ptr, s_tr),
            ("portfolio_value", pi["portfolio_value"], si["portfolio_value"]),
            ("position", to_numpy(pi["positions"])[:, 0], si["position"]),
            ("episode_return", pi["episode_return"], si["episode_return"]),
            ("episode_length", pi["episode_length"], si["episode_length"]),
        ]
        if mode == "same_step":  # the rows that ended (the others are not written)
            done = to_numpy(pte) | to_numpy(ptr)
            pairs.append(("_final_obs", pi["_final_obs"], si["_final_obs"]))
            pairs.append(
                (
                    "final_obs",
                    to_numpy(pi["final_obs"])[done],
                    to_numpy(si["final_obs"])[done][:, :d],
                )
            )
        for name, x, y in pairs:
            np.testing.assert_array_equal(to_numpy(x), to_numpy(y), err_msg=f"{name} at {step}")
    np.testing.assert_array_equal(
        to_numpy(port.backend.state.cash), to_numpy(single.backend.state.cash)
    )


def test_worked_example_on_cuda() -> None:
    from test_portfolio_env import EXAMPLE, LONG, SHORT, bars

    data = [bars("A", [100.0, 110.0, 99.0]), bars("B", [50.0, 50.0, 55.0])]
    for reward in ("simple", "log"):
        env = PortfolioVectorEnv(1, device="cuda", data=data, config=EXAMPLE.replace(reward=reward))
        obs, _ = env.reset(seed=0, options={"start_index": 0})
        np.testing.assert_array_equal(to_numpy(obs)[0, 4:], np.float32([1.0, 0.0, 0.0]))
        obs, r1, _, _, info = env.step(np.array([[LONG, LONG]]))
        np.testing.assert_array_equal(to_numpy(info["positions"]), [[50.0, 100.0]])
        np.testing.assert_array_equal(to_numpy(info["costs"]), [[5.0, 10.0]])
        assert to_numpy(info["portfolio_value"])[0] == 10485.0
        np.testing.assert_allclose(to_numpy(obs)[0, 4:], [1.0485, 0.55, 0.5], rtol=1e-6)
        obs, r2, term, trunc, info = env.step(np.array([[SHORT, LONG]]))
        np.testing.assert_allclose(
            to_numpy(info["positions"]), [[-10485 / 220, 104.85]], rtol=1e-15
        )
        np.testing.assert_allclose(to_numpy(info["costs"]), [[10.7425, 0.485]], rtol=1e-12)
        assert to_numpy(info["portfolio_value"])[0] == pytest.approx(11522.2725, rel=1e-14)
        np.testing.assert_allclose(
            to_numpy(info["reward_components"])[0], [0.1, 11.2275 / 10485], rtol=1e-6
        )
        assert bool(to_numpy(trunc)[0]) and not bool(to_numpy(term)[0])
        if reward == "simple":
            assert to_numpy(r1)[0] == np.float32(0.0485)
            assert to_numpy(r2)[0] == pytest.approx(1037.2725 / 10485, rel=1e-6)
        else:
            assert to_numpy(r2)[0] == pytest.approx(math.log(11522.2725 / 10485), rel=1e-6)


def _pair(mode: str = "same_step", n: int = 512, k: int = 8) -> tuple:
    data = MarketData.synthetic("gbm", n_bars=300, n_instruments=k, seed=4)
    envs = [
        PortfolioVectorEnv(n, device="cuda", data=data, episode_length=17, autoreset_mode=mode)
        for _ in range(2)
    ]
    for env in envs:
        env.reset(seed=9)
    return envs


def test_step_into_static_outputs_and_a_cuda_graph_replay_equal_step() -> None:
    import torch

    eager, captured = _pair()
    backend = captured.backend
    n, k = backend.num_envs, backend.n_instruments
    gen = torch.Generator(device="cuda").manual_seed(3)
    actions = [torch.randint(0, 3, (n, k), device="cuda", generator=gen) for _ in range(40)]
    outputs = backend.make_outputs()
    bound = backend.bind_outputs(outputs)
    static_actions = torch.zeros((n, k), dtype=torch.int64, device="cuda")
    assert backend.prepare_actions(static_actions) is static_actions  # read in place
    # Two eager steps through the static buffers, then a graph of one step.
    for a in actions[:2]:
        static_actions.copy_(a)
        backend.step_bound(static_actions, bound)
        eager.step(a)
    backend.restart_error_countdown()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # the launch goes to the capture stream, torch's current one
        backend.step_bound(static_actions, bound, check=False)
    for a in actions[2:]:
        static_actions.copy_(a)
        graph.replay()
        obs, reward, term, trunc, info = eager.step(a)
        torch.testing.assert_close(outputs.obs, obs, rtol=0, atol=0)
        torch.testing.assert_close(outputs.reward, reward, rtol=0, atol=0)
        torch.testing.assert_close(outputs.done, term | trunc, rtol=0, atol=0)
        torch.testing.assert_close(outputs.positions, info["positions"], rtol=0, atol=0)
        done = outputs.done[:, None]
        torch.testing.assert_close(
            torch.where(done, outputs.final_obs, 0.0),
            torch.where(done, info["final_obs"], 0.0),
            rtol=0,
            atol=0,
        )
    backend.check_errors()


def test_invalid_device_actions_are_raised_at_the_check() -> None:
    import torch

    env, _ = _pair("next_step", n=64, k=3)
    a = torch.ones((64, 3), dtype=torch.int64, device="cuda")
    a[5, 1] = 3
    env.step(a)
    with pytest.raises(ValueError, match=r"actions\[5, 1\] = 3 is invalid: allowed is 0\.\.2"):
        env.backend.check_errors()
    env.backend.check_errors()  # raised once
    with pytest.raises(ValueError, match=r"actions of shape \(64,\)"):
        env.step(torch.ones(64, dtype=torch.int64, device="cuda"))
    with pytest.raises(TypeError, match="dtype torch.float32"):
        env.step(torch.ones((64, 3), device="cuda"))
    with pytest.raises(ValueError, match=r"actions\[0, 0\] = -1"):
        env.step(-np.ones((64, 3), dtype=np.int64))  # host arrays: the reference's checks


def test_switching_the_autoreset_mode_on_cuda_follows_the_reference() -> None:
    rng = np.random.default_rng(21)
    data = MarketData.synthetic("gbm", n_bars=200, n_instruments=3, seed=6)
    envs = [
        PortfolioVectorEnv(64, device=device, data=data, episode_length=5, max_leverage=3.0)
        for device in ("cpu", "cuda")
    ]
    for env in envs:
        env.reset(seed=2)
    for mode in ("same_step", "disabled", "next_step"):
        waiting = bool(envs[0].backend.state.done_flag.any())  # then reset() must come next
        for env in envs:
            env.set_autoreset_mode(mode)
            if waiting:
                env.reset()
        for _ in range(12):
            a = rng.integers(0, 3, (64, 3))
            (ro, rr, *_, ri), (co, cr, *_, ci) = (env.step(a) for env in envs)
            np.testing.assert_array_equal(ro, to_numpy(co), err_msg=mode)
            np.testing.assert_array_equal(rr, to_numpy(cr), err_msg=mode)
            np.testing.assert_array_equal(ri["positions"], to_numpy(ci["positions"]))
