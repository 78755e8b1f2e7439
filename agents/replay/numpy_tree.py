"""The sum/min tree in NumPy: the reference of the specification in
:mod:`agents.replay.sum_min_tree`."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.replay.sum_min_tree import SumMinTree
from gpu_trading_env.gpu.philox import STREAM_PER_SAMPLE, philox4x32, uniform_float64


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

    def to_torch(self, x: Any) -> Any:
        import torch

        return torch.as_tensor(np.asarray(x))

    def from_torch(self, x: Any) -> np.ndarray:
        return x.detach().cpu().numpy()

    def to_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        return self.sum_tree, self.min_tree

    def max_value_host(self) -> float:
        return float(self.max_value[0])
