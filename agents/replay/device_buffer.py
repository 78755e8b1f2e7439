"""The contract between the GPU rollouts, the loss and a replay buffer that lives on the device.

:class:`~agents.replay.prioritized_buffer.PrioritizedReplayBuffer` implements it. ``GpuDQN``
chooses the fused rollout only for a buffer that satisfies it (``isinstance`` against this
runtime-checkable protocol), and feeds priorities and progress only to such a buffer.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch as th


@runtime_checkable
class DeviceReplayBuffer(Protocol):
    """A replay buffer that stores device tensors and keeps priorities."""

    def add_tensors(
        self,
        obs: th.Tensor,
        next_obs: th.Tensor,
        action: th.Tensor,
        reward: th.Tensor,
        terminated: th.Tensor,
        truncated: th.Tensor,
    ) -> None:
        """Store one transition per env, all [N, ...] tensors on the buffer's device; no sync."""
        ...

    def update_priorities(self, indices: Any, td_errors: Any) -> None:
        """Set the priorities of sampled transitions from their absolute TD errors ([B])."""
        ...

    def set_progress(self, progress_remaining: float) -> None:
        """Training progress remaining, 1 at the start and 0 at the end (anneals beta)."""
        ...
