"""The fused GPU rollout on the portfolio env: act, step and store ``MultiDiscrete`` actions
without leaving the GPU.

For a :class:`~gpu_trading_env.portfolio_env.PortfolioVectorEnv` on a CUDA device (N envs of K
instruments, actions ``MultiDiscrete([L] * K)``) and a GpuDQN with the branching dueling head,
one vector step is :class:`~agents.rollouts.fused.FusedRollout`'s, with ``[N, K]`` actions::

    greedy   = argmax_a A_d(obs)[a] for each branch d          # [N, K] (agents.rollouts.acting)
    explore  = rand(N) < epsilon                                 # one coin per env
    action   = where(explore[:, None], randint(L, (N, K)), greedy)   # all K branches together
    outputs  = backend.step_bound(action, static outputs)        # one kernel, no host sync
    next_obs = where(done, final_obs, obs')
    buffer.add_tensors_at(slot, obs, next_obs, action, r, terminated, truncated)  # [N, K] int64

With the model's ``branch_rewards`` the state's ``bar``, ``cash`` and ``position`` are copied
into static tensors before the step, and ``r`` is each instrument's share of the reward, float32
``[N, K]`` (:func:`~agents.rollouts.branch_rewards.instrument_rewards`, torch ops on the device,
recorded in the graph with the step).

The step goes to :class:`~gpu_trading_env.backends.portfolio_cuda.PortfolioCudaBackend`
directly, into two sets of static output tensors used in turn (an eager step's observation is
read after the next step has written the other set), not through ``PortfolioVectorEnv.step``,
whose info dict asks the host whether any episode ended. The CUDA graph, the exploration
generator, the replay-buffer write and the episode ring are the Discrete path's.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch as th

from agents.replay.step_store import store_module_spec
from agents.replay.tree_kernels import tree_module_spec
from agents.rollouts.branch_rewards import PreStep, instrument_rewards
from agents.rollouts.episode_ring import ring_module_spec
from agents.rollouts.fused import FusedRollout
from gpu_runtime.device import ModuleSpec

__all__ = ["DeviceBranchRewards", "PortfolioRollout", "portfolio_path_kernels"]


def portfolio_path_kernels() -> list[ModuleSpec]:
    """Every kernel module the first ``learn`` of a GpuDQN on a CUDA portfolio env loads: the
    portfolio step, the prioritized buffer's tree and store, and the episode ring."""
    from gpu_trading_env.backends.portfolio_cuda import portfolio_module_spec

    return [portfolio_module_spec(), tree_module_spec(), store_module_spec(), ring_module_spec()]


class DeviceBranchRewards:
    """Each instrument's share of a portfolio backend's reward, on its device: :meth:`snapshot`
    before a step, :meth:`rewards` after it. Torch ops only, on views of the backend's arrays
    (any array with ``__cuda_array_interface__`` or a torch tensor; NumPy arrays on the CPU),
    so that a CUDA graph records both with the step.

    :param backend: a portfolio backend: ``close``, ``open`` ``[T, K]``, ``state`` (``bar``,
        ``cash``, ``position``) and ``params`` (``fill_next_open``, ``reward_log``).
    :param device: the torch device of its arrays.
    """

    def __init__(self, backend: Any, device: th.device) -> None:
        def view(a: Any) -> th.Tensor:
            # A CuPy array through DLPack: a view of its memory, never a copy (the snapshot must
            # read the state the kernel writes); NumPy's (CPU tests) through as_tensor.
            if hasattr(a, "__cuda_array_interface__"):
                return th.from_dlpack(a)
            if isinstance(a, np.ndarray) and not a.flags.writeable:
                # The market's bars are read-only; the snapshot only reads them.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    return th.as_tensor(a, device=device)
            return th.as_tensor(a, device=device)

        self.close, self.open = view(backend.close), view(backend.open)
        state = backend.state
        self._state = (view(state.bar), view(state.cash), view(state.position))
        self.before = PreStep(*(t.clone() for t in self._state))
        self.fill_next_open = bool(backend.params.fill_next_open)
        self.log_reward = bool(backend.params.reward_log)

    def snapshot(self) -> None:
        """Copy the state the next step reads (the step changes it, and resets ended envs)."""
        saved = (self.before.bar, self.before.cash, self.before.position)
        for dst, src in zip(saved, self._state, strict=True):
            dst.copy_(src)

    def rewards(self, out: Any) -> th.Tensor:
        """float32 ``[N, K]`` of the step whose outputs are ``out`` (``positions``, ``costs``
        float64 ``[N, K]``, ``reward`` ``[N]``)."""
        return instrument_rewards(
            self.close,
            self.open,
            self.before,
            out.positions,
            out.costs,
            fill_next_open=self.fill_next_open,
            reward=out.reward,
            log_reward=self.log_reward,
        )


