"""The sum/min tree on a CUDA device: :class:`CudaSumMinTree`, and :func:`make_tree`.

The specification of both trees (layout, update, sampling, IS weights) is the docstring of
:mod:`agents.replay.sum_min_tree`; :class:`~agents.replay.numpy_tree.NumpySumMinTree` is its NumPy
reference. This tree keeps CuPy arrays and runs the kernels of ``kernels/segment_tree.cu``
(``tree_kernels.py``: geometry and parameters) on torch's current stream. Both produce the same
sampled indices for the same seed and the same stored values.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from agents.replay.numpy_tree import NumpySumMinTree
from agents.replay.sum_min_tree import SumMinTree, next_pow2
from agents.replay.tree_kernels import (
    CHECK_THREADS,
    GROUP,
    MAX_CHUNK,
    MIN_CHUNK,
    SAMPLE_THREADS,
    SCRATCH_INIT,
    SMEM_KEYS,
    TREE_KERNEL_PARAMS,
    UPDATE_THREADS,
    VERDICT_SEQ_SHIFT,
    WEIGHT_THREADS,
    tree_module_spec,
)
from gpu_runtime.device import KernelLauncher, current_stream, load_module, require_cupy

__all__ = ["SumMinTree", "NumpySumMinTree", "CudaSumMinTree", "make_tree"]

_VERDICT_POSITION_MASK = (1 << VERDICT_SEQ_SHIFT) - 1
# Reads of the verdict word before waiting on the stream: a read of mapped host memory is far
# cheaper than a stream synchronisation, and most verdicts arrive within these.
_VERDICT_POLLS = 2000


class _UpdateBatch(NamedTuple):
    """One :meth:`CudaSumMinTree.update`'s inputs, as both of its launch paths pass them on."""

    idx: int  # device address of the int64 indices [n]
    x: int  # device address of the values [n]
    f32: bool  # the values are float32 (else float64)
    n: int
    transform: bool  # priorities are (x + epsilon) ** alpha (else x itself)
    alpha: float
    epsilon: float
    n_ok: int  # indices below it are valid
    seq: int  # the update's number, which its verdict carries


def _torch_module() -> Any | None:
    """``torch`` when it is already imported (a tensor argument implies it is)."""
    return sys.modules.get("torch")


