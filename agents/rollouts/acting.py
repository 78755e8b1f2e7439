"""The fused rollout's greedy action: ``argmax_a Q(s, a)`` for every env, in as few launches as
the network allows.

For a :class:`~agents.algorithm.policies.DuelingQNetwork`, ``Q(s, .) = V(s) + A(s, .) - mean A(s, .)``
differs from the advantage ``A(s, .)`` by one constant per state, so the greedy action is the
argmax of the advantage head: acting runs the shared trunk and the advantage head only, with no
value head, no merged head weights and no mean. Rounding can only make two actions tie in one
form and not in the other; the rollout's products are rounded anyway (tf32 or bf16).

In ``"bf16"``, one launch of ``kernels/bf16_cast.cu`` casts the layers' weights and biases and
the observations into bfloat16 copies padded to multiples of 8 (zero padding: the products add
exact zeros), then each layer is one cuBLAS product with its bias, each activation one launch,
and one argmax, where autocast would cast each weight in a launch of its own (docs/PERFORMANCE.md,
"Figures behind choices in the code"). In ``"tf32"`` and ``"fp32"`` the same chain
runs on the float32 parameters, without copies.

A branching network (:class:`~agents.algorithm.policies.BranchingDuelingQNetwork`, actions
``MultiDiscrete([L] * K)``) hands its K advantage heads through ``branch_advantages(obs)``
(``A [N, K, L]``; ``Q_d`` differs from ``A_d`` by one constant per state and branch), and the
greedy action is each branch's argmax, ``int64 [N, K]``; in ``"bf16"`` under autocast, in
``"tf32"`` and ``"fp32"`` on the float32 parameters.

Other Q-networks act through their own forward: ``q_net(obs).argmax(dim=1)``.

:class:`NumpyGreedy` is the same chain in NumPy, for one observation per network: the
backtests' policy (:func:`agents.pipelines.backtest_policies.greedy_batch_policy`), where torch's per-call
overhead was most of a one-row forward.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from torch import nn

from agents.network_layout import Chain, aligned_width, run_chain
from gpu_runtime.device import (
    I64,
    PTR,
    KernelLauncher,
    KernelParams,
    ModuleSpec,
    cupy_or_none,
    current_stream,
    load_module,
)
from gpu_runtime.precision import Precision, check_precision, tf32_matmuls

__all__ = ["GreedyActor", "NumpyGreedy"]

CAST_KERNEL_FILE = Path(__file__).resolve().parent / "kernels" / "bf16_cast.cu"


def cast_module_spec() -> ModuleSpec:
    """:func:`~gpu_runtime.device.load_module`'s arguments for ``bf16_cast.cu``."""
    return (CAST_KERNEL_FILE, (), (), ())


CAST_KERNEL_PARAMS: KernelParams = (
    ("table", PTR),
    ("n_jobs", I64),
    ("weight_blocks", I64),
    ("x", PTR),
    ("x_rows", I64),
    ("x_cols", I64),
    ("x_out", PTR),
    ("x_stride", I64),
)
CAST_THREADS = 256
CAST_WEIGHT_BLOCKS = 32  # per weight or bias: 256x256 weights are 8 elements per thread
CAST_INPUT_ELEMENTS_PER_THREAD = 8
_MAX_JOB_ELEMENTS = 2**31 - 1  # the kernel indexes within a job in 32 bits


