"""The double-DQN target and the importance-weighted loss: one statement for every training path.

Both take Q-values, not networks, so each caller runs its forward passes as it likes:
:meth:`GpuDQN.train <agents.GpuDQN.train>`'s eager loop runs the online net on ``o`` and on
``o'`` separately; :class:`~agents.algorithm.captured_step.CapturedTrainStep` runs it once on ``[o; o']``.

A ``Discrete`` network's Q-values are ``[B, A]``; a branching network's
(:class:`~agents.algorithm.policies.BranchingDuelingQNetwork`, ``MultiDiscrete([L] * K)``) are
``[B, K, L]``, and each function takes both. With one reward a transition (``[B, 1]``) the
branching variant is the "mean" one of Tavakoli et al. (2018): one target per transition, the
branches' next-state values averaged; with one reward a branch (``[B, K]``, GpuDQN's
``branch_rewards``) each branch has its own target, ``y_d = r_d + gamma·(1 − done)·Q'_d(s',
argmax_a Q_d(s', a))``. Either way the loss is averaged over branches and the priority is the
mean of the branches' ``|td|``.
"""

from __future__ import annotations

import torch as th
from torch.nn import functional as F

__all__ = ["taken_q", "td_target", "weighted_td_loss"]


def taken_q(q_all: th.Tensor, actions: th.Tensor) -> th.Tensor:
    """The Q-values of the taken actions.

    :param q_all: ``[B, A]`` (``Discrete``) or ``[B, K, L]`` (branching).
    :param actions: int64 ``[B, 1]`` or ``[B, K]``, the stored actions.
    :return: ``[B, 1]`` or ``[B, K]`` (``Q_d(s, a_d)`` of each branch), with ``q_all``'s gradient.
    """
    if q_all.ndim == 3:
        return th.gather(q_all, 2, actions.unsqueeze(-1)).squeeze(-1)
    return th.gather(q_all, 1, actions)


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
    maximum over actions. Branching Q-values ``[B, K, L]``: the same in every branch; with
    ``rewards`` ``[B, 1]`` then the mean over branches, ``q_next = mean_d Q'_d(s', argmax_a
    Q_d(s', a))`` (one target shared by the branches, Tavakoli et al.'s "mean" variant); with
    ``rewards`` ``[B, K]`` (one a branch) each branch's own, ``y_d = r_d + (1 - done) * gamma *
    Q'_d(s', argmax_a Q_d(s', a))``.

    :param rewards: ``[B, 1]``, or ``[B, K]`` with branching Q-values (one reward a branch).
    :param dones: ``[B, 1]``, 1 for terminations only (0 for time-limit truncations).
    :param gamma: a float or ``[B, 1]`` discounts.
    :param q_next_target: ``[B, A]`` or ``[B, K, L]``, ``Q_target(s', .)``.
    :param q_next_online: the same shape, ``Q(s', .)``, or ``None``.
    :return: ``[B, 1]``, or ``[B, K]`` with ``rewards`` of ``[B, K]``.
    :raises ValueError: where ``rewards`` has neither 1 nor K columns (K branches).
    """
    with th.no_grad():
        if q_next_target.ndim == 3:
            branches = q_next_target.shape[1]
            if rewards.shape[-1] not in (1, branches):
                raise ValueError(
                    f"rewards of shape {tuple(rewards.shape)} are invalid with {branches} "
                    f"branches: allowed is [B, 1] (one reward a transition) or [B, {branches}] "
                    "(one a branch)"
                )
            if q_next_online is not None:
                next_actions = q_next_online.argmax(dim=2, keepdim=True)
                branch_q = th.gather(q_next_target, 2, next_actions).squeeze(-1)
            else:
                branch_q = q_next_target.max(dim=2).values
            # One reward a branch: each branch bootstraps from its own next value; one shared
            # reward: from the branches' mean (each branch's value estimates the whole return).
            next_q = branch_q if rewards.shape[-1] > 1 else branch_q.mean(dim=1, keepdim=True)
        elif q_next_online is not None:
            next_actions = q_next_online.argmax(dim=1, keepdim=True)
            next_q = th.gather(q_next_target, 1, next_actions)
        else:
            next_q = q_next_target.max(dim=1, keepdim=True).values
        return rewards + (1.0 - dones) * gamma * next_q


def weighted_td_loss(
    q: th.Tensor, target: th.Tensor, weights: th.Tensor | None = None
) -> tuple[th.Tensor, th.Tensor]:
    """``(loss, |td|)``: the mean of ``w_i * smooth_l1(q_i, y_i)`` and ``|y - q|``.

    With K branches (``q`` of ``[B, K]``) the loss is ``mean_i w_i * mean_d smooth_l1(q_id,
    y_i)`` and the priority of transition ``i`` is ``mean_d |y_i - q_id|`` (the mean, not the
    paper's sum, so that the priorities keep the scale of one branch's error whatever K).

    :param q: ``[B, 1]`` (or ``[B, K]``), ``Q(s, a)`` of the taken actions (with gradient).
    :param target: ``[B, 1]`` (or ``[B, K]``, one a branch), the TD target.
    :param weights: ``[B]`` or ``[B, 1]`` importance-sampling weights; ``None``: unweighted mean.
    :return: the scalar loss and the absolute TD errors ``[B]`` (detached): the new priorities.
    """
    if q.shape[1] != 1:
        target = target.expand_as(q)
    elementwise = F.smooth_l1_loss(q, target, reduction="none")
    if weights is not None:
        loss = (weights.reshape(-1, 1).to(elementwise.dtype) * elementwise).mean()
    else:
        loss = elementwise.mean()
    if q.shape[1] != 1:
        return loss, (q.detach() - target).abs().mean(dim=1)
    td = (q.detach() - target).abs().reshape(-1)
    return loss, td
