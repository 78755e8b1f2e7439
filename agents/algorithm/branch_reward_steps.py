"""GpuDQN's ``branch_rewards`` on SB3's rollout loop: each transition stored with one reward an
instrument of the portfolio env (:mod:`agents.rollouts.branch_rewards`), so that each branch of
the branching head learns from its own instrument's P&L rather than the whole portfolio's.

SB3's loop asks for the actions (``_sample_action``), steps the env, then stores
(``_store_transition``); the state before the step is copied in the first, the shares computed
in the second from the step's ``positions`` and ``costs`` infos. The fused CUDA rollout does the
same on the device (:class:`~agents.rollouts.portfolio_fused.PortfolioRollout`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from agents.rollouts.branch_rewards import PreStep, instrument_rewards, pre_step

__all__ = ["BranchRewardSteps", "check_branch_rewards"]


def check_branch_rewards(model: Any) -> int:
    """The number of rewards a transition of ``model``: K with ``branch_rewards`` on a
    ``MultiDiscrete([L] * K)`` space, else 1.

    :raises ValueError: naming the setting where ``branch_rewards`` meets a space or buffer
        that has no per-branch form.
    """
    if not getattr(model, "branch_rewards", False):
        return 1
    space = model.action_space
    if not isinstance(space, spaces.MultiDiscrete):
        raise ValueError(
            f"branch_rewards = True is invalid with the action space {space}: allowed is a "
            "MultiDiscrete([L] * K) space (one reward a branch of the branching head)"
        )
    from agents.replay.prioritized_buffer import PrioritizedReplayBuffer

    buffer_class = model.replay_buffer_class
    if not (isinstance(buffer_class, type) and issubclass(buffer_class, PrioritizedReplayBuffer)):
        raise ValueError(
            f"branch_rewards = True is invalid with replay_buffer_class = "
            f"{getattr(buffer_class, '__name__', buffer_class)}: allowed is "
            "PrioritizedReplayBuffer (it stores one reward a branch, reward_dim = K)"
        )
    return int(np.asarray(space.nvec).size)


class BranchRewardSteps:
    """Mixin of :class:`~agents.GpuDQN`: SB3's loop storing ``[N, K]`` rewards where
    ``branch_rewards`` is on. Reads ``branch_rewards``, ``portfolio_env`` and
    ``_vec_normalize_env``."""

    branch_rewards: bool
    portfolio_env: Any
    _vec_normalize_env: Any
    _pre_step: PreStep | None = None

    def _sample_action(self, *args: Any, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
        """The parent's actions; with ``branch_rewards``, the env's state copied first (SB3
        steps the env right after)."""
        if getattr(self, "branch_rewards", False):
            self._pre_step = pre_step(self._numpy_portfolio_backend().state)
        return super()._sample_action(*args, **kwargs)  # type: ignore[misc]

    def _numpy_portfolio_backend(self) -> Any:
        env = self.portfolio_env
        if env is None or str(env.device) != "cpu":
            raise ValueError(
                "branch_rewards = True is invalid here: allowed is a GpuPortfolio-v0 env on "
                f"device='cpu' in SB3's loop, or a CUDA one in the fused rollout (got "
                f"{'no portfolio env' if env is None else f'device {env.device!r}'}; a CUDA env "
                "needs fused_rollout=True and the prioritized buffer)"
            )
        if self._vec_normalize_env is not None:
            raise ValueError(
                "branch_rewards = True is invalid with VecNormalize: allowed is the portfolio "
                "env under nothing but the adapter (its rewards are the instruments' shares)"
            )
        return env.backend

    def _store_transition(
        self,
        replay_buffer: Any,
        buffer_action: np.ndarray,
        new_obs: Any,
        reward: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """The parent's store, with ``reward`` [N] replaced by the instruments' shares [N, K]
        where ``branch_rewards`` is on."""
        if getattr(self, "branch_rewards", False):
            before, self._pre_step = self._pre_step, None
            if before is None:
                raise RuntimeError("branch_rewards: a transition stored without its pre-step state")
            backend = self.portfolio_env.backend
            params = backend.params
            reward = instrument_rewards(
                backend.close,
                backend.open,
                before,
                np.stack([np.asarray(info["positions"], dtype=np.float64) for info in infos]),
                np.stack([np.asarray(info["costs"], dtype=np.float64) for info in infos]),
                fill_next_open=bool(params.fill_next_open),
                reward=reward,
                log_reward=bool(params.reward_log),
            )
        super()._store_transition(  # type: ignore[misc]
            replay_buffer, buffer_action, new_obs, reward, dones, infos
        )
