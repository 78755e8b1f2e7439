"""The target network's update of :class:`~agents.GpuDQN`: SB3's ``polyak_update``, batched.

SB3 updates the target with two launches per tensor (``mul_`` then ``add_``). The fused rollout
runs a vector step in microseconds and updates the target every few steps, so the launches and
the walk of ``parameters()`` on the host showed up; here each operation is one multi-tensor
kernel over all tensors (``torch._foreach_*``, the kernels ``torch.optim`` uses), and the
parameter lists are walked once per pair of networks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch as th

__all__ = ["TargetNetworkUpdate", "polyak_update_"]


def polyak_update_(online: Sequence[th.Tensor], target: Sequence[th.Tensor], tau: float) -> None:
    """SB3's ``polyak_update`` (``target = target * (1 - tau) + tau * online``, in place, the
    same two roundings), as two multi-tensor operations; ``tau == 1`` (a hard update) as one
    multi-tensor copy, the same values for a finite target.

    :raises ValueError: when the two lists differ in length.
    """
    if len(online) != len(target):
        raise ValueError(f"{len(online)} online tensors and {len(target)} target tensors differ")
    if not target:
        return
    if tau == 1.0:
        th._foreach_copy_(target, online)
    else:
        th._foreach_mul_(target, 1 - tau)
        th._foreach_add_(target, online, alpha=tau)


class TargetNetworkUpdate:
    """``update(q_net, q_net_target, tau, stats, stats_target)``: DQN's target update, the
    parameters with ``tau`` and the batch-norm statistics copied (tau 1), as SB3's ``_on_step``.
    """

    def __init__(self) -> None:
        # (q_net, q_net_target, their parameter lists) of the last call.
        self._lists: tuple[Any, Any, list[th.Tensor], list[th.Tensor]] = (None, None, [], [])

    def _pairs(self, q_net: th.nn.Module, q_net_target: th.nn.Module):
        cached = self._lists
        if cached[0] is not q_net or cached[1] is not q_net_target:
            online, target = list(q_net.parameters()), list(q_net_target.parameters())
            cached = self._lists = (q_net, q_net_target, online, target)
        return cached[2], cached[3]

    def __call__(
        self,
        q_net: th.nn.Module,
        q_net_target: th.nn.Module,
        tau: float,
        stats: Sequence[th.Tensor],
        stats_target: Sequence[th.Tensor],
    ) -> None:
        online, target = self._pairs(q_net, q_net_target)
        with th.no_grad():
            polyak_update_(online, target, tau)
            polyak_update_(stats, stats_target, 1.0)
