"""Per-env epsilon-greedy acting of :class:`~agents.GpuDQN` on SB3's rollout loop.

SB3's ``DQN.predict`` draws one exploration coin for the whole batch of envs: with 4,096 envs
every env explores in the same steps. Here every env draws its own coin, from the action
space's generator (the one SB3 seeds). The fused rollout does the same on the device
(:mod:`agents.rollouts.fused`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.noise import ActionNoise

from agents.algorithm.hyperparameters import check_finite_observation

__all__ = ["PerEnvEpsilonGreedy"]


class PerEnvEpsilonGreedy:
    """Mixin for SB3's ``DQN``: :meth:`predict` and ``_sample_action`` with one coin per env.

    Reads ``action_space``, ``exploration_rate``, ``num_timesteps``, ``_last_obs`` and
    ``policy`` of the algorithm it is mixed into.
    """

    action_space: Any
    exploration_rate: float
    num_timesteps: int
    policy: Any
    _last_obs: Any

    def _random_actions(self, n: int) -> np.ndarray:
        """``n`` uniform actions: int64 ``[n]`` (``Discrete``) or ``[n, K]`` (``MultiDiscrete``)."""
        space = self.action_space
        if isinstance(space, spaces.MultiDiscrete):
            nvec = np.asarray(space.nvec, dtype=np.int64)
            draws = space.np_random.integers(nvec, size=(n, *nvec.shape))
            return (np.asarray(space.start, dtype=np.int64) + draws).astype(np.int64)
        assert isinstance(space, spaces.Discrete)
        return (int(space.start) + space.np_random.integers(int(space.n), size=n)).astype(np.int64)

    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """Epsilon-greedy actions with an independent coin per env.

        :param observation: ``[N, *obs_shape]`` (or one observation).
        :param state: Unused (no recurrent policies).
        :param episode_start: Unused.
        :param deterministic: Greedy actions only.
        :return: ``(actions [N] int64, state)``; ``[N, K]`` on a ``MultiDiscrete`` space.
        :raises ValueError: on a NaN or infinite observation value (the network's argmax of NaN
            Q-values is action 0, an answer that looks valid).
        """
        check_finite_observation(observation)
        if deterministic or self.exploration_rate <= 0.0:
            return self.policy.predict(observation, state, episode_start, deterministic=True)
        if not self.policy.is_vectorized_observation(observation) or isinstance(observation, dict):
            return super().predict(observation, state, episode_start, deterministic)
        n = np.asarray(observation).shape[0]
        # The action space's generator is the one SB3 seeds (``set_random_seed``).
        explore = self.action_space.np_random.random(n) < self.exploration_rate
        if explore.all():
            return self._random_actions(n), state
        actions, state = self.policy.predict(observation, state, episode_start, deterministic=True)
        actions = np.array(actions, dtype=np.int64, copy=True).reshape(n, *self.action_space.shape)
        k = int(explore.sum())
        if k:
            actions[explore] = self._random_actions(k)
        return actions, state

    def _sample_action(
        self,
        learning_starts: int,
        action_noise: ActionNoise | None = None,
        n_envs: int = 1,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Uniform actions during warm-up, then :meth:`predict`; ``(env action, buffer action)``."""
        if self.num_timesteps < learning_starts:
            action = self._random_actions(n_envs)
        else:
            assert self._last_obs is not None, "self._last_obs was not set"
            action, _ = self.predict(self._last_obs, deterministic=False)  # type: ignore[arg-type]
        return action, action
