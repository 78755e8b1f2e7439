"""The portfolio kernels' CUDA source run on the CPU: a C++ emulation of their thread blocks.

``kernels/portfolio_step.cu`` is compiled by the host C++ compiler with the generated
``#define`` lines and a small header that maps what the kernels use of CUDA onto C++20: each
block runs as ``blockDim.x`` ``std::thread``s meeting at a ``std::barrier`` for
``__syncthreads``, blocks one after another (so ``__shared__`` arrays are function statics), and
the atomics are GCC's. Floating-point contraction is off, as ``--fmad=false`` keeps it off on
the GPU, so the float64 results are the source's operations correctly rounded, as on the device.

:class:`HostPortfolioKernels` launches the three kernels with arguments packed in the order of
``PORTFOLIO_KERNEL_PARAMS``, so a test that compares it with the NumPy reference also checks the
Python description of the parameter lists.
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from gpu_runtime.device import INCLUDE_DIR
from gpu_trading_env.backends.portfolio_base import PortfolioBackend
from gpu_trading_env.backends.portfolio_cuda import PORTFOLIO_KERNEL_FILE
from gpu_trading_env.backends.portfolio_numpy import PortfolioNumpyBackend
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

CXX = shutil.which("g++") or shutil.which("clang++")

HOST_CUDA_HEADER = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>
using std::min; using std::max;
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(x)
#define __restrict__
#define __shared__ static
struct dim3_ { unsigned int x; };
static thread_local dim3_ threadIdx;
static dim3_ blockIdx, blockDim;
static std::barrier<>* block_barrier;
static inline void __syncthreads() { block_barrier->arrive_and_wait(); }
static inline unsigned int __umulhi(unsigned int a, unsigned int b) {
    return (unsigned int)(((unsigned long long)a * b) >> 32);
}
static inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long cmp,
                                           unsigned long long val) {
    __atomic_compare_exchange_n(p, &cmp, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
static inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
"""


def _launcher(name: str) -> str:
    """C++ of ``launch_<name>(grid, block, args)``: the kernel over ``grid`` blocks, one after
    another, each a team of threads; ``args[k]`` points at parameter k's value."""
    casts = []
    for k, (_, ctype) in enumerate(PORTFOLIO_KERNEL_PARAMS[name]):
        casts.append(f"*({ctype}*)args[{k}]")
    call = f"{name}({', '.join(casts)})"
    return f"""
extern "C" void launch_{name}(int grid, int block, void** args) {{
    blockDim.x = (unsigned int)block;
    for (int b = 0; b < grid; ++b) {{
        blockIdx.x = (unsigned int)b;
        std::barrier<> barrier(block);
        block_barrier = &barrier;
        std::vector<std::thread> team;
        for (int t = 0; t < block; ++t) team.emplace_back([=] {{ threadIdx.x = (unsigned int)t; {call}; }});
        for (auto& th : team) th.join();
    }}
}}
"""


def build_host_library(folder: Path) -> Path:
    """Compile the kernels for the host into ``folder`` (once per source text); its path."""
    if CXX is None:
        raise RuntimeError("no host C++ compiler (g++ or clang++) on PATH")
    defines = "".join(f"#define {k} {v}\n" for k, v in portfolio_kernel_defines())
    code = (
        HOST_CUDA_HEADER
        + defines
        + PORTFOLIO_KERNEL_FILE.read_text()
        + "".join(_launcher(name) for name in PORTFOLIO_KERNEL_PARAMS)
    )
    digest = hashlib.sha256(
        (code + (PORTFOLIO_KERNEL_FILE.parent / "portfolio_env.cuh").read_text()).encode()
    )
    lib = folder / f"portfolio_host_{digest.hexdigest()[:16]}.so"
    if not lib.exists():
        source = folder / "portfolio_host.cpp"
        source.write_text(code)
        cmd = [
            CXX,
            "-std=c++20",
            "-O1",
            "-ffp-contract=off",
            "-fno-fast-math",
            "-shared",
            "-fPIC",
            "-pthread",
            "-Wno-unknown-pragmas",
            f"-I{PORTFOLIO_KERNEL_FILE.parent}",
            f"-I{INCLUDE_DIR}",
            str(source),
            "-o",
            str(lib),
        ]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"host build of the portfolio kernels failed:\n{result.stderr}")
    return lib


_SCALARS = {"int": ctypes.c_int, "long long": ctypes.c_longlong}