class PortfolioRollout(FusedRollout):
    """Collects transitions for a :class:`~agents.GpuDQN` whose env is a CUDA
    ``PortfolioVectorEnv``: :class:`~agents.rollouts.fused.FusedRollout` with actions int64
    ``[N, K]``.

    Exploration draws one coin per env: an env that explores takes a random level in every one
    of its K branches (instruments) in that step, as SB3's DQN explores one whole action; the
    others take each branch's greedy level. The random levels are drawn as ``[N, K]`` before
    the ``[N]`` coins, in one generator, by eager and graph steps alike.

    :param model: the GpuDQN; its ``portfolio_env`` (CUDA, SAME_STEP), ``q_net`` (a
        branching network: ``branch_advantages``), ``replay_buffer``, ``exploration_rate`` and
        ``branch_rewards`` (store ``[N, K]`` rewards, :class:`DeviceBranchRewards`).
        The other parameters are :class:`~agents.rollouts.fused.FusedRollout`'s.
    """

    _branch_rewards: DeviceBranchRewards | None = None

    def _checked_env(self, model: Any) -> Any:
        env = getattr(model, "portfolio_env", None)
        if env is None or not str(env.device).startswith("cuda"):
            raise ValueError(
                "PortfolioRollout needs model.portfolio_env to be a PortfolioVectorEnv on a CUDA "
                f"device; got {None if env is None else env.device!r}"
            )
        if env.autoreset_mode.name != "SAME_STEP":
            raise ValueError(
                f"PortfolioRollout needs autoreset_mode SAME_STEP; got {env.autoreset_mode.name}"
            )
        with th.cuda.device(th.device(env.device)):
            self._bind_backend(model, env)
        return env

    def _bind_backend(self, model: Any, env: Any) -> None:
        """The two static output sets of ``env``'s backend and their bindings, and, with the
        model's ``branch_rewards``, the per-instrument rewards on its device."""
        backend = env.backend
        self._outputs = [backend.make_outputs() for _ in range(2)]
        self._bound = [backend.bind_outputs(out) for out in self._outputs]
        self._next_set = 0
        self._branch_rewards = (
            DeviceBranchRewards(backend, th.device(env.device))
            if getattr(model, "branch_rewards", False)
            else None
        )

    @staticmethod
    def _action_layout(space: Any) -> tuple[int, tuple[int, ...]]:
        """``(L, (K,))`` of ``MultiDiscrete([L] * K)``."""
        nvec = np.asarray(space.nvec)
        if nvec.ndim != 1 or len(set(nvec.tolist())) != 1:
            raise ValueError(
                f"the portfolio env's action space {space} is invalid for PortfolioRollout: "
                "allowed is MultiDiscrete([L] * K)"
            )
        return int(nvec[0]), (int(nvec.size),)

    def _env_step(self, action: th.Tensor) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """One backend step into the next static output set; no host read inside a capture."""
        backend = self.env.backend
        k = self._next_set
        self._next_set = 1 - k
        capturing = self.device.type == "cuda" and th.cuda.is_current_stream_capturing()
        branch = self._branch_rewards
        if branch is not None:
            branch.snapshot()
        backend.step_bound(backend.prepare_actions(action), self._bound[k], check=not capturing)
        out = self._outputs[k]
        reward = out.reward if branch is None else branch.rewards(out)
        info = {
            "final_obs": out.final_obs,
            "_final_obs": out.done,
            "episode_return": out.episode_return,
            "_episode_return": out.done,
            "episode_length": out.episode_length,
        }
        return out.obs, reward, out.terminated, out.truncated, info
