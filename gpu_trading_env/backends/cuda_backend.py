"""The CUDA backend: the env step as one CuPy kernel launch (``kernels/trading_step.cu``).

State, market data and outputs stay on the GPU. Kernels run on torch's current stream (shared
through ``cupy.cuda.Stream.from_external``) so torch tensors handed over by DLPack never race
with them. A step issues one launch and never waits for the GPU; an invalid action is recorded
on the device and raised at the next check (every ``error_check_interval`` steps, at reset, and
on :meth:`check_errors`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpu_runtime.device import (
    KernelLauncher,
    ModuleSpec,
    current_stream,
    load_module,
    require_cupy,
)
from gpu_trading_env.backends.base import (
    Backend,
    CuriosityWeights,
    check_action_layout,
    check_curiosity_weights,
)
from gpu_trading_env.core.config import FLOAT_PARAMS, INT_PARAMS, kernel_defines
from gpu_trading_env.core.constants import BLOCK, CURIOSITY_MAX_HIDDEN, N_CATEGORIES
from gpu_trading_env.core.kernel_interface import ENV_KERNEL_PARAMS, launcher_kind
from gpu_trading_env.core.state import OUTPUT_FIELDS, STATE_FIELDS, StepOutputs, output_layout


def _address(arr: Any) -> int:
    """Device address of a torch CUDA tensor or a CuPy array."""
    return arr.data_ptr() if hasattr(arr, "data_ptr") else arr.data.ptr


# trading_env.cuh (device functions of one env step), included by other packages' kernels too.
KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
KERNEL_FILE = KERNEL_DIR / "trading_step.cu"
# Without contraction into FMA, float64 results equal NumPy's bit for bit (see trading_env.cuh).
KERNEL_OPTIONS = ("--fmad=false",)


def launch_block(num_envs: int, sm_count: int) -> int:
    """Threads per block of the env kernels: ``BLOCK``, halved (down to 64) while the grid
    would have fewer blocks than the GPU has SMs. A thread runs one env's long serial step,
    so at a few thousand envs wide blocks would leave most SMs idle. The results do not depend
    on it (one thread per env)."""
    threads = BLOCK
    while threads > 64 and -(-num_envs // threads) < sm_count:
        threads //= 2
    return threads


@dataclass(frozen=True)
class KernelArgs:
    """The argument groups of the env kernels, in the order of ``core/kernel_interface.py``.

    Other kernels that step the env in place (``#include "trading_env.cuh"``) pass these groups
    in this order: ``ENV_STATE_ARGS`` (``state``), ``MARKET_ARGS`` (``market``), ``PARAM_ARGS``
    (``params``) and ``CURIOSITY_ARGS`` (``curiosity``), the parameter lists generated there. The arrays are the backend's own, so
    a kernel that writes the state advances the env.
    """

    state: tuple[Any, ...]
    market: tuple[Any, ...]
    params: tuple[Any, ...]
    curiosity: tuple[Any, ...]

    def all(self) -> tuple[Any, ...]:
        return (*self.state, *self.market, *self.params, *self.curiosity)


def kernel_module_spec() -> ModuleSpec:
    """:func:`~gpu_runtime.device.load_module`'s arguments for the env's kernels."""
    return (KERNEL_FILE, kernel_defines(), KERNEL_OPTIONS, ())


class CudaBackend(Backend):
    """Backend whose arrays are CuPy arrays on one CUDA device.

    ``step_args_version`` (int) changes whenever the by-value arguments of the step launch
    change: turning the curiosity bonus on or off (``set_curiosity_weights``). A CUDA graph
    that captured a step replays the arguments of its capture, so its owner captures again when
    the version moved (new weights while the bonus stays on are copied in place: no change).
    """

    device = "cuda"
    error_check_interval = 1024

    def __init__(
        self, data: Any, config: Any, num_envs: int, device_index: int | None = None
    ) -> None:
        cp = require_cupy("device='cuda'")
        if config.curiosity_hidden > CURIOSITY_MAX_HIDDEN:  # the kernel's per-thread hidden array
            raise ValueError(
                f"EnvConfig.curiosity_hidden = {config.curiosity_hidden} is invalid on device='cuda': allowed is at most {CURIOSITY_MAX_HIDDEN}"
            )
        self.xp = cp
        self.device_index = (
            cp.cuda.runtime.getDevice() if device_index is None else int(device_index)
        )
        self._device = cp.cuda.Device(self.device_index)
        with self._device:
            super().__init__(data, config, num_envs)
            self.device = f"cuda:{self.device_index}"
            self.features = cp.asarray(np.ascontiguousarray(data.features, dtype=np.float32))
            self.open = cp.asarray(np.ascontiguousarray(data.open, dtype=np.float64))
            self.close = cp.asarray(np.ascontiguousarray(data.close, dtype=np.float64))
            p = self.params
            # The scalar slots, then max_position per instrument (PF_MAX_POSITION_BASE + k).
            self._pf = cp.asarray(
                np.concatenate(
                    [np.array([p.floats[k] for k in FLOAT_PARAMS], np.float64), p.max_position]
                )
            )
            self._pi = cp.asarray(np.array([p.ints[k] for k in INT_PARAMS], dtype=np.int64))
            self._tables = (
                cp.asarray(p.exposure),
                cp.asarray(p.cost_rate),
                cp.asarray(p.category),
            )
            d, h = config.curiosity_state_dims, config.curiosity_hidden
            self._cur = CuriosityWeights(
                cp.zeros((h, d + N_CATEGORIES), cp.float32),
                cp.zeros(h, cp.float32),
                cp.zeros((d, h), cp.float32),
                cp.zeros(d, cp.float32),
            )
            self._error = cp.zeros(3, dtype=cp.int64)
            module = load_module(*kernel_module_spec())
            self._k_step = module.get_function("trading_step")
            self._k_reset = module.get_function("trading_reset")
            self._k_observe = module.get_function("trading_observe")
        self._block = (launch_block(self.num_envs, self._device.attributes["MultiProcessorCount"]),)
        self._grid = ((self.num_envs + self._block[0] - 1) // self._block[0],)
        self._n = np.int32(self.num_envs)
        self._steps_since_check = 0
        self._cp = cp
        try:
            import torch

            self._torch_int64: Any = torch.int64
            self._action_shape: Any = torch.Size([self.num_envs])
        except ImportError:  # CuPy arrays only
            self._torch_int64 = self._action_shape = None
        layout, _ = output_layout(self.num_envs, self.obs_dim)
        self._output_specs = {name: (dtype, shape) for name, dtype, shape, _ in layout}
        self._launcher: KernelLauncher | None = None
        self._get_device = cp.cuda.runtime.getDevice
        # Changes whenever the step launch's by-value arguments change (see _build_step_args).
        self.step_args_version = 0
        self._head: tuple[int, ...] = ()
        self._tail: tuple[int, ...] = ()
        self._build_step_args()

    # ---------------------------------------------------------------- launch helpers
    def _state_args(self) -> tuple[Any, ...]:
        return tuple(getattr(self.state, f) for f in STATE_FIELDS)

    def _market_args(self) -> tuple[Any, ...]:
        return (self.features, self.open, self.close, np.int32(self.n_features))

    def _param_args(self) -> tuple[Any, ...]:
        return (self._pf, self._pi, *self._tables)

    def _curiosity_args(self) -> tuple[Any, ...]:
        c = self._cur
        return (c.w1, c.b1, c.w2, c.b2, np.int32(self.curiosity is not None))

    def kernel_args(self) -> KernelArgs:
        """The env's device arrays and scalars as kernel arguments (see :class:`KernelArgs`)."""
        return KernelArgs(
            self._state_args(), self._market_args(), self._param_args(), self._curiosity_args()
        )

    def device_scope(self) -> Any:
        """Context manager that makes this backend's GPU the current CuPy device."""
        return self._device

    def compile_module(self, source: Path, defines: tuple[tuple[str, str], ...] = ()) -> Any:
        """Compile a kernel file that includes ``trading_env.cuh`` as this backend's kernels are:
        same generated #defines (then the caller's ``defines``), same options (no FMA
        contraction), same include folders."""
        return load_module(
            Path(source), kernel_defines() + tuple(defines), KERNEL_OPTIONS, (KERNEL_DIR,)
        )

    def restart_error_countdown(self) -> None:
        """Count ``error_check_interval`` steps from now before the next host read of the error
        word (a CUDA graph capture of a step must not contain that read)."""
        self._steps_since_check = 0

    def stream(self) -> Any:
        """The CuPy view of torch's current stream on this device (see ``current_stream``)."""
        return current_stream(self.device_index)[0]

    def stream_handle(self) -> int:
        """The handle of torch's current stream on this device (what a step launches on)."""
        return current_stream(self.device_index)[1]

    # ---------------------------------------------------------------- contract
    def seed(self, seeds: Any, mask: Any) -> None:
        cp = self.xp
        with self._device, self.stream():
            m = cp.asarray(mask, dtype=cp.bool_)
            s = cp.asarray(seeds, dtype=cp.uint64)
            self.state.seed[...] = cp.where(m, s, self.state.seed)
            self.state.episode_count[...] = cp.where(m, cp.uint64(0), self.state.episode_count)

    def observe(self) -> Any:
        cp = self.xp
        with self._device, self.stream():
            obs = cp.empty((self.num_envs, self.obs_dim), dtype=cp.float32)
            self._k_observe(
                self._grid,
                self._block,
                (*self._state_args(), *self._market_args(), *self._param_args(), obs, self._n),
            )
        return obs

    def reset(self, mask: Any, start_index: Any) -> Any:
        cp = self.xp
        with self._device, self.stream():
            m = cp.asarray(mask, dtype=cp.bool_)
            si = cp.asarray(start_index, dtype=cp.int64)
            self._k_reset(
                self._grid, self._block, (*self._state_args(), *self._param_args(), m, si, self._n)
            )
        return self.observe()

    def prepare_actions(self, actions: Any) -> Any:
        """Actions as an int64 [N] device array (torch or CuPy) on this GPU.

        A contiguous int64 CUDA tensor is used as it is (the kernel reads it in place); other
        torch or CuPy arrays are converted on the device; NumPy input is copied to the device.
        Values are checked by the kernel (see :meth:`check_errors`).
        """
        cp = self.xp
        a = actions
        if (
            getattr(a, "dtype", None) is self._torch_int64
            and a.is_cuda
            and a.shape == self._action_shape
            and a.is_contiguous()
            and a.get_device() == self.device_index
        ):
            return a  # what the kernel reads in place: checked by attribute reads alone
        is_torch = hasattr(a, "data_ptr") and hasattr(a, "is_cuda")
        if is_torch and a.is_cuda:
            # Shape and dtype are metadata: checking them needs no host sync.
            floating = a.dtype.is_floating_point or a.dtype.is_complex
            check_action_layout(
                a.shape, a.dtype, not floating and str(a.dtype) != "torch.bool", self.num_envs
            )
            a = a.reshape(self.num_envs)
            if a.device.index != self.device_index:
                a = a.to(f"cuda:{self.device_index}")
            if str(a.dtype) != "torch.int64" or not a.is_contiguous():
                a = a.long().contiguous()
            return a
        if is_torch:
            a = a.numpy()
        if not isinstance(a, cp.ndarray):
            a = np.asarray(a)  # checked on the host, before the copy to the device
        check_action_layout(a.shape, a.dtype, a.dtype.kind in "iu", self.num_envs)
        a = cp.asarray(a).reshape(self.num_envs)
        if a.dtype != cp.int64 or not a.flags.c_contiguous:
            a = cp.ascontiguousarray(a, dtype=cp.int64)
        return a

    def _build_step_args(self) -> None:
        """The launcher of trading_step and its constant leading arguments (state, market,
        parameters, curiosity), as ints; a step adds the actions and output addresses."""
        head = (
            *self._state_args(),
            *self._market_args(),
            *self._param_args(),
            *self._curiosity_args(),
        )
        if self._launcher is None:
            signature = ENV_KERNEL_PARAMS["trading_step"]
            # head, actions, the outputs, error and n: what _launch_step passes.
            if len(head) + 1 + len(OUTPUT_FIELDS) + 2 != len(signature):
                raise RuntimeError(
                    f"trading_step takes {len(signature)} arguments but the backend packs "
                    f"{len(head) + len(OUTPUT_FIELDS) + 3} (see core/kernel_interface.py)"
                )
            params = tuple((name, launcher_kind(ctype)) for name, ctype in signature)
            self._launcher = KernelLauncher(self._k_step, params, self.device_index)
        before = self._head, self._tail
        self._head = tuple(int(v) if isinstance(v, np.int32) else _address(v) for v in head)
        # Packed once: a step packs only the actions' and the outputs' addresses.
        self._launcher.set_leading(*self._head)
        self._tail = (_address(self._error), int(self._n))
        # Per output set: its OUTPUT_FIELDS addresses and the constant tail, what a step adds
        # after the actions (bind_outputs returns the same shape).
        self._out_addresses = [
            (*(_address(getattr(out, f)) for f in OUTPUT_FIELDS), *self._tail)
            for out in self._outputs
        ]
        if before != (self._head, self._tail):
            # A CUDA graph holds a step launch's arguments as they were at its capture: the
            # curiosity on/off flag above is one, so a graph captured before
            # set_curiosity_weights turned the bonus on would replay steps without it.
            self.step_args_version += 1
        # Where a step that is given no final_obs points the kernel: the first buffer's, which
        # only SAME_STEP steps write (and those are always given one).
        self._spare_final_obs = _address(self._outputs[0].final_obs)

    def _launch_step(
        self, actions: Any, rest: tuple[int, ...], check: bool, stream: int | None = None
    ) -> None:
        """One trading_step launch on torch's current stream (``stream``: its handle, when the
        caller has read it already): actions (a torch tensor or CuPy array, int64 [N]), then
        ``rest``, the addresses of the OUTPUT_FIELDS arrays and the constant tail (what
        :meth:`bind_outputs` returns)."""
        if stream is None:
            stream = current_stream(self.device_index)[1]
        if self._get_device() == self.device_index:
            self._launcher.launch_rest(
                self._grid[0], self._block[0], stream, _address(actions), *rest
            )
        else:
            with self._device:
                self._launcher.launch_rest(
                    self._grid[0], self._block[0], stream, _address(actions), *rest
                )
        if check:
            self._steps_since_check += 1
            if self._steps_since_check >= self.error_check_interval:
                self.check_errors()

    def step(self, actions: Any) -> StepOutputs:
        out = self._next_outputs()
        self._launch_step(actions, self._out_addresses[self._turn], True)
        return out

    def bind_outputs(self, outputs: dict[str, Any], trusted: bool = False) -> tuple[int, ...]:
        """The device addresses of ``outputs``' arrays in the kernel's order, after checking
        their dtype, shape, device and layout (host metadata only) unless ``trusted``. A missing
        ``final_obs`` points at a spare buffer, which only SAME_STEP steps would write."""
        addresses = []
        for f in OUTPUT_FIELDS:
            if f not in outputs and f == "final_obs":
                addresses.append(self._spare_final_obs)
            elif trusted:
                addresses.append(_address(outputs[f]))
            else:
                addresses.append(self._checked_address(f, outputs[f]))
        return (*addresses, *self._tail)

    def step_bound(
        self, actions: Any, bound: tuple[int, ...], check: bool = True, stream: int | None = None
    ) -> None:
        self._launch_step(actions, bound, check, stream)

    def _checked_address(self, name: str, arr: Any) -> int:
        """Device address of output ``name``, after checking its dtype, shape, device and
        layout (host metadata only: no sync)."""
        dtype, shape = self._output_specs[name]
        if hasattr(arr, "data_ptr"):  # torch
            ok = (
                arr.is_cuda
                and arr.get_device() == self.device_index
                and str(arr.dtype).removeprefix("torch.") == dtype.name
                and tuple(arr.shape) == shape
                and arr.is_contiguous()
            )
        else:
            ok = (
                isinstance(arr, self._cp.ndarray)
                and arr.device.id == self.device_index
                and arr.dtype == dtype
                and arr.shape == shape
                and arr.flags.c_contiguous
            )
        if not ok:
            raise ValueError(
                f"outputs[{name!r}] = {type(arr).__name__} is invalid: allowed is a contiguous "
                f"{dtype.name} {shape} array on cuda:{self.device_index} (see make_outputs())"
            )
        return _address(arr)

    def check_errors(self) -> None:
        """Raise ValueError for an invalid action recorded on the device (synchronises)."""
        self._steps_since_check = 0
        with self._device, self.stream():
            err = self._error.get()
            if err[0]:
                self._error[...] = 0
                raise ValueError(
                    f"actions[{int(err[1])}] = {int(err[2])} is invalid: allowed is "
                    f"0..{self.config.n_actions - 1} (recorded on the GPU; that env skipped the step)"
                )

    def set_autoreset_mode(self, mode: Any) -> None:
        super().set_autoreset_mode(mode)
        with self._device, self.stream():
            self._pi[INT_PARAMS.index("autoreset_mode")] = self.params.autoreset_mode

    def set_curiosity_weights(self, weights: CuriosityWeights | None) -> None:
        if weights is None:
            self.curiosity = None
            self._build_step_args()
            return
        check_curiosity_weights(
            weights, self.config.curiosity_state_dims, self.config.curiosity_hidden
        )
        cp = self.xp
        with self._device, self.stream():
            converted = {}
            for k in ("w1", "b1", "w2", "b2"):
                v = getattr(weights, k)
                if hasattr(v, "detach"):
                    v = (
                        cp.from_dlpack(v.detach().contiguous())
                        if v.is_cuda
                        else cp.asarray(v.detach().numpy())
                    )
                converted[k] = cp.asarray(v, dtype=cp.float32)
            super().set_curiosity_weights(CuriosityWeights(**converted))
            # Copy into persistent buffers so captured CUDA graphs see new weights.
            for k, v in converted.items():
                getattr(self._cur, k)[...] = v
        self._build_step_args()
