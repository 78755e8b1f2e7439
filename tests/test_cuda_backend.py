"""GPU tier: the CUDA backend against the NumPy reference, and the CUDA vector env's contract.

Run with ``pytest -m gpu`` on a machine with CUDA and CuPy; skipped elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_trading_env import EnvConfig, MarketData, TradingVectorEnv
from gpu_trading_env.backends.base import CuriosityWeights

pytestmark = pytest.mark.gpu
# The kernel is checked in the source design's env: 45 actions, barriers, both penalties.
SOURCE = EnvConfig.source_design()

N_ENVS = 1024
N_STEPS = 2000


def _random_config(
    rng: np.random.Generator, curiosity: bool, sizing: str = "units"
) -> tuple[EnvConfig, dict]:
    cfg = EnvConfig.source_design(
        fill=str(rng.choice(["close", "next_open"])),
        barriers=bool(rng.integers(2)),
        profit_target_bps=float(rng.uniform(20, 150)),
        stop_loss_bps=float(rng.uniform(10, 100)),
        max_holding_bars=int(rng.integers(5, 200)),
        reserve_pct=float(rng.choice([0.0, rng.uniform(1, 30)])),
        initial_capital=float(rng.uniform(1e4, 1e6)),
        episode_length=int(rng.integers(20, 400)),
        diversity_window=int(rng.integers(1, 120)),
        autoreset_mode=str(rng.choice(["same_step", "next_step", "disabled"])),
        curiosity_max_reward=10.0,
        spread=float(rng.uniform(0, 1e-3)),
        sizing=sizing,
        leverage=float(rng.uniform(0.5, 5.0)) if sizing == "equity" else 1.0,
    )
    return cfg, {"curiosity": curiosity}


def _curiosity(cfg: EnvConfig, seed: int) -> CuriosityWeights:
    rng = np.random.default_rng(seed)
    d, h = cfg.curiosity_state_dims, cfg.curiosity_hidden
    return CuriosityWeights(
        rng.normal(0, 0.1, (h, d + 3)).astype(np.float32),
        rng.normal(0, 0.1, h).astype(np.float32),
        rng.normal(0, 0.1, (d, h)).astype(np.float32),
        rng.normal(0, 0.1, d).astype(np.float32),
    )


@pytest.fixture(scope="module")
def market() -> MarketData:
    return MarketData.synthetic(kind="regime", n_bars=6000, n_instruments=3, seed=11)


@pytest.mark.parametrize("case", range(6))
def test_cuda_matches_numpy(case: int, market: MarketData):
    import cupy as cp

    from gpu_trading_env.backends.cuda_backend import CudaBackend
    from gpu_trading_env.backends.numpy_backend import NumpyBackend

    rng = np.random.default_rng(1000 + case)
    # Cases 2 and 5 size positions by equity (one without, one with curiosity); the market's
    # three instruments exercise the per-instrument max_position of the others.
    cfg, extra = _random_config(
        rng, curiosity=case % 2 == 1, sizing="equity" if case % 3 == 2 else "units"
    )
    ref = NumpyBackend(market, cfg, N_ENVS)
    gpu = CudaBackend(market, cfg, N_ENVS)
    seeds = rng.integers(0, 2**63, N_ENVS, dtype=np.uint64)
    mask = np.ones(N_ENVS, dtype=bool)
    ref.seed(seeds, mask)
    gpu.seed(seeds, mask)
    start = np.where(rng.random(N_ENVS) < 0.2, rng.integers(0, 50, N_ENVS), -1)
    np.testing.assert_array_equal(
        ref.reset(mask, start), gpu.reset(cp.asarray(mask), cp.asarray(start)).get()
    )
    if extra["curiosity"]:
        ref.set_curiosity_weights(_curiosity(cfg, case))
        gpu.set_curiosity_weights(_curiosity(cfg, case))
    # Sticky random actions: agents hold positions for a while, so barriers and reversals occur.
    actions = rng.integers(0, cfg.n_actions, N_ENVS)
    ended = 0
    for k in range(N_STEPS):
        change = rng.random(N_ENVS) < 0.3
        actions = np.where(change, rng.integers(0, cfg.n_actions, N_ENVS), actions)
        a = ref.step(actions)
        b = gpu.step(cp.asarray(actions))
        for name in ("terminated", "truncated", "barrier_label", "episode_length"):
            np.testing.assert_array_equal(
                getattr(a, name), getattr(b, name).get(), err_msg=f"{name} at step {k}"
            )
        for name in ("position", "bar", "cash", "episode_count", "done_flag"):
            np.testing.assert_array_equal(
                getattr(ref.state, name),
                getattr(gpu.state, name).get(),
                err_msg=f"state.{name} at step {k}",
            )
        for name in ("obs", "components"):
            np.testing.assert_allclose(
                getattr(a, name),
                getattr(b, name).get(),
                rtol=1e-5,
                atol=1e-7,
                err_msg=f"{name} at step {k}",
            )
        # The curiosity bonus is float32 on both sides with different summation orders; where
        # it nearly cancels the pnl, the reward's error is relative to the bonus, not to the sum.
        scale = np.maximum(np.abs(a.reward), np.abs(a.components[:, 4]))
        np.testing.assert_array_less(
            np.abs(a.reward - b.reward.get()), 1e-5 * scale + 1e-7, err_msg=f"reward at step {k}"
        )
        if cfg.autoreset_mode.name == "SAME_STEP":
            done = a.terminated | a.truncated
            np.testing.assert_allclose(
                a.final_obs[done], b.final_obs.get()[done], rtol=1e-5, atol=1e-7
            )
        if cfg.autoreset_mode.name == "DISABLED" and k % 97 == 0:
            m = ref.state.done_flag != 0
            ref.reset(m, np.full(N_ENVS, -1))
            gpu.reset(cp.asarray(m), cp.full(N_ENVS, -1, dtype=cp.int64))
        ended += int((a.terminated | a.truncated).sum())
    assert ended > N_ENVS  # episodes ended and restarted many times
    if extra["curiosity"]:
        assert np.any(a.components[:, 4] > 0)


def test_cuda_vector_env_torch_outputs_and_action_types():
    import cupy as cp
    import torch

    env = TradingVectorEnv(num_envs=512, device="cuda", episode_length=50, config=SOURCE)
    obs, _ = env.reset(seed=3)
    assert isinstance(obs, torch.Tensor) and obs.is_cuda and obs.dtype == torch.float32
    assert obs.shape == (512, env.single_observation_space.shape[0])
    for actions in (
        torch.randint(0, 45, (512,), device="cuda"),
        cp.random.randint(0, 45, 512),
        np.random.default_rng(0).integers(0, 45, 512),
        torch.randint(0, 45, (512,), device="cuda", dtype=torch.int32),
    ):
        obs, reward, terminated, truncated, info = env.step(actions)
        assert reward.is_cuda and terminated.dtype == torch.bool and truncated.is_cuda
        assert info["reward_components"].shape == (512, 5)
        torch.testing.assert_close(info["reward_components"].sum(1), reward, rtol=1e-5, atol=1e-6)
    cenv = TradingVectorEnv(
        num_envs=64, device="cuda", array_type="cupy", episode_length=50, config=SOURCE
    )
    obs, _ = cenv.reset(seed=0)
    assert isinstance(obs, cp.ndarray)


def test_cuda_vector_env_matches_cpu_env_through_gym_api():
    cpu = TradingVectorEnv(
        num_envs=256, device="cpu", episode_length=40, autoreset_mode="next_step", config=SOURCE
    )
    gpu = TradingVectorEnv(
        num_envs=256, device="cuda", episode_length=40, autoreset_mode="next_step", config=SOURCE
    )
    o1, _ = cpu.reset(seed=5, options={"start_index": 7})
    o2, _ = gpu.reset(seed=5, options={"start_index": 7})
    np.testing.assert_array_equal(o1, o2.cpu().numpy())
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = rng.integers(0, 45, 256)
        r1 = cpu.step(a)
        r2 = gpu.step(a)
        np.testing.assert_array_equal(r1[2], r2[2].cpu().numpy())
        np.testing.assert_array_equal(r1[3], r2[3].cpu().numpy())
        np.testing.assert_allclose(r1[0], r2[0].cpu().numpy(), rtol=1e-5, atol=1e-7)


def test_cuda_invalid_action_raises_at_check():
    import torch

    env = TradingVectorEnv(num_envs=128, device="cuda", episode_length=50, config=SOURCE)
    env.reset(seed=0)
    a = torch.zeros(128, dtype=torch.int64, device="cuda")
    a[17] = 45
    env.step(a)
    with pytest.raises(ValueError, match=r"actions\[17\] = 45"):
        env.backend.check_errors()
    env.step(torch.zeros(128, dtype=torch.int64, device="cuda"))
    env.backend.check_errors()  # the flag was cleared


def test_cuda_graph_capture_replays_step():
    """The step kernel launched on torch's stream can be captured in a CUDA graph."""
    import torch

    env = TradingVectorEnv(num_envs=4096, device="cuda", episode_length=100, config=SOURCE)
    twin = TradingVectorEnv(num_envs=4096, device="cuda", episode_length=100, config=SOURCE)
    env.reset(seed=1)
    twin.reset(seed=1)
    actions = torch.randint(0, 45, (4096,), device="cuda")
    backend = env.backend
    acts = backend.prepare_actions(actions)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        backend.step(acts)  # warm-up on the capture stream
        twin.step(actions)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = backend.step(acts)
        backend.step(acts)
    for _ in range(3):
        g.replay()
        twin.step(actions)
        twin.step(actions)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(backend.state.position.get(), twin.backend.state.position.get())
    assert out is not None


