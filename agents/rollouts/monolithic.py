"""The monolithic rollout path: the source design's one-thread-per-env kernel.

One launch runs ``steps`` env steps for every env, each thread doing a scalar dueling Q forward
pass of the online net (to act) per step in local memory. It is slower
than :class:`~agents.rollouts.fused.FusedRollout` at every size we measured (see
docs/PERFORMANCE.md) and is kept as a selectable path (``GpuDQN(rollout_kernel="monolithic")``) and as
the benchmark baseline. Only the default dueling architecture (256-256 trunk, 128 heads) fits
its fixed-size local arrays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from torch import nn

from agents.network_layout import DEFAULT_DUELING_ARCH
from gpu_trading_env.core.constants import BLOCK
from gpu_trading_env.core.kernel_interface import (
    CURIOSITY_PARAMS,
    MARKET_PARAMS,
    PARAM_PARAMS,
    KernelSignature,
    state_params,
)

KERNEL_FILE = Path(__file__).resolve().parent / "kernels" / "monolithic_rollout.cu"
# Trunk 1, trunk 2, value hidden, advantage hidden: the policy's default dueling network, the
# only one the kernel's fixed-size local arrays hold.
MONO_LAYERS = (
    *DEFAULT_DUELING_ARCH["shared"],
    *DEFAULT_DUELING_ARCH["value"],
    *DEFAULT_DUELING_ARCH["advantage"],
)
# Sizes of the per-thread observation and Q arrays (local memory: larger ones spill further).
MONO_MAX_OBS = 128
MONO_MAX_ACTIONS = 128


# The kernel's parameters as MonolithicRollout.launch passes them (the outputs in the order of
# its ``out`` dict); tests/test_kernel_interface.py compares them with the source.
MONOLITHIC_KERNEL_PARAMS: KernelSignature = (
    *state_params(),
    *MARKET_PARAMS,
    *PARAM_PARAMS,
    *CURIOSITY_PARAMS,
    ("online", "const float*"),
    ("epsilon", "float"),
    ("steps", "int"),
    ("seed", "unsigned long long"),
    ("round", "unsigned long long"),
    ("obs_out", "float*"),
    ("action_out", "long long*"),
    ("reward_out", "float*"),
    ("terminated_out", "bool*"),
    ("truncated_out", "bool*"),
    ("next_obs_out", "float*"),
    ("episode_return_out", "float*"),
    ("episode_length_out", "int*"),
    ("n", "int"),
)


def monolithic_kernel_defines() -> tuple[tuple[str, str], ...]:
    """The layer sizes and array bounds ``monolithic_rollout.cu`` is compiled with."""
    if len(MONO_LAYERS) != 4:
        raise ValueError(
            f"the monolithic kernel holds a 2-layer trunk and 1-layer heads; the default dueling "
            f"network is {DEFAULT_DUELING_ARCH}"
        )
    h1, h2, vh, ah = MONO_LAYERS
    sizes = {"H1": h1, "H2": h2, "VH": vh, "AH": ah}
    sizes |= {"MAX_OBS": MONO_MAX_OBS, "MAX_ACTIONS": MONO_MAX_ACTIONS}
    return tuple((f"MONO_{k}", str(v)) for k, v in sizes.items())


def flat_dueling_weights(q_net: nn.Module, obs_dim: int, n_actions: int) -> th.Tensor:
    """The dueling network's Linear layers flattened in the kernel's order (float32, 1-D).

    Expects ``q_net.shared``, ``q_net.value_head`` and ``q_net.advantage_head`` made of
    ``nn.Linear`` layers of sizes ``obs_dim-256-256``, ``256-128-1`` and ``256-128-n_actions``.
    """
    linears = [
        m
        for part in ("shared", "value_head", "advantage_head")
        for m in getattr(q_net, part)
        if isinstance(m, nn.Linear)
    ]
    h1, h2, vh, ah = MONO_LAYERS
    expected = [(h1, obs_dim), (h2, h1), (vh, h2), (1, vh), (ah, h2), (n_actions, ah)]
    got = [tuple(m.weight.shape) for m in linears]
    if got != expected:
        raise ValueError(
            f"the monolithic kernel needs the default dueling layers {expected}; got {got}"
        )
    return th.cat([t.detach().reshape(-1).float() for m in linears for t in (m.weight, m.bias)])


class MonolithicRollout:
    """Collect ``steps`` transitions per env in one kernel launch and store them in the buffer.

    :param model: a GpuDQN with a dueling policy, a CUDA ``trading_env`` and a device buffer.
    :param seed: key of the exploration Philox stream.
    """

    def __init__(self, model: Any, seed: int = 0) -> None:
        env = model.trading_env
        if env is None or not str(env.device).startswith("cuda"):
            raise ValueError("the monolithic rollout needs a TradingVectorEnv on a CUDA device")
        self.model = model
        self.env = env
        self.backend = env.backend
        self.obs_dim = int(env.single_observation_space.shape[0])
        self.n_actions = int(env.single_action_space.n)
        if self.obs_dim > MONO_MAX_OBS or self.n_actions > MONO_MAX_ACTIONS:
            raise ValueError(
                f"the monolithic kernel supports observations up to {MONO_MAX_OBS} dims and up to "
                f"{MONO_MAX_ACTIONS} actions; got {self.obs_dim} and {self.n_actions}"
            )
        # The module loads into the current device's context: the env's device, not device 0.
        with self.backend.device_scope():
            module = self.backend.compile_module(KERNEL_FILE, monolithic_kernel_defines())
            self.kernel = module.get_function("monolithic_rollout")
        self.seed = int(seed)
        self.round = 0

    def launch(self, steps: int, epsilon: float) -> dict[str, th.Tensor]:
        """Run the kernel; returns torch tensors shaped [N, steps, ...] on the env's device."""
        import cupy as cp

        b = self.backend
        n, d = self.env.num_envs, self.obs_dim
        dev = th.device(self.env.device)
        out = {
            "obs": th.empty((n, steps, d), dtype=th.float32, device=dev),
            "action": th.empty((n, steps), dtype=th.int64, device=dev),
            "reward": th.empty((n, steps), dtype=th.float32, device=dev),
            "terminated": th.empty((n, steps), dtype=th.bool, device=dev),
            "truncated": th.empty((n, steps), dtype=th.bool, device=dev),
            "next_obs": th.empty((n, steps, d), dtype=th.float32, device=dev),
            "episode_return": th.empty((n, steps), dtype=th.float32, device=dev),
            "episode_length": th.empty((n, steps), dtype=th.int32, device=dev),
        }
        online = flat_dueling_weights(self.model.q_net, d, self.n_actions).to(dev)
        with b.device_scope(), b.stream():
            args = (
                *b.kernel_args().all(),
                cp.from_dlpack(online),
                np.float32(epsilon),
                np.int32(steps),
                np.uint64(self.seed),
                np.uint64(self.round),
                *(cp.from_dlpack(t) for t in out.values()),  # in the kernel's order
                np.int32(n),
            )
            self.kernel(((n + BLOCK - 1) // BLOCK,), (BLOCK,), args)
        self.round += 1
        return out

    def collect(self, n_steps: int, callback: Any, learning_starts: int) -> tuple[int, int, bool]:
        """One launch of ``n_steps`` steps, then ``n_steps`` buffer writes of N transitions.

        Returns ``(steps collected, episodes that ended in them, continue)``; the newest ended
        episodes go to the model's ``ep_info_buffer`` (``rollout/ep_rew_mean``), as the fused
        rollout's do.
        """
        model = self.model
        eps = 1.0 if model.num_timesteps < learning_starts else float(model.exploration_rate)
        out = self.launch(n_steps, eps)
        collected, go_on = self._store(out, n_steps, callback)
        done = out["terminated"][:, :collected] | out["truncated"][:, :collected]
        buffer = model.ep_info_buffer
        n_episodes, infos = finished_episodes(
            done,
            out["episode_return"][:, :collected],
            out["episode_length"][:, :collected],
            keep=None if buffer is None else buffer.maxlen,
        )
        if buffer is not None:
            buffer.extend(infos)
        return collected, n_episodes, go_on

    def _store(self, out: dict[str, th.Tensor], n_steps: int, callback: Any) -> tuple[int, bool]:
        """Write the launch's steps to the buffer one vector step at a time, with SB3's per-step
        callbacks; returns ``(steps written, continue)``."""
        model = self.model
        for t in range(n_steps):
            model.replay_buffer.add_tensors(
                out["obs"][:, t],
                out["next_obs"][:, t],
                out["action"][:, t],
                out["reward"][:, t],
                out["terminated"][:, t],
                out["truncated"][:, t],
            )
            model.num_timesteps += self.env.num_envs
            callback.update_locals({"self": model})
            if not callback.on_step():
                return t + 1, False
            model.after_rollout_step()
        return n_steps, True


def finished_episodes(
    done: th.Tensor, returns: th.Tensor, lengths: th.Tensor, keep: int | None = None
) -> tuple[int, list[dict[str, float]]]:
    """The episodes that ended in a launch's outputs: ``(how many, the newest ones' entries)``.

    :param done: bool ``[N, L]``, env-major as the kernel writes it: episode ended at step t.
    :param returns: float ``[N, L]``, the ended episode's return where ``done`` (else 0).
    :param lengths: int ``[N, L]``, its length in steps where ``done``.
    :param keep: at most this many entries (the newest), e.g. ``ep_info_buffer.maxlen``;
        None keeps all.
    :return: the count of ended episodes and SB3 ``ep_info`` entries ``{"r": return,
        "l": length}`` in the order they ended (step by step, env by env within a step).
    """
    if not (done.shape == returns.shape == lengths.shape and done.dim() == 2):
        raise ValueError(
            f"done, returns and lengths must be [N, L] of one shape, got {tuple(done.shape)}, "
            f"{tuple(returns.shape)} and {tuple(lengths.shape)}"
        )
    ended = th.nonzero(done.t().reshape(-1)).reshape(-1)  # step-major order
    count = int(ended.numel())
    if keep is not None:
        ended = ended[max(0, count - max(int(keep), 0)) :]
    r = returns.t().reshape(-1)[ended].tolist()
    ln = lengths.t().reshape(-1)[ended].tolist()
    return count, [{"r": float(a), "l": int(b)} for a, b in zip(r, ln, strict=True)]
