"""Owned outputs from the reuse pool (gpu_trading_env/output_pool.py): whatever a caller still
holds of a step (the array, a slice of it, an export, the info dict) is never written by a later
step, and when nothing is held the pool does reuse its blocks.

CPU: NumPy and torch CPU outputs; GPU tier: torch CUDA and CuPy twins.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from gpu_trading_env import TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties): all of the step is exercised.
SOURCE = EnvConfig.source_design()

N = 32
HOLD_STEPS = 8


def _host(a) -> np.ndarray:
    if hasattr(a, "detach"):
        return a.detach().cpu().numpy()
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _address(a) -> int:
    if hasattr(a, "data_ptr"):
        return a.data_ptr()
    if hasattr(a, "data") and hasattr(a.data, "ptr"):
        return a.data.ptr
    return a.ctypes.data


def _env(device: str, array_type: str, mode: str = "next_step") -> TradingVectorEnv:
    env = TradingVectorEnv(
        N, device, array_type=array_type, autoreset_mode=mode, episode_length=5, config=SOURCE
    )
    env.reset(seed=3)
    return env


def _actions(env: TradingVectorEnv, k: int):
    acts = np.random.default_rng(k).integers(0, env.single_action_space.n, N)
    if env.device != "cpu":
        import torch

        return torch.as_tensor(acts, device=env.device)
    return acts


def _dlpack(a):
    """A DLPack export of ``a`` into its own library."""
    if hasattr(a, "detach"):
        import torch

        return torch.from_dlpack(a)
    if isinstance(a, np.ndarray):
        return np.from_dlpack(a)
    import cupy

    return cupy.from_dlpack(a)


def _asarray(a):
    """``asarray`` of ``a`` (a view): NumPy's on the CPU (torch CPU tensors too), CuPy's or
    torch's ``as_tensor`` on a GPU."""
    if isinstance(a, np.ndarray) or getattr(a, "is_cuda", True) is False:
        return np.asarray(a)
    if hasattr(a, "detach"):
        import torch

        return torch.as_tensor(a).view(-1)
    import cupy

    return cupy.asarray(a)


# What a caller keeps of one step's result; each keeps something that shares the block.
HOLDS: dict[str, Callable] = {
    "obs": lambda r: r[0],
    "obs slice only": lambda r: r[0][1:4],
    "obs row view": lambda r: r[0][2],
    "reward": lambda r: r[1],
    "terminated": lambda r: r[2],
    "info dict": lambda r: r[4],
    "info array": lambda r: r[4]["portfolio_value"],
    "asarray of a slice": lambda r: _asarray(r[0][:3]),
    "dlpack export of a slice": lambda r: _dlpack(r[0][1:3]),
}


def _snapshot(held) -> list[np.ndarray]:
    if isinstance(held, dict):
        return [_host(v).copy() for v in held.values() if hasattr(v, "shape")]
    return [_host(held).copy()]


def _check_holds_survive(device: str, array_type: str, hold: str) -> None:
    """Keep ``hold`` of step 0, drop the rest, step on: what was kept never changes."""
    env = _env(device, array_type)
    keep = HOLDS[hold]
    held = keep(env.step(_actions(env, 0)))
    want = _snapshot(held)
    for k in range(1, HOLD_STEPS):
        env.step(_actions(env, k))  # nothing else of these steps is held: the pool reuses
    for got, expected in zip(_snapshot(held), want, strict=True):
        np.testing.assert_array_equal(got, expected)
    env.close()


def _check_reuses(device: str, array_type: str, mode: str) -> None:
    """Results dropped after each step: the pool builds at most two sets and obs repeats its
    address (so pooling cannot silently never happen)."""
    env = _env(device, array_type, mode)
    built = []
    build = env._pool._build
    env._pool._build = lambda stream: built.append(1) or build(stream)
    addresses = []
    for k in range(12):
        addresses.append(_address(env.step(_actions(env, k))[0]))
    assert len(built) <= 2, f"{len(built)} output sets built for 12 steps nobody held"
    assert len(set(addresses)) <= 2
    # Hold a few steps' observations, then let go: the pool reuses again (the baselines are
    # measured, not fixed numbers, and count the pool's own references only).
    held = [env.step(_actions(env, k))[0] for k in range(6)]
    assert len({_address(h) for h in held}) == 6  # each held step got its own block
    del held
    n_built = len(built)
    for k in range(8):
        env.step(_actions(env, k))
    assert len(built) == n_built, "the pool did not reuse its sets once they were released"
    env.close()


