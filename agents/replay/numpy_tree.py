"""The sum/min tree in NumPy: the reference of the specification in
:mod:`agents.replay.sum_min_tree`."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.replay.sum_min_tree import SumMinTree
from gpu_runtime.philox import STREAM_PER_SAMPLE, philox4x32, uniform_float64

# Tree levels of at most this many nodes (or 4x the batch) are recomputed whole on a write:
# below a few thousand nodes one contiguous pass costs less than gathering the touched ones.
DENSE_LEVEL_NODES = 2048


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
    """The tree in NumPy (the specification is in :mod:`agents.replay.sum_min_tree`)."""

    backend = "numpy"

    def __init__(self, capacity: int, seed: int = 0) -> None:
        super().__init__(capacity, seed)
        self.sum_tree = np.zeros(2 * self.pow2, dtype=np.float64)
        self.min_tree = np.full(2 * self.pow2, np.inf, dtype=np.float64)
        self.max_value = np.ones(1, dtype=np.float64)
        # Row n of a pair view holds node n's children (2n, 2n+1): one gather per level.
        self._sum_pairs = self.sum_tree.reshape(-1, 2)
        self._min_pairs = self.min_tree.reshape(-1, 2)

    def reset(self) -> None:
        self.sum_tree[:] = 0.0
        self.min_tree[:] = np.inf
        self.max_value[:] = 1.0
        self.sample_calls = 0

    def _write(self, leaf_idx: np.ndarray, vals: np.ndarray) -> None:
        """Write leaves (unique, ascending indices) and recompute their ancestors.

        A parent is recomputed from its two children, read as one row of the pair view
        (``tree.reshape(-1, 2)[n]`` is ``tree[2n], tree[2n+1]``). Levels with few nodes are
        recomputed whole (two array operations, however many nodes were touched; an untouched
        node gets the value it holds); below them only the touched parents are. Siblings give
        the same parent twice, which writes the same value twice.
        """
        nodes = leaf_idx + self.pow2
        self.sum_tree[nodes] = vals
        self.min_tree[nodes] = np.where(vals > 0.0, vals, np.inf)
        sum_pairs, min_pairs = self._sum_pairs, self._min_pairs
        dense = max(DENSE_LEVEL_NODES, 4 * nodes.size)
        level = self.pow2  # nodes of a level: [level, 2 * level); the leaves' is pow2
        while level > 1 and level // 2 > dense:
            level >>= 1
            nodes = nodes >> 1
            pair = sum_pairs.take(nodes, axis=0)
            self.sum_tree[nodes] = pair[:, 0] + pair[:, 1]
            pair = min_pairs.take(nodes, axis=0)
            self.min_tree[nodes] = np.minimum(pair[:, 0], pair[:, 1])
        while level > 1:  # node n's children are row n of the pair views
            level >>= 1
            rows = slice(level, 2 * level)
            np.add(sum_pairs[rows, 0], sum_pairs[rows, 1], out=self.sum_tree[rows])
            np.minimum(min_pairs[rows, 0], min_pairs[rows, 1], out=self.min_tree[rows])

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
        x = np.asarray(self._host_values(values, name), dtype=np.float64).reshape(-1)
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
            v_max = v.max()
            # Reductions first (NaN fails every comparison); the mask only to name a bad entry.
            ok = (
                idx.min() >= 0
                and idx.max() < n_ok
                and x.min() >= 0.0
                and x.max() < np.inf
                and v_max < np.inf
                and v.min() > -np.inf
            )
            if not ok:
                bad = (idx < 0) | (idx >= n_ok) | ~(x >= 0.0) | ~np.isfinite(x) | ~np.isfinite(v)
        if not ok:
            k = int(np.argmax(bad))
            if not check:
                return
            raise self._bad_entry_error(
                k, int(idx[k]), float(x[k]), n_ok, name, alpha, epsilon, transform
            )
        self.max_value[0] = max(self.max_value[0], float(v_max))
        if idx.size > 1:
            step = np.diff(idx)
            if step.min() >= 0:
                # Non-decreasing (as sample() returns them): the last of each run of equal
                # indices is the last occurrence.
                last = np.empty(idx.size, dtype=bool)
                np.not_equal(step, 0, out=last[:-1])
                last[-1] = True
                self._write(idx[last], v[last])
                return
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
        """Leaf nodes of the draws ``u`` (float64 [B], >= 0), by the specification's descent.

        The rule "left when the left sum is non-zero and ``u < left``, or the right sum is
        zero" is first run without its last clause, as "right when ``u >= left``": ``u`` stays
        >= 0 (it only loses a left sum it is at least), so ``u < left`` implies a non-zero left
        sum, and a zero left sum sends ``u`` right under both rules. The two rules differ only
        where ``u >= left`` and the right sum is zero, and that step enters a subtree whose
        leaves are all 0; every other path ends on a non-zero leaf. So the draws that end on a
        zero leaf (rounding at the end of the filled range) are descended again by the full
        rule, and all draws end where the specification puts them.
        """
        node = self._descend_rows(u.copy(), full_rule=False)
        zero = (self.sum_tree.take(node) == 0.0).nonzero()[0]
        if zero.size:
            node[zero] = self._descend_rows(u[zero], full_rule=True)
        return node

    def _descend_rows(self, u: np.ndarray, full_rule: bool) -> np.ndarray:
        """The descent of ``u`` (overwritten); ``full_rule=False`` drops the zero-right clause."""
        node = np.ones(u.shape, dtype=np.int64)
        tree = self.sum_tree
        go_right = np.empty(u.shape, dtype=bool)
        for _ in range(self.levels):
            node <<= 1  # the left child
            left = tree.take(node)
            np.greater_equal(u, left, out=go_right)
            if full_rule:
                go_right &= tree.take(node + 1) != 0.0
            np.subtract(u, left, out=u, where=go_right)
            node += go_right
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
        w = _is_weights(self.sum_tree.take(node), self.min_tree[1], float(beta))
        return node - self.pow2, w.astype(weights_dtype, copy=False)

    def weights(self, indices: Any, beta: float) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        return _is_weights(self.sum_tree[idx + self.pow2], self.min_tree[1], float(beta))

    def to_torch(self, x: Any) -> Any:
        import torch

        return torch.as_tensor(np.asarray(x))

    def from_torch(self, x: Any) -> np.ndarray:
        return x.detach().cpu().numpy()

    def to_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        return self.sum_tree, self.min_tree

    def max_value_host(self) -> float:
        return float(self.max_value[0])
