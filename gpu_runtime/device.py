"""Access to CuPy and CUDA shared by every GPU path of the project.

CuPy is optional: ``import cupy`` happens here, lazily, so the NumPy backend and the CPU replay
buffer work on machines without CUDA. Kernels live in ``.cu`` files and are compiled by NVRTC
through ``cupy.RawModule`` once per process (CuPy also caches the binaries on disk).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# Headers of this layer (philox.cuh) that kernels of either package include.
INCLUDE_DIR = Path(__file__).resolve().parent / "kernels"


def to_numpy(x: Any) -> Any:
    """One host copy of a torch tensor (any device) or a CuPy array; anything else array-like
    through ``np.asarray``."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if hasattr(x, "get") and not isinstance(x, np.ndarray | dict):
        return x.get()
    return np.asarray(x)


@functools.cache
def cupy_or_none() -> Any | None:
    """The ``cupy`` module when it imports and sees a CUDA device, else ``None``."""
    try:
        import cupy
    except Exception:  # ImportError, or a CUDA runtime that fails to load
        return None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:
        return None
    return cupy


def cuda_available() -> bool:
    """True when CuPy imports and at least one CUDA device is visible."""
    return cupy_or_none() is not None


def cuda_index(device: str) -> int | None:
    """The device number of ``"cuda:N"``; None for ``"cuda"`` (CuPy's current device)."""
    name = str(device)
    if ":" not in name:
        return None
    number = name.split(":", 1)[1]
    if not number.isdigit():
        raise ValueError(f"device = {device!r} is invalid: allowed is 'cuda' or 'cuda:N'")
    return int(number)


def require_cupy(what: str) -> Any:
    """Return ``cupy`` or raise a RuntimeError that says how to get it."""
    cp = cupy_or_none()
    if cp is None:
        raise RuntimeError(
            f"{what} needs a CUDA GPU and CuPy; none was found. Install the extra that matches "
            "your CUDA driver (pip install 'gpu-trading-env[cuda12]' or "
            "'gpu-trading-env[cuda13]'), or use device='cpu'."
        )
    return cp


ModuleSpec = tuple[Path, tuple[tuple[str, str], ...], tuple[str, ...], tuple[Path, ...]]

