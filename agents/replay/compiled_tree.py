"""The NumPy sum/min tree's descent and leaf writes, compiled with numba (the ``cpu-replay``
extra: ``pip install gpu-trading-env[cpu-replay]``).

:class:`~agents.replay.numpy_tree.NumpySumMinTree` uses these kernels when numba imports and
its own NumPy code otherwise; the NumPy code is the reference. Both follow the rules of
:mod:`agents.replay.sum_min_tree` with the same float64 operations on the same operands (a
parent is ``left + right`` and ``min(left, right)`` of its two children; a draw loses the left
sum by one subtraction per level), so their trees, sampled indices and weights are the same
bits (``tests/test_compiled_tree.py``). What the kernels save is the count of calls: a descent
costs the NumPy tree about five array calls per level (20 levels at capacity 2^20) and a write
about seven per sparse level, a few microseconds each at a batch of 256; here each is one call.

numba is imported when the first tree is built (:func:`kernels_or_none`), not with this module,
so a process that never builds a NumPy tree never pays for the import (about a second) or the
compilation (cached on disk by numba after the first run).
"""

from __future__ import annotations

from types import SimpleNamespace

_KERNELS: SimpleNamespace | None = None
_MISSING: ImportError | None = None  # why numba did not import, once it was tried


def numba_available() -> bool:
    """Whether numba can be imported (without compiling anything)."""
    return kernels_or_none() is not None


def kernels_or_none() -> SimpleNamespace | None:
    """:func:`kernels`, or None when numba is missing or does not import (a numba built for
    another NumPy raises ImportError too); the import is tried once per process."""
    if _KERNELS is None and _MISSING is not None:
        return None
    try:
        return kernels()
    except ImportError:
        return None


def kernels() -> SimpleNamespace:
    """The compiled kernels ``descend`` and ``write_sorted`` (compiled on first call).

    Raises ImportError, naming the extra to install, when numba is missing.
    """
    global _KERNELS, _MISSING
    if _KERNELS is None:
        try:
            import numba
        except ImportError as e:
            _MISSING = e
            raise ImportError(
                "the compiled NumPy sum/min tree needs numba: pip install "
                f"'gpu-trading-env[cpu-replay]' (or pass compiled=False for the NumPy code): {e}"
            ) from e
        _KERNELS = _build(numba)
    return _KERNELS


def _build(numba) -> SimpleNamespace:
    import numpy as np

    def jit(fn):
        try:
            return numba.njit(cache=True, nogil=True)(fn)
        except RuntimeError:  # numba finds no writable cache directory: compile every process
            return numba.njit(nogil=True)(fn)

    @jit
    def descend(sum_tree, u, levels, node_out, leaf_out):  # pragma: no cover - compiled
        """Leaf nodes and values of draws ``u`` (float64 [B], >= 0) by the specification's
        rule: left when the left sum is non-zero and ``u < left`` or the right sum is zero,
        otherwise ``u -= left`` and right.

        Level by level over the whole batch, as the NumPy code goes: the reads of one level
        are independent of each other, so the CPU overlaps their cache misses (the lower levels
        of a tree of 2^20 leaves are not in cache), where a draw-by-draw descent waits for
        each one in turn.
        """
        b = u.shape[0]
        x = u.copy()
        node_out[:] = 1
        for _ in range(levels):
            for i in range(b):
                node = node_out[i] << 1
                left = sum_tree[node]
                if left > 0.0 and (x[i] < left or sum_tree[node + 1] == 0.0):
                    node_out[i] = node
                else:
                    x[i] -= left
                    node_out[i] = node + 1
        for i in range(b):
            leaf_out[i] = sum_tree[node_out[i]]

    @jit
    def write_sorted(sum_tree, min_tree, pow2, levels, idx, vals):  # pragma: no cover
        """Write leaves ``idx`` (non-decreasing; the last of each run of equal indices wins)
        with ``vals`` and recompute their ancestors once each, level by level. Returns False,
        having written nothing, when ``idx`` is not non-decreasing."""
        n = idx.shape[0]
        for i in range(1, n):
            if idx[i] < idx[i - 1]:
                return False
        nodes = np.empty(n, dtype=np.int64)
        m = 0
        for i in range(n):
            if i + 1 < n and idx[i + 1] == idx[i]:
                continue  # a later occurrence of the same leaf wins
            node = idx[i] + pow2
            v = vals[i]
            sum_tree[node] = v
            min_tree[node] = v if v > 0.0 else np.inf
            nodes[m] = node
            m += 1
        for _ in range(levels):
            k = 0
            for i in range(m):
                parent = nodes[i] >> 1
                if k > 0 and nodes[k - 1] == parent:
                    continue  # siblings share their parent: it is recomputed once
                nodes[k] = parent
                k += 1
                child = 2 * parent
                sum_tree[parent] = sum_tree[child] + sum_tree[child + 1]
                a, b = min_tree[child], min_tree[child + 1]
                # np.minimum's result: values are never NaN (validated), never 0 in the min tree.
                min_tree[parent] = a if a <= b else b
            m = k
        return True

    return SimpleNamespace(descend=descend, write_sorted=write_sorted)
