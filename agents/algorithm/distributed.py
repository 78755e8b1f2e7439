"""Data-parallel :class:`~agents.GpuDQN` over the ranks of a ``torch.distributed`` process group.

One process per GPU (``torchrun --nproc_per_node=N``), each with its own env shard, its own
prioritized replay buffer and its own batch; the ranks keep one set of network parameters::

    rank r:  env (num_envs envs, seeded seed + r) -> replay buffer r -> batch of batch_size
             loss_r.backward()
             flat  = [grad of every parameter of the optimizer]      # one persistent buffer
             all_reduce(flat, SUM); flat /= world_size; grads <- flat
             clip_grad_norm_(max_grad_norm); Adam step                # identical on every rank

So a gradient step of N ranks with batch ``B`` each equals one step of a single process with
batch ``N * B`` (the mean of the per-rank mean losses), up to float summation order, when the
importance weights are uniform; with prioritized replay every rank weights its own batch by its
own priorities (priorities stay local: a rank updates the priorities of what it sampled).

What each rank owns and what is shared:

- parameters, target network and Adam state: identical on every rank. :meth:`DataParallel.setup`
  broadcasts rank 0's parameters (online and target network) when the model is built, every
  gradient step averages the gradients before clipping, and the target network is copied at the
  same vector step everywhere (the counters below are identical on every rank).
- env, replay buffer, priorities, exploration draws, episode statistics: per rank. The seed of
  rank ``r`` is ``seed + r`` (envs, exploration, network initialisation before the broadcast,
  the buffer's sampling stream), so the shards see different data.
- callbacks: every rank. One that stops training must stop every rank at the same step (a
  rank that stops alone leaves the others waiting in their next all-reduce).
- logging and saving: rank 0. The other ranks log nothing (no stdout, no TensorBoard, no
  progress bar) and :meth:`GpuDQN.save` returns without writing there; ``rollout/ep_rew_mean``
  is rank 0's episodes. ``save_replay_buffer`` writes on every rank (give each rank its path).

Counters are global, as if one process stepped all ``N * num_envs`` envs: each vector step adds
``N * num_envs`` to ``num_timesteps`` on every rank, so ``learn(total_timesteps)``,
``learning_starts``, ``target_update_interval``, the exploration and beta schedules,
``time/fps`` and the progress bar all count env-steps of the whole job. (SB3's loops add the
local ``num_envs``; :class:`GlobalStepCounter` adds the other ranks' share right after, before
any callback, schedule or target update reads the counter.) Every rank must be given the same
``num_envs``, ``batch_size``, ``train_freq``, ``gradient_steps``, ``learning_starts``,
``target_update_interval`` and ``total_timesteps``: they decide how many gradient steps (and so
all-reduces) each rank runs, and :meth:`DataParallel.setup` and ``learn`` refuse to start when
they differ, rather than hang.

The all-reduce in the captured train step: :meth:`DataParallel.all_reduce_gradients` copies the
gradients into one preallocated flat buffer (``torch.cat(out=...)``), all-reduces that buffer in
place and copies the averages back; no allocation, no host synchronisation, a fixed buffer
address: NCCL's all-reduce is recorded in the CUDA graph with the rest of the step (NCCL >=
2.9.6). Gloo (the CPU) runs the same code on the eager path.

Not supported yet: ``curiosity=True`` (the curiosity model would differ per rank).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch as th
import torch.distributed as dist
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, ProgressBarCallback
from stable_baselines3.common.type_aliases import MaybeCallback

__all__ = ["DataParallel", "DataParallelMixin", "GlobalStepCounter", "flat_gradient_numel"]


def flat_gradient_numel(optimizer_or_params: th.optim.Optimizer | Iterable[th.Tensor]) -> int:
    """Number of gradient values one all-reduce carries (the optimizer's trainable parameters)."""
    return sum(p.numel() for p in _trainable(optimizer_or_params))


def _trainable(optimizer_or_params: th.optim.Optimizer | Iterable[th.Tensor]) -> list[th.Tensor]:
    if isinstance(optimizer_or_params, th.optim.Optimizer):
        params: Iterable[th.Tensor] = (
            p for group in optimizer_or_params.param_groups for p in group["params"]
        )
    else:
        params = optimizer_or_params
    return [p for p in params if p.requires_grad]


class DataParallel:
    """The process group of a data-parallel :class:`~agents.GpuDQN` and its gradient buffer.

    Made by ``GpuDQN(..., distributed=True)`` (:meth:`from_arguments`); the model calls
    :meth:`setup` once its networks exist and :meth:`all_reduce_gradients` after every
    ``loss.backward()``.

    :param group: the process group (``None``: the default group of
        ``torch.distributed.init_process_group``).
    """

    def __init__(self, group: Any = None) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError(
                "distributed = True is invalid here: torch.distributed has no process group; "
                "allowed is True after torch.distributed.init_process_group(...) in every "
                "process (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for it), "
                "or False"
            )
        rank = dist.get_rank(group)
        if rank < 0:
            raise ValueError(
                f"process_group = {group!r} is invalid: this process (global rank "
                f"{dist.get_rank()}) is not a member; allowed is a group this process belongs "
                "to, or None for the default group"
            )
        self.group = group
        self.rank = int(rank)
        self.world_size = int(dist.get_world_size(group))
        self.backend = str(dist.get_backend(group))
        self.src = 0 if group is None else int(dist.get_global_rank(group, 0))
        self._key: tuple[int, ...] | None = None
        self._flat: th.Tensor | None = None
        self._views: list[th.Tensor] = []

    @classmethod
    def from_arguments(cls, distributed: Any, process_group: Any) -> DataParallel | None:
        """The ``DataParallel`` of ``GpuDQN``'s ``distributed`` and ``process_group``, or None."""
        if not isinstance(distributed, bool):
            raise ValueError(f"distributed = {distributed!r} is invalid: allowed is True or False")
        if not distributed:
            if process_group is not None:
                raise ValueError(
                    f"process_group = {process_group!r} is invalid with distributed = False: "
                    "allowed is None, or pass distributed = True to train data-parallel"
                )
            return None
        return cls(process_group)

    @property
    def is_main(self) -> bool:
        """Rank 0: the rank that logs and saves."""
        return self.rank == 0

    def rank_seed(self, seed: int | None) -> int | None:
        """``seed + rank`` (``None`` stays ``None``)."""
        return None if seed is None else int(seed) + self.rank

    # ------------------------------------------------------------------ setup
    def setup(self, model: Any) -> None:
        """Check the model and the ranks agree, broadcast rank 0's parameters, mute rank > 0.

        :raises ValueError: curiosity on; a device the backend cannot serve; settings that
            differ between ranks (they would hang the all-reduce), naming each rank's value.
        """
        if getattr(model, "curiosity", False):
            raise ValueError(
                "curiosity = True is invalid with distributed = True: allowed is False (the "
                "curiosity model is not averaged across ranks yet)"
            )
        device = th.device(model.device)
        if self.backend == "nccl" and device.type != "cuda":
            raise ValueError(
                f"device = {str(device)!r} is invalid with the process group's backend 'nccl': "
                "allowed is this rank's CUDA device (e.g. device=f'cuda:{local_rank}'), or a "
                "'gloo' process group for the CPU"
            )
        if self.backend == "gloo" and device.type != "cpu":
            raise ValueError(
                f"device = {str(device)!r} is invalid with the process group's backend 'gloo': "
                "allowed is 'cpu' (gloo cannot be captured in the CUDA graph of a train step); "
                "use backend='nccl' for CUDA devices"
            )
        params = _trainable(model.policy.optimizer)
        settings = {
            "num_envs": int(model.n_envs),
            "batch_size": int(model.batch_size),
            "train_freq": int(model.train_freq.frequency),
            "gradient_steps": int(model.gradient_steps),
            "learning_starts": int(model.learning_starts),
            "target_update_interval": int(model.target_update_interval),
            "parameters": sum(p.numel() for p in params),
        }
        self.check_same(settings, device)
        self.broadcast_parameters(model)
        if not self.is_main:
            model.verbose = 0
            model.tensorboard_log = None

    def check_same(self, values: dict[str, int], device: th.device | str = "cpu") -> None:
        """Raise on every rank when an integer setting differs between ranks (one all-gather).

        :raises ValueError: naming the first setting that differs and each rank's value.
        """
        local = th.tensor(list(values.values()), dtype=th.int64, device=device)
        gathered = [th.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(gathered, local, group=self.group)
        table = th.stack(gathered).cpu().tolist()
        for j, name in enumerate(values):
            column = [row[j] for row in table]
            if any(v != column[0] for v in column):
                raise ValueError(
                    f"{name} = {column} (one value per rank) is invalid with distributed = True: "
                    f"allowed is the same {name} on every rank (the ranks must train and copy "
                    "their target networks at the same steps, or the all-reduce desynchronises)"
                )

    def broadcast_parameters(self, model: Any) -> None:
        """Copy rank 0's policy (online and target network, buffers) to every rank, in place.

        Called by :meth:`setup`; call it again after loading weights on rank 0 alone.
        """
        with th.no_grad():
            for tensor in model.policy.state_dict().values():
                dist.broadcast(tensor, src=self.src, group=self.group)

    # ------------------------------------------------------------------ the step
    def all_reduce_gradients(
        self, optimizer_or_params: th.optim.Optimizer | Iterable[th.Tensor]
    ) -> None:
        """Average the gradients of the optimizer's parameters over the ranks, in place.

        Between ``loss.backward()`` and ``clip_grad_norm_``. One all-reduce of one flat buffer,
        allocated at the first call for a parameter list and reused, so the call can be
        captured in a CUDA graph. A parameter without a gradient contributes zeros.
        """
        params = _trainable(optimizer_or_params)
        key = tuple(id(p) for p in params)
        if key != self._key:
            self._allocate(params)
            self._key = key
        flat = self._flat
        assert flat is not None
        grads = []
        for p in params:
            if p.grad is None:
                p.grad = th.zeros_like(p)
            grads.append(p.grad)
        th.cat([g.reshape(-1) for g in grads], out=flat)  # one kernel
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group)
        if self.world_size > 1:
            flat.div_(self.world_size)
        th._foreach_copy_(grads, self._views)  # one kernel, not one per parameter

    def _allocate(self, params: list[th.Tensor]) -> None:
        dtypes = {p.dtype for p in params}
        devices = {p.device for p in params}
        if len(dtypes) != 1 or len(devices) != 1:
            raise ValueError(
                f"parameters of dtypes {sorted(map(str, dtypes))} on devices "
                f"{sorted(map(str, devices))} are invalid for the gradient all-reduce: allowed "
                "is one dtype on one device"
            )
        numel = sum(p.numel() for p in params)
        self._flat = th.zeros(numel, dtype=params[0].dtype, device=params[0].device)
        self._views = []
        offset = 0
        for p in params:
            self._views.append(self._flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()

    @property
    def flat_gradients(self) -> th.Tensor | None:
        """The flat gradient buffer (None before the first gradient step)."""
        return self._flat

    # ------------------------------------------------------------------ checks
    def parameter_spread(self, model: Any) -> float:
        """Largest absolute difference between this rank's policy values and rank 0's, over all
        ranks (online and target network); 0.0 when the ranks agree bit for bit. Collective:
        every rank must call it."""
        values = [t.detach().reshape(-1) for t in model.policy.state_dict().values()]
        flat = th.cat([v.to(th.float64) for v in values if v.is_floating_point()])
        reference = flat.clone()
        dist.broadcast(reference, src=self.src, group=self.group)
        spread = (flat - reference).abs().max().reshape(1)
        dist.all_reduce(spread, op=dist.ReduceOp.MAX, group=self.group)
        return float(spread.item())


class GlobalStepCounter(BaseCallback):
    """Wraps ``learn``'s callback: adds the other ranks' env-steps to ``num_timesteps``.

    SB3's rollout loop and the GPU rollouts add the local ``num_envs`` to ``num_timesteps`` and
    then call ``callback.update_locals`` once per vector step, before ``on_step``, the progress
    update and ``_on_step``; this wrapper adds ``(world_size - 1) * num_envs`` there.
    """

    def __init__(self, callback: BaseCallback, extra_steps: int) -> None:
        super().__init__()
        self.callback = callback
        self.extra_steps = int(extra_steps)

    def update_locals(self, locals_: dict[str, Any]) -> None:
        self.model.num_timesteps += self.extra_steps
        self.callback.update_locals(locals_)

    def on_training_start(self, locals_: dict[str, Any], globals_: dict[str, Any]) -> None:
        self.callback.on_training_start(locals_, globals_)

    def on_rollout_start(self) -> None:
        self.callback.on_rollout_start()

    def on_step(self) -> bool:
        return self.callback.on_step()

    def on_rollout_end(self) -> None:
        self.callback.on_rollout_end()

    def on_training_end(self) -> None:
        self.callback.on_training_end()

    def _on_step(self) -> bool:
        return True


class _GlobalProgressBar(ProgressBarCallback):
    """SB3's progress bar, advancing by the env-steps of all ranks."""

    def __init__(self, world_size: int) -> None:
        super().__init__()
        self.world_size = world_size

    def _on_step(self) -> bool:
        self.pbar.update(self.training_env.num_envs * self.world_size)
        return True


class DataParallelMixin:
    """What ``distributed=True`` changes in :class:`~agents.GpuDQN`'s SB3 machinery (a base
    class of it, before ``DQN``): per-rank seeds, the parameter broadcast, global step
    counting, rank-0-only progress bar (``GpuDQN._on_step`` counts the target update interval in
    env-steps of all ranks). Nothing changes
    while ``self.data_parallel`` is None."""

    data_parallel: DataParallel | None

    def set_random_seed(self, seed: int | None = None) -> None:
        dp = getattr(self, "data_parallel", None)
        super().set_random_seed(seed if dp is None else dp.rank_seed(seed))  # type: ignore[misc]

    def _setup_model(self) -> None:
        super()._setup_model()  # type: ignore[misc]
        dp = getattr(self, "data_parallel", None)
        if dp is not None:
            dp.setup(self)

    def _setup_learn(self, total_timesteps: int, *args: Any, **kwargs: Any) -> Any:
        out = super()._setup_learn(total_timesteps, *args, **kwargs)  # type: ignore[misc]
        dp = getattr(self, "data_parallel", None)
        if dp is not None:
            m: Any = self
            dp.check_same(
                {"total_timesteps": int(out[0]), "num_timesteps": int(m.num_timesteps)}, m.device
            )
        return out

    def _init_callback(self, callback: MaybeCallback, progress_bar: bool = False) -> BaseCallback:
        dp = getattr(self, "data_parallel", None)
        if dp is None:
            return super()._init_callback(callback, progress_bar)  # type: ignore[misc]
        inner = super()._init_callback(callback, False)  # type: ignore[misc]
        if progress_bar and dp.is_main:
            inner = CallbackList([inner, _GlobalProgressBar(dp.world_size)])
            inner.init_callback(self)  # type: ignore[arg-type]
        counter = GlobalStepCounter(inner, (dp.world_size - 1) * self.n_envs)  # type: ignore[attr-defined]
        counter.init_callback(self)  # type: ignore[arg-type]
        return counter

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "data_parallel"]  # type: ignore[misc]
