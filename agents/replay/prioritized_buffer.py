"""Prioritized experience replay (Schaul et al., 2016) as a Stable-Baselines3 replay buffer.

The storage and the sum/min tree live on the buffer's torch device: torch tensors for the
transitions, :class:`~agents.replay.segment_tree.CudaSumMinTree` (CuPy + CUDA kernels) on a CUDA device,
:class:`~agents.replay.segment_tree.NumpySumMinTree` on the CPU. It can be passed to any SB3 off-policy
algorithm as ``replay_buffer_class`` (plain ``DQN`` samples it and ignores priorities, which then
all stay at the running maximum: uniform sampling with unit weights); ``agents.GpuDQN`` also
calls :meth:`PrioritizedReplayBuffer.update_priorities` and
:meth:`PrioritizedReplayBuffer.set_progress`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer, ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecNormalize

from agents.replay.batch import FlatStorage
from agents.replay.segment_tree import SumMinTree, make_tree
from agents.replay.step_store import CudaStepStore, storage_fits
from agents.replay.step_writes import StepWrites
from gpu_runtime.device import require_cupy

__all__ = [
    "PrioritizedReplayBuffer",
    "PrioritizedReplayBufferSamples",
    "BetaAnnealingCallback",
    "LinearBetaSchedule",
]


class LinearBetaSchedule:
    """``beta(progress_remaining) = beta0 + (1 - beta0) * (1 - progress_remaining)``.

    A module-level class rather than a closure so that a buffer holding it can be saved: the
    weights-only format writes it as JSON (``GpuDQN.save_replay_buffer``,
    ``CheckpointCallback(save_replay_buffer=True)``; :data:`agents.files.safe_archive.PLAIN_CLASSES`),
    and it pickles.

    :param beta0: beta at the start of training (progress remaining 1), in [0, 1].
    """

    def __init__(self, beta0: float) -> None:
        self.beta0 = float(beta0)

    def __call__(self, progress_remaining: float) -> float:
        return self.beta0 + (1.0 - self.beta0) * (1.0 - progress_remaining)

    def __repr__(self) -> str:
        return f"LinearBetaSchedule(beta0={self.beta0!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LinearBetaSchedule) and other.beta0 == self.beta0

    def __hash__(self) -> int:
        return hash((LinearBetaSchedule, self.beta0))


class PrioritizedReplayBufferSamples(NamedTuple):
    """A prioritized batch: SB3's ``ReplayBufferSamples`` fields plus ``weights`` and ``indices``.

    :param observations: [B, *obs_shape], the observation space's dtype.
    :param actions: [B, action_dim], the action dtype (int64 for ``Discrete``).
    :param next_observations: [B, *obs_shape].
    :param dones: [B, 1] float32, ``done * (1 - timeout)`` when timeouts are handled.
    :param rewards: [B, 1] float32 ([B, K] with ``reward_dim = K``).
    :param weights: [B, 1] float32 importance-sampling weights in (0, 1].
    :param indices: [B] int64 flat slot indices (``row * n_envs + env``) for
        :meth:`PrioritizedReplayBuffer.update_priorities`.
    :param discounts: always ``None`` (no n-step returns), as in SB3's one-step buffers.
    """

    observations: th.Tensor
    actions: th.Tensor
    next_observations: th.Tensor
    dones: th.Tensor
    rewards: th.Tensor
    weights: th.Tensor
    indices: th.Tensor
    discounts: th.Tensor | None = None


def _torch_dtype(dtype: Any) -> th.dtype:
    return th.from_numpy(np.zeros(0, dtype=dtype)).dtype


# Batches drawn without any update_priorities() call before the buffer warns.
STALE_PRIORITY_SAMPLES = 100


class PrioritizedReplayBuffer(StepWrites, ReplayBuffer):
    """Proportional prioritized replay with a sum tree and a min tree on the buffer's device.

    Priorities are ``p_i = (|td_i| + epsilon)**alpha``; sampling probability
    ``P(i) = p_i / sum_j p_j`` (stratified: one draw per equal slice of the total); IS weights
    ``w_i = (N * P(i))**-beta / max_j (N * P(j))**-beta = (p_i / min_j p_j)**-beta``. New
    transitions get the running maximum priority (1 before any update). Sample and update cost
    O(B log C) for B transitions in a buffer of C slots.

    Storage: ``observations``, ``next_observations`` [buffer_size, n_envs, *obs_shape] (observation
    dtype), ``actions`` [buffer_size, n_envs, action_dim], ``rewards``, ``dones``, ``timeouts``
    [buffer_size, n_envs] float32, all torch tensors on ``device``. Slot ``(row, env)`` has the flat
    index ``row * n_envs + env``; the tree has ``buffer_size * n_envs`` leaves and sampled
    ``indices`` are flat indices.

    :param buffer_size: Max number of transitions (divided among ``n_envs``, as in SB3).
    :param observation_space: Observation space.
    :param action_space: Action space.
    :param device: PyTorch device of storage and tree.
    :param n_envs: Number of parallel environments.
    :param optimize_memory_usage: Not supported (must be False).
    :param handle_timeout_termination: Store time-limit truncations separately and do not treat
        them as terminal in ``dones`` (SB3 semantics).
    :param alpha: Priority exponent, ``>= 0`` (0: uniform).
    :param beta: IS exponent: a float in [0, 1], annealed linearly to 1.0 as the progress
        remaining (see :meth:`set_progress`) goes from 1 to 0 (:class:`LinearBetaSchedule`), or
        a callable ``progress_remaining -> beta`` (a module-level function or a picklable
        object if the buffer is to be saved).
    :param epsilon: Added to ``|td|`` so no priority is 0; ``> 0``.
    :param seed: Key of the Philox stream of the stratified draws (default: drawn from
        ``np.random``, which SB3 seeds).
    :param reward_dim: Rewards per transition: 1 (``rewards`` [buffer_size, n_envs]; sampled
        [B, 1]), or K, one per branch of a ``MultiDiscrete([L] * K)`` action (``rewards``
        [buffer_size, n_envs, K]; sampled [B, K]: GpuDQN's ``branch_rewards``).
    """

    observations: th.Tensor  # type: ignore[assignment]
    next_observations: th.Tensor  # type: ignore[assignment]
    actions: th.Tensor  # type: ignore[assignment]
    rewards: th.Tensor  # type: ignore[assignment]
    dones: th.Tensor  # type: ignore[assignment]
    timeouts: th.Tensor  # type: ignore[assignment]

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        alpha: float = 0.6,
        beta: float | Callable[[float], float] = 0.4,
        epsilon: float = 1e-6,
        seed: int | None = None,
        reward_dim: int = 1,
    ):
        if (
            isinstance(reward_dim, bool)
            or not isinstance(reward_dim, int | np.integer)
            or reward_dim < 1
        ):
            raise ValueError(
                f"reward_dim = {reward_dim!r} is invalid: allowed is an integer >= 1 (1: one "
                "reward a transition; K: one a branch of a MultiDiscrete([L] * K) action)"
            )
        if isinstance(buffer_size, bool) or int(buffer_size) != buffer_size or buffer_size < 1:
            raise ValueError(f"buffer_size must be an integer >= 1, got {buffer_size!r}")
        if int(n_envs) != n_envs or n_envs < 1:
            raise ValueError(f"n_envs must be an integer >= 1, got {n_envs!r}")
        if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
        if float(epsilon) ** float(alpha) == 0.0:
            # The smallest priority, epsilon**alpha (|td| = 0), would be 0: never sampled again.
            raise ValueError(
                f"epsilon = {epsilon!r} with alpha = {alpha!r} gives the priority "
                "epsilon**alpha = 0.0 (float64 underflow) for |td| = 0: such transitions would "
                "never be sampled again; allowed is epsilon**alpha > 0 (raise epsilon or lower alpha)"
            )
        if callable(beta):
            self.beta_schedule: Callable[[float], float] = beta
        elif isinstance(beta, (int, float, np.integer, np.floating)) and 0.0 <= beta <= 1.0:
            self.beta_schedule = LinearBetaSchedule(float(beta))
        else:
            raise ValueError(f"beta must be a number in [0, 1] or a callable, got {beta!r}")
        if optimize_memory_usage:
            raise ValueError(
                "optimize_memory_usage=True is not supported by PrioritizedReplayBuffer "
                "(allowed: False)"
            )
        # BaseBuffer, not ReplayBuffer.__init__: that would allocate the NumPy storage.
        BaseBuffer.__init__(
            self, int(buffer_size), observation_space, action_space, device, n_envs=int(n_envs)
        )
        self.buffer_size = max(int(buffer_size) // self.n_envs, 1)
        self.optimize_memory_usage = False
        self.handle_timeout_termination = handle_timeout_termination
        self.alpha = float(alpha)
        self.epsilon = float(epsilon)
        self.progress_remaining = 1.0
        if seed is None:
            seed = int(np.random.randint(0, 2**31 - 1))  # noqa: NPY002 (SB3 seeds the legacy RNG)
        self.seed = int(seed)

        dev = self.device
        n, e = self.buffer_size, self.n_envs
        obs_dtype = _torch_dtype(observation_space.dtype)
        act_dtype = _torch_dtype(self._maybe_cast_dtype(action_space.dtype))
        self.observations = th.zeros((n, e, *self.obs_shape), dtype=obs_dtype, device=dev)
        self.next_observations = th.zeros((n, e, *self.obs_shape), dtype=obs_dtype, device=dev)
        self.actions = th.zeros((n, e, self.action_dim), dtype=act_dtype, device=dev)
        # One reward a transition ([n, e]), or one a branch ([n, e, reward_dim]).
        self.reward_dim = int(reward_dim)
        reward_shape = (n, e) if self.reward_dim == 1 else (n, e, self.reward_dim)
        self.rewards = th.zeros(reward_shape, dtype=th.float32, device=dev)
        self.dones = th.zeros((n, e), dtype=th.float32, device=dev)
        self.timeouts = th.zeros((n, e), dtype=th.float32, device=dev)
        self.tree = self._make_tree(n * e, self.seed)
        self._step_store = self._make_step_store()

    def __getstate__(self) -> dict[str, Any]:
        """The buffer's state without the store kernel's launcher (made anew after loading)."""
        state = self.__dict__.copy()
        state["_step_store"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._step_store = self._make_step_store()

    def _make_step_store(self) -> CudaStepStore | None:
        """The store kernel's launcher for :meth:`add_tensors_at` where the storage fits it."""
        return CudaStepStore(self) if storage_fits(self) else None

    def _make_tree(self, capacity: int, seed: int) -> SumMinTree:
        if self.device.type == "cuda":
            require_cupy("PrioritizedReplayBuffer on a CUDA device")
            index = self.device.index if self.device.index is not None else th.cuda.current_device()
            return make_tree("cuda", capacity, seed=seed, device=index)
        if self.device.type == "cpu":
            return make_tree("numpy", capacity, seed=seed)
        raise ValueError(f"device must be a CPU or CUDA device, got {self.device}")

    # -- beta ---------------------------------------------------------------------------------
    def set_progress(self, progress_remaining: float) -> None:
        """Set the training progress remaining (1 at the start, 0 at the end) that anneals beta."""
        p = float(progress_remaining)
        if not (0.0 <= p <= 1.0):
            raise ValueError(f"progress_remaining must be in [0, 1], got {progress_remaining!r}")
        self.progress_remaining = p

    @property
    def beta(self) -> float:
        """The current IS exponent ``beta_schedule(progress_remaining)``, in [0, 1]."""
        b = float(self.beta_schedule(self.progress_remaining))
        if not (0.0 <= b <= 1.0):
            raise ValueError(f"beta schedule returned {b!r}; beta must be in [0, 1]")
        return b

    def reset(self) -> None:
        """Empty the buffer (storage is kept, priorities are cleared)."""
        super().reset()
        self.tree.reset()

    # -- sampling ---------------------------------------------------------------------------
    def _to_torch_index(self, indices: Any) -> th.Tensor:
        if isinstance(indices, th.Tensor):
            return indices.to(device=self.device, dtype=th.int64).reshape(-1)
        return self.tree.to_torch(indices).to(th.int64).reshape(-1)

    def sample(
        self, batch_size: int, env: VecNormalize | None = None
    ) -> PrioritizedReplayBufferSamples:  # type: ignore[override]
        """Stratified prioritized sample of ``batch_size`` transitions with IS weights.

        No host sync on a CUDA device (the total and the minimum are read by the kernel),
        unless ``env`` (a ``VecNormalize``) is given: its NumPy normalisation needs a round trip.

        :param batch_size: B.
        :param env: Optional ``VecNormalize`` to normalise observations and rewards.
        :return: :class:`PrioritizedReplayBufferSamples`.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
            raise TypeError(
                f"batch_size = {batch_size!r} is invalid: allowed is an integer >= 1 "
                f"(got {type(batch_size).__name__})"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size = {batch_size} is invalid: allowed is an integer >= 1")
        if self.size() == 0:
            raise ValueError(
                "cannot sample from an empty PrioritizedReplayBuffer; add transitions first"
            )
        self._warn_if_priorities_stale()
        idx, w = self.tree.sample(int(batch_size), beta=self.beta, weights_dtype=np.float32)
        return self._gather(self._to_torch_index(idx), self.tree.to_torch(w).reshape(-1, 1), env)

    def _get_samples(
        self, batch_inds: np.ndarray, env: VecNormalize | None = None
    ) -> PrioritizedReplayBufferSamples:  # type: ignore[override]
        """Samples at given flat slot indices (``row * n_envs + env``), with their IS weights."""
        idx = self._to_torch_index(batch_inds)
        w = self.tree.weights(self.tree.from_torch(idx), self.beta)
        weights = self.tree.to_torch(w).reshape(-1, 1).to(th.float32)
        return self._gather(idx, weights, env)

    def _gather(
        self, idx: th.Tensor, weights: th.Tensor, env: VecNormalize | None
    ) -> PrioritizedReplayBufferSamples:
        batch = FlatStorage(self).gather(idx)
        obs, next_obs, rewards = batch.observations, batch.next_observations, batch.rewards
        if env is not None:
            obs = self.to_torch(self._normalize_obs(obs.cpu().numpy(), env))
            next_obs = self.to_torch(self._normalize_obs(next_obs.cpu().numpy(), env))
            rewards = self.to_torch(self._normalize_reward(rewards.cpu().numpy(), env))
        return PrioritizedReplayBufferSamples(
            observations=obs,
            actions=batch.actions,
            next_observations=next_obs,
            dones=batch.dones,
            rewards=rewards,
            weights=weights,
            indices=idx,
        )

    # -- priorities -------------------------------------------------------------------------
    def update_priorities(self, indices: Any, td_errors: Any) -> None:
        """Set the priorities of sampled transitions to ``(|td| + epsilon)**alpha``.

        :param indices: [B] int flat slot indices (``samples.indices``); torch, NumPy or CuPy.
        :param td_errors: [B] (or [B, 1]) absolute TD errors ``|target - q|``, finite and
            ``>= 0``; float32 or float64; torch, NumPy or CuPy.
        :raises ValueError: on NaN, inf or negative ``td_errors``, on a priority that overflows,
            or on an index that is not a filled slot; the error names the first offending position
            and value, and no priority is changed. On a CUDA device this check waits for the
            kernel's verdict on the batch (written to host-mapped memory before the tree is
            touched); everything else stays on the device and runs asynchronously.
        """
        self._samples_since_update = 0
        if isinstance(indices, th.Tensor):
            indices = self.tree.from_torch(indices)
        if isinstance(td_errors, th.Tensor):
            td_errors = self.tree.from_torch(td_errors)
        self.tree.update(
            indices,
            td_errors,
            alpha=self.alpha,
            epsilon=self.epsilon,
            n_valid=self.size() * self.n_envs,
            name="td_errors",
        )

    @property
    def max_priority(self) -> float:
        """Running maximum of ``(|td| + epsilon)**alpha`` (what new transitions get); host sync."""
        return self.tree.max_value_host()

    def _warn_if_priorities_stale(self) -> None:
        """Warn once when many batches were drawn and no priority was ever updated: the
        algorithm does not report TD errors (plain SB3 ``DQN``), so sampling stays uniform."""
        count = getattr(self, "_samples_since_update", 0) + 1
        self._samples_since_update = count
        if count == STALE_PRIORITY_SAMPLES and not getattr(self, "_warned_stale", False):
            self._warned_stale = True
            warnings.warn(
                f"PrioritizedReplayBuffer: {count} batches sampled without update_priorities(); "
                "priorities never change, so sampling is uniform and every IS weight is 1. "
                "Plain SB3 DQN does not report TD errors: use agents.PrioritizedDQN (or "
                "agents.GpuDQN), or call update_priorities(samples.indices, |td|) yourself.",
                stacklevel=3,
            )


class BetaAnnealingCallback(BaseCallback):
    """Anneals the buffer's beta during ``model.learn`` of a plain SB3 algorithm.

    SB3's ``DQN`` never tells its buffer about progress; this callback passes
    ``model._current_progress_remaining`` to :meth:`PrioritizedReplayBuffer.set_progress` at
    every step.
    """

    def _on_step(self) -> bool:
        buffer = getattr(self.model, "replay_buffer", None)
        if isinstance(buffer, PrioritizedReplayBuffer):
            progress = self.model._current_progress_remaining  # noqa: SLF001 (SB3 has no getter)
            buffer.set_progress(min(1.0, max(0.0, progress)))
        return True
