"""The transitions at sampled slots: one gather for the eager and the captured train step.

A device buffer stores each field as ``[buffer_size, n_envs, ...]``; slot ``(row, env)`` has
the flat index ``row * n_envs + env``, the index the tree samples. :class:`FlatStorage` holds
the fields as flat ``[buffer_size * n_envs, ...]`` views (no copy) and :meth:`FlatStorage.gather`
reads a batch from them: :meth:`PrioritizedReplayBuffer.sample
<agents.replay.prioritized_buffer.PrioritizedReplayBuffer.sample>` through it, and the captured
train step inside its graph (where ``torch.compile`` fuses it with the forwards).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch as th

__all__ = ["FlatStorage", "StoredBatch"]


class StoredBatch(NamedTuple):
    """The stored fields of a batch of B slots.

    :param observations: [B, *obs_shape], the storage's dtype.
    :param actions: [B, action_dim], the storage's dtype.
    :param next_observations: [B, *obs_shape].
    :param dones: [B, 1] float32: terminations (``done * (1 - timeout)`` when timeouts are kept).
    :param rewards: [B, 1] float32, or [B, K] from a buffer of one reward a branch.
    """

    observations: th.Tensor
    actions: th.Tensor
    next_observations: th.Tensor
    dones: th.Tensor
    rewards: th.Tensor


class FlatStorage:
    """A buffer's storage as flat views: ``[C, ...]`` with ``C = buffer_size * n_envs``.

    A plain class, not a tuple: ``torch.compile`` traces :meth:`gather` as it traces any
    method, guarding on the views as attributes.

    :param buffer: a device buffer: ``observations``, ``next_observations``, ``actions``,
        ``rewards``, ``dones`` and ``timeouts`` torch tensors of ``[buffer_size, n_envs, ...]``,
        contiguous (the views share their memory).
    """

    def __init__(self, buffer: Any) -> None:
        flat = buffer.buffer_size * buffer.n_envs
        self.observations = buffer.observations.reshape(flat, *buffer.obs_shape)
        self.next_observations = buffer.next_observations.reshape(flat, *buffer.obs_shape)
        self.actions = buffer.actions.reshape(flat, buffer.action_dim)
        # [C, 1], or [C, K] where the buffer keeps one reward a branch (reward_dim = K).
        self.rewards = buffer.rewards.reshape(flat, -1)
        self.dones = buffer.dones.reshape(flat)
        # None: time-limit truncations are not kept apart, every done is a termination.
        self.timeouts: th.Tensor | None = (
            buffer.timeouts.reshape(flat) if buffer.handle_timeout_termination else None
        )

    def gather(self, idx: th.Tensor) -> StoredBatch:
        """The fields at the flat slots ``idx`` (int64 [B], on the storage's device)."""
        dones = self.dones.index_select(0, idx)
        if self.timeouts is not None:
            dones = dones * (1.0 - self.timeouts.index_select(0, idx))
        return StoredBatch(
            observations=self.observations.index_select(0, idx),
            actions=self.actions.index_select(0, idx),
            next_observations=self.next_observations.index_select(0, idx),
            dones=dones.reshape(-1, 1),
            rewards=self.rewards.index_select(0, idx),
        )
