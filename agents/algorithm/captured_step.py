"""The captured training step of :class:`~agents.GpuDQN`: one CUDA graph replay per gradient step.

On a CUDA device, with a :class:`~agents.PrioritizedReplayBuffer` (CUDA tree) and SB3's Adam, one
gradient step is recorded once in a CUDA graph and replayed; nothing in it waits for the host.
The whole step, in order::

    idx, w  = tree.sample_into(B, calls, beta)      # counter and beta read from device scalars
    o, o', a, r, done = the stored fields at idx    # done: terminations only
    q       = q_net(o)[a]                           # the one forward with a backward
    q_next  = q_net_target(o')                      # no gradient
    a'      = argmax q_net(o')  (double_q)          # no gradient; else max over q_next
    y       = r + (1 - done) * gamma * q_next[a']
    loss    = mean(w * smooth_l1(q, y))             # torch.compile'd, with its backward
    backward; [all-reduce of the flat gradients: distributed only]
    clip_grad_norm_(max_grad_norm); Adam(fused, capturable, lr from a device scalar)
    tree.update(idx, |y - q|)                       # validated on the device
    error   = max(error, tree status)               # first rejected position, or -1
    sums   += (loss, mean |y - q|)

This is :meth:`GpuDQN.train`'s eager loop, step for step, with the same target and loss
(:mod:`agents.algorithm.dqn_loss`). With ``compile=True`` (the default) the gathers, forwards, target and
loss run through ``torch.compile``, which fuses the elementwise work and reductions around the
matrix products into a few generated kernels (forward and backward); the step's GPU time fell
from 0.56 to 0.35 ms at batch 4,096 on an H200 (docs/PERFORMANCE.md). The learning rate and
beta enter as
device scalars filled before a replay when their host values change, so one graph serves the
whole run; the target network is updated by SB3's ``_on_step`` schedule, between train calls,
as on the eager path. Loss, mean TD error and the error flag reach the host every
``stats_interval`` train calls (and at the end of ``learn``): a rejected priority update (a NaN or
negative TD error) raises there, naming the first bad position.

Matrix products run in ``precision``: ``"bf16"`` (the three forwards under bfloat16 autocast;
target, loss and TD errors stay float32), ``"tf32"`` (tensor cores, as the fused rollout acts)
or ``"fp32"`` (exact float32, what the eager path does under torch's defaults); the choice is
fixed when the step is captured. ``GpuDQN``'s default, ``"auto"`` (:func:`resolve_precision`),
is bf16 where the GPU computes it natively: it measured faster (0.26 against 0.30 ms per step
at batch 4,096 on an H200) and the quickstart's agent learned as well with it
(docs/PERFORMANCE.md).

The first ``warmup_steps`` gradient steps run the same code without a graph (on a side stream,
as capture requires: cuBLAS workspaces, Adam state); the next one is captured and replayed.

The optimizer is replaced by an equivalent ``torch.optim.Adam(fused=True, capturable=True)``
with the same state (its ``lr`` a device tensor); :func:`plain_optimizer_state` turns its state
dict back into the plain Adam's for saving.
"""

from __future__ import annotations

import contextlib
import types
import warnings
from typing import Any

import torch as th
from gymnasium import spaces

from agents.algorithm.dqn_loss import td_target, weighted_td_loss
from agents.algorithm.policies import pairable, paired_q_values

__all__ = ["CapturedTrainStep", "captured_train_unsupported", "plain_optimizer_state"]

PRECISIONS = ("tf32", "fp32", "bf16")


def resolve_precision(precision: str, device: th.device | str) -> str:
    """``precision``, with ``"auto"`` made ``"bf16"`` on a GPU that computes bfloat16 natively
    (compute capability 8.0 or later: A100, H100, H200, RTX 30xx and later) and ``"tf32"``
    elsewhere (before Ampere, tf32 products are plain float32 ones)."""
    if precision != "auto":
        return precision
    major, _ = th.cuda.get_device_capability(th.device(device))
    return "bf16" if major >= 8 else "tf32"


# Compile gradient clipping and Adam with the loss (a foreach Adam then, not the fused one):
# 0.365 -> 0.339 ms per step at batch 4,096 on an H200 (docs/PERFORMANCE.md).
COMPILE_UPDATE = True
# The double-DQN target's two forwards on o' as one (agents.algorithm.policies.paired_q_values). Off:
# measured slower on an H200 at batch 4,096 (0.320 against 0.301 ms per step; the weights
# stacked every step cost more than the launches saved).
PAIRED_FORWARD = False
STATS_INTERVAL = 64  # train calls between host reads of the statistics and the error flag
WARMUP_STEPS = 2  # gradient steps run without a graph before the capture
RECOMPILE_RETRIES = 2  # captures abandoned for a recompile, each followed by one more warm-up step


