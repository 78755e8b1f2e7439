"""The fused GPU rollout: act, step and store without leaving the GPU.

For a :class:`~gpu_trading_env.TradingVectorEnv` on a CUDA device, one vector step of
``collect`` is: Q-network forward on the current observations (torch), per-env epsilon-greedy
choice, one env kernel launch (CuPy, on torch's stream), and device-to-device writes into the
:class:`~agents.PrioritizedReplayBuffer`. Nothing waits for the GPU inside the loop; finished
episodes are appended to a small device ring and reach the host every ``stats_interval`` steps,
where they feed SB3's ``ep_info_buffer`` (``rollout/ep_rew_mean`` in the logs).

The whole algorithm of one step, in order (see :meth:`FusedRollout.step`)::

    q        = q_net(obs)                                   # [N, A]
    explore  = rand(N) < epsilon                            # one coin per env
    action   = where(explore, randint(A), argmax(q))        # [N]
    obs', r, terminated, truncated, info = env.step(action) # one kernel
    next_obs = where(terminated | truncated, final_obs, obs')
    buffer.add_tensors(obs, next_obs, action, r, terminated, truncated)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

STATS_RING = 4096


class EpisodeRing:
    """Returns and lengths of finished episodes, appended on the device without a host sync.

    Each step scatters the finished envs' values to consecutive ring slots found by a cumulative
    sum over the done mask; :meth:`drain` copies the ring to the host once and yields the
    entries written since the last drain (at most ``size``; older ones are overwritten).
    """

    def __init__(self, device: th.device, size: int = STATS_RING) -> None:
        self.size = size
        self.returns = th.zeros(size + 1, dtype=th.float32, device=device)  # slot `size` = sink
        self.lengths = th.zeros(size + 1, dtype=th.int32, device=device)
        self.written = th.zeros((), dtype=th.int64, device=device)
        self._read = 0

    def append(self, done: th.Tensor, returns: th.Tensor, lengths: th.Tensor) -> None:
        d = done.to(th.int64)
        slot = (self.written + th.cumsum(d, 0) - 1) % self.size
        slot = th.where(done, slot, th.full_like(slot, self.size))
        self.returns.scatter_(0, slot, returns.to(th.float32))
        self.lengths.scatter_(0, slot, lengths.to(th.int32))
        self.written += d.sum()

    def drain(self) -> list[dict[str, float]]:
        written = int(self.written.item())
        new = written - self._read
        if new <= 0:
            return []
        new = min(new, self.size)
        r = self.returns[: self.size].cpu().numpy()
        ln = self.lengths[: self.size].cpu().numpy()
        slots = (np.arange(written - new, written)) % self.size
        self._read = written
        return [{"r": float(r[s]), "l": int(ln[s])} for s in slots]


class FusedRollout:
    """Collects transitions for a :class:`~agents.GpuDQN` whose env is a CUDA TradingVectorEnv.

    :param model: the GpuDQN; its ``trading_env`` (CUDA), ``q_net``, ``replay_buffer`` and
        ``exploration_rate`` are used as they are at each call.
    :param seed: seed of the exploration RNG (a torch generator on the env's device).
    :param stats_interval: vector steps between host reads of finished-episode statistics.
    :param act_precision: matmul precision of the acting forward pass: ``"tf32"`` (default:
        tensor cores, about 1e-3 relative error in Q, which changes only near-tie argmaxes),
        ``"fp32"`` (exact float32) or ``"bf16"`` (autocast).
    """

    def __init__(
        self,
        model: Any,
        seed: int | None = None,
        stats_interval: int = 64,
        act_precision: str = "tf32",
    ) -> None:
        env = model.trading_env
        if env is None or not str(env.device).startswith("cuda"):
            raise ValueError(
                "FusedRollout needs model.trading_env to be a TradingVectorEnv on a CUDA device"
            )
        if env.array_type != "torch":
            raise ValueError(
                f"FusedRollout needs the env's array_type 'torch'; got {env.array_type!r}"
            )
        if env.autoreset_mode.name != "SAME_STEP":
            raise ValueError(
                f"FusedRollout needs autoreset_mode SAME_STEP; got {env.autoreset_mode.name}"
            )
        self.model = model
        self.env = env
        self.device = th.device(env.device)
        self.num_envs = env.num_envs
        self.n_actions = int(env.single_action_space.n)
        self.generator = th.Generator(device=self.device)
        self.generator.manual_seed(int(seed if seed is not None else np.random.randint(2**31 - 1)))  # noqa: NPY002
        self.stats_interval = int(stats_interval)
        if act_precision not in ("tf32", "fp32", "bf16"):
            raise ValueError(
                f"act_precision = {act_precision!r} is invalid: allowed is 'tf32', 'fp32' or 'bf16'"
            )
        self.act_precision = act_precision
        self.ring = EpisodeRing(self.device)
        self.obs: th.Tensor = env.observe()
        self._steps = 0
        self._episodes_pending = 0

    @th.no_grad()
    def act(self, obs: th.Tensor, epsilon: float, random_only: bool = False) -> th.Tensor:
        """Epsilon-greedy actions int64 [N], one exploration coin per env."""
        n = obs.shape[0]
        rand_actions = th.randint(
            0, self.n_actions, (n,), device=self.device, generator=self.generator
        )
        if random_only:
            return rand_actions
        coins = th.rand(n, device=self.device, generator=self.generator)
        if self.act_precision == "bf16":
            with th.autocast("cuda", dtype=th.bfloat16):
                q = self.model.q_net(obs)
        else:
            # Set for this forward pass only, so the training step keeps the user's setting.
            previous = th.backends.cuda.matmul.allow_tf32
            th.backends.cuda.matmul.allow_tf32 = self.act_precision == "tf32"
            try:
                q = self.model.q_net(obs)
            finally:
                th.backends.cuda.matmul.allow_tf32 = previous
        greedy = q.argmax(dim=1)
        return th.where(coins < epsilon, rand_actions, greedy)

    def step(self, epsilon: float, random_only: bool = False) -> tuple[th.Tensor, th.Tensor]:
        """One vector step: act, step the env, store. Returns (rewards, done) tensors [N]."""
        obs = self.obs
        action = self.act(obs, epsilon, random_only)
        new_obs, reward, terminated, truncated, info = self.env.step(action)
        done = terminated | truncated
        next_obs = th.where(done[:, None], info["final_obs"], new_obs)
        self.model.replay_buffer.add_tensors(obs, next_obs, action, reward, terminated, truncated)
        self.ring.append(done, info["episode"]["r"], info["episode"]["l"])
        self.obs = new_obs
        return reward, done

    def drain_episode_stats(self) -> int:
        """Move finished episodes to the model's ``ep_info_buffer``; returns how many (syncs)."""
        infos = self.ring.drain()
        if self.model.ep_info_buffer is not None:
            self.model.ep_info_buffer.extend(infos)
        return len(infos)

    def collect(
        self,
        n_steps: int,
        callback: Any,
        learning_starts: int,
        on_step: Callable[[], None] | None = None,
    ) -> tuple[int, int, bool]:
        """Run ``n_steps`` vector steps, advancing ``num_timesteps`` and the callbacks as SB3 does.

        Returns ``(steps collected, episodes whose statistics reached the host, continue)``.
        """
        model = self.model
        model.policy.set_training_mode(False)
        n_episodes = 0
        for k in range(n_steps):
            random_only = model.num_timesteps < learning_starts
            self.step(model.exploration_rate, random_only=random_only)
            model.num_timesteps += self.num_envs
            self._steps += 1
            callback.update_locals({"self": model, "num_collected_steps": self._steps})
            if not callback.on_step():
                return k + 1, n_episodes, False
            model._update_current_progress_remaining(model.num_timesteps, model._total_timesteps)
            if on_step is not None:
                on_step()
            else:
                model._on_step()
            if self._steps % self.stats_interval == 0:
                n_episodes += self.drain_episode_stats()
        return n_steps, n_episodes, True