def _check_same_step_final_obs(device: str, array_type: str) -> None:
    """SAME_STEP on reused sets: rows that did not end have a zero final_obs, every step, and
    the values agree with zero-copy stepping."""
    env = _env(device, array_type, "same_step")
    ref = TradingVectorEnv(
        N,
        device,
        array_type=array_type,
        autoreset_mode="same_step",
        episode_length=5,
        copy_outputs=False,
        config=SOURCE,
    )
    ref.reset(seed=3)
    ended = 0
    for k in range(16):
        info = env.step(_actions(env, k))[4]
        info_ref = ref.step(_actions(env, k))[4]
        if "final_obs" not in info:  # on the host: only on steps where an episode ended
            assert "final_obs" not in info_ref and device == "cpu"
            del info, info_ref
            continue
        done = _host(info["_final_obs"])
        ended += int(done.sum())
        final = _host(info["final_obs"])
        assert not final[~done].any()
        np.testing.assert_array_equal(final[done], _host(info_ref["final_obs"])[done])
        del info, info_ref
    assert ended > 0
    env.close()
    ref.close()


# ------------------------------------------------------------------ CPU
CPU_TYPES = ["numpy", "torch"]


@pytest.mark.parametrize("hold", list(HOLDS))
@pytest.mark.parametrize("array_type", CPU_TYPES)
def test_held_outputs_are_never_written_again(array_type: str, hold: str) -> None:
    _check_holds_survive("cpu", array_type, hold)


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
@pytest.mark.parametrize("array_type", CPU_TYPES)
def test_pool_reuses_outputs_nobody_holds(array_type: str, mode: str) -> None:
    _check_reuses("cpu", array_type, mode)


@pytest.mark.parametrize("array_type", CPU_TYPES)
def test_reused_same_step_outputs_zero_final_obs(array_type: str) -> None:
    _check_same_step_final_obs("cpu", array_type)


def test_torch_slice_outlives_obs_through_the_storage() -> None:
    """A torch slice does not refer to the Python ``obs``: only the storage's use count shows
    it. It must hold the block after ``obs`` itself is gone."""
    env = _env("cpu", "torch")
    obs = env.step(_actions(env, 0))[0]
    part = obs.view(-1)[:5]
    want = part.clone()
    del obs
    for k in range(1, HOLD_STEPS):
        env.step(_actions(env, k))
    assert bool((part == want).all())


def test_torch_without_storage_use_count_gets_fresh_outputs(monkeypatch) -> None:
    """Where torch cannot count a storage's users, no torch output set is ever reused."""
    import gpu_trading_env.vector_env as vector_env

    monkeypatch.setattr(vector_env, "storage_use_count", lambda: None)
    env = _env("cpu", "torch")
    built = []
    build = env._pool._build
    env._pool._build = lambda stream: built.append(1) or build(stream)
    for k in range(6):
        env.step(_actions(env, k))
    assert env._pool.reuse is False and len(env._pool) == 0
    assert len(built) == 6  # one new set per step
    numpy_env = _env("cpu", "numpy")
    assert numpy_env._pool.reuse is True


def test_switching_autoreset_mode_drops_the_pool() -> None:
    env = _env("cpu", "numpy", "next_step")
    env.step(_actions(env, 0))
    assert len(env._pool) == 1 and "final_obs" not in env._pool._sets[0].views
    env.set_autoreset_mode("same_step")
    env.reset(seed=1)
    env.step(_actions(env, 1))
    assert len(env._pool) == 1 and "final_obs" in env._pool._sets[0].views


# ------------------------------------------------------------------ GPU tier
GPU_TYPES = ["torch", "cupy"]


@pytest.mark.gpu
@pytest.mark.parametrize("hold", list(HOLDS))
@pytest.mark.parametrize("array_type", GPU_TYPES)
def test_cuda_held_outputs_are_never_written_again(array_type: str, hold: str) -> None:
    _check_holds_survive("cuda", array_type, hold)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
@pytest.mark.parametrize("array_type", GPU_TYPES)
def test_cuda_pool_reuses_outputs_nobody_holds(array_type: str, mode: str) -> None:
    _check_reuses("cuda", array_type, mode)


@pytest.mark.gpu
@pytest.mark.parametrize("array_type", GPU_TYPES)
def test_cuda_reused_same_step_outputs_zero_final_obs(array_type: str) -> None:
    _check_same_step_final_obs("cuda", array_type)


@pytest.mark.gpu
def test_cuda_outputs_are_reused_on_their_own_stream_only() -> None:
    """A block last written on one stream is not handed out on another (a kernel queued there
    to read it may not have run)."""
    import torch

    env = _env("cuda", "torch")
    first = _address(env.step(_actions(env, 0))[0])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        other = _address(env.step(_actions(env, 1))[0])
    torch.cuda.current_stream().wait_stream(side)
    assert other != first
    assert _address(env.step(_actions(env, 2))[0]) == first
