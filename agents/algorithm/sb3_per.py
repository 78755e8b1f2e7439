"""Prioritized replay for plain Stable-Baselines3: ``PrioritizedDQN``.

SB3's ``DQN.train`` samples the replay buffer but neither weights its loss by importance
weights nor reports TD errors back, so with ``replay_buffer_class=PrioritizedReplayBuffer``
alone every priority stays at its initial value and sampling is uniform (the buffer warns).
``PrioritizedDQN`` is SB3's ``DQN`` with the one change PER needs, so the switch is one line::

    from agents import PrioritizedDQN, PrioritizedReplayBuffer

    model = PrioritizedDQN("MlpPolicy", env, replay_buffer_class=PrioritizedReplayBuffer)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3 import DQN

from agents.algorithm.dqn_loss import weighted_td_loss
from agents.algorithm.gpu_dqn_files import DQN_NAMES, check_dqn_file_attributes
from agents.files.model_files import WeightsOnlyFiles
from agents.replay.prioritized_buffer import PrioritizedReplayBuffer

__all__ = ["PrioritizedDQN"]


class PrioritizedDQN(WeightsOnlyFiles, DQN):
    """SB3 ``DQN`` whose gradient steps use prioritized replay.

    Per sampled batch of B transitions: the Huber loss of each transition ``[B, 1]`` is
    multiplied by its importance weight ``samples.weights`` ``[B, 1]`` before the mean
    (:func:`agents.algorithm.dqn_loss.weighted_td_loss`), and
    ``|target - Q(s, a)|`` ``[B]`` (float32, from the same forward pass) is written back with
    ``replay_buffer.update_priorities(samples.indices, td)``. The buffer's beta is annealed
    from its initial value to 1 over ``learn`` (``set_progress``). Targets are SB3's
    (``r + (1 - done) * discount * max_a Q_target(s', a)``, n-step discounts honoured).

    With any other replay buffer class it trains exactly as ``DQN``. Its files are weights-only
    (:class:`~agents.files.model_files.WeightsOnlyFiles`): SB3's pickle-based zips and buffers load
    only with ``allow_pickle=True``.
    """

    def check_loaded_attributes(
        self, data: dict[str, Any], params: dict[str, Any], where: str
    ) -> None:
        """:meth:`WeightsOnlyFiles.check_loaded_attributes`, then the DQN hyperparameters and
        sizes (:func:`~agents.algorithm.gpu_dqn_files.check_dqn_file_attributes`)."""
        super().check_loaded_attributes(data, params, where)
        defaults = {k: v for k, v in vars(self).items() if k in DQN_NAMES}
        check_dqn_file_attributes({**defaults, **data}, params, self.device, where)

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        buffer = self.replay_buffer
        if not isinstance(buffer, PrioritizedReplayBuffer):
            super().train(gradient_steps, batch_size)
            return
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        buffer.set_progress(min(1.0, max(0.0, float(self._current_progress_remaining))))
        losses: list[th.Tensor] = []
        for _ in range(gradient_steps):
            batch = buffer.sample(batch_size, env=self._vec_normalize_env)
            gamma = batch.discounts if getattr(batch, "discounts", None) is not None else self.gamma
            with th.no_grad():
                best_next = self.q_net_target(batch.next_observations).max(dim=1).values
                target = batch.rewards + (1 - batch.dones) * gamma * best_next.reshape(-1, 1)
            q_taken = self.q_net(batch.observations).gather(1, batch.actions.long())
            loss, td = weighted_td_loss(q_taken, target, batch.weights)
            self.policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
            buffer.update_priorities(batch.indices, td)
            losses.append(loss.detach())
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        if losses:
            self.logger.record("train/loss", float(np.mean([x.item() for x in losses])))
        self.logger.record("train/per_beta", float(buffer.beta))
