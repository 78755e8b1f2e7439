"""Sum tree and min tree over ``priority**alpha`` for prioritized experience replay.

One specification, two array backends:

- :class:`NumpySumMinTree`: NumPy, runs anywhere; the reference.
- :class:`CudaSumMinTree`: CuPy arrays and the CUDA kernels of ``agents/kernels/segment_tree.cu``,
  launched on torch's current stream.

Both produce the same sampled indices for the same seed and the same stored values.

**Layout.** ``capacity`` C is rounded up to a power of two P. ``sum_tree`` and ``min_tree`` are
float64 arrays of ``2P`` nodes: node 1 is the root, node ``n`` has children ``2n`` and ``2n+1``,
leaf ``i`` is node ``P + i``. Empty leaves (never written, or the padding ``C <= i < P``) hold 0 in
the sum tree and ``+inf`` in the min tree; a leaf whose value is 0 also holds ``+inf`` in the min
tree, so ``min_tree[1]`` is the smallest *non-zero* leaf, the smallest value that can be sampled.
This is the layout of :meth:`SumMinTree.to_numpy`; on the device, the CUDA tree keeps only every
fourth level up to date (see :class:`CudaSumMinTree`).

**Update** of a batch of B (index, value) pairs: validate (indices in ``[0, n_valid)``, inputs
finite and ``>= 0``, transformed values finite), keep the *last* occurrence of each index, write
the leaves, then recompute level by level only the parents of touched nodes, each exactly once
(no atomics, no races). Each touched node is recomputed from its two children, never adjusted by
a delta, so sums do not drift: the root equals the pairwise float64 sum of the leaves.
Work O(B log C).

**Sampling** of B indices is stratified: draw ``j`` takes ``u_j = (j + U_j) / B * total`` with
``U_j`` in ``[0, 1)`` from Philox4x32-10 keyed by ``(seed, call counter, j, STREAM_PER_SAMPLE)``
and descends from the root: go left when the left sum is non-zero and ``u < left`` (or the right
sum is zero), otherwise subtract the left sum and go right. A node with a non-zero sum always has
a child with a non-zero sum, so the descent always ends on a non-zero leaf, even when rounding
puts ``u`` at or past the total. Work O(B log C); the draws are in non-decreasing leaf order.

**IS weights** ``w_i = (N * P(i))**-beta / max_j (N * P(j))**-beta`` with ``P(i) = v_i / total``;
the maximum weight belongs to the smallest non-zero value, so ``w_i = (v_i / min_tree[1])**-beta``,
in ``(0, 1]``, independent of N and of the total.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from gpu_trading_env.cuda_device import KernelLauncher, current_stream, load_module, require_cupy
from gpu_trading_env.philox import STREAM_PER_SAMPLE, philox4x32, uniform_float64

__all__ = ["SumMinTree", "NumpySumMinTree", "CudaSumMinTree", "make_tree"]

_MASK64 = (1 << 64) - 1


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class SumMinTree:
    """What both backends share: layout, validation messages, Philox keys, weight formula.

    :param capacity: number of leaves C (any integer >= 1; stored as the next power of two).
    :param seed: 64-bit key of the Philox stream used by :meth:`sample`.
    """

    backend = "abstract"

    def __init__(self, capacity: int, seed: int = 0) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
            raise TypeError(f"capacity must be an int, got {type(capacity).__name__}")
        capacity = int(capacity)
        if capacity < 1 or capacity >= 2**31:
            raise ValueError(f"capacity must be in [1, 2**31), got {capacity}")
        self.capacity = capacity
        self.pow2 = _next_pow2(capacity)
        self.levels = self.pow2.bit_length() - 1  # tree depth: log2(P)
        self.seed = int(seed) & _MASK64
        self.sample_calls = 0  # Philox counter words 1-2: one step per sample() call

    # -- shared helpers ---------------------------------------------------------------------
    def _philox_words(self) -> tuple[int, int, int, int]:
        """(k0, k1, c1, c2) for the next sample call; advances the call counter."""
        calls = self.sample_calls & _MASK64
        self.sample_calls += 1
        # The same words as gpu_trading_env.philox.split_u64, in plain ints (no NumPy overhead).
        return self.seed & 0xFFFFFFFF, self.seed >> 32, calls & 0xFFFFFFFF, calls >> 32

    @staticmethod
    def _check_scalars(batch_size: int, beta: float) -> None:
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not (0.0 <= float(beta) <= 1.0):
            raise ValueError(f"beta must be in [0, 1], got {beta}")

    def _bad_entry_error(
        self,
        position: int,
        index: int,
        value: float,
        n_valid: int,
        name: str,
        alpha: float,
        epsilon: float,
        transform: bool,
    ) -> ValueError:
        """The ValueError for the first rejected entry of an update batch."""
        if not (0 <= index < n_valid):
            return ValueError(
                f"indices[{position}] = {index} is out of range: indices must point at filled "
                f"slots, 0 <= index < {n_valid}"
            )
        if not (math.isfinite(value) and value >= 0.0):
            return ValueError(
                f"{name}[{position}] = {value!r} is not allowed: {name} must be finite and >= 0"
                + (" (pass absolute TD errors |td|)" if transform else "")
            )
        return ValueError(
            f"{name}[{position}] = {value!r} gives a priority ({value!r} + {epsilon})**{alpha} "
            "that overflows float64; priorities must be finite"
        )

    def _prepare_count(self, count: int) -> int:
        """``count`` of :meth:`fill_range` as an int (<= 0: nothing to fill), or ValueError."""
        count = int(count)
        if count > self.capacity:
            raise ValueError(f"count must be <= capacity {self.capacity}, got {count}")
        return count

    @staticmethod
    def _check_lengths(n_indices: int, n_values: int, name: str) -> None:
        if n_indices != n_values:
            raise ValueError(
                f"indices and {name} must have the same length, got {n_indices} and {n_values}"
            )

    @staticmethod
    def _prepare_n_valid(n_valid: int | None, capacity: int) -> int:
        n = capacity if n_valid is None else int(n_valid)
        if not (0 <= n <= capacity):
            raise ValueError(f"n_valid must be in [0, {capacity}], got {n_valid}")
        return n

    # -- interface --------------------------------------------------------------------------
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
        """Set leaves ``indices`` to ``(values + epsilon)**alpha`` (``values`` itself by default).

        :param indices: leaf indices, shape [B], integer, ``0 <= i < n_valid``; repeated indices
            keep the value of their last occurrence.
        :param values: shape [B], finite and ``>= 0``.
        :param alpha: exponent applied after adding ``epsilon``.
        :param epsilon: added before the exponent.
        :param n_valid: indices must be below this (default: the capacity).
        :param name: what ``values`` are called in error messages.
        :param check: raise ValueError on a bad entry (the CUDA tree then waits for the
            kernel's verdict on the batch, not for the update itself); with ``check=False`` a
            bad batch is still refused (the tree is left untouched) but silently.
        """
        raise NotImplementedError

    def fill_range(self, start: int, count: int) -> None:
        """Set leaves ``start, ..., start+count-1`` (mod capacity) to the running maximum value.

        This is how new transitions get the max priority; no validation, no host sync.
        """
        raise NotImplementedError

    def sample(self, batch_size: int, beta: float = 0.0, weights_dtype: Any = np.float64):
        """Stratified proportional sample of ``batch_size`` leaves with their IS weights.

        :return: ``(indices, weights)``: int64 [B] and ``weights_dtype`` [B] arrays of the
            backend (NumPy or CuPy), indices in non-decreasing order.
        """
        raise NotImplementedError

    def weights(self, indices: Any, beta: float) -> Any:
        """IS weights ``(v_i / min)**-beta`` of given leaves, float64 [B]."""
        raise NotImplementedError

    def reset(self) -> None:
        """Empty every leaf and set the running maximum back to 1."""
        raise NotImplementedError

    # Host-side views (copies for the CUDA tree: they synchronise).
    def total(self) -> float:
        """Sum of all leaves (the root), float."""
        return float(self.to_numpy()[0][1])

    def min(self) -> float:
        """Smallest non-zero leaf (``inf`` when every leaf is 0)."""
        return float(self.to_numpy()[1][1])

    def leaves(self) -> np.ndarray:
        """Leaf values, float64 [capacity] (a NumPy copy)."""
        return self.to_numpy()[0][self.pow2 : self.pow2 + self.capacity].copy()

    def to_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        """``(sum_tree, min_tree)`` as NumPy float64 arrays of shape [2P]."""
        raise NotImplementedError

    def max_value_host(self) -> float:
        """Running maximum of all values ever written by :meth:`update` (starts at 1)."""
        raise NotImplementedError


def _is_weights(leaf: np.ndarray, min_value: float, beta: float) -> np.ndarray:
    """``(leaf / min)**-beta``; in log space when the ratio overflows (as the CUDA kernel does)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        ratio = leaf / min_value
        w = np.power(ratio, -beta)
        wide = ~(ratio <= np.finfo(np.float64).max)
        if wide.any():
            w[wide] = np.exp(-beta * (np.log(leaf[wide]) - np.log(min_value)))
    return w


class NumpySumMinTree(SumMinTree):
    """The tree in NumPy (see the module docstring for the specification)."""

    backend = "numpy"

    def __init__(self, capacity: int, seed: int = 0) -> None:
        super().__init__(capacity, seed)
        self.sum_tree = np.zeros(2 * self.pow2, dtype=np.float64)
        self.min_tree = np.full(2 * self.pow2, np.inf, dtype=np.float64)
        self.max_value = np.ones(1, dtype=np.float64)

    def reset(self) -> None:
        self.sum_tree[:] = 0.0
        self.min_tree[:] = np.inf
        self.max_value[:] = 1.0
        self.sample_calls = 0

    def _write(self, leaf_idx: np.ndarray, vals: np.ndarray) -> None:
        """Write leaves (unique, ascending indices) and recompute their ancestors once each."""
        nodes = leaf_idx + self.pow2
        self.sum_tree[nodes] = vals
        self.min_tree[nodes] = np.where(vals > 0.0, vals, np.inf)
        for _ in range(self.levels):
            nodes = nodes >> 1
            if nodes.size > 1:  # ascending, so duplicates are adjacent
                keep = np.empty(nodes.size, dtype=bool)
                keep[0] = True
                np.not_equal(nodes[1:], nodes[:-1], out=keep[1:])
                nodes = nodes[keep]
            left = nodes << 1
            self.sum_tree[nodes] = self.sum_tree[left] + self.sum_tree[left + 1]
            self.min_tree[nodes] = np.minimum(self.min_tree[left], self.min_tree[left + 1])

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
        idx = np.asarray(indices).reshape(-1)
        x = np.asarray(values, dtype=np.float64).reshape(-1)
        self._check_lengths(idx.size, x.size, name)
        if idx.size == 0:
            return
        if not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"indices must be integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=False)
        n_ok = self._prepare_n_valid(n_valid, self.capacity)
        transform = not (alpha == 1.0 and epsilon == 0.0)
        with np.errstate(over="ignore", invalid="ignore"):
            v = np.power(x + epsilon, alpha) if transform else x
            bad = (idx < 0) | (idx >= n_ok) | ~(x >= 0.0) | ~np.isfinite(x) | ~np.isfinite(v)
        if bad.any():
            k = int(np.argmax(bad))
            if not check:
                return
            raise self._bad_entry_error(
                k, int(idx[k]), float(x[k]), n_ok, name, alpha, epsilon, transform
            )
        self.max_value[0] = max(self.max_value[0], float(v.max()))
        # Last occurrence wins: np.unique on the reversed batch keeps first (= last) positions.
        uniq, first = np.unique(idx[::-1], return_index=True)
        self._write(uniq, v[::-1][first])

    def fill_range(self, start: int, count: int) -> None:
        count = self._prepare_count(count)
        if count <= 0:
            return
        idx = np.sort((int(start) + np.arange(count, dtype=np.int64)) % self.capacity)
        self._write(idx, np.full(count, self.max_value[0]))

    def _descend(self, u: np.ndarray) -> np.ndarray:
        node = np.ones(u.shape, dtype=np.int64)
        for _ in range(self.levels):
            left_node = node << 1
            left = self.sum_tree[left_node]
            right = self.sum_tree[left_node + 1]
            go_left = (left > 0.0) & ((u < left) | (right == 0.0))
            u = np.where(go_left, u, u - left)
            node = left_node + (~go_left)
        return node

    def sample(self, batch_size: int, beta: float = 0.0, weights_dtype: Any = np.float64):
        self._check_scalars(batch_size, beta)
        total = self.sum_tree[1]
        if not total > 0.0:
            raise ValueError("cannot sample from a tree whose values are all 0 (empty buffer)")
        b = int(batch_size)
        k0, k1, c1, c2 = self._philox_words()
        j = np.arange(b, dtype=np.int64)
        r = philox4x32(j.astype(np.uint32), c1, c2, STREAM_PER_SAMPLE, k0, k1)
        u = (j + uniform_float64(r[0], r[1])) / float(b) * total
        node = self._descend(u)
        w = _is_weights(self.sum_tree[node], self.min_tree[1], float(beta))
        return node - self.pow2, w.astype(weights_dtype, copy=False)

    def weights(self, indices: Any, beta: float) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        return _is_weights(self.sum_tree[idx + self.pow2], self.min_tree[1], float(beta))

    def to_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        return self.sum_tree, self.min_tree

    def max_value_host(self) -> float:
        return float(self.max_value[0])


_CHECK_THREADS = 1024  # entries per block of the check kernel (one per thread)
_MIN_CHUNK, _MAX_CHUNK = 128, 1024  # entries per block of the levels kernel
_SAMPLE_THREADS = 256
_SMEM_KEYS = 4096  # ST_SMEM_KEYS of segment_tree.cu: the largest batch updated in one launch
_UPDATE_THREADS = 256  # ST_UPDATE_THREADS of segment_tree.cu
_VERDICT_POLLS = 2000  # reads of the verdict word (about 0.1 µs each) before waiting on the stream
_GROUP = 4  # ST_GROUP of segment_tree.cu: levels between stored levels
_WEIGHT_THREADS = 256

# Kernel parameter codes (see KernelLauncher): p pointer, q int64, i int32, I uint32, d float64.
_SIGNATURES = {
    "seg_tree_check": "ppqiddqpppIppp",
    "seg_tree_levels": "ppppqqqiiddqppppp",
    "seg_tree_sample": "ppqiqIIIIdpp",
    "seg_tree_sample_dev": "ppqiqIIpppp",
    "seg_tree_update": "ppppqqiiddiqpppIp",
}


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
            # Check kernel: first bad position, bits of the largest value, unsorted, ticket.
            self._scratch = cp.asarray(np.array([np.iinfo(np.int64).max, 0, 0, 0], np.int64))
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
            module = load_module("segment_tree.cu")
            self._launchers = {
                f"{base}_{sfx}": KernelLauncher(
                    module.get_function(f"{base}_{sfx}"), sig, self.device
                )
                for base, sig in _SIGNATURES.items()
                for sfx in ("f32", "f64")
            }
            self._k_weights = module.get_function("seg_tree_weights")
        self._ptrs = (self.sum_tree.data.ptr, self.min_tree.data.ptr)

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
            x = np.asarray(x)
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
    ) -> None:
        # Chunks of c entries, c the smallest power of two >= 128 with c * c >= n (at most
        # 1024): enough blocks to spread the work, few enough boundaries that the finishing
        # block handles all of them in one pass per level group.
        chunk = min(_MAX_CHUNK, max(_MIN_CHUNK, 1 << ((max(n, 1) - 1).bit_length() + 1) // 2))
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
        cp = self._cp
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
            if n <= _SMEM_KEYS:  # one launch
                # Whether (x + eps)**alpha can overflow for a finite x >= 0 (else every block
                # of the kernel checks the indices and inputs only).
                may_overflow = transform and not (0.0 <= alpha <= 1.0 and 0.0 <= epsilon < 1e290)
                self._launchers["seg_tree_update_f32" if f32 else "seg_tree_update_f64"](
                    (n + _UPDATE_THREADS - 1) // _UPDATE_THREADS,
                    _UPDATE_THREADS,
                    stream,
                    *self._ptrs,
                    idx_ptr,
                    x_ptr,
                    n,
                    self.pow2,
                    self.levels,
                    int(transform),
                    alpha,
                    epsilon,
                    int(may_overflow),
                    n_ok,
                    self.max_value.data.ptr,
                    self._status.data.ptr,
                    self._status_host.ctypes.data,
                    seq,
                    self._ticket.data.ptr,
                )
            else:  # check (and sort) first, then write
                if self._keys.size < n:  # room to sort an unsorted batch
                    with cstream:
                        self._keys = cp.zeros(_next_pow2(n), dtype=cp.uint64)
                self._launchers["seg_tree_check_f32" if f32 else "seg_tree_check_f64"](
                    (n + _CHECK_THREADS - 1) // _CHECK_THREADS,
                    _CHECK_THREADS,
                    stream,
                    idx_ptr,
                    x_ptr,
                    n,
                    int(transform),
                    alpha,
                    epsilon,
                    n_ok,
                    self.max_value.data.ptr,
                    self._status.data.ptr,
                    self._status_host.ctypes.data,
                    seq,
                    self._flags.data.ptr,
                    self._keys.data.ptr,
                    self._scratch.data.ptr,
                )
                self._launch_levels(stream, idx_ptr, x_ptr, f32, n, transform, alpha, epsilon, -1)
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
            if value >> 32 == seq:
                return (value & 0xFFFFFFFF) - 1
        self._cp.cuda.runtime.streamSynchronize(stream)
        value = int(word[0])
        if value >> 32 != seq:
            raise RuntimeError(f"update {seq} of the CUDA tree finished without a verdict")
        return (value & 0xFFFFFFFF) - 1

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
                (b + _SAMPLE_THREADS - 1) // _SAMPLE_THREADS,
                _SAMPLE_THREADS,
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
                (b + _SAMPLE_THREADS - 1) // _SAMPLE_THREADS,
                _SAMPLE_THREADS,
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
                    ((n + _WEIGHT_THREADS - 1) // _WEIGHT_THREADS,),
                    (_WEIGHT_THREADS,),
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
            if level % _GROUP == 0:
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
