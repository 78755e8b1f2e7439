"""Access to CuPy and CUDA shared by every GPU path of the project.

CuPy is optional: ``import cupy`` happens here, lazily, so the NumPy backend and the CPU replay
buffer work on machines without CUDA. Kernels live in ``.cu`` files and are compiled by NVRTC
through ``cupy.RawModule`` once per process (CuPy also caches the binaries on disk).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

KERNEL_DIRS = (
    Path(__file__).resolve().parent / "kernels",
    Path(__file__).resolve().parent.parent / "agents" / "kernels",
)
KERNEL_DIR = KERNEL_DIRS[0]


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


@functools.cache
def load_module(
    filename: str, defines: tuple[tuple[str, str], ...] = (), options: tuple[str, ...] = ()
) -> Any:
    """Compile ``filename`` (found in a kernel folder) with NVRTC once and return the RawModule.

    ``defines`` are prepended as ``#define NAME VALUE`` lines, which is how generated constants
    (parameter slots shared with Python) reach the kernel source.
    """
    cp = require_cupy(f"compiling {filename}")
    for folder in KERNEL_DIRS:
        path = folder / filename
        if path.exists():
            break
    else:
        raise FileNotFoundError(f"kernel file {filename!r} not found in {KERNEL_DIRS}")
    header = "".join(f"#define {k} {v}\n" for k, v in defines)
    source = header + path.read_text()
    opts = ("--std=c++17", *options, *(f"-I{d}" for d in KERNEL_DIRS))
    return cp.RawModule(code=source, options=opts)


def torch_current_stream_for_cupy() -> Any:
    """A CuPy stream object wrapping torch's current CUDA stream.

    Launching CuPy kernels on it orders them with torch's own work, so tensors exchanged by
    DLPack never race. ``cupy.cuda.Stream.from_external`` is used where present (CuPy 14);
    ``ExternalStream`` is the fallback for older CuPy.
    """
    import torch

    cp = require_cupy("sharing torch's CUDA stream")
    ts = torch.cuda.current_stream()
    from_external = getattr(cp.cuda.Stream, "from_external", None)
    if from_external is not None:
        # torch streams implement the __cuda_stream__ protocol that from_external reads.
        try:
            return from_external(ts)
        except TypeError:
            pass
    return cp.cuda.ExternalStream(ts.cuda_stream, ts.device.index)
