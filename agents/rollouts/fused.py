"""The fused GPU rollout: act, step and store without leaving the GPU.

For a :class:`~gpu_trading_env.TradingVectorEnv` on a CUDA device, one vector step of
``collect`` is: Q-network forward on the current observations (torch), per-env epsilon-greedy
choice, one env kernel launch (CuPy, on torch's stream), and device-to-device writes into the
:class:`~agents.PrioritizedReplayBuffer`. Nothing waits for the GPU inside the loop; finished
episodes are appended to a small device ring and reach the host every ``stats_interval`` steps,
where they feed SB3's ``ep_info_buffer`` (``rollout/ep_rew_mean`` in the logs).

The whole algorithm of one step, in order (see :meth:`FusedRollout.step`)::

    greedy   = argmax_a q_net(obs)[a]                      # [N] (agents.rollouts.acting)
    explore  = rand(N) < epsilon                            # one coin per env
    action   = where(explore, randint(A), greedy)           # [N]
    obs', r, terminated, truncated, info = env.step(action) # one kernel
    next_obs = where(terminated | truncated, final_obs, obs')
    buffer.add_tensors(obs, next_obs, action, r, terminated, truncated)

On the portfolio env (``MultiDiscrete([L] * K)`` actions, a branching Q-network) the same loop
runs with ``[N, K]`` actions: :class:`~agents.rollouts.portfolio_fused.PortfolioRollout`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th

from agents.replay.step_store import store_module_spec
from agents.replay.tree_kernels import tree_module_spec
from agents.rollouts.acting import GreedyActor, cast_module_spec
from agents.rollouts.episode_ring import EpisodeRing, ring_module_spec
from gpu_runtime.cuda_graph import GraphRunner, warm_up_on_side_stream
from gpu_runtime.device import ModuleSpec, compile_in_background, cuda_index, cupy_or_none
from gpu_runtime.precision import Precision, check_precision


def fused_path_kernels() -> list[ModuleSpec]:
    """Every kernel module the first ``learn`` of a GpuDQN on a CUDA TradingVectorEnv loads:
    the env's step, the prioritized buffer's tree and store, the episode ring and the bf16
    cast of the observations."""
    from gpu_trading_env.backends.cuda_backend import kernel_module_spec

    return [
        kernel_module_spec(),
        tree_module_spec(),
        store_module_spec(),
        ring_module_spec(),
        cast_module_spec(),
    ]


def start_compiling_kernels(device: str, modules: list[ModuleSpec] | None = None) -> list[Any]:
    """On a CUDA ``device`` ("cuda" or "cuda:N"), start compiling ``modules`` (default
    :func:`fused_path_kernels`; on the portfolio env
    :func:`~agents.rollouts.portfolio_fused.portfolio_path_kernels`) side by side on background
    threads (:func:`gpu_runtime.device.compile_in_background`) and return the threads;
    elsewhere do nothing. Call it before building the env and the model: on a new machine
    their first use waited for about 7 s of NVRTC, one module after another."""
    if not str(device).startswith("cuda"):
        return []
    cp = cupy_or_none()
    if cp is None:
        return []
    index = cuda_index(device)
    return compile_in_background(
        fused_path_kernels() if modules is None else modules,
        cp.cuda.runtime.getDevice() if index is None else index,
    )


def epsilon_greedy(
    greedy: th.Tensor,
    random_actions: th.Tensor,
    coins: th.Tensor,
    epsilon: float | th.Tensor,
    out: th.Tensor | None = None,
) -> th.Tensor:
    """``random_actions`` where an env's coin is below ``epsilon``, else ``greedy``.

    One coin per env: with actions ``[N, K]`` (a ``MultiDiscrete`` space, one entry per
    branch) an env that explores takes random levels in all K branches together, as SB3's DQN
    explores one whole action.

    :param greedy: int64 ``[N]`` or ``[N, K]``.
    :param random_actions: int64, ``greedy``'s shape.
    :param coins: float32 ``[N]`` in [0, 1).
    :param epsilon: the exploration rate, a float or a 0-d device tensor.
    :param out: written in place where given (a CUDA graph's static buffer).
    :return: int64, ``greedy``'s shape.
    """
    explore = coins < epsilon
    if greedy.dim() == 2:
        explore = explore[:, None]  # a view: no launch
    if out is None:
        return th.where(explore, random_actions, greedy)
    return th.where(explore, random_actions, greedy, out=out)


class FusedRollout:
    """Collects transitions for a :class:`~agents.GpuDQN` whose env is a CUDA TradingVectorEnv.

    :param model: the GpuDQN; its ``trading_env`` (CUDA), ``q_net``, ``replay_buffer`` and
        ``exploration_rate`` are used as they are at each call.
    :param seed: seed of the exploration RNG (a torch generator on the env's device).
    :param stats_interval: vector steps between host reads of finished-episode statistics.
    :param cuda_graph: replay greedy steps from a captured CUDA graph (one launch instead of
        dozens; the transitions are identical to eager steps).
    :param act_precision: matmul precision of the acting forward pass: ``"tf32"`` (default:
        tensor cores, about 1e-3 relative error in Q, which changes only near-tie argmaxes),
        ``"fp32"`` (exact float32) or ``"bf16"`` (bfloat16 copies of the weights, cast at each
        step; see :class:`~agents.rollouts.acting.GreedyActor`).
    """

    def __init__(
        self,
        model: Any,
        seed: int | None = None,
        stats_interval: int = 64,
        act_precision: Precision = "tf32",
        cuda_graph: bool = True,
    ) -> None:
        env = self._checked_env(model)
        self.model = model
        self.env = env
        self.device = th.device(env.device)
        self.num_envs = env.num_envs
        self.n_actions, self.branch_shape = self._action_layout(env.single_action_space)
        self.generator = th.Generator(device=self.device)
        self.generator.manual_seed(int(seed if seed is not None else np.random.randint(2**31 - 1)))  # noqa: NPY002
        self.stats_interval = int(stats_interval)
        self.act_precision: Precision = check_precision("act_precision", act_precision)
        self._actor: GreedyActor | None = None
        self.ring = EpisodeRing(self.device)
        self.obs: th.Tensor = env.observe()
        self._steps = 0
        self.cuda_graph = bool(cuda_graph)
        # Two eager steps make every buffer view before the capture; they stay made when the
        # graph is dropped, so a new capture needs no new warm-up.
        self.runner = GraphRunner("the rollout step", "stepping eagerly", warmup_steps=2)
        self._static: dict[str, Any] | None = None  # the graph's input and output tensors

    def _checked_env(self, model: Any) -> Any:
        """The env this rollout steps: ``model.trading_env``, checked (CUDA, torch arrays,
        SAME_STEP) and switched to its zero-copy outputs."""
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
        # This loop copies what it keeps (into the replay buffer) within the step, so it steps
        # the zero-copy double buffer; SB3VecEnv, sharing the env, copies its own arrays.
        env.copy_outputs = False
        return env

    @staticmethod
    def _action_layout(space: Any) -> tuple[int, tuple[int, ...]]:
        """``(actions per choice, shape of one env's action)``: ``(n, ())`` for ``Discrete(n)``."""
        return int(space.n), ()

    def _env_step(self, action: th.Tensor) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step the env: ``(obs, reward, terminated, truncated, info)`` with the info keys
        this loop reads (``final_obs``, ``_final_obs``, ``episode_return``,
        ``_episode_return``, ``episode_length``), every array a device tensor."""
        return self.env.step(action)

    def _draw(
        self,
        n: int,
        coins: bool = True,
        out_actions: th.Tensor | None = None,
        out_coins: th.Tensor | None = None,
    ) -> tuple[th.Tensor, th.Tensor | None]:
        """The exploration draws of one step: n random actions (``[n, *branch_shape]``), then
        n coins in [0, 1).

        Eager and graph steps both draw here, in this order, so they consume the generator
        alike and their transitions are identical.
        """
        actions = th.randint(
            0,
            self.n_actions,
            (n, *self.branch_shape),
            device=self.device,
            generator=self.generator,
            out=out_actions,
        )
        if not coins:
            return actions, None
        return actions, th.rand(n, device=self.device, generator=self.generator, out=out_coins)

    @th.no_grad()
    def act(self, obs: th.Tensor, epsilon: float, random_only: bool = False) -> th.Tensor:
        """Epsilon-greedy actions int64 ``[N, *branch_shape]``, one exploration coin per env
        (:func:`epsilon_greedy`)."""
        rand_actions, coins = self._draw(obs.shape[0], coins=not random_only)
        if random_only:
            return rand_actions
        assert coins is not None
        return epsilon_greedy(self._greedy(obs), rand_actions, coins, epsilon)

    def _greedy(self, obs: th.Tensor) -> th.Tensor:
        actor = self._actor
        if actor is None or not actor.serves(self.model.q_net):
            actor = self._actor = GreedyActor(self.model.q_net, self.act_precision)
        return actor(obs)

    @property
    def captured(self) -> bool:
        """Whether greedy steps replay a captured graph now."""
        return self.runner.graph is not None

    @property
    def stores_in_graph(self) -> bool:
        """Whether the captured graph writes the replay buffer too (``add_tensors_at``), so
        nothing runs between replays but host counters."""
        return self.captured and self._static is not None and "slot" in self._static

    def _record(self) -> th.cuda.CUDAGraph:
        """Record act + env step + episode ring of one step in a CUDA graph (the runner's
        ``record``).

        The graph reads the observation from a static buffer and writes the step's results to
        static buffers; the random draws (same generator, same order as :meth:`act`) are part
        of it where the torch version can register the generator with a graph, else they run
        before each replay. The replay-buffer write is recorded too when the buffer can store at
        a slot read on the device (``add_tensors_at``: the slot moves every replay); otherwise it runs
        after each replay (``add_tensors``, a dozen launches from the host).

        Capture runs with the env's device current: ``torch.cuda.graph`` makes its capture
        stream on the current device and the env's kernels launch on torch's current stream of
        *their* device. With device 0 current and the env on cuda:1, the env's launches went to
        cuda:1's legacy stream during a global capture: cudaErrorStreamCaptureInvalidated.
        """
        with th.cuda.device(self.device):
            return self._record_on_device()

    def _record_on_device(self) -> th.cuda.CUDAGraph:
        n, dev = self.num_envs, self.device
        g = {
            "obs": self.obs.clone(),
            "next_obs": th.empty_like(self.obs),
            "action": th.zeros((n, *self.branch_shape), dtype=th.int64, device=dev),
            "rand": th.zeros((n, *self.branch_shape), dtype=th.int64, device=dev),
            "coin": th.ones(n, device=dev),
            "eps": th.zeros((), device=dev),
        }
        buffer = self.model.replay_buffer
        store_at = getattr(buffer, "add_tensors_at", None)
        if store_at is not None and not getattr(buffer.tree, "capturable", False):
            store_at = None
        g["buffer"] = buffer
        g["step_args_version"] = self.env.backend.step_args_version
        if store_at is not None:
            g["slot"] = th.full((1,), int(buffer.pos), dtype=th.int64, device=dev)
        else:  # the step's observation, kept for add_tensors after the replay
            g["prev_obs"] = th.empty_like(self.obs)
        self.env.backend.restart_error_countdown()  # no host read of the error word in the capture
        warm_up_on_side_stream(lambda: self._greedy(g["obs"]), dev)  # the Q forward's cuBLAS
        graph = th.cuda.CUDAGraph()
        # The exploration draws go into the graph where torch can replay a generator's draws
        # (each replay advances it as the same draws run eagerly would: same numbers).
        register = getattr(graph, "register_generator_state", None)
        g["draws_inside"] = register is not None
        if register is not None:
            register(self.generator)
        with th.cuda.graph(graph), th.no_grad():
            if g["draws_inside"]:
                self._draw(n, out_actions=g["rand"], out_coins=g["coin"])
            greedy = self._greedy(g["obs"])
            # Written in place (out=): a copy after each would be one more node per step.
            epsilon_greedy(greedy, g["rand"], g["coin"], g["eps"], out=g["action"])
            new_obs, reward, terminated, truncated, info = self._env_step(g["action"])
            th.where(info["_final_obs"][:, None], info["final_obs"], new_obs, out=g["next_obs"])
            if store_at is not None:
                store_at(
                    g["slot"], g["obs"], g["next_obs"], g["action"], reward, terminated, truncated
                )
            else:
                g["prev_obs"].copy_(g["obs"])
            g["obs"].copy_(new_obs)
            self.ring.append(
                info["_episode_return"], info["episode_return"], info["episode_length"]
            )
        g["out"] = (reward, terminated, truncated)
        self._static = g
        return graph

    def release_graph(self) -> None:
        """Drop the captured step graph; the next greedy step captures a new one."""
        self.runner.release(warm_up_again=False)
        self._static = None

    def _graph_step(self, epsilon: float) -> None:
        g = self._static
        assert g is not None
        if self.obs is not g["obs"]:
            g["obs"].copy_(self.obs)
        if epsilon != g.get("eps_host"):
            g["eps"].fill_(float(epsilon))
            g["eps_host"] = epsilon
        buffer = g["buffer"]
        stored = "slot" in g
        if stored and g.get("slot_host") != buffer.pos:  # the host wrote a step in between
            g["slot"].fill_(int(buffer.pos))
        if not g["draws_inside"]:
            self._draw(self.num_envs, out_actions=g["rand"], out_coins=g["coin"])
        with th.cuda.device(self.device):  # replay on the env device's current stream
            self.runner.replay()
        if stored:
            buffer.advance_position()
            g["slot_host"] = buffer.pos
        else:
            reward, terminated, truncated = g["out"]
            buffer.add_tensors(
                g["prev_obs"], g["next_obs"], g["action"], reward, terminated, truncated
            )
        self.obs = g["obs"]

    def step(self, epsilon: float, random_only: bool = False) -> tuple[th.Tensor, th.Tensor] | None:
        """One vector step: act, step the env, store.

        With ``cuda_graph=True``, once two eager steps have made every buffer view, greedy
        steps replay a captured graph (returns None then); otherwise returns (rewards, done).
        The graph is captured again for another replay buffer, and when the env's step launch
        arguments changed (``step_args_version``: the curiosity bonus turned on or off).
        """
        if self.cuda_graph and not random_only:
            g = self._static
            if g is not None and (
                g["buffer"] is not self.model.replay_buffer
                # The step launch's arguments changed since the capture (the curiosity bonus
                # turned on or off): the graph would replay the old ones. A run that captured
                # before its first curiosity round never got the bonus in its rewards, and one
                # resumed from a checkpoint (bonus on at capture) differed from it.
                or g["step_args_version"] != self.env.backend.step_args_version
            ):
                self.release_graph()  # recorded with stale storage or arguments: capture anew
            if self.runner.ready(self._record):
                self._graph_step(epsilon)
                return None
        return self.runner.run_eager(lambda: self._eager_step(epsilon, random_only))

    def _eager_step(self, epsilon: float, random_only: bool) -> tuple[th.Tensor, th.Tensor]:
        obs = self.obs
        action = self.act(obs, epsilon, random_only)
        new_obs, reward, terminated, truncated, info = self._env_step(action)
        done = terminated | truncated
        # A host-flag env (device="cpu") reports final_obs only on steps where an episode ended.
        next_obs = (
            th.where(done[:, None], info["final_obs"], new_obs) if "final_obs" in info else new_obs
        )
        self.model.replay_buffer.add_tensors(obs, next_obs, action, reward, terminated, truncated)
        self.ring.append(done, info["episode_return"], info["episode_length"])
        self.obs = new_obs
        return reward, done

    def drain_episode_stats(self) -> int:
        """Move finished episodes to the model's ``ep_info_buffer``; returns how many (syncs)."""
        buffer = self.model.ep_info_buffer
        n, infos = self.ring.drain(keep=None if buffer is None else buffer.maxlen)
        # Graph replays bypass the env's own periodic check for invalid actions.
        self.env.backend.check_errors()
        if buffer is not None:
            buffer.extend(infos)
        return n

    def collect(
        self,
        n_steps: int,
        callback: Any,
        learning_starts: int,
    ) -> tuple[int, int, bool]:
        """Run ``n_steps`` vector steps, advancing ``num_timesteps`` and the callbacks as SB3 does.

        Returns ``(steps collected, episodes whose statistics reached the host, continue)``.
        """
        model = self.model
        model.set_training_mode(False)
        n_episodes = 0
        for k in range(n_steps):
            random_only = model.num_timesteps < learning_starts
            self.step(model.exploration_rate, random_only=random_only)
            model.num_timesteps += self.num_envs
            self._steps += 1
            callback.update_locals({"self": model, "num_collected_steps": self._steps})
            if not callback.on_step():
                return k + 1, n_episodes, False
            model.after_rollout_step()
            if self._steps % self.stats_interval == 0:
                n_episodes += self.drain_episode_stats()
        return n_steps, n_episodes, True