class CudaSumMinTree(SumMinTree):
    """The tree on a CUDA device: CuPy arrays, kernels from ``segment_tree.cu``.

    The kernels keep only every fourth level above the leaves (and the root) up to date; the
    arrays :attr:`sum_tree` and :attr:`min_tree` therefore hold stale values on the levels in
    between until a host view (:meth:`to_numpy`, :meth:`leaves`) rebuilds them, bit for bit
    equal to the NumPy tree. Read the tree through those views, not through the raw arrays.

    Kernels run on torch's current stream, so tensors exchanged by DLPack never race. Nothing
    synchronises with the host except :meth:`update` with ``check=True`` and the host views
    (:meth:`to_numpy`, :meth:`total`, ...). ``update(check=True)`` waits only for the verdict
    on the batch, which the kernel writes to pinned, device-mapped host memory before it
    touches the tree; the writes themselves finish asynchronously, in stream order.

    Inputs of :meth:`update` may be CuPy arrays, torch CUDA tensors (read in place, by pointer)
    or anything NumPy reads (copied to the device).

    :param capacity: number of leaves.
    :param seed: Philox key of the sampling stream.
    :param device: CUDA device ordinal (default: CuPy's current device).
    """

    backend = "cuda"
    capturable = True

    def __init__(self, capacity: int, seed: int = 0, device: int | None = None) -> None:
        super().__init__(capacity, seed)
        cp = self._cp = require_cupy("CudaSumMinTree")
        self.device = int(cp.cuda.Device().id if device is None else device)
        self._device_scope = cp.cuda.Device(self.device)
        with cp.cuda.Device(self.device):
            self.sum_tree = cp.zeros(2 * self.pow2, dtype=cp.float64)
            self.min_tree = cp.full(2 * self.pow2, np.inf, dtype=cp.float64)
            self.max_value = cp.ones(1, dtype=cp.float64)
            self._status = cp.full(1, -1, dtype=cp.int64)
            self._flags = cp.zeros(1, dtype=cp.int32)  # 1: the batch was sorted into _keys
            self._ticket = cp.zeros(1, dtype=cp.uint32)  # blocks of the levels kernel done
            self._scratch = cp.asarray(np.array(list(SCRATCH_INIT.values()), np.int64))
            self._keys = cp.zeros(1, dtype=cp.uint64)  # sorted keys of a large unsorted batch
            # The check kernel writes the status word straight into this pinned, device-mapped
            # host memory (same address on both sides), so reading it needs no copy launch.
            flags = cp.cuda.runtime.hostAllocMapped | cp.cuda.runtime.hostAllocPortable
            self._status_mem = cp.cuda.PinnedMemory(8, flags)
            self._status_host = np.frombuffer(
                cp.cuda.PinnedMemoryPointer(self._status_mem, 0), np.uint64, 1
            )
            self._status_host[0] = 0
            self._update_seq = 0  # numbers the updates; the kernels echo it with their verdict
            self._inputs_in_flight: tuple[Any, Any] | None = None
            module = load_module(*tree_module_spec())
            self._launchers = {
                f"{base}_{sfx}": KernelLauncher(
                    module.get_function(f"{base}_{sfx}"), sig, self.device
                )
                for base, sig in TREE_KERNEL_PARAMS.items()
                for sfx in ("f32", "f64")
            }
            self._k_weights = module.get_function("seg_tree_weights")
        self._ptrs = (self.sum_tree.data.ptr, self.min_tree.data.ptr)

    def __getstate__(self) -> dict[str, Any]:
        """Capacity, seed, device, call counter and the full host copies of both trees.

        Kernel handles, streams and the mapped verdict word belong to one process and are
        rebuilt by :meth:`__setstate__`.
        """
        sum_tree, min_tree = self.to_numpy()
        return {
            "capacity": self.capacity,
            "seed": self.seed,
            "device": self.device,
            "sample_calls": self.sample_calls,
            "sum_tree": sum_tree,
            "min_tree": min_tree,
            "max_value": self._host(self.max_value),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["capacity"], seed=state["seed"], device=state["device"])
        cp = self._cp
        with cp.cuda.Device(self.device), current_stream(self.device)[0]:
            self.sum_tree.set(np.asarray(state["sum_tree"], dtype=np.float64))
            self.min_tree.set(np.asarray(state["min_tree"], dtype=np.float64))
            self.max_value.set(np.asarray(state["max_value"], dtype=np.float64))
        self.sample_calls = int(state["sample_calls"])

    def reset(self) -> None:
        cp = self._cp
        with cp.cuda.Device(self.device), current_stream(self.device)[0]:
            self.sum_tree.fill(0.0)
            self.min_tree.fill(np.inf)
            self.max_value.fill(1.0)
        self.sample_calls = 0

    def _device_vector(
        self, x: Any, integer: bool, what: str, stream: Any
    ) -> tuple[Any, int, bool]:
        """``(vector, address, is_float32)``: ``x`` as a contiguous 1-D device vector.

        The vector is int64 (``integer``) or float32/float64. CuPy arrays and torch CUDA
        tensors stay where they are (a cast or copy only when the dtype or layout needs one, on
        ``stream``, the CuPy view of torch's current stream); anything else goes through NumPy
        and is copied to the device.
        """
        cp = self._cp
        if type(x) is cp.ndarray and x.ndim == 1 and x.flags.c_contiguous:  # the common case
            if x.dtype == (np.int64 if integer else np.float32) or (
                not integer and x.dtype == np.float64
            ):
                return x, x.data.ptr, x.dtype == np.float32
        with stream:
            return self._convert(x, integer, what)

    def _convert(self, x: Any, integer: bool, what: str) -> tuple[Any, int, bool]:
        cp = self._cp
        torch = _torch_module()
        if torch is not None and isinstance(x, torch.Tensor) and x.is_cuda:
            if x.device.index != self.device:
                raise ValueError(f"{what} are on {x.device}, the tree on cuda:{self.device}")
            x = x.detach().reshape(-1)
            if integer:
                if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
                    raise TypeError(f"{what} must be integers, got dtype {x.dtype}")
                x = x.to(torch.int64)
            elif x.dtype not in (torch.float32, torch.float64):
                x = x.to(torch.float64)
            x = x.contiguous()
            return x, x.data_ptr(), x.dtype == torch.float32
        if not isinstance(x, cp.ndarray):
            x = np.asarray(x) if integer else self._host_values(x, what)
        if integer:
            if x.dtype.kind not in "iu":
                raise TypeError(f"{what} must be integers, got dtype {x.dtype}")
            x = cp.ascontiguousarray(cp.asarray(x, dtype=cp.int64).reshape(-1))
        else:
            if x.dtype not in (np.float32, np.float64):
                x = x.astype(np.float64)
            x = cp.ascontiguousarray(cp.asarray(x).reshape(-1))
        return x, int(x.data.ptr), x.dtype == np.float32

    def _launch_levels(
        self,
        stream: int,
        idx: int,
        x: int,
        f32: bool,
        n: int,
        transform: bool,
        alpha: float,
        epsilon: float,
        range_start: int,
        range_start_at: int = 0,
    ) -> None:
        # Chunks of c entries, c the smallest power of two >= 128 with c * c >= n (at most
        # 1024): enough blocks to spread the work, few enough boundaries that the finishing
        # block handles all of them in one pass per level group.
        chunk = min(MAX_CHUNK, max(MIN_CHUNK, 1 << ((max(n, 1) - 1).bit_length() + 1) // 2))
        self._launchers["seg_tree_levels_f32" if f32 else "seg_tree_levels_f64"](
            (n + chunk - 1) // chunk,
            chunk,
            stream,
            *self._ptrs,
            idx,
            x,
            n,
            self.capacity,
            self.pow2,
            self.levels,
            int(transform),
            alpha,
            epsilon,
            range_start,
            range_start_at,
            self.max_value.data.ptr,
            self._status.data.ptr,
            self._flags.data.ptr,
            self._keys.data.ptr,
            self._ticket.data.ptr,
        )

    def update(
        self,
        indices: Any,
        values: Any,
        *,
        alpha: float = 1.0,
        epsilon: float = 0.0,
        n_valid: int | None = None,
        name: str = "priorities",
        check: bool = True,
    ) -> None:
        n_ok = self._prepare_n_valid(n_valid, self.capacity)
        with self._device_scope:
            cstream, stream = current_stream(self.device)
            idx, idx_ptr, _ = self._device_vector(indices, True, "indices", cstream)
            x, x_ptr, f32 = self._device_vector(values, False, name, cstream)
            n = int(idx.shape[0])
            self._check_lengths(n, int(x.shape[0]), name)
            if n == 0:
                return
            transform = not (alpha == 1.0 and epsilon == 0.0)
            self._update_seq = seq = (self._update_seq + 1) & 0xFFFFFFFF
            # update() may return before its kernels have read the inputs (it waits for the
            # verdict only): converted inputs stay referenced until the next update.
            self._inputs_in_flight = (idx, x)
            batch = _UpdateBatch(idx_ptr, x_ptr, f32, n, transform, alpha, epsilon, n_ok, seq)
            if n <= SMEM_KEYS:
                self._launch_update(stream, batch)
            else:
                self._launch_check_then_write(cstream, stream, batch)
            if check:
                k = self._wait_verdict(seq, stream)
                if k >= 0:
                    raise self._bad_entry_error(
                        k,
                        int(idx[k].item()),
                        float(x[k].item()),
                        n_ok,
                        name,
                        alpha,
                        epsilon,
                        transform,
                    )

    def _verdict_args(self, b: _UpdateBatch) -> tuple[int, ...]:
        """The arguments both update kernels end their checks with: where the verdict of
        update ``b.seq`` goes (the running maximum, the device and host status words)."""
        return (
            b.n_ok,
            self.max_value.data.ptr,
            self._status.data.ptr,
            self._status_host.ctypes.data,
            b.seq,
        )

    def _launch_update(self, stream: Any, b: _UpdateBatch) -> None:
        """An update of ``b.n <= SMEM_KEYS`` entries in one launch (check, deduplicate, write)."""
        # Whether (x + eps)**alpha can overflow for a finite x >= 0 (else every block of the
        # kernel checks the indices and inputs only).
        may_overflow = b.transform and not (0.0 <= b.alpha <= 1.0 and 0.0 <= b.epsilon < 1e290)
        self._launchers["seg_tree_update_f32" if b.f32 else "seg_tree_update_f64"](
            (b.n + UPDATE_THREADS - 1) // UPDATE_THREADS,
            UPDATE_THREADS,
            stream,
            *self._ptrs,
            b.idx,
            b.x,
            b.n,
            self.pow2,
            self.levels,
            int(b.transform),
            b.alpha,
            b.epsilon,
            int(may_overflow),
            *self._verdict_args(b),
            self._ticket.data.ptr,
        )

    def _launch_check_then_write(self, cstream: Any, stream: Any, b: _UpdateBatch) -> None:
        """An update of more than ``SMEM_KEYS`` entries: check (and sort) first, then write."""
        cp = self._cp
        if self._keys.size < b.n:  # room to sort an unsorted batch
            with cstream:
                self._keys = cp.zeros(next_pow2(b.n), dtype=cp.uint64)
        self._launchers["seg_tree_check_f32" if b.f32 else "seg_tree_check_f64"](
            (b.n + CHECK_THREADS - 1) // CHECK_THREADS,
            CHECK_THREADS,
            stream,
            b.idx,
            b.x,
            b.n,
            int(b.transform),
            b.alpha,
            b.epsilon,
            *self._verdict_args(b),
            self._flags.data.ptr,
            self._keys.data.ptr,
            self._scratch.data.ptr,
        )
        self._launch_levels(stream, b.idx, b.x, b.f32, b.n, b.transform, b.alpha, b.epsilon, -1)

    def status_tensor(self) -> Any:
        """The verdict of the latest :meth:`update` on the device, as a torch view (no copy):
        int64 [1], -1 when the update was accepted, else the first rejected position.

        An update with ``check=False`` reports nowhere else: a caller that never waits (a
        captured train step) folds this word into a flag of its own after each update."""
        return self.to_torch(self._status)

    @contextlib.contextmanager
    def updates_forgotten_on_error(self) -> Iterator[None]:
        """Updates issued in the block do not count when it raises: the update numbering, which
        the kernels echo with their verdict, goes back to what it was (a failed graph capture,
        whose kernels never ran)."""
        seq = self._update_seq
        try:
            yield
        except BaseException:
            self._update_seq = seq
            raise

    def _wait_verdict(self, seq: int, stream: int) -> int:
        """First bad position of update ``seq`` (-1: accepted), as soon as the GPU knows it.

        The kernels write the verdict to host-mapped memory before they touch the tree, so this
        waits for the validation, not for the update to finish (later work on the stream sees
        the finished update anyway). It polls the word briefly; when the GPU is still busy with
        earlier work it waits on the stream instead, which also surfaces CUDA errors.
        """
        word = self._status_host
        for _ in range(_VERDICT_POLLS):
            value = int(word[0])
            if value >> VERDICT_SEQ_SHIFT == seq:
                return (value & _VERDICT_POSITION_MASK) - 1
        self._cp.cuda.runtime.streamSynchronize(stream)
        value = int(word[0])
        if value >> VERDICT_SEQ_SHIFT != seq:
            raise RuntimeError(f"update {seq} of the CUDA tree finished without a verdict")
        return (value & _VERDICT_POSITION_MASK) - 1

    def fill_range(self, start: int, count: int) -> None:
        count = self._prepare_count(count)
        if count <= 0:
            return
        cp = self._cp
        with cp.cuda.Device(self.device):
            stream = current_stream(self.device)[1]
            self._launch_levels(
                stream, 0, 0, False, count, False, 1.0, 0.0, int(start) % self.capacity
            )

    def fill_range_at(self, start_ptr: int, count: int) -> None:
        """:meth:`fill_range` with the first slot read on the device, from the int64 at address
        ``start_ptr``: a launch that a CUDA graph can record while the slot moves every replay.

        The ``count`` slots from there get the running maximum priority; ``count`` is fixed.
        """
        count = self._prepare_count(count)
        if count <= 0:
            return
        with self._cp.cuda.Device(self.device):
            stream = current_stream(self.device)[1]
            self._launch_levels(stream, 0, 0, False, count, False, 1.0, 0.0, 0, int(start_ptr))

    def sample(self, batch_size: int, beta: float = 0.0, weights_dtype: Any = np.float64):
        self._check_scalars(batch_size, beta)
        cp = self._cp
        b = int(batch_size)
        k0, k1, c1, c2 = self._philox_words()
        f32 = np.dtype(weights_dtype) == np.float32
        with self._device_scope:
            cstream, stream = current_stream(self.device)
            with cstream:  # one allocation for both outputs, from the stream's pool
                memory = cp.cuda.alloc(b * (12 if f32 else 16))
            out_idx = cp.ndarray((b,), cp.int64, memory)
            out_w = cp.ndarray((b,), cp.float32 if f32 else cp.float64, memory + 8 * b)
            self._launchers["seg_tree_sample_f32" if f32 else "seg_tree_sample_f64"](
                (b + SAMPLE_THREADS - 1) // SAMPLE_THREADS,
                SAMPLE_THREADS,
                stream,
                *self._ptrs,
                self.pow2,
                self.levels,
                b,
                k0,
                k1,
                c1,
                c2,
                float(beta),
                out_idx.data.ptr,
                out_w.data.ptr,
            )
        if not f32 and np.dtype(weights_dtype) != np.float64:
            with cp.cuda.Device(self.device), current_stream(self.device)[0]:
                out_w = out_w.astype(weights_dtype)
        return out_idx, out_w

    def sample_into(
        self, batch_size: int, calls: int, beta: int, out_idx: int, out_weights: int
    ) -> None:
        """:meth:`sample` with its call counter and beta read from device memory (capturable).

        The draws are those of :meth:`sample` at ``sample_calls == calls[0]``; the caller
        advances ``calls[0]`` (and the host's :attr:`sample_calls`) after the launch. Nothing is
        allocated and nothing waits, so the launch can be recorded in a CUDA graph.

        :param batch_size: B.
        :param calls: address of a uint64 (or int64) holding the sample call counter.
        :param beta: address of a float64 holding the IS exponent, in [0, 1].
        :param out_idx: address of B int64: the sampled leaf indices.
        :param out_weights: address of B float32: the IS weights.
        """
        b = int(batch_size)
        self._check_scalars(b, 0.0)
        with self._device_scope:
            self._launchers["seg_tree_sample_dev_f32"](
                (b + SAMPLE_THREADS - 1) // SAMPLE_THREADS,
                SAMPLE_THREADS,
                current_stream(self.device)[1],
                *self._ptrs,
                self.pow2,
                self.levels,
                b,
                self.seed & 0xFFFFFFFF,
                self.seed >> 32,
                calls,
                beta,
                out_idx,
                out_weights,
            )

    def weights(self, indices: Any, beta: float) -> Any:
        cp = self._cp
        with cp.cuda.Device(self.device), current_stream(self.device)[0]:
            idx = self._convert(indices, True, "indices")[0]
            idx = idx if isinstance(idx, cp.ndarray) else cp.from_dlpack(idx)
            n = int(idx.size)
            out = cp.empty(n, dtype=cp.float64)
            if n:
                self._k_weights(
                    ((n + WEIGHT_THREADS - 1) // WEIGHT_THREADS,),
                    (WEIGHT_THREADS,),
                    (
                        self.sum_tree,
                        self.min_tree,
                        np.int64(self.pow2),
                        idx,
                        np.int64(n),
                        np.float64(beta),
                        out,
                    ),
                )
        return out

    def to_torch(self, x: Any) -> Any:
        import torch

        if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):  # CuPy: no copy
            return torch.from_dlpack(x)
        return torch.as_tensor(np.asarray(x), device=torch.device("cuda", self.device))

    def from_torch(self, x: Any) -> Any:
        import torch

        x = x.detach()
        device = torch.device("cuda", self.device)
        return x if x.device == device else x.to(device)

    def _host(self, x: Any) -> np.ndarray:
        cp = self._cp
        with cp.cuda.Device(self.device), current_stream(self.device)[0]:
            return x.get()

    def _rebuild_inner_levels(self) -> None:
        """Fill the levels the kernels skip (see ``segment_tree.cu``) from the ones below.

        Pairwise float64 sums level by level are what the stored levels already hold, so the
        result is the full binary tree of the NumPy backend, bit for bit.
        """
        cp = self._cp
        for level in range(1, self.levels):
            if level % GROUP == 0:
                continue
            lo = self.pow2 >> level
            s, m = self.sum_tree, self.min_tree
            cp.add(s[2 * lo : 4 * lo : 2], s[2 * lo + 1 : 4 * lo : 2], out=s[lo : 2 * lo])
            cp.minimum(m[2 * lo : 4 * lo : 2], m[2 * lo + 1 : 4 * lo : 2], out=m[lo : 2 * lo])

    def to_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        cp = self._cp
        with cp.cuda.Device(self.device), current_stream(self.device)[0]:
            self._rebuild_inner_levels()
            return self.sum_tree.get(), self.min_tree.get()

    def total(self) -> float:
        return float(self._host(self.sum_tree[1:2])[0])

    def min(self) -> float:
        return float(self._host(self.min_tree[1:2])[0])

    def max_value_host(self) -> float:
        return float(self._host(self.max_value)[0])


def make_tree(backend: str, capacity: int, seed: int = 0, device: int | None = None) -> SumMinTree:
    """``NumpySumMinTree`` for ``backend="numpy"``, ``CudaSumMinTree`` for ``"cuda"``."""
    if backend == "numpy":
        return NumpySumMinTree(capacity, seed)
    if backend == "cuda":
        return CudaSumMinTree(capacity, seed, device)
    raise ValueError(f"backend must be 'numpy' or 'cuda', got {backend!r}")
