"""The sum/min tree in NumPy: the reference of the specification in
:mod:`agents.replay.sum_min_tree`, with its descent and writes compiled by numba where it is
installed (:mod:`agents.replay.compiled_tree`, the same bits)."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.replay import compiled_tree
from agents.replay.sum_min_tree import SumMinTree
from gpu_runtime.philox import STREAM_PER_SAMPLE, philox4x32, uniform_float64

# Tree levels of at most this many nodes (or 4x the batch) are recomputed whole on a write:
# below a few thousand nodes one contiguous pass costs less than gathering the touched ones.
DENSE_LEVEL_NODES = 2048
# Stratified draws computed per Philox pass: the draws of the next DRAW_CACHE // batch sample
# calls at once. A batch of 256 otherwise pays the ~80 array calls of ten Philox rounds on
# every sample; the draws are a pure function of (seed, call counter, j), so computing them
# ahead changes nothing.
DRAW_CACHE = 16384


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
    """The tree in NumPy (the specification is in :mod:`agents.replay.sum_min_tree`).

    :param compiled: run the descent and the leaf writes through numba's compiled kernels
        (:mod:`agents.replay.compiled_tree`): ``None`` (default) when numba is installed (the
        ``cpu-replay`` extra), ``True`` to require it (ImportError without it), ``False`` for
        the NumPy code. Both give the same bits; :attr:`compiled` says which one runs.
    """

    backend = "numpy"

    def __init__(self, capacity: int, seed: int = 0, compiled: bool | None = None) -> None:
        super().__init__(capacity, seed)
        if compiled is not None and not isinstance(compiled, bool):
            raise TypeError(f"compiled must be None, True or False, got {compiled!r}")
        self._compiled_request = compiled
        if compiled is None:
            self._kernels = compiled_tree.kernels_or_none()
        else:
            self._kernels = compiled_tree.kernels() if compiled else None
        self.sum_tree = np.zeros(2 * self.pow2, dtype=np.float64)
        self.min_tree = np.full(2 * self.pow2, np.inf, dtype=np.float64)
        self.max_value = np.ones(1, dtype=np.float64)
        # Row n of a pair view holds node n's children (2n, 2n+1): one gather per level.
        self._sum_pairs = self.sum_tree.reshape(-1, 2)
        self._min_pairs = self.min_tree.reshape(-1, 2)
        # Per level, top down from the leaves' parents: (level size, then the views a whole-level
        # recompute reads and writes), made once rather than on every write.
        self._levels = []
        level = self.pow2
        while level > 1:
            level >>= 1
            rows = slice(level, 2 * level)
            sp, mp = self._sum_pairs[rows], self._min_pairs[rows]
            views = (sp[:, 0], sp[:, 1], self.sum_tree[rows], mp[:, 0], mp[:, 1])
            self._levels.append((level, (*views, self.min_tree[rows])))
        # (seed, batch, first call, unit draws [calls, batch]): see _unit_draws.
        self._draws: tuple[int, int, int, np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Capacity, seed, call counter and both trees: the views over the trees (pair rows,
        per-level views) are rebuilt by :meth:`__setstate__`, since a pickled view comes back
        as a copy that no longer aliases its tree."""
        return {
            "capacity": self.capacity,
            "seed": self.seed,
            "sample_calls": self.sample_calls,
            "sum_tree": self.sum_tree,
            "min_tree": self.min_tree,
            "max_value": self.max_value,
            "compiled": self._compiled_request,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["capacity"], seed=state["seed"], compiled=state.get("compiled"))
        self.sum_tree[:] = state["sum_tree"]
        self.min_tree[:] = state["min_tree"]
        self.max_value[:] = state["max_value"]
        self.sample_calls = int(state["sample_calls"])

    @property
    def compiled(self) -> bool:
        """Whether the descent and the writes run through the numba kernels."""
        return self._kernels is not None

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
        if self._kernels is not None:
            self._kernels.write_sorted(
                self.sum_tree, self.min_tree, self.pow2, self.levels, leaf_idx, vals
            )
            return
        nodes = leaf_idx + self.pow2
        self.sum_tree[nodes] = vals
        self.min_tree[nodes] = np.where(vals > 0.0, vals, np.inf)
        sum_tree, min_tree = self.sum_tree, self.min_tree
        sum_pairs, min_pairs = self._sum_pairs, self._min_pairs
        dense = max(DENSE_LEVEL_NODES, 4 * nodes.size)
        add, minimum = np.add, np.minimum
        for level, (s0, s1, s_out, m0, m1, m_out) in self._levels:
            if level > dense:  # node n's children are row n of the pair views
                nodes = nodes >> 1
                pair = sum_pairs.take(nodes, axis=0)
                sum_tree[nodes] = add(pair[:, 0], pair[:, 1])
                pair = min_pairs.take(nodes, axis=0)
                min_tree[nodes] = minimum(pair[:, 0], pair[:, 1])
            else:  # the whole level, through views made once
                add(s0, s1, out=s_out)
                minimum(m0, m1, out=m_out)

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
        if idx.dtype.kind not in "iu":  # np.issubdtype(dtype, np.integer), without its cost
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
        if self._kernels is not None:
            idx, v = np.ascontiguousarray(idx), np.ascontiguousarray(v)
            # Keeps the last of each run when idx is non-decreasing (as sample() returns them).
            if self._kernels.write_sorted(
                self.sum_tree, self.min_tree, self.pow2, self.levels, idx, v
            ):
                return
        elif idx.size > 1:
            step = idx[1:] - idx[:-1]  # np.diff's arithmetic without its Python wrapper
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
        """Leaf nodes of the draws ``u`` (float64 [B], >= 0); see :meth:`_descend_leaves`."""
        return self._descend_leaves(u)[0]

    def _descend_leaves(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Leaf nodes of the draws ``u`` (float64 [B], >= 0), by the specification's descent.

        The rule "left when the left sum is non-zero and ``u < left``, or the right sum is
        zero" is first run without its last clause, as "right when ``u >= left``": ``u`` stays
        >= 0 (it only loses a left sum it is at least), so ``u < left`` implies a non-zero left
        sum, and a zero left sum sends ``u`` right under both rules. The two rules differ only
        where ``u >= left`` and the right sum is zero, and that step enters a subtree whose
        leaves are all 0; every other path ends on a non-zero leaf. So the draws that end on a
        zero leaf (rounding at the end of the filled range) are descended again by the full
        rule, and all draws end where the specification puts them. Returns the leaf nodes and
        their values.
        """
        if self._kernels is not None:
            node = np.empty(u.shape[0], dtype=np.int64)
            leaf = np.empty(u.shape[0], dtype=np.float64)
            self._kernels.descend(self.sum_tree, u, self.levels, node, leaf)
            return node, leaf
        node = self._descend_rows(u.copy(), full_rule=False)
        leaf = self.sum_tree.take(node)
        zero = (leaf == 0.0).nonzero()[0]
        if zero.size:
            node[zero] = self._descend_rows(u[zero], full_rule=True)
            leaf[zero] = self.sum_tree.take(node[zero])
        return node, leaf

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
        u = self._unit_draws(b) * total
        node, leaf = self._descend_leaves(u)
        w = _is_weights(leaf, self.min_tree[1], float(beta))
        return node - self.pow2, w.astype(weights_dtype, copy=False)

    def _unit_draws(self, b: int) -> np.ndarray:
        """float64 [b]: ``(j + uniform_j) / b`` for this sample call (advances the counter),
        the stratified draws before scaling by the total; those of the next calls come from
        the same Philox pass (see :data:`DRAW_CACHE`)."""
        k0, k1, c1, c2 = self._philox_words()
        call = c1 | (c2 << 32)
        cached = self._draws
        if cached is not None and cached[0] == self.seed and cached[1] == b:
            row = call - cached[2]
            if 0 <= row < cached[3].shape[0]:
                return cached[3][row]
        calls = np.uint64(call) + np.arange(max(1, DRAW_CACHE // b), dtype=np.uint64)
        lo, hi = (calls & np.uint64(0xFFFFFFFF))[:, None], (calls >> np.uint64(32))[:, None]
        j = np.arange(b, dtype=np.int64)
        r = philox4x32(j.astype(np.uint32)[None, :], lo, hi, STREAM_PER_SAMPLE, k0, k1)
        units = (j + uniform_float64(r[0], r[1])) / float(b)
        self._draws = (self.seed, b, call, units)
        return units[0]

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
