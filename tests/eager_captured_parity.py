"""Helpers of the tests that hold the captured train step to the eager one on CUDA: both
models take one state before a gradient step, and agree after it.

``from eager_captured_parity import ...`` works from any test module (``tests/`` is on
``sys.path``, as for ``hand_market``).
"""

from __future__ import annotations

import numpy as np
import torch as th

from agents import GpuDQN


def copy_training_state(src: GpuDQN, dst: GpuDQN) -> None:
    """dst's weights, target, Adam moments and tree become src's (in place: the graph's memory)."""
    th.cuda.synchronize()
    with th.no_grad():
        for a, b in zip(src.policy.parameters(), dst.policy.parameters(), strict=True):
            b.copy_(a)
        so, do = src.policy.optimizer, dst.policy.optimizer
        for pa, pb in zip(so.param_groups[0]["params"], do.param_groups[0]["params"], strict=True):
            for key, value in so.state.get(pa, {}).items():
                do.state[pb][key].copy_(value)
    ts, td = src.replay_buffer.tree, dst.replay_buffer.tree
    td.sum_tree[...] = ts.sum_tree
    td.min_tree[...] = ts.min_tree
    td.max_value[...] = ts.max_value
    th.cuda.synchronize()


def assert_steps_agree(eager: GpuDQN, captured: GpuDQN, step: int) -> None:
    """After one gradient step from the same state: parameters (target included) and
    priorities agree to float32 rounding."""
    for a, b in zip(eager.policy.parameters(), captured.policy.parameters(), strict=True):
        # Adam's first step is lr * sign(g): a gradient at rounding level may flip (seen on the
        # H200: 3 elements at <= 9e-6, lr 1e-3), later steps agree to 1e-6.
        th.testing.assert_close(b, a, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(
        captured.replay_buffer.tree.leaves(),
        eager.replay_buffer.tree.leaves(),
        # Priorities are (|td| + eps)**alpha: near td = 0 the slope alpha*|td|**(alpha-1) turns
        # a float32 rounding difference of the TD error (1e-6) into ~1e-5 of priority (seen on
        # the H200: 1.1e-5 at a priority of 0.004).
        rtol=1e-3,
        atol=5e-5,
        err_msg=f"step {step}",
    )