class GreedyActor:
    """Greedy actions of a Q-network: ``actor(obs) -> int64 [N]`` (``[N, K]`` for a branching
    network).

    :param q_net: the online network. With a network that hands a chain through
        ``greedy_chain()`` (:class:`~agents.algorithm.policies.DuelingQNetwork`) (and a flattening features extractor),
        the trunk and advantage head alone; with one that hands ``branch_advantages(obs)``
        (:class:`~agents.algorithm.policies.BranchingDuelingQNetwork`), the argmax of each of
        its K branches; otherwise ``q_net(obs).argmax(dim=1)``.
    :param precision: ``"tf32"`` (tensor-core float32 products), ``"fp32"`` (exact float32)
        or ``"bf16"`` (bfloat16 products with float32 accumulation).

    The bf16 copies are rewritten from the live parameters at every call (they change at every
    gradient step); the launch is recorded when a call is captured in a CUDA graph, so a replay
    acts with the weights of that moment. The copies read the parameters' storage as it was
    when the actor was built: :meth:`serves` tells whether that is still the network's.
    """

    def __init__(self, q_net: nn.Module, precision: Precision) -> None:
        check_precision("precision", precision)
        self.q_net = q_net
        self.precision = precision
        self.chain = _greedy_chain(q_net)
        self._branches = _branch_advantages(q_net) if self.chain is None else None
        self._linear = [op for op in self.chain or [] if not isinstance(op, nn.Module)]
        self._storage = _storage(self.chain or [])
        self._kernel: KernelLauncher | None = None
        self._inputs: dict[int, th.Tensor] = {}
        if self.chain is not None and precision == "bf16":
            self._kernel = self._bf16_copies()

    @property
    def kind(self) -> str:
        """``"advantage-bf16-kernel"``, ``"advantage"``, ``"branch-advantage"`` or
        ``"q-forward"``: the path taken."""
        if self.chain is None:
            return "q-forward" if self._branches is None else "branch-advantage"
        return "advantage-bf16-kernel" if self._kernel is not None else "advantage"

    def serves(self, q_net: nn.Module) -> bool:
        """Whether this actor acts for ``q_net`` as it is now (same module, same storage)."""
        if q_net is not self.q_net:
            return False
        chain = _greedy_chain(q_net)
        if chain is None or self.chain is None:
            return chain is self.chain
        return _storage(chain) == self._storage

    def _bf16_copies(self) -> KernelLauncher | None:
        """Allocate the padded bf16 layers and the cast kernel's job table; ``None`` where the
        kernel does not apply (no CuPy, parameters not contiguous float32 on one CUDA device)."""
        params = [t for pair in self._linear for t in pair]
        device = params[0].device
        if (
            device.type != "cuda"
            or cupy_or_none() is None
            or any(
                p.dtype != th.float32 or not p.is_contiguous() or p.device != device for p in params
            )
            or any(p.numel() > _MAX_JOB_ELEMENTS for p in params)
        ):
            return None
        layers: list[tuple[th.Tensor, th.Tensor] | nn.Module] = []
        jobs: list[tuple[int, int, int, int, int]] = []
        for op in self.chain or []:
            if isinstance(op, nn.Module):
                layers.append(op)
                continue
            weight, bias = op
            out, inp = weight.shape
            w16 = th.zeros(aligned_width(out), aligned_width(inp), dtype=th.bfloat16, device=device)
            b16 = th.zeros(aligned_width(out), dtype=th.bfloat16, device=device)
            jobs.append((weight.data_ptr(), w16.data_ptr(), out, inp, w16.shape[1]))
            jobs.append((bias.data_ptr(), b16.data_ptr(), 1, out, b16.shape[0]))
            layers.append((w16, b16))
        self.layers = layers
        self.n_actions = self._linear[-1][0].shape[0]
        self._table = th.tensor(jobs, dtype=th.int64, device=device)
        self._device_index = device.index if device.index is not None else th.cuda.current_device()
        import cupy as cp

        with cp.cuda.Device(self._device_index):
            kernel = load_module(*cast_module_spec()).get_function("cast_bf16")
        return KernelLauncher(kernel, CAST_KERNEL_PARAMS, self._device_index)

    def _bf16_input(self, obs: th.Tensor) -> th.Tensor:
        """The padded bf16 input buffer for ``obs``'s batch size (zeroed once, then reused)."""
        n, f = obs.shape
        buf = self._inputs.get(n)
        if buf is None:
            buf = th.zeros(n, aligned_width(f), dtype=th.bfloat16, device=obs.device)
            self._inputs[n] = buf
        return buf

    @th.no_grad()
    def __call__(self, obs: th.Tensor) -> th.Tensor:
        """Greedy actions int64 ``[N]`` (``[N, K]``, one per branch, for a branching network)
        for observations ``[N, features]``."""
        if self._branches is not None:
            return self._branch_forward(obs)
        if self.chain is None:
            return self._q_forward(obs)
        if self._kernel is None:
            return self._float_chain(obs)
        if obs.dtype != th.float32 or not obs.is_contiguous() or obs.dim() != 2:
            obs = obs.reshape(obs.shape[0], -1).to(th.float32).contiguous()
        n, f = obs.shape
        if n * f > _MAX_JOB_ELEMENTS:
            raise ValueError(
                f"obs has {n * f} elements: the bf16 acting forward allows at most "
                f"{_MAX_JOB_ELEMENTS} per call"
            )
        x = self._bf16_input(obs)
        n_jobs = self._table.shape[0]
        input_blocks = max(1, -(-n * f // (CAST_THREADS * CAST_INPUT_ELEMENTS_PER_THREAD)))
        self._kernel(
            n_jobs * CAST_WEIGHT_BLOCKS + input_blocks,
            CAST_THREADS,
            current_stream(self._device_index)[1],
            self._table.data_ptr(),
            n_jobs,
            CAST_WEIGHT_BLOCKS,
            obs.data_ptr(),
            n,
            f,
            x.data_ptr(),
            x.shape[1],
        )
        return run_chain(self.layers, x)[:, : self.n_actions].argmax(dim=1)

    def _float_chain(self, obs: th.Tensor) -> th.Tensor:
        features = self.q_net.extract_features(obs, self.q_net.features_extractor)
        with tf32_matmuls(self.precision != "fp32"):
            if self.precision == "bf16":  # bf16 without the kernel: autocast
                with th.autocast(features.device.type, dtype=th.bfloat16):
                    return run_chain(self.chain, features).argmax(dim=1)
            return run_chain(self.chain, features).argmax(dim=1)

    def _branch_forward(self, obs: th.Tensor) -> th.Tensor:
        assert self._branches is not None
        if self.precision == "bf16":
            # No cast cache: a capture records the weights' casts, which each replay redoes.
            with th.autocast(obs.device.type, dtype=th.bfloat16, cache_enabled=False):
                return self._branches(obs).argmax(dim=2)
        with tf32_matmuls(self.precision == "tf32"):
            return self._branches(obs).argmax(dim=2)

    def _q_forward(self, obs: th.Tensor) -> th.Tensor:
        if self.precision == "bf16":
            with th.autocast(obs.device.type, dtype=th.bfloat16):
                return self.q_net(obs).argmax(dim=1)
        with tf32_matmuls(self.precision == "tf32"):
            return self.q_net(obs).argmax(dim=1)


def _storage(chain: list[tuple[th.Tensor, th.Tensor] | nn.Module]) -> list[int]:
    """The addresses of a chain's weights and biases, in order."""
    return [t.data_ptr() for op in chain if not isinstance(op, nn.Module) for t in op]


def _greedy_chain(q_net: nn.Module) -> Chain | None:
    """The trunk + advantage chain a network hands the actor where acting can use it, else
    ``None``: a network offers it through a ``greedy_chain()`` method (the dueling network's
    :meth:`~agents.algorithm.policies.DuelingQNetwork.greedy_chain`)."""
    from stable_baselines3.common.torch_layers import FlattenExtractor

    greedy_chain = getattr(q_net, "greedy_chain", None)
    if not callable(greedy_chain):
        return None
    if type(q_net.features_extractor) is not FlattenExtractor:
        return None
    return greedy_chain()


def _branch_advantages(q_net: nn.Module) -> Callable[[th.Tensor], th.Tensor] | None:
    """The ``branch_advantages(obs) -> A [N, K, L]`` method of a branching network (the
    branching dueling network's
    :meth:`~agents.algorithm.policies.BranchingDuelingQNetwork.branch_advantages`), else
    ``None``."""
    branches = getattr(q_net, "branch_advantages", None)
    return branches if callable(branches) else None


def _numpy_activation(module: nn.Module) -> Callable[[np.ndarray], np.ndarray] | None:
    """``module`` as a NumPy function of float32 arrays, for the activations that have one."""
    if type(module) is nn.LeakyReLU:
        slope = np.float32(module.negative_slope)
        return lambda x: np.where(x > 0, x, x * slope)
    if type(module) is nn.ReLU:
        return lambda x: np.maximum(x, np.float32(0))
    if type(module) is nn.Tanh:
        return np.tanh
    if type(module) is nn.Identity:
        return lambda x: x
    return None


class NumpyGreedy:
    """Greedy actions of ``k`` dueling networks (for instance snapshots of one network taken
    during training), each for its own observation, in NumPy float32 from copies of their
    weights taken at construction: ``f(obs [k, D]) -> actions int64 [k]``.

    The trunk and advantage head only (:class:`GreedyActor`'s argument). Row ``j``'s products
    are the same BLAS calls whatever ``k`` is, so a network's actions do not depend on the
    others beside it. Through torch, a one-row forward is 18 operator calls, each with torch's
    dispatch overhead, several times this one's time (docs/PERFORMANCE.md); a backtest asks for
    one per bar.

    Build it with :meth:`of`.
    """

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray] | Callable[..., Any]]) -> None:
        self.layers = layers
        self.k = next(w.shape[0] for w in (op[0] for op in layers if isinstance(op, tuple)))

    @classmethod
    def of(cls, q_nets: list[nn.Module]) -> NumpyGreedy | None:
        """The networks' :class:`NumpyGreedy`, or ``None`` where one is not a dueling network
        with a :meth:`~agents.algorithm.policies.DuelingQNetwork.greedy_chain` of LeakyReLU, ReLU, Tanh or Identity
        activations, or where their architectures differ (the caller then runs torch)."""
        chains = [_greedy_chain(q) for q in q_nets]
        if not chains or any(c is None for c in chains):
            return None
        first = chains[0]
        assert first is not None
        layers: list[tuple[np.ndarray, np.ndarray] | Callable[..., Any]] = []
        for i, op in enumerate(first):
            ops = [c[i] if len(c) == len(first) else None for c in chains]  # type: ignore[index]
            if isinstance(op, nn.Module):
                fn = _numpy_activation(op)
                if fn is None or any(
                    not isinstance(o, nn.Module) or repr(o) != repr(op) for o in ops
                ):
                    return None
                layers.append(fn)
                continue
            if any(o is None or isinstance(o, nn.Module) or o[0].shape != op[0].shape for o in ops):
                return None
            w = np.stack([o[0].detach().to("cpu", th.float32).numpy() for o in ops])  # type: ignore[index]
            b = np.stack([o[1].detach().to("cpu", th.float32).numpy() for o in ops])  # type: ignore[index]
            layers.append((w, b[:, :, None]))
        return cls(layers)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32).reshape(self.k, -1, 1)
        for layer in self.layers:
            x = np.matmul(layer[0], x) + layer[1] if isinstance(layer, tuple) else layer(x)
        return x[:, :, 0].argmax(axis=1).astype(np.int64)
