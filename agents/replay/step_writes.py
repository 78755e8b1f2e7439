"""Writing steps into :class:`~agents.replay.prioritized_buffer.PrioritizedReplayBuffer`.

A vector step of ``n_envs`` transitions reaches the storage by one of three paths, by where it
comes from:

- :meth:`StepWrites.add`: NumPy arrays from SB3's own rollout loop (host to device copies);
- :meth:`StepWrites.add_tensors`: device tensors from the fused rollout's eager steps (device
  copies, no host sync);
- :meth:`StepWrites.add_tensors_at`: device tensors at a slot read on the device, so that a CUDA
  graph records the write once and each replay writes the next step (one kernel of
  :mod:`agents.replay.step_store` where the storage fits it, the torch copies elsewhere).

All three give each field the same value (``dones = terminated | truncated``, ``timeouts =
truncated & ~terminated``) and give the new slots the running maximum priority.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th

from agents.replay.step_store import inputs_fit

__all__ = ["StepWrites"]


class StepWrites:
    """Mixin of the device buffer: its ``add`` paths. Reads the buffer's storage tensors,
    ``pos``, ``full``, ``buffer_size``, ``n_envs``, ``obs_shape``, ``action_dim``,
    ``handle_timeout_termination``, ``tree`` and ``_step_store``."""

    observations: th.Tensor
    next_observations: th.Tensor
    actions: th.Tensor
    rewards: th.Tensor
    dones: th.Tensor
    timeouts: th.Tensor
    pos: int
    full: bool
    buffer_size: int
    n_envs: int
    obs_shape: tuple[int, ...]
    action_dim: int
    handle_timeout_termination: bool
    tree: Any
    device: th.device

    def _advance(self) -> None:
        self.tree.fill_range(self.pos * self.n_envs, self.n_envs)
        self.advance_position()

    def advance_position(self) -> None:
        """Move the write position by one step on the host only: after :meth:`add_tensors_at`
        (whose graph wrote the slot and filled its priorities on the device)."""
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def add(
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """Store one step of ``n_envs`` transitions (SB3's NumPy path).

        :param obs: [n_envs, *obs_shape].
        :param next_obs: [n_envs, *obs_shape].
        :param action: [n_envs, action_dim] (or anything reshapeable to it).
        :param reward: [n_envs], or [n_envs, K] in a buffer of ``reward_dim = K``.
        :param done: [n_envs], terminated or truncated.
        :param infos: ``n_envs`` dicts; ``TimeLimit.truncated`` marks time-limit truncations.
        """
        e = self.n_envs
        dev = self.device
        self.observations[self.pos] = th.as_tensor(
            np.asarray(obs).reshape((e, *self.obs_shape)), device=dev
        )
        self.next_observations[self.pos] = th.as_tensor(
            np.asarray(next_obs).reshape((e, *self.obs_shape)), device=dev
        )
        self.actions[self.pos] = th.as_tensor(
            np.asarray(action).reshape((e, self.action_dim)), device=dev
        )
        self.rewards[self.pos] = th.as_tensor(
            np.asarray(reward, dtype=np.float32).reshape(self.rewards.shape[1:]), device=dev
        )
        self.dones[self.pos] = th.as_tensor(
            np.asarray(done, dtype=np.float32).reshape(e), device=dev
        )
        if self.handle_timeout_termination:
            timeouts = np.array(
                [info.get("TimeLimit.truncated", False) for info in infos], dtype=np.float32
            )
            self.timeouts[self.pos] = th.as_tensor(timeouts, device=dev)
        self._advance()

    def add_tensors(
        self,
        obs: th.Tensor,
        next_obs: th.Tensor,
        action: th.Tensor,
        reward: th.Tensor,
        terminated: th.Tensor,
        truncated: th.Tensor,
    ) -> None:
        """Store one step of ``n_envs`` transitions given as tensors on the buffer's device.

        The fused path: device-to-device copies and one tree kernel, no host sync.
        ``dones = terminated | truncated`` and ``timeouts = truncated & ~terminated`` (as SB3's
        ``TimeLimit.truncated``), so the sampled ``dones`` are the terminations.

        :param obs: [n_envs, *obs_shape].
        :param next_obs: [n_envs, *obs_shape], the true next observation (before any reset).
        :param action: [n_envs] or [n_envs, action_dim].
        :param reward: [n_envs], or [n_envs, K] in a buffer of ``reward_dim = K``.
        :param terminated: [n_envs], bool or 0/1.
        :param truncated: [n_envs], bool or 0/1.
        """
        fields = self._step_fields(obs, next_obs, action, reward, terminated, truncated)
        for name, value in fields.items():
            getattr(self, name)[self.pos].copy_(value)
        self._advance()

    def _step_fields(
        self,
        obs: th.Tensor,
        next_obs: th.Tensor,
        action: th.Tensor,
        reward: th.Tensor,
        terminated: th.Tensor,
        truncated: th.Tensor,
    ) -> dict[str, th.Tensor]:
        """The storage fields of one step, each ``[n_envs, ...]`` in its storage's dtype."""
        e = self.n_envs
        term = terminated.reshape(e).bool()
        trunc = truncated.reshape(e).bool()
        fields = {
            "observations": obs.reshape((e, *self.obs_shape)),
            "next_observations": next_obs.reshape((e, *self.obs_shape)),
            "actions": action.reshape((e, self.action_dim)),
            "rewards": reward.reshape(self.rewards.shape[1:]),
            "dones": term | trunc,
        }
        if self.handle_timeout_termination:
            fields["timeouts"] = trunc & ~term
        return {k: v.to(getattr(self, k).dtype) for k, v in fields.items()}

    def add_tensors_at(
        self,
        slot: th.Tensor,
        obs: th.Tensor,
        next_obs: th.Tensor,
        action: th.Tensor,
        reward: th.Tensor,
        terminated: th.Tensor,
        truncated: th.Tensor,
    ) -> None:
        """:meth:`add_tensors` at the step ``slot`` read on the device, then ``slot`` advanced
        (modulo ``buffer_size``); the host's ``pos`` does not move (:meth:`advance_position`).

        Nothing here reads host state that changes between steps, so a CUDA graph records it
        once and each replay stores the next step (the fused rollout's graph does). CUDA only.

        :param slot: int64 [1] on the buffer's device, the step to write (``pos`` before it).
            The other arguments are those of :meth:`add_tensors`.
        """
        e = self.n_envs
        inputs = {
            "obs": obs,
            "next_obs": next_obs,
            "action": action,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
        }
        store = getattr(self, "_step_store", None)  # absent in buffers pickled before it
        if (
            store is not None
            and slot.device == self.observations.device
            and inputs_fit(self, inputs)
        ):
            start = store(slot, inputs)  # one launch for every field (the loop below is a dozen)
        else:
            for name, value in self._step_fields(**inputs).items():
                getattr(self, name).index_copy_(0, slot, value.unsqueeze(0))
            start = getattr(self, "_fill_start", None)
            if start is None or start.device != slot.device:
                start = self._fill_start = th.zeros(1, dtype=th.int64, device=slot.device)
            th.mul(slot, e, out=start)
        self.tree.fill_range_at(start.data_ptr(), e)
        slot.add_(1).remainder_(self.buffer_size)
