"""The declared contracts between layers: Backend, CudaBackend's kernel view, DeviceReplayBuffer."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.buffers import ReplayBuffer

import gpu_trading_env  # noqa: F401
from agents import GpuDQN, PrioritizedReplayBuffer
from agents.replay.device_buffer import DeviceReplayBuffer
from gpu_trading_env.backends.base import Backend
from gpu_trading_env.backends.cuda_backend import CudaBackend, KernelArgs
from gpu_trading_env.backends.numpy_backend import NumpyBackend
from gpu_trading_env.core.config import EnvConfig


def test_backends_implement_the_declared_contract():
    contract = ("seed", "reset", "prepare_actions", "step", "check_errors", "observe")
    for cls in (NumpyBackend, CudaBackend):
        for name in contract:
            assert getattr(cls, name) is not getattr(Backend, name) or name == "check_errors"
    # The public kernel view other packages' kernels use.
    for name in ("kernel_args", "device_scope", "compile_module", "restart_error_countdown"):
        assert callable(getattr(CudaBackend, name))
    assert [f for f in KernelArgs.__dataclass_fields__] == [
        "state",
        "market",
        "params",
        "curiosity",
    ]


def test_numpy_prepare_actions_names_the_bad_action():
    env = gym.make_vec("GpuTrading-v0", num_envs=3, device="cpu")
    env.reset(seed=0)
    backend = env.unwrapped.backend if hasattr(env, "unwrapped") else env.backend
    assert backend.prepare_actions(np.array([0, 1, 2])).dtype == np.int64
    with pytest.raises(ValueError, match=r"actions\[1\] = 99 is invalid"):
        backend.prepare_actions(np.array([0, 99, 2]))
    backend.check_errors()  # nothing deferred on the CPU


@pytest.mark.parametrize("dtype", ["i1", "i2", "<i4", "<i8", ">i8", "u1", "u4", "u8"])
def test_numpy_prepare_actions_range_check_for_every_integer_dtype(dtype: str) -> None:
    """The range check reads signed actions of 4 or 8 bytes as unsigned (one reduction):
    negative ones, the most negative included, and strided arrays are still refused (in the
    source design's 45 actions, so that 7 and 9 are valid)."""
    env = gym.make_vec("GpuTrading-v0", num_envs=3, device="cpu", config=EnvConfig.source_design())
    backend = env.unwrapped.backend if hasattr(env, "unwrapped") else env.backend
    n = backend.config.n_actions
    kind = np.dtype(dtype)
    ok = np.array([0, n - 1, 7], dtype=kind)
    assert backend.prepare_actions(ok).tolist() == [0, n - 1, 7]
    bad = [n] + ([-1, int(np.iinfo(kind).min)] if kind.kind == "i" else [int(np.iinfo(kind).max)])
    for value in bad:
        with pytest.raises(ValueError, match=rf"actions\[1\] = {value} is invalid"):
            backend.prepare_actions(np.array([0, value, 2], dtype=kind))
        strided = np.array([0, 9, value, 9, 2, 9], dtype=kind)[::2]
        with pytest.raises(ValueError, match=rf"actions\[1\] = {value} is invalid"):
            backend.prepare_actions(strided)


def test_device_buffer_protocol_decides_the_fused_path(monkeypatch):
    env = gym.make_vec("GpuTrading-v0", num_envs=2, device="cpu")
    model = GpuDQN("DuelingPolicy", env, buffer_size=1000, learning_starts=10, device="cpu")
    assert isinstance(model.replay_buffer, PrioritizedReplayBuffer)
    assert isinstance(model.replay_buffer, DeviceReplayBuffer)
    monkeypatch.setattr(model.trading_env, "device", "cuda:0")
    assert model.uses_fused_rollout(model.env)
    plain = ReplayBuffer(100, model.observation_space, model.action_space, n_envs=2)
    assert not isinstance(plain, DeviceReplayBuffer)
    monkeypatch.setattr(model, "replay_buffer", plain)
    assert not model.uses_fused_rollout(model.env)  # SB3's loop: the buffer takes no tensors