# Compiled modules by (source, defines, options, include_dirs) and current device, and a lock
# per key: a module compiled on a background thread (compile_in_background) is waited for, not
# compiled twice, by the thread that needs it.
_MODULES: dict[tuple[ModuleSpec, int], Any] = {}
_MODULE_LOCKS: dict[tuple[ModuleSpec, int], threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def load_module(
    source: Path,
    defines: tuple[tuple[str, str], ...] = (),
    options: tuple[str, ...] = (),
    include_dirs: tuple[Path, ...] = (),
) -> Any:
    """Compile the kernel file ``source`` with NVRTC once per device and return the RawModule,
    loaded on the current device.

    ``defines`` are prepended as ``#define NAME VALUE`` lines, which is how generated constants
    (parameter slots shared with Python) reach the kernel source. ``include_dirs`` are searched
    for ``#include "..."`` after the source's own folder and :data:`INCLUDE_DIR`.
    """
    source = Path(source)
    cp = require_cupy(f"compiling {source.name}")
    key = (
        (source, tuple(defines), tuple(options), tuple(include_dirs)),
        cp.cuda.runtime.getDevice(),
    )
    with _LOCKS_GUARD:
        lock = _MODULE_LOCKS.setdefault(key, threading.Lock())
    with lock:
        module = _MODULES.get(key)
        if module is None:
            if not source.exists():
                raise FileNotFoundError(f"kernel file {str(source)!r} not found")
            header = "".join(f"#define {k} {v}\n" for k, v in defines)
            code = header + source.read_text()
            folders = (source.parent, INCLUDE_DIR, *include_dirs)
            opts = ("--std=c++17", *options, *(f"-I{d}" for d in folders))
            module = cp.RawModule(code=code, options=opts)
            module.compile()  # NVRTC and the load on this device here, under the key's lock
            _MODULES[key] = module
    return module


def compiled_modules() -> list[tuple[ModuleSpec, int]]:
    """``(spec, device index)`` of every module :func:`load_module` has compiled in this
    process, in the order they finished."""
    return list(_MODULES)


def compile_in_background(specs: Sequence[ModuleSpec], device_index: int) -> list[threading.Thread]:
    """Start compiling each of ``specs`` (:func:`load_module`'s arguments) for device
    ``device_index``, one thread each, and return the threads.

    NVRTC releases the GIL, so the kernels of a first run on a new machine (seconds of
    compilation, docs/PERFORMANCE.md) compile side by side and beside the Python work before
    their first use; :func:`load_module` then waits for a module still
    compiling. A failure is left to that call to raise (it compiles again). Nothing happens
    without CuPy and a CUDA device.
    """
    cp = cupy_or_none()
    if cp is None:
        return []

    def work(spec: ModuleSpec) -> None:
        try:
            with cp.cuda.Device(device_index):
                load_module(*spec)
        except Exception:  # the caller's own load_module raises it, with its context
            pass

    threads = [
        threading.Thread(target=work, args=(spec,), name=f"nvrtc {spec[0].name}", daemon=True)
        for spec in specs
    ]
    for t in threads:
        t.start()
    return threads


_STREAMS: dict[tuple[int, int], Any] = {}


@functools.cache
def _raw_stream_getter() -> Any | None:
    """A function ``device_index -> cudaStream_t`` of torch's current stream, or None.

    ``torch._C._cuda_getCurrentRawStream`` returns the handle as an int in well under a
    microsecond; ``torch.cuda.current_stream()`` builds a Stream object first (a few
    microseconds), which matters on paths that launch every few microseconds.
    """
    try:
        import torch
    except ImportError:  # torch is a dependency, but keep CuPy usable alone
        return None
    if not torch.cuda.is_available():
        return None
    fast = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # noqa: SLF001 (see above)
    if fast is not None:
        return fast
    return lambda device_index: torch.cuda.current_stream(device_index).cuda_stream


def _wrap_torch_stream(cp: Any, device_index: int) -> Any:
    import torch

    ts = torch.cuda.current_stream(device_index)
    from_external = getattr(cp.cuda.Stream, "from_external", None)  # CuPy >= 14
    if from_external is not None:
        try:  # torch streams implement the __cuda_stream__ protocol that from_external reads
            return from_external(ts)
        except TypeError:
            pass
    return cp.cuda.ExternalStream(ts.cuda_stream, device_index)


def current_stream(device_index: int) -> tuple[Any, int]:
    """``(cupy_stream, handle)`` for torch's current CUDA stream on ``device_index``.

    Every CuPy kernel and allocation of the project runs on it, so torch tensors handed over by
    DLPack or by pointer never race with our kernels. The CuPy wrapper of each torch stream is
    made once and cached by (device, handle). Without torch CUDA: CuPy's current stream.
    """
    get = _raw_stream_getter()
    if get is None:
        cp = require_cupy("a CUDA stream")
        stream = cp.cuda.get_current_stream()
        return stream, int(stream.ptr)
    handle = int(get(device_index))
    stream = _STREAMS.get((device_index, handle))
    if stream is None:
        cp = require_cupy("sharing torch's CUDA stream")
        stream = _STREAMS[(device_index, handle)] = _wrap_torch_stream(cp, device_index)
    return stream, handle


# Kernel parameter types of KernelLauncher (C: pointer, long long, int, unsigned int, double)
# and the 8-byte slot each is packed into (little-endian, zero padded).
PTR, I64, I32, U32, F64 = "ptr", "i64", "i32", "u32", "f64"
_ARG_FORMATS = {PTR: "Q", I64: "q", I32: "i4x", U32: "I4x", F64: "d"}
_CUDA_ERROR_INVALID_CONTEXT = 201

KernelParams = tuple[tuple[str, str], ...]
"""A kernel's parameters in order, as ``(name, type)`` with type one of PTR, I64, I32, U32, F64."""


class KernelLauncher:
    """Launch one compiled kernel through the CUDA driver with a reusable argument block.

    ``RawKernel.__call__`` converts each argument on every call, which on a kernel with a dozen
    arguments costs more host time than the launch itself. Here the argument values are packed
    by one ``struct.pack_into`` into a fixed buffer whose slot addresses were computed once, and
    ``cuLaunchKernel`` reads them from there (it copies them at launch, so the buffer can be
    refilled at once).

    :param kernel: a ``cupy.RawKernel`` (for instance from ``RawModule.get_function``).
    :param params: the kernel's parameters in order, ``(name, type)`` pairs (see
        :data:`KernelParams`); a pointer is passed as an int address. Calls pass the values
        positionally in this order (no per-call name lookup on the hot path).
    :param device_index: the device the kernel's module belongs to.
    """

    def __init__(self, kernel: Any, params: KernelParams, device_index: int) -> None:
        import ctypes
        import struct

        unknown = {t for _, t in params} - set(_ARG_FORMATS)
        if unknown:
            raise ValueError(f"parameter types must be in {sorted(_ARG_FORMATS)}, got {unknown}")
        self.params = tuple(params)
        signature = [t for _, t in params]
        cp = require_cupy("launching a kernel")
        self._launch = cp.cuda.driver.launchKernel
        self._function = int(kernel.kernel.ptr)
        self._device_index = int(device_index)
        self._struct = struct.Struct("<" + "".join(_ARG_FORMATS[c] for c in signature))
        self._buffer = ctypes.create_string_buffer(8 * max(1, len(signature)))
        base = ctypes.addressof(self._buffer)
        self._params = (ctypes.c_void_p * max(1, len(signature)))(
            *(base + 8 * k for k in range(len(signature)))
        )
        self._params_ptr = ctypes.addressof(self._params)

        self._leading = 0
        self._rest_struct = self._struct

    def set_leading(self, *values: Any) -> None:
        """Pack the first ``len(values)`` parameters once, for :meth:`launch_rest`.

        A kernel whose leading arguments stay the same from launch to launch (the env step's
        state, market and parameter addresses) then packs only the rest per launch: the driver
        copies the whole block at each launch, so the packed values stay valid until the next
        ``set_leading`` or ``__call__`` overwrites them.
        """
        import struct

        k = len(values)
        if k > len(self.params):
            raise ValueError(f"{k} leading values for a kernel of {len(self.params)} parameters")
        formats = [_ARG_FORMATS[t] for _, t in self.params]
        struct.Struct("<" + "".join(formats[:k])).pack_into(self._buffer, 0, *values)
        self._leading = k
        self._rest_struct = struct.Struct("<" + "".join(formats[k:]))

    def launch_rest(self, grid: int, block: int, stream: int, *rest: Any) -> None:
        """Launch with the leading values of :meth:`set_leading` and ``rest``, the values of
        the remaining parameters in order."""
        self._rest_struct.pack_into(self._buffer, 8 * self._leading, *rest)
        self._go(grid, block, stream)

    def __call__(self, grid: int, block: int, stream: int, *args: Any) -> None:
        """Launch ``grid`` blocks of ``block`` threads on the stream handle ``stream``; ``args``
        are the values of :attr:`params`, in order."""
        self._struct.pack_into(self._buffer, 0, *args)
        # Every slot was overwritten: a launch_rest needs set_leading again.
        self._leading = 0
        self._rest_struct = self._struct
        self._go(grid, block, stream)

    def _go(self, grid: int, block: int, stream: int) -> None:
        try:
            self._launch(self._function, grid, 1, 1, block, 1, 1, 0, stream, self._params_ptr, 0)
        except Exception as exc:
            # A thread that never made a runtime call has no current context yet: bind the
            # device's primary context (what the CUDA runtime does lazily) and launch again.
            if getattr(exc, "status", None) != _CUDA_ERROR_INVALID_CONTEXT:
                raise
            cp = require_cupy("launching a kernel")
            cp.cuda.runtime.setDevice(self._device_index)
            self._launch(self._function, grid, 1, 1, block, 1, 1, 0, stream, self._params_ptr, 0)
