"""The CUDA side of :meth:`PrioritizedReplayBuffer.add_tensors_at
<agents.replay.prioritized_buffer.PrioritizedReplayBuffer.add_tensors_at>`: one kernel that writes
every field of one vector step at a slot read on the device.

``kernels/store_step.cu`` is launched through :class:`~gpu_runtime.device.KernelLauncher`
with the parameters of ``STORE_KERNEL_PARAMS`` (``tests/test_kernels_compile.py`` checks them
against the source). It applies to the storage dtypes of a float32 observation space and an
int64 action space of ``action_dim`` entries per env (1 for ``Discrete``, K for
``MultiDiscrete([L] * K)``); :func:`storage_fits` and :func:`inputs_fit` say when, and the
buffer keeps its torch path otherwise.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch as th

from gpu_runtime.device import (
    I64,
    PTR,
    KernelLauncher,
    KernelParams,
    ModuleSpec,
    current_stream,
    load_module,
    require_cupy,
)

__all__ = [
    "STORE_KERNEL_FILE",
    "STORE_KERNEL_PARAMS",
    "CudaStepStore",
    "inputs_fit",
    "storage_fits",
]

STORE_KERNEL_FILE = Path(__file__).resolve().parent / "kernels" / "store_step.cu"


def store_module_spec() -> ModuleSpec:
    """:func:`~gpu_runtime.device.load_module`'s arguments for ``store_step.cu``."""
    return (STORE_KERNEL_FILE, (), (), ())


STORE_THREADS = 256
STORE_KERNEL_PARAMS: KernelParams = (
    ("slot", PTR),
    ("n_envs", I64),
    ("obs_dim", I64),
    ("action_dim", I64),
    ("obs", PTR),
    ("next_obs", PTR),
    ("action", PTR),
    ("reward", PTR),
    ("terminated", PTR),
    ("truncated", PTR),
    ("obs_store", PTR),
    ("next_obs_store", PTR),
    ("action_store", PTR),
    ("reward_store", PTR),
    ("done_store", PTR),
    ("timeout_store", PTR),
    ("fill_start", PTR),
)

# Storage field -> the dtype the kernel writes.
_STORAGE_DTYPES = {
    "observations": th.float32,
    "next_observations": th.float32,
    "actions": th.int64,
    "rewards": th.float32,
    "dones": th.float32,
    "timeouts": th.float32,
}


def storage_fits(buffer: Any) -> bool:
    """Whether the buffer's storage is what ``store_step`` writes: on a CUDA device, contiguous,
    float32 observations, ``action_dim`` int64 actions per env, float32 rewards, dones and
    timeouts."""
    # The storage's own device: ``buffer.device`` may be "cuda" without an index.
    if buffer.observations.device.type != "cuda":
        return False
    for name, dtype in _STORAGE_DTYPES.items():
        t = getattr(buffer, name)
        if t.dtype != dtype or not t.is_contiguous():
            return False
    # The kernel writes one reward a transition; a buffer of one a branch takes torch's copies.
    return buffer.rewards.ndim == 2


def inputs_fit(buffer: Any, inputs: dict[str, th.Tensor]) -> bool:
    """Whether one step's tensors are what ``store_step`` reads: on the storage's device,
    contiguous, float32 observations and rewards, int64 actions (``[n_envs]`` or
    ``[n_envs, action_dim]``), bool flags, ``n_envs`` rows."""
    wanted = {
        "obs": th.float32,
        "next_obs": th.float32,
        "action": th.int64,
        "reward": th.float32,
        "terminated": th.bool,
        "truncated": th.bool,
    }
    device = buffer.observations.device
    e = buffer.n_envs
    obs_dim = math.prod(buffer.obs_shape)
    for name, dtype in wanted.items():
        t = inputs[name]
        if t.dtype != dtype or not t.is_contiguous() or t.device != device:
            return False
        per_env = {"obs": obs_dim, "next_obs": obs_dim, "action": buffer.action_dim}.get(name, 1)
        if t.numel() != e * per_env:
            return False
    return True


class CudaStepStore:
    """Launches ``store_step`` for one buffer on torch's current stream of its device.

    :param buffer: the :class:`~agents.replay.prioritized_buffer.PrioritizedReplayBuffer`.
    """

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer
        self.device_index = buffer.observations.device.index
        self._cp = require_cupy("the replay buffer's store kernel")
        with self._cp.cuda.Device(self.device_index):  # the module is loaded per device
            kernel = load_module(*store_module_spec()).get_function("store_step")
            self._launch = KernelLauncher(kernel, STORE_KERNEL_PARAMS, self.device_index)
        self.fill_start = th.zeros(1, dtype=th.int64, device=buffer.observations.device)
        # One empty launch now (no env, the slot read from fill_start): the module is loaded
        # here rather than at the first real launch, which may be inside a graph capture.
        ptr = self.fill_start.data_ptr()
        with self._cp.cuda.Device(self.device_index):
            stream = current_stream(self.device_index)[1]
            self._launch(1, STORE_THREADS, stream, ptr, 0, 0, 0, *(0,) * 12, ptr)

    def __call__(self, slot: th.Tensor, inputs: dict[str, th.Tensor]) -> th.Tensor:
        """Write the step at ``slot`` (int64 [1]); returns ``fill_start`` (int64 [1], the
        step's first flat index, written on the device)."""
        b = self.buffer
        e = b.n_envs
        d = math.prod(b.obs_shape)
        total = max(e * d, e * b.action_dim, e)
        grid = (total + STORE_THREADS - 1) // STORE_THREADS
        timeouts = b.timeouts.data_ptr() if b.handle_timeout_termination else 0
        with self._cp.cuda.Device(self.device_index):
            self._launch(
                grid,
                STORE_THREADS,
                current_stream(self.device_index)[1],
                slot.data_ptr(),
                e,
                d,
                b.action_dim,
                inputs["obs"].data_ptr(),
                inputs["next_obs"].data_ptr(),
                inputs["action"].data_ptr(),
                inputs["reward"].data_ptr(),
                inputs["terminated"].data_ptr(),
                inputs["truncated"].data_ptr(),
                b.observations.data_ptr(),
                b.next_observations.data_ptr(),
                b.actions.data_ptr(),
                b.rewards.data_ptr(),
                b.dones.data_ptr(),
                timeouts,
                self.fill_start.data_ptr(),
            )
        return self.fill_start
