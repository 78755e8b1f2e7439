"""The portfolio env's CUDA backend: a vector step as one kernel launch (``kernels/portfolio_step.cu``).

State (CuPy, ``PortfolioState``'s layout) and market arrays stay on the GPU; the outputs are torch
tensors on the same device, written by the kernel in place. Every launch goes to torch's current
stream, so tensors handed over by the caller never race with the kernels, and a step never waits
for the GPU: an invalid action is recorded on the device and raised at the next check (every
``error_check_interval`` steps, at reset, and on :meth:`check_errors`).

The kernel runs the reference's (``portfolio_numpy.py``) float64 operations in the same order,
compiled without FMA contraction, so its results equal the NumPy backend's bit for bit (the log
reward to the last bit of each library's ``log``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_runtime.device import (
    KernelLauncher,
    ModuleSpec,
    current_stream,
    load_module,
    require_cupy,
)
from gpu_trading_env.backends.cuda_backend import KERNEL_DIR, KERNEL_OPTIONS, launch_block
from gpu_trading_env.backends.portfolio_base import PortfolioBackend
from gpu_trading_env.core.kernel_interface import launcher_kind
from gpu_trading_env.core.portfolio_config import PortfolioConfig
from gpu_trading_env.core.portfolio_kernel_interface import (
    PORTFOLIO_INT_PARAMS,
    PORTFOLIO_KERNEL_PARAMS,
    PORTFOLIO_OUTPUT_FIELDS,
    PORTFOLIO_STATE_FIELDS,
    portfolio_kernel_defines,
    portfolio_param_arrays,
)
from gpu_trading_env.core.portfolio_state import PortfolioStepOutputs, allocate_portfolio_outputs
from gpu_trading_env.data.portfolio_data import PortfolioData

PORTFOLIO_KERNEL_FILE = KERNEL_DIR / "portfolio_step.cu"


def portfolio_module_spec() -> ModuleSpec:
    """:func:`~gpu_runtime.device.load_module`'s arguments for the portfolio kernels."""
    return (PORTFOLIO_KERNEL_FILE, portfolio_kernel_defines(), KERNEL_OPTIONS, ())


def _address(arr: Any) -> int:
    """Device address of a torch CUDA tensor or a CuPy array."""
    return arr.data_ptr() if hasattr(arr, "data_ptr") else arr.data.ptr


def _require_torch_cuda() -> Any:
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        raise RuntimeError(
            "the portfolio env on device='cuda' returns torch tensors and needs torch with CUDA; "
            "none was found: install a CUDA build of torch, or use device='cpu'"
        )
    return torch


