"""Sum tree and min tree over ``priority**alpha`` for prioritized experience replay: the
specification, and :class:`SumMinTree`, what both implementations share.

One specification, two array backends:

- :class:`~agents.replay.numpy_tree.NumpySumMinTree` (``numpy_tree.py``): NumPy, runs anywhere;
  the reference.
- :class:`~agents.replay.segment_tree.CudaSumMinTree` (``segment_tree.py``): CuPy arrays and
  the CUDA kernels of ``kernels/segment_tree.cu``, launched on torch's current stream.

:class:`SumMinTree` (this module) holds what both share: layout, validation messages, Philox
keys.

Both produce the same sampled indices for the same seed and the same stored values.

**Layout.** ``capacity`` C is rounded up to a power of two P. ``sum_tree`` and ``min_tree`` are
float64 arrays of ``2P`` nodes: node 1 is the root, node ``n`` has children ``2n`` and ``2n+1``,
leaf ``i`` is node ``P + i``. Empty leaves (never written, or the padding ``C <= i < P``) hold 0 in
the sum tree and ``+inf`` in the min tree; a leaf whose value is 0 also holds ``+inf`` in the min
tree, so ``min_tree[1]`` is the smallest *non-zero* leaf, the smallest value that can be sampled.
This is the layout of :meth:`SumMinTree.to_numpy`; on the device, the CUDA tree keeps only every
fourth level up to date (see :class:`~agents.replay.segment_tree.CudaSumMinTree`).

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
from typing import Any

import numpy as np

_MASK64 = (1 << 64) - 1


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class SumMinTree:
    """What both backends share: layout, validation messages, Philox keys, weight formula.

    :param capacity: number of leaves C (any integer >= 1; stored as the next power of two).
    :param seed: 64-bit key of the Philox stream used by :meth:`sample`.
    """

    backend = "abstract"
    # Whether sample_into exists and update never waits for the host, so that a CUDA graph can
    # record both (agents.algorithm.captured_step).
    capturable = False

    def __init__(self, capacity: int, seed: int = 0) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
            raise TypeError(f"capacity must be an int, got {type(capacity).__name__}")
        capacity = int(capacity)
        if capacity < 1 or capacity >= 2**31:
            raise ValueError(f"capacity must be in [1, 2**31), got {capacity}")
        self.capacity = capacity
        self.pow2 = next_pow2(capacity)
        self.levels = self.pow2.bit_length() - 1  # tree depth: log2(P)
        self.seed = int(seed) & _MASK64
        self.sample_calls = 0  # Philox counter words 1-2: one step per sample() call

    # -- shared helpers ---------------------------------------------------------------------
    def _philox_words(self) -> tuple[int, int, int, int]:
        """(k0, k1, c1, c2) for the next sample call; advances the call counter."""
        calls = self.sample_calls & _MASK64
        self.sample_calls += 1
        # The same words as gpu_runtime.philox.split_u64, in plain ints (no NumPy overhead).
        return self.seed & 0xFFFFFFFF, self.seed >> 32, calls & 0xFFFFFFFF, calls >> 32

    @staticmethod
    def _check_scalars(batch_size: int, beta: float) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
            raise TypeError(
                f"batch_size = {batch_size!r} is invalid: allowed is an integer >= 1 "
                f"(got {type(batch_size).__name__})"
            )
        if int(batch_size) < 1:
            raise ValueError(f"batch_size = {batch_size} is invalid: allowed is an integer >= 1")
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

    @staticmethod
    def _host_values(values: Any, name: str) -> np.ndarray:
        """Host ``values`` as a float array; entries that are not numbers (None, strings) are
        named as they are instead of turning into NaN."""
        arr = np.asarray(values)
        if arr.dtype.kind in "biuf":
            return arr
        flat = arr.reshape(-1)
        for k, v in enumerate(flat):
            if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
                v = v.item() if isinstance(v, np.generic) else v
                raise TypeError(
                    f"{name}[{k}] = {v!r} is not allowed: {name} must be finite numbers >= 0"
                )
        return flat.astype(np.float64)

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

    # Exchange with torch (the replay buffer's storage).
    def to_torch(self, x: Any) -> Any:
        """``x`` (an array of this tree's kind, such as :meth:`sample` returns, or anything NumPy
        reads) as a torch tensor on the tree's device, sharing memory where it can."""
        raise NotImplementedError

    def from_torch(self, x: Any) -> Any:
        """The torch tensor ``x``, detached, as :meth:`update` and :meth:`weights` take it on this
        tree's device (a NumPy array for the NumPy tree, a device tensor for the CUDA tree)."""
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
