"""The captured training step of :class:`~agents.GpuDQN`: one CUDA graph replay per gradient step.

On a CUDA device, with a :class:`~agents.PrioritizedReplayBuffer` (CUDA tree) and SB3's Adam, one
gradient step is recorded once in a CUDA graph and replayed; nothing in it waits for the host.
:meth:`CapturedTrainStep.train` is SB3's ``DQN.train`` with prioritized replay, step for step::

    idx, w  = tree.sample_into(B, calls, beta)      # counter and beta read from device scalars
    o, a, o', done, r = storage.gather(idx)         # done: terminations only
    q       = q_net(o)[a]                           # the one forward with a backward
                                                    # (branching: Q_d(o, a_d) of each branch)
    q_next  = q_net_target(o')                      # no gradient
    a'      = argmax q_net(o')  (double_q)          # no gradient; else max over q_next
    y       = r + (1 - done) * gamma * q_next[a']   # branching: the branches' mean
    loss    = mean(w * smooth_l1(q, y))
    backward; [all-reduce of the flat gradients: distributed only]
    clip_grad_norm_(max_grad_norm); Adam step       # capturable, lr from a device scalar
    tree.update(idx, |y - q|)                       # validated on the device
    error   = max(error, tree status)               # first rejected position, or -1
    sums   += (loss, mean |y - q|)

The target and loss are :mod:`agents.algorithm.dqn_loss`'s, as on the eager path, and the gather
is :class:`~agents.replay.batch.FlatStorage`'s, as in the buffer's ``sample``. What differs is
around the maths, so that one graph serves the whole run:

- the learning rate and beta enter as device scalars, filled before a replay when their host
  values change; the Adam is a capturable copy of SB3's (:mod:`agents.algorithm.capturable_adam`);
- loss, mean TD error and the error flag reach the host every ``stats_interval`` train calls
  (and at the end of ``learn``): a rejected priority update (a NaN or negative TD error)
  raises there, naming the first bad position;
- with ``compile=True`` (the default) the gathers, forwards, target and loss run through
  ``torch.compile`` (:mod:`agents.algorithm.compiled_or_eager`), which fuses the elementwise work
  and reductions around the matrix products into a few generated kernels, forward and backward;
  with ``compile_update`` gradient clipping and a foreach Adam too (the fused Adam it cannot
  compile). docs/PERFORMANCE.md has the step's times;
- the warm-up, capture and fallback are :class:`~gpu_runtime.cuda_graph.GraphRunner`'s: the
  first ``warmup_steps`` gradient steps run the same code without a graph, on a side stream
  (cuBLAS workspaces, Adam state and compiled kernels must exist before the capture).

Matrix products run in ``precision`` (:mod:`gpu_runtime.precision`): ``"bf16"`` (the three
forwards under bfloat16 autocast; target, loss and TD errors stay float32), ``"tf32"`` or
``"fp32"`` (exact float32, what the eager path does under torch's defaults); the choice is
fixed when the step is captured. The target network is updated by SB3's ``_on_step`` schedule,
between train calls, as on the eager path.
"""

from __future__ import annotations

from typing import Any

import torch as th
from gymnasium import spaces

from agents.algorithm.capturable_adam import adam_update, capturable_adam
from agents.algorithm.compiled_or_eager import CompiledOrEager
from agents.algorithm.dqn_loss import taken_q, td_target, weighted_td_loss
from agents.algorithm.policies import BranchingDuelingQNetwork, InstrumentEncoderQNetwork
from agents.replay.batch import FlatStorage
from gpu_runtime.cuda_graph import GraphRunner
from gpu_runtime.precision import Precision, check_precision, tf32_matmuls

__all__ = ["CapturedTrainStep", "captured_train_unsupported"]

# Compile gradient clipping and Adam with the loss (a foreach Adam then, not the fused one):
# fewer launches per step (docs/PERFORMANCE.md).
COMPILE_UPDATE = True
STATS_INTERVAL = 64  # train calls between host reads of the statistics and the error flag
WARMUP_STEPS = 2  # gradient steps run without a graph before the capture
RECOMPILE_RETRIES = 2  # captures abandoned for a recompile, each followed by one more warm-up step