def _no_recompile() -> Any:
    """``torch.compiler.set_stance("fail_on_recompile")`` where the torch version has it."""
    set_stance = getattr(th.compiler, "set_stance", None)
    if set_stance is None:
        return contextlib.nullcontext()
    return set_stance("fail_on_recompile")


def _is_recompile_error(err: BaseException) -> bool:
    return "fail_on_recompile" in str(err) or "Detected recompile" in str(err)


# Adam hyperparameters carried over to the capturable optimizer (where the torch version has them).
_ADAM_KEYS = ("betas", "eps", "weight_decay", "amsgrad", "maximize", "decoupled_weight_decay")


def captured_train_unsupported(model: Any) -> str | None:
    """Why ``model.train`` cannot run as a captured step, or ``None`` when it can.

    Needs: a CUDA device, a :class:`~agents.PrioritizedReplayBuffer` with its CUDA tree, a flat
    ``Box`` observation space and a ``Discrete`` action space, no ``VecNormalize``, SB3's
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
    if not isinstance(model.action_space, spaces.Discrete):
        return "the action space is not Discrete"
    if model._vec_normalize_env is not None:
        return "the env is wrapped in VecNormalize (its normalisation runs on the host)"
    optimizer = model.policy.optimizer
    if type(optimizer) is not th.optim.Adam or len(optimizer.param_groups) != 1:
        return "the optimizer is not torch.optim.Adam with one parameter group"
    if getattr(model, "n_steps", 1) != 1:
        return "n-step returns are not captured"
    return None


def _with_own_code(fn: Any) -> Any:
    """``fn`` (a function or a bound method) with a copy of its code object.

    Dynamo keys its cache of compiled code, and the limit of 8 recompilations, on the code
    object. Every train step compiles the same ``_loss`` method guarded on its own model, so
    the ninth model in a process (a sweep, a test session, a benchmark) hit the limit and ran
    its loss eagerly inside the graph, silently (in one benchmark run, ``GpuDQN.learn`` of the
    ninth model at 5.5e6 env-steps/s where the same settings gave 7.6e6 before).
    """
    func = getattr(fn, "__func__", fn)
    copy = types.FunctionType(
        func.__code__.replace(),
        func.__globals__,
        func.__name__,
        func.__defaults__,
        func.__closure__,
    )
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__qualname__ = func.__qualname__
    owner = getattr(fn, "__self__", None)
    return types.MethodType(copy, owner) if owner is not None else copy


class CompiledOrEager:
    """``fn`` through ``torch.compile``, compiled at its first call; when that call fails (no
    Triton, an unsupported torch), a warning and ``fn`` itself from then on: same math, eager.

    :param fn: the function.
    :param what: its name in the warning.
    """

    def __init__(self, fn: Any, what: str) -> None:
        self.fn = _with_own_code(fn)
        self.what = what
        self.failed = False
        self._call: Any = None

    def __call__(self, *args: Any) -> Any:
        if self._call is None:
            self._call = th.compile(self.fn, dynamic=False)
            try:
                return self._call(*args)
            except Exception as err:
                warnings.warn(
                    f"torch.compile of the train step's {self.what} failed, running it eagerly: "
                    f"{err}",
                    stacklevel=5,
                )
                self._call = self.fn
                self.failed = True
        return self._call(*args)


def _capturable_adam(optimizer: th.optim.Adam, lr: th.Tensor, fused: bool = True) -> th.optim.Adam:
    """An Adam with ``optimizer``'s parameters, hyperparameters and state; capturable, fused
    (or foreach), its learning rate read from the device scalar ``lr``."""
    (group,) = optimizer.param_groups
    kwargs = {k: group[k] for k in _ADAM_KEYS if k in group}
    if fused:
        kwargs["fused"] = True
    else:
        kwargs["foreach"] = True
    new = th.optim.Adam(group["params"], lr=lr, capturable=True, **kwargs)
    for p in group["params"]:
        state = optimizer.state.get(p)
        if state:
            new.state[p] = {
                k: (v.to(device=p.device, dtype=th.float32) if k == "step" else v)
                for k, v in state.items()
            }
    return new


def plain_optimizer_state(state_dict: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """The state dict of the capturable Adam as the plain Adam it replaced would give it.

    ``lr`` becomes a float, ``fused``/``capturable``/``foreach`` take the values in ``flags``
    (the replaced optimizer's), and when that one kept ``step`` on the host (not capturable, not
    fused), each ``step`` becomes a CPU float32 scalar. The live optimizer is not modified.

    :param state_dict: ``optimizer.state_dict()`` of the capturable Adam.
    :param flags: ``{"fused": ..., "capturable": ..., "foreach": ...}`` of the plain Adam.
    :return: A new state dict (tensors not converted are shared with the input).
    """
    groups = []
    for group in state_dict["param_groups"]:
        group = dict(group)
        lr = group["lr"]
        group["lr"] = float(lr.item()) if isinstance(lr, th.Tensor) else float(lr)
        group.update(flags)
        groups.append(group)
    host_step = not (flags.get("capturable") or flags.get("fused"))
    state = {}
    for key, entry in state_dict["state"].items():
        entry = dict(entry)
        step = entry.get("step")
        if host_step and isinstance(step, th.Tensor):
            entry["step"] = th.tensor(float(step.item()), dtype=th.float32)
        state[key] = entry
    return {"state": state, "param_groups": groups}


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
        precision: str = "bf16",
        plain_flags: dict[str, Any] | None = None,
        compile: bool = True,
        compile_update: bool | None = None,
    ) -> None:
        if compile_update is None:
            compile_update = COMPILE_UPDATE
        reason = captured_train_unsupported(model)
        if reason is not None:
            raise ValueError(f"the captured train step does not apply: {reason}")
        if precision not in PRECISIONS:
            raise ValueError(
                f"precision = {precision!r} is invalid: allowed is 'tf32', 'fp32' or 'bf16'"
            )
        self.precision = precision
        self.compile = bool(compile)
        self.compile_update = bool(self.compile and compile_update)
        # Online and target network on o' as one chain of batched products (double DQN).
        self.paired = PAIRED_FORWARD and pairable(model.q_net, model.q_net_target)
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
        self.optimizer = _capturable_adam(old, self.lr, fused=not self.compile_update)
        model.policy.optimizer = self.optimizer
        self.params = list(self.optimizer.param_groups[0]["params"])
        self.beta = th.zeros((), dtype=th.float64, device=dev)
        self.calls = th.zeros((), dtype=th.int64, device=dev)
        self.error = th.full((1,), -1, dtype=th.int64, device=dev)
        self.sums = th.zeros(2, dtype=th.float32, device=dev)
        self._status = th.from_dlpack(self.tree._status)  # int64 [1]: -1 or first bad position
        self._lr_host: float | None = None
        self._beta_host: float | None = None
        self._calls_host: int | None = None
        self.warmup_steps = int(warmup_steps)
        self.stats_interval = int(stats_interval)
        self.graph: th.cuda.CUDAGraph | None = None
        self._side_stream: th.cuda.Stream | None = None
        self.graph_failed = False
        self._recompile_retries = 0
        self.batch_size = 0
        self._warm = 0
        self._unread_steps = 0
        self._calls_since_read = 0
        self._stats_read = False
        self.last_loss = float("nan")
        self.last_td = float("nan")
        buf = self.buffer
        flat = buf.buffer_size * buf.n_envs
        self._obs = buf.observations.reshape(flat, *buf.obs_shape)
        self._next_obs = buf.next_observations.reshape(flat, *buf.obs_shape)
        self._actions = buf.actions.reshape(flat, buf.action_dim)
        self._rewards = buf.rewards.reshape(flat)
        self._dones = buf.dones.reshape(flat)
        self._timeouts = buf.timeouts.reshape(flat) if buf.handle_timeout_termination else None

    def is_current(self) -> bool:
        """Whether the model still trains with what this step captured (optimizer, buffer)."""
        m = self.model
        return (
            m.policy.optimizer is self.optimizer
            and self.optimizer.param_groups[0]["lr"] is self.lr
            and m.replay_buffer is self.buffer
            and self.buffer.tree is self.tree
        )

    def _prepare(self, batch_size: int) -> None:
        b = int(batch_size)
        dev = self.device
        self.batch_size = b
        self.idx = th.zeros(b, dtype=th.int64, device=dev)
        self.weights = th.zeros(b, dtype=th.float32, device=dev)
        self.graph = None
        self._warm = 0

    # ------------------------------------------------------------------ the step
    def _body(self) -> None:
        """One gradient step in the step's precision (the GEMMs are chosen when captured)."""
        previous = th.backends.cuda.matmul.allow_tf32
        th.backends.cuda.matmul.allow_tf32 = self.precision != "fp32"
        try:
            self._step()
        finally:
            th.backends.cuda.matmul.allow_tf32 = previous

    def _loss(self, idx: th.Tensor, weights: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """``(loss, |td|)`` of the sampled rows ``idx`` with IS weights ``weights``: the gathers,
        the forwards, the double-DQN target and the weighted loss (what ``compile`` fuses)."""
        m = self.model
        obs = self._obs.index_select(0, idx)
        next_obs = self._next_obs.index_select(0, idx)
        actions = self._actions.index_select(0, idx).long()
        rewards = self._rewards.index_select(0, idx).reshape(-1, 1)
        dones = self._dones.index_select(0, idx)
        if self._timeouts is not None:
            dones = dones * (1.0 - self._timeouts.index_select(0, idx))
        dones = dones.reshape(-1, 1)
        with th.autocast("cuda", dtype=th.bfloat16, enabled=self.precision == "bf16"):
            q_all = m.q_net(obs)
            with th.no_grad():  # no backward through the next-state forwards
                if m.double_q and self.paired:
                    q_next_online, q_next_target = paired_q_values(
                        m.q_net, m.q_net_target, next_obs
                    )
                else:
                    q_next_online = m.q_net(next_obs) if m.double_q else None
                    q_next_target = m.q_net_target(next_obs)
        # Target, loss and TD errors in float32 whatever the products ran in.
        q = th.gather(q_all.float(), 1, actions)
        q_next_target = q_next_target.float()
        if q_next_online is not None:
            q_next_online = q_next_online.float()
        target = td_target(rewards, dones, m.gamma, q_next_target, q_next_online)
        return weighted_td_loss(q, target, weights)

    def _update(self) -> None:
        """Gradient clipping and the Adam step."""
        th.nn.utils.clip_grad_norm_(self.params, self.model.max_grad_norm)
        self.optimizer.step()

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

    def _run_uncaptured(self) -> None:
        dev = self.device
        # One side stream for every uncaptured step: the autograd engine keeps each parameter's
        # gradient accumulator on the stream it first ran on, and a new stream per step made
        # it warn of a mismatch that can break the capture.
        side = self._side_stream
        if side is None:
            side = self._side_stream = th.cuda.Stream(device=dev)
        side.wait_stream(th.cuda.current_stream(dev))
        with th.cuda.stream(side):
            self._body()
        th.cuda.current_stream(dev).wait_stream(side)

    def _capture(self) -> None:
        graph = th.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)
        seq = self.tree._update_seq
        try:
            # A compiled part whose guards fail here would recompile inside the capture, and
            # building guards may read a device scalar (the optimizer's repr formats its lr
            # tensor): cudaErrorStreamCaptureUnsupported. Under this stance it raises first,
            # before any CUDA call, and the step recompiles in one more uncaptured step.
            with _no_recompile(), th.cuda.graph(graph):
                self._body()
        except RuntimeError as err:  # a torch/CuPy combination that cannot capture
            self.tree._update_seq = seq
            if _is_recompile_error(err) and self._recompile_retries < RECOMPILE_RETRIES:
                self._recompile_retries += 1
                self._warm = self.warmup_steps - 1
                return
            warnings.warn(
                f"CUDA graph capture of the train step failed, running it without a graph: {err}",
                stacklevel=3,
            )
            self.graph_failed = True
            return
        self.graph = graph

    def release_graph(self) -> None:
        """Drop the captured graph (and its memory pool); the next gradient step captures anew
        after the warm-up steps."""
        self.graph = None
        self._warm = 0

    def _one_step(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        elif self.graph_failed or self._warm < self.warmup_steps:
            self._warm += 1
            self._run_uncaptured()
        else:
            self._capture()
            if self.graph is not None:
                self.graph.replay()
            else:
                self._run_uncaptured()

    # ------------------------------------------------------------------ the call
    def train(self, gradient_steps: int, batch_size: int) -> None:
        """``gradient_steps`` captured gradient steps; logs what :meth:`GpuDQN.train` logs.

        ``train/loss`` and ``train/mean_td_error`` are the means over the gradient steps up to
        the latest host read (every ``stats_interval`` calls).
        """
        m = self.model
        if int(batch_size) != self.batch_size:
            self._prepare(batch_size)
        progress = float(m._current_progress_remaining)
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
            self._one_step()
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
