"""The double-DQN target and the importance-weighted loss: one statement for every training path.

Both take Q-values, not networks, so each caller runs its forward passes as it likes:
:meth:`GpuDQN.train <agents.GpuDQN.train>`'s eager loop runs the online net on ``o`` and on
``o'`` separately; :class:`~agents.algorithm.captured_step.CapturedTrainStep` runs it once on ``[o; o']``.
"""

from __future__ import annotations

import torch as th
from torch.nn import functional as F

__all__ = ["td_target", "weighted_td_loss"]


def td_target(
    rewards: th.Tensor,
    dones: th.Tensor,
    gamma: th.Tensor | float,
    q_next_target: th.Tensor,
    q_next_online: th.Tensor | None,
) -> th.Tensor:
    """One-step TD target ``y = r + (1 - done) * gamma * q_next``, without gradient.

    ``q_next`` is the target network's value of the online network's greedy action in ``s'``
    (double DQN: pass ``q_next_online``) or, with ``q_next_online=None``, the target network's
    maximum over actions.

    :param rewards: ``[B, 1]``.
    :param dones: ``[B, 1]``, 1 for terminations only (0 for time-limit truncations).
    :param gamma: a float or ``[B, 1]`` discounts.
    :param q_next_target: ``[B, A]``, ``Q_target(s', .)``.
    :param q_next_online: ``[B, A]``, ``Q(s', .)``, or ``None``.
    :return: ``[B, 1]``.
    """
    with th.no_grad():
        if q_next_online is not None:
            next_actions = q_next_online.argmax(dim=1, keepdim=True)
            next_q = th.gather(q_next_target, 1, next_actions)
        else:
            next_q = q_next_target.max(dim=1, keepdim=True).values
        return rewards + (1.0 - dones) * gamma * next_q


def weighted_td_loss(
    q: th.Tensor, target: th.Tensor, weights: th.Tensor | None = None
) -> tuple[th.Tensor, th.Tensor]:
    """``(loss, |td|)``: the mean of ``w_i * smooth_l1(q_i, y_i)`` and ``|y - q|``.

    :param q: ``[B, 1]``, ``Q(s, a)`` of the taken actions (with gradient).
    :param target: ``[B, 1]``, the TD target.
    :param weights: ``[B]`` or ``[B, 1]`` importance-sampling weights; ``None``: unweighted mean.
    :return: the scalar loss and the absolute TD errors ``[B]`` (detached): the new priorities.
    """
    elementwise = F.smooth_l1_loss(q, target, reduction="none")
    if weights is not None:
        loss = (weights.reshape(-1, 1).to(elementwise.dtype) * elementwise).mean()
    else:
        loss = elementwise.mean()
    td = (q.detach() - target).abs().reshape(-1)
    return loss, td