class PortfolioCudaBackend(PortfolioBackend):
    """Portfolio backend whose state lives on one CUDA device (CuPy arrays), outputs torch.

    What a fused GPU rollout uses, with no host sync: :meth:`prepare_actions` passes a
    contiguous int64 [N, K] CUDA tensor through as it is (values checked by the kernel);
    :meth:`make_outputs` gives static output tensors, :meth:`bind_outputs` their addresses once,
    and :meth:`step_bound` launches the step into them (``check=False`` inside a CUDA graph
    capture, after :meth:`restart_error_countdown`); :meth:`check_errors` reads the error word.
    ``step_args_version`` stays 0: no by-value argument of the step launch ever changes.
    """

    device = "cuda"
    error_check_interval = 1024
    step_args_version = 0

    def __init__(
        self,
        data: PortfolioData,
        config: PortfolioConfig,
        num_envs: int,
        device_index: int | None = None,
    ) -> None:
        cp = require_cupy("the portfolio env on device='cuda'")
        self._torch = _require_torch_cuda()
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
            pf, pi = portfolio_param_arrays(self.params, data.n_bars, data.n_features)
            self._pf = cp.asarray(pf)
            self._pi = cp.asarray(pi)
            self._exposure = cp.asarray(self.params.exposure)
            self._rate = cp.asarray(self.params.rate)
            # [flag, env, instrument, value] of the first invalid action since the last check.
            self._error = cp.zeros(4, dtype=cp.int64)
            module = load_module(*portfolio_module_spec())
            self._launchers = {
                name: KernelLauncher(
                    module.get_function(name),
                    tuple((p, launcher_kind(c)) for p, c in signature),
                    self.device_index,
                )
                for name, signature in PORTFOLIO_KERNEL_PARAMS.items()
            }
        sms = self._device.attributes["MultiProcessorCount"]
        self._block = launch_block(self.num_envs, sms)
        self._grid = (self.num_envs + self._block - 1) // self._block
        self._n = int(self.num_envs)
        self._steps_since_check = 0
        self._action_shape = self._torch.Size([self.num_envs, self.n_instruments])
        state = tuple(_address(getattr(self.state, f)) for f in PORTFOLIO_STATE_FIELDS)
        market = (_address(self.features), _address(self.open), _address(self.close))
        params = (_address(self._pf), _address(self._pi), _address(self._exposure))
        params += (_address(self._rate),)
        self._head = {
            "portfolio_step": (*state, *market, *params),
            "portfolio_reset": (*state, *params),
            "portfolio_observe": (*state, *market, *params),
        }
        step = self._launchers["portfolio_step"]
        signature = PORTFOLIO_KERNEL_PARAMS["portfolio_step"]
        # head, actions, the outputs, error and n: what step_bound passes.
        if len(self._head["portfolio_step"]) + 1 + len(PORTFOLIO_OUTPUT_FIELDS) + 2 != len(
            signature
        ):
            raise RuntimeError(
                f"portfolio_step takes {len(signature)} arguments but the backend packs "
                "another count (see core/portfolio_kernel_interface.py)"
            )
        step.set_leading(*self._head["portfolio_step"])
        self._tail = (_address(self._error), self._n)
        spec = allocate_portfolio_outputs(np, 1, self.n_instruments, self.obs_dim)
        self._output_specs = {
            f: (getattr(spec, f).dtype, self._output_shape(f)) for f in PORTFOLIO_OUTPUT_FIELDS
        }

    # ---------------------------------------------------------------- helpers
    def _output_shape(self, field: str) -> tuple[int, ...]:
        n, k = self.num_envs, self.n_instruments
        shapes = {"obs": (n, self.obs_dim), "final_obs": (n, self.obs_dim)}
        shapes |= {"components": (n, 2), "positions": (n, k), "costs": (n, k)}
        return shapes.get(field, (n,))

    def device_scope(self) -> Any:
        """Context manager that makes this backend's GPU the current CuPy device."""
        return self._device

    def stream(self) -> Any:
        """The CuPy view of torch's current stream on this device (what every launch uses)."""
        return current_stream(self.device_index)[0]

    def stream_handle(self) -> int:
        """The handle of torch's current stream on this device."""
        return current_stream(self.device_index)[1]

    def restart_error_countdown(self) -> None:
        """Count ``error_check_interval`` steps from now before the next host read of the error
        word (a CUDA graph capture of a step must not contain that read)."""
        self._steps_since_check = 0

    def _launch(self, name: str, *rest: Any, stream: int | None = None) -> None:
        """One launch of kernel ``name``: its constant head (state, market, parameters) then
        ``rest``, on torch's current stream of this device."""
        if stream is None:
            stream = self.stream_handle()
        launcher = self._launchers[name]
        with self._device:
            if name == "portfolio_step":
                launcher.launch_rest(self._grid, self._block, stream, *rest)
            else:
                launcher(self._grid, self._block, stream, *self._head[name], *rest)

    # ---------------------------------------------------------------- contract
    def seed(self, seeds: np.ndarray, mask: np.ndarray) -> None:
        cp = self.xp
        with self._device, self.stream():
            m = cp.asarray(np.asarray(mask, dtype=bool))
            s = cp.asarray(np.asarray(seeds, dtype=np.uint64))
            self.state.seed[...] = cp.where(m, s, self.state.seed)
            self.state.episode_count[...] = cp.where(m, cp.uint64(0), self.state.episode_count)

    def reset(self, mask: Any, start_index: Any) -> Any:
        """Start new episodes where ``mask`` (bool [N], host or device); ``start_index`` int64
        [N], -1 = draw. Checks the error word first (a sync). Returns the torch observation."""
        self.check_errors()
        cp = self.xp
        with self._device, self.stream():
            m = cp.ascontiguousarray(cp.asarray(mask, dtype=cp.bool_))
            si = cp.ascontiguousarray(cp.asarray(start_index, dtype=cp.int64))
            self._launch("portfolio_reset", _address(m), _address(si), self._n)
        return self.observe()

    def observe(self) -> Any:
        """The current observation of every env: a new torch float32 [N, D] tensor."""
        obs = self._torch.empty(
            (self.num_envs, self.obs_dim), dtype=self._torch.float32, device=self.device
        )
        self._launch("portfolio_observe", obs.data_ptr(), self._n)
        return obs

    def prepare_actions(self, actions: Any) -> Any:
        """Actions as an int64 [N, K] contiguous array on this GPU (torch or CuPy).

        A contiguous int64 CUDA tensor of that shape is used as it is; other CUDA tensors are
        converted on the device after a check of their shape and dtype (metadata, no sync);
        host arrays are checked as the NumPy backend checks them (same errors) and copied.
        Values of device arrays are checked by the kernel (see :meth:`check_errors`).
        """
        torch = self._torch
        a = actions
        is_torch = isinstance(a, torch.Tensor)
        if is_torch and a.is_cuda:
            if (
                a.dtype == torch.int64
                and a.shape == self._action_shape
                and a.is_contiguous()
                and a.get_device() == self.device_index
            ):
                return a
            not_integer = a.dtype.is_floating_point or a.dtype.is_complex or a.dtype == torch.bool
            self._check_device_layout(tuple(a.shape), not_integer, str(a.dtype))
            return a.to(device=self.device, dtype=torch.int64).contiguous()
        cp = self.xp
        if isinstance(a, cp.ndarray):
            self._check_device_layout(a.shape, a.dtype.kind not in "iu", str(a.dtype))
            with self._device, self.stream():
                return cp.ascontiguousarray(a, dtype=cp.int64)
        host = self._check_host_actions(a)
        return torch.from_numpy(np.ascontiguousarray(host)).to(self.device)

    def _check_host_actions(self, actions: Any) -> np.ndarray:
        """The NumPy reference's checks of host actions (its messages), as int64 [N, K]."""
        from gpu_trading_env.backends.portfolio_numpy import PortfolioNumpyBackend

        # It reads num_envs, n_instruments and n_levels only, which every backend has.
        return PortfolioNumpyBackend.prepare_actions(self, actions)  # type: ignore[arg-type]

    def _check_device_layout(self, shape: tuple[int, ...], not_integer: bool, dtype: str) -> None:
        n, k = self.num_envs, self.n_instruments
        if tuple(shape) != (n, k):
            raise ValueError(
                f"actions of shape {tuple(shape)} are invalid: allowed is ({n}, {k}), one level "
                "per env and instrument"
            )
        if not_integer:
            raise TypeError(f"actions of dtype {dtype} are invalid: allowed is an integer dtype")

    def make_outputs(self) -> PortfolioStepOutputs:
        """Zeroed torch output tensors on this device, for :meth:`bind_outputs` (what a CUDA
        graph captures the step into)."""
        torch = self._torch
        arrays = {}
        for f in PORTFOLIO_OUTPUT_FIELDS:
            dtype, shape = self._output_specs[f]
            arrays[f] = torch.zeros(shape, dtype=_torch_dtype(torch, dtype), device=self.device)
        return PortfolioStepOutputs(**arrays)

    def _new_outputs(self) -> PortfolioStepOutputs:
        """Output tensors of one step: uninitialised but ``final_obs`` (zeroed: only the rows
        that end are written), since the kernel writes every other element."""
        torch = self._torch
        arrays = {}
        for f in PORTFOLIO_OUTPUT_FIELDS:
            dtype, shape = self._output_specs[f]
            make = torch.zeros if f == "final_obs" else torch.empty
            arrays[f] = make(shape, dtype=_torch_dtype(torch, dtype), device=self.device)
        return PortfolioStepOutputs(**arrays)

    def bind_outputs(
        self, outputs: PortfolioStepOutputs | dict[str, Any], trusted: bool = False
    ) -> tuple[int, ...]:
        """The device addresses of ``outputs``' arrays in the kernel's order (then the error
        word and N), after checking dtype, shape, device and layout (metadata only) unless
        ``trusted``. ``final_obs`` is written only in SAME_STEP mode, and there only in the
        rows that ended. The handle is valid while the arrays keep their memory."""
        if isinstance(outputs, PortfolioStepOutputs):
            outputs = vars(outputs)
        addresses = []
        for f in PORTFOLIO_OUTPUT_FIELDS:
            if f not in outputs:
                raise ValueError(f"outputs has no {f!r}: allowed is every field of make_outputs()")
            arr = outputs[f]
            addresses.append(_address(arr) if trusted else self._checked_address(f, arr))
        return (*addresses, *self._tail)

    def _checked_address(self, name: str, arr: Any) -> int:
        dtype, shape = self._output_specs[name]
        if hasattr(arr, "data_ptr"):  # torch
            ok = (
                arr.is_cuda
                and arr.get_device() == self.device_index
                and str(arr.dtype).removeprefix("torch.") == np.dtype(dtype).name
                and tuple(arr.shape) == shape
                and arr.is_contiguous()
            )
        else:
            cp = self.xp
            ok = (
                isinstance(arr, cp.ndarray)
                and arr.device.id == self.device_index
                and arr.dtype == dtype
                and arr.shape == shape
                and arr.flags.c_contiguous
            )
        if not ok:
            raise ValueError(
                f"outputs[{name!r}] = {type(arr).__name__} is invalid: allowed is a contiguous "
                f"{np.dtype(dtype).name} {shape} array on cuda:{self.device_index} (see "
                "make_outputs())"
            )
        return _address(arr)

    def step_bound(
        self, actions: Any, bound: tuple[int, ...], check: bool = True, stream: int | None = None
    ) -> None:
        """One step into the arrays of ``bound`` (from :meth:`bind_outputs`); ``actions`` an
        int64 [N, K] contiguous device array (:meth:`prepare_actions`); ``stream``: torch's
        current stream handle when the caller has read it. ``check=False``: no host read of
        the error word (inside a CUDA graph capture)."""
        self._launch("portfolio_step", _address(actions), *bound, stream=stream)
        if check:
            self._steps_since_check += 1
            if self._steps_since_check >= self.error_check_interval:
                self.check_errors()

    def step_into(
        self,
        actions: Any,
        outputs: PortfolioStepOutputs | dict[str, Any],
        check: bool = True,
        trusted: bool = False,
    ) -> None:
        """One step that writes into ``outputs`` (torch or CuPy arrays on this GPU, as
        :meth:`make_outputs` gives them)."""
        self.step_bound(actions, self.bind_outputs(outputs, trusted), check)

    def step(self, actions: Any) -> PortfolioStepOutputs:
        out = self._new_outputs()
        self.step_bound(actions, self.bind_outputs(out, trusted=True))
        return out

    def check_errors(self) -> None:
        """Raise ValueError for an invalid action recorded on the device (synchronises)."""
        self._steps_since_check = 0
        with self._device, self.stream():
            err = self._error.get()
            if err[0]:
                self._error[...] = 0
                raise ValueError(
                    f"actions[{int(err[1])}, {int(err[2])}] = {int(err[3])} is invalid: allowed "
                    f"is 0..{self.n_levels - 1} (recorded on the GPU; that env skipped the step)"
                )

    def set_autoreset_mode(self, mode: Any) -> None:
        super().set_autoreset_mode(mode)
        with self._device, self.stream():
            self._pi[PORTFOLIO_INT_PARAMS.index("autoreset_mode")] = self.params.autoreset_mode


def _torch_dtype(torch: Any, dtype: np.dtype) -> Any:
    """The torch dtype of a NumPy one (the output dtypes: float32/64, int32, bool)."""
    return {
        np.dtype(np.float32): torch.float32,
        np.dtype(np.float64): torch.float64,
        np.dtype(np.int32): torch.int32,
        np.dtype(np.bool_): torch.bool,
    }[np.dtype(dtype)]


__all__ = ["PORTFOLIO_KERNEL_FILE", "PortfolioCudaBackend", "portfolio_module_spec"]