def captured_train_unsupported(model: Any) -> str | None:
    """Why ``model.train`` cannot run as a captured step, or ``None`` when it can.

    Needs: a CUDA device, a :class:`~agents.PrioritizedReplayBuffer` with its CUDA tree, a flat
    ``Box`` observation space and a ``Discrete`` action space (or a ``MultiDiscrete`` one with
    the branching dueling network), no ``VecNormalize``, SB3's
    ``torch.optim.Adam`` with one parameter group, one-step returns.
    """
    from agents.replay.prioritized_buffer import PrioritizedReplayBuffer

    if model.device.type != "cuda":
        return f"the model is on {model.device}, not a CUDA device"
    buffer = model.replay_buffer
    if not isinstance(buffer, PrioritizedReplayBuffer) or not buffer.tree.capturable:
        return "the replay buffer is not a PrioritizedReplayBuffer on a CUDA device"
    if not isinstance(model.observation_space, spaces.Box):
        return "the observation space is not a Box"
    if not isinstance(model.action_space, spaces.Discrete) and not (
        isinstance(model.action_space, spaces.MultiDiscrete)
        and isinstance(model.q_net, BranchingDuelingQNetwork | InstrumentEncoderQNetwork)
    ):
        return "the action space is neither Discrete nor MultiDiscrete with a branching network"
    if model.get_vec_normalize_env() is not None:
        return "the env is wrapped in VecNormalize (its normalisation runs on the host)"
    optimizer = model.policy.optimizer
    if type(optimizer) is not th.optim.Adam or len(optimizer.param_groups) != 1:
        return "the optimizer is not torch.optim.Adam with one parameter group"
    if getattr(model, "n_steps", 1) != 1:
        return "n-step returns are not captured"
    return None