class HostPortfolioKernels:
    """The three portfolio kernels of a host build, launched on NumPy arrays."""

    def __init__(self, library: Path) -> None:
        self._lib = ctypes.CDLL(str(library))
        for name in PORTFOLIO_KERNEL_PARAMS:
            fn = getattr(self._lib, f"launch_{name}")
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
            fn.restype = None

    def launch(self, name: str, grid: int, block: int, args: tuple[Any, ...]) -> None:
        """Kernel ``name`` over ``grid`` x ``block`` threads; ``args`` in the order of
        ``PORTFOLIO_KERNEL_PARAMS[name]``: contiguous NumPy arrays for pointers, ints for
        scalars."""
        signature = PORTFOLIO_KERNEL_PARAMS[name]
        if len(args) != len(signature):
            raise ValueError(f"{name} takes {len(signature)} arguments, got {len(args)}")
        keep = []
        slots = (ctypes.c_void_p * len(args))()
        for k, ((pname, ctype), value) in enumerate(zip(signature, args, strict=True)):
            if ctype.endswith("*"):
                if not (isinstance(value, np.ndarray) and value.flags.c_contiguous):
                    raise TypeError(f"{name} argument {pname}: a contiguous NumPy array")
                holder = ctypes.c_void_p(value.ctypes.data)
            else:
                holder = _SCALARS[ctype](int(value))
            keep.append(holder)
            slots[k] = ctypes.cast(ctypes.pointer(holder), ctypes.c_void_p)
        getattr(self._lib, f"launch_{name}")(grid, block, slots)


class HostPortfolioBackend(PortfolioBackend):
    """A portfolio backend that runs the host build of the kernels on NumPy arrays, with the
    arguments ``PortfolioCudaBackend`` passes (state, market, parameters in the interface's
    order). An invalid action raises at the step that recorded it."""

    xp = np
    device = "cpu"

    def __init__(
        self,
        data: PortfolioData,
        config: PortfolioConfig,
        num_envs: int,
        kernels: HostPortfolioKernels,
        block: int = 32,
    ) -> None:
        super().__init__(data, config, num_envs)
        self.kernels = kernels
        self.block = block
        self.grid = -(-self.num_envs // block)
        self.features = np.ascontiguousarray(data.features, dtype=np.float32)
        self.open = np.ascontiguousarray(data.open, dtype=np.float64)
        self.close = np.ascontiguousarray(data.close, dtype=np.float64)
        self._pf, self._pi = portfolio_param_arrays(self.params, data.n_bars, data.n_features)
        self._tables = (np.ascontiguousarray(self.params.exposure), self.params.rate.copy())
        self.error = np.zeros(4, dtype=np.int64)

    def _head(self, market: bool = True) -> tuple[Any, ...]:
        state = tuple(getattr(self.state, f) for f in PORTFOLIO_STATE_FIELDS)
        markets = (self.features, self.open, self.close) if market else ()
        return (*state, *markets, self._pf, self._pi, *self._tables)

    def seed(self, seeds: np.ndarray, mask: np.ndarray) -> None:
        mask = np.asarray(mask, dtype=bool)
        self.state.seed[mask] = np.asarray(seeds, dtype=np.uint64)[mask]
        self.state.episode_count[mask] = 0

    def reset(self, mask: Any, start_index: Any) -> np.ndarray:
        m = np.ascontiguousarray(mask, dtype=np.bool_)
        si = np.ascontiguousarray(start_index, dtype=np.int64)
        args = (*self._head(market=False), m, si, self.num_envs)
        self.kernels.launch("portfolio_reset", self.grid, self.block, args)
        return self.observe()

    def observe(self) -> np.ndarray:
        obs = np.empty((self.num_envs, self.obs_dim), dtype=np.float32)
        args = (*self._head(), obs, self.num_envs)
        self.kernels.launch("portfolio_observe", self.grid, self.block, args)
        return obs

    def prepare_actions(self, actions: Any) -> np.ndarray:
        a = PortfolioNumpyBackend.prepare_actions(self, actions)  # type: ignore[arg-type]
        return np.ascontiguousarray(a)

    def step(self, actions: Any) -> PortfolioStepOutputs:
        out = allocate_portfolio_outputs(np, self.num_envs, self.n_instruments, self.obs_dim)
        arrays = tuple(getattr(out, f) for f in PORTFOLIO_OUTPUT_FIELDS)
        args = (*self._head(), np.ascontiguousarray(actions), *arrays, self.error, self.num_envs)
        self.kernels.launch("portfolio_step", self.grid, self.block, args)
        if self.error[0]:
            _, i, k, v = (int(x) for x in self.error)
            self.error[...] = 0
            raise ValueError(f"actions[{i}, {k}] = {v} is invalid (recorded by the kernel)")
        return out

    def set_autoreset_mode(self, mode: Any) -> None:
        super().set_autoreset_mode(mode)
        self._pi[PORTFOLIO_INT_PARAMS.index("autoreset_mode")] = self.params.autoreset_mode