@pytest.mark.parametrize("n", [1000, 20_000, 40_000])
def test_cuda_matches_numpy_at_every_launch_width(n: int, market: MarketData):
    """64-, 128- and 256-thread blocks (on an H200), each with a partial last block: the
    observations and the final observations of finishing envs (stored by the block together)
    equal the reference env's."""
    import cupy as cp

    from gpu_trading_env.backends.cuda_backend import CudaBackend
    from gpu_trading_env.backends.numpy_backend import NumpyBackend

    cfg = EnvConfig.source_design(episode_length=7, autoreset_mode="same_step")
    ref = NumpyBackend(market, cfg, n)
    gpu = CudaBackend(market, cfg, n)
    rng = np.random.default_rng(n)
    seeds = rng.integers(0, 2**63, n, dtype=np.uint64)
    mask = np.ones(n, dtype=bool)
    ref.seed(seeds, mask)
    gpu.seed(seeds, mask)
    start = np.full(n, -1)
    ref.reset(mask, start)
    gpu.reset(cp.asarray(mask), cp.asarray(start))
    finished = 0
    for k in range(40):
        actions = rng.integers(0, cfg.n_actions, n)
        a = ref.step(actions)
        b = gpu.step(cp.asarray(actions))
        done = a.terminated | a.truncated
        np.testing.assert_array_equal(done, (b.terminated | b.truncated).get(), f"step {k}")
        np.testing.assert_allclose(a.obs, b.obs.get(), rtol=1e-5, atol=1e-7, err_msg=f"step {k}")
        np.testing.assert_allclose(
            a.final_obs[done], b.final_obs.get()[done], rtol=1e-5, atol=1e-7, err_msg=f"step {k}"
        )
        finished += int(done.sum())
    assert finished > 4 * n  # every env finished several episodes