class CapturedTrainStep:
    """Gradient steps of a :class:`~agents.GpuDQN` as CUDA graph replays (see the module doc).

    :param model: the GpuDQN (:func:`captured_train_unsupported` must return ``None``); its
        policy's optimizer is replaced by the capturable Adam.
    :param warmup_steps: gradient steps run without a graph before the capture.
    :param stats_interval: train calls between host reads of the statistics and error flag.
    :param precision: ``"tf32"``, ``"fp32"`` or ``"bf16"`` matrix products.
    :param plain_flags: ``fused``/``capturable``/``foreach`` of the plain Adam to save as
        (default: those of the model's optimizer now; pass the previous step's when it replaces
        one whose optimizer is already the capturable Adam).
    :param compile: run the loss (gathers, forwards, target, loss and its backward) through
        ``torch.compile``; it falls back to the eager loss, with a warning, where it cannot.
    :param compile_update: with ``compile``, also compile gradient clipping and the (foreach)
        Adam step; ``None``: :data:`COMPILE_UPDATE`.
    """

    def __init__(
        self,
        model: Any,
        warmup_steps: int = WARMUP_STEPS,
        stats_interval: int = STATS_INTERVAL,
        precision: Precision = "bf16",
        plain_flags: dict[str, Any] | None = None,
        compile: bool = True,
        compile_update: bool | None = None,
    ) -> None:
        if compile_update is None:
            compile_update = COMPILE_UPDATE
        reason = captured_train_unsupported(model)
        if reason is not None:
            raise ValueError(f"the captured train step does not apply: {reason}")
        self.precision = check_precision("precision", precision)
        self.compile = bool(compile)
        self.compile_update = bool(self.compile and compile_update)
        # The loss (gathers, forwards, target, loss and its backward) and clip + Adam, each
        # compiled at its first call (the first warm-up step), eager where that fails.
        self._compiled_loss = CompiledOrEager(self._loss, "loss")
        self._compiled_update = CompiledOrEager(self._update, "clip and Adam step")
        self.model = model
        self.buffer = model.replay_buffer
        self.tree = self.buffer.tree
        self.device = th.device(model.device)
        dev = self.device
        old = model.policy.optimizer
        self.plain_flags = plain_flags or {
            k: old.param_groups[0].get(k) for k in ("fused", "capturable", "foreach")
        }
        self.lr = th.zeros((), dtype=th.float32, device=dev)
        # torch.compile turns the foreach Adam into generated kernels; the fused one it cannot.
        self.optimizer = capturable_adam(old, self.lr, fused=not self.compile_update)
        model.policy.optimizer = self.optimizer
        self._adam_update = adam_update(self.optimizer)
        self.params = list(self.optimizer.param_groups[0]["params"])
        self.beta = th.zeros((), dtype=th.float64, device=dev)
        self.calls = th.zeros((), dtype=th.int64, device=dev)
        self.error = th.full((1,), -1, dtype=th.int64, device=dev)
        self.sums = th.zeros(2, dtype=th.float32, device=dev)
        self._status = self.tree.status_tensor()  # int64 [1]: -1 or first bad position
        self._lr_host: float | None = None
        self._beta_host: float | None = None
        self._calls_host: int | None = None
        self.stats_interval = int(stats_interval)
        self.runner = GraphRunner(
            "the train step",
            "running it without a graph",
            warmup_steps,
            recompile_retries=RECOMPILE_RETRIES,
            device=dev,
        )
        self.batch_size = 0
        self._unread_steps = 0
        self._calls_since_read = 0
        self._stats_read = False
        self.last_loss = float("nan")
        self.last_td = float("nan")
        self.storage = FlatStorage(self.buffer)

    @property
    def graph(self) -> th.cuda.CUDAGraph | None:
        """The captured gradient step (``None`` before the capture, or after a failed one)."""
        return self.runner.graph

    @property
    def graph_failed(self) -> bool:
        """Whether the capture failed: every gradient step then runs without a graph."""
        return self.runner.failed

    def is_current(self) -> bool:
        """Whether the model still trains with what this step captured (optimizer, buffer)."""
        m = self.model
        return (
            m.policy.optimizer is self.optimizer
            and self.optimizer.param_groups[0]["lr"] is self.lr
            and m.replay_buffer is self.buffer
            and self.buffer.tree is self.tree
        )

    # -- the call: SB3's DQN.train -----------------------------------------------------------------
    def train(self, gradient_steps: int, batch_size: int) -> None:
        """``gradient_steps`` captured gradient steps; logs what :meth:`GpuDQN.train` logs.

        ``train/loss`` and ``train/mean_td_error`` are the means over the gradient steps up to
        the latest host read (every ``stats_interval`` calls).
        """
        m = self.model
        if int(batch_size) != self.batch_size:
            self._prepare(batch_size)
        progress = float(m.progress_remaining)
        lr = float(m.lr_schedule(progress))
        m.logger.record("train/learning_rate", lr)
        if lr != self._lr_host:
            self.lr.fill_(lr)
            self._lr_host = lr
        buf = self.buffer
        buf.set_progress(min(1.0, max(0.0, progress)))
        beta = buf.beta
        if beta != self._beta_host:
            self.beta.fill_(beta)
            self._beta_host = beta
        tree = self.tree
        if tree.sample_calls != self._calls_host:  # sampled elsewhere (curiosity, user code)
            self.calls.fill_(tree.sample_calls)
        for _ in range(gradient_steps):
            self._gradient_step()
            tree.sample_calls += 1
        self._calls_host = tree.sample_calls
        self._unread_steps += gradient_steps
        self._calls_since_read += 1
        if not self._stats_read or self._calls_since_read >= self.stats_interval:
            self.read_stats()
        if self._stats_read:
            m.logger.record("train/loss", self.last_loss)
            m.logger.record("train/mean_td_error", self.last_td)
        m.logger.record("train/per_beta", beta)

    def _gradient_step(self) -> None:
        if self.runner.ready(self._record):
            self.runner.replay()
        else:
            self.runner.run_eager_on_side_stream(self._body)

    # -- one gradient step (what the graph records) ------------------------------------------------
    def _body(self) -> None:
        """One gradient step in the step's precision (the GEMMs are chosen when captured)."""
        with tf32_matmuls(self.precision != "fp32"):
            self._step()

    def _step(self) -> None:
        """One gradient step: what the graph records (and what the warm-up steps run)."""
        m = self.model
        b = self.batch_size
        idx = self.idx
        self.tree.sample_into(
            b,
            self.calls.data_ptr(),
            self.beta.data_ptr(),
            idx.data_ptr(),
            self.weights.data_ptr(),
        )
        self.calls.add_(1)
        if self.compile:
            loss, td = self._compiled_loss(idx, self.weights)
            self.compile = not self._compiled_loss.failed
        else:
            loss, td = self._loss(idx, self.weights)

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if m.data_parallel is not None:  # one NCCL all-reduce of the flat gradients, captured
            m.data_parallel.all_reduce_gradients(self.optimizer)
        if self.compile_update:
            self._compiled_update()
        else:
            self._update()

        buf = self.buffer
        # The sampled indices are leaves of non-zero priority, so filled slots; what the device
        # check guards here are the TD errors (NaN, inf).
        self.tree.update(
            idx,
            td,
            alpha=buf.alpha,
            epsilon=buf.epsilon,
            n_valid=self.tree.capacity,
            name="td_errors",
            check=False,
        )
        th.maximum(self.error, self._status, out=self.error)
        self.sums[0].add_(loss.detach())
        self.sums[1].add_(td.mean())

    def _loss(self, idx: th.Tensor, weights: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """``(loss, |td|)`` of the sampled rows ``idx`` with IS weights ``weights``: the gathers,
        the forwards, the double-DQN target and the weighted loss (what ``compile`` fuses)."""
        m = self.model
        obs, actions, next_obs, dones, rewards = self.storage.gather(idx)
        actions = actions.long()
        with th.autocast("cuda", dtype=th.bfloat16, enabled=self.precision == "bf16"):
            q_all = m.q_net(obs)
            with th.no_grad():  # no backward through the next-state forwards
                q_next_online = m.q_net(next_obs) if m.double_q else None
                q_next_target = m.q_net_target(next_obs)
        # Target, loss and TD errors in float32 whatever the products ran in.
        q = taken_q(q_all.float(), actions)
        q_next_target = q_next_target.float()
        if q_next_online is not None:
            q_next_online = q_next_online.float()
        target = td_target(rewards * m.reward_scale, dones, m.gamma, q_next_target, q_next_online)
        return weighted_td_loss(q, target, weights)

    def _update(self) -> None:
        """Gradient clipping and the Adam step."""
        th.nn.utils.clip_grad_norm_(self.params, self.model.max_grad_norm)
        with th.no_grad():
            self._adam_update()

    # -- statistics --------------------------------------------------------------------------------
    def read_stats(self) -> None:
        """Bring the statistics and the error flag to the host (one sync); raise on an error.

        :raises ValueError: when a priority update since the last read was rejected (a TD error
            that is NaN, infinite or negative): that batch kept its old priorities.
        """
        self._calls_since_read = 0
        if self._unread_steps == 0:
            return
        host = th.cat([self.sums.double(), self.error.double()]).cpu()
        n = self._unread_steps
        self._unread_steps = 0
        self.sums.zero_()
        self.last_loss = float(host[0]) / n
        self.last_td = float(host[1]) / n
        self._stats_read = True
        bad = int(host[2])
        if bad >= 0:
            self.error.fill_(-1)
            raise ValueError(
                f"td_errors[{bad}] of a captured train step was NaN, infinite or negative "
                f"(within the last {n} gradient steps): td_errors must be finite and >= 0; the "
                "priority update of that batch was rejected and its priorities are unchanged "
                "(a diverging loss: lower the learning rate or scale the rewards)"
            )

    # -- the graph ---------------------------------------------------------------------------------
    def _prepare(self, batch_size: int) -> None:
        b = int(batch_size)
        dev = self.device
        self.batch_size = b
        self.idx = th.zeros(b, dtype=th.int64, device=dev)
        self.weights = th.zeros(b, dtype=th.float32, device=dev)
        self.runner.release()  # recorded with the old batch's tensors

    def _record(self) -> th.cuda.CUDAGraph:
        """Capture one gradient step (the runner's ``record``)."""
        graph = th.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)
        # A capture that fails never ran its tree update: the tree's numbering goes back.
        with self.tree.updates_forgotten_on_error(), th.cuda.graph(graph):
            self._body()
        return graph

    def release_graph(self) -> None:
        """Drop the captured graph (and its memory pool); the next gradient step captures anew
        after the warm-up steps."""
        self.runner.release()
