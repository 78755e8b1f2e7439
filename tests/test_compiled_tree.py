"""The NumPy sum/min tree's numba kernels (``agents.replay.compiled_tree``) against its NumPy
code, the reference: the same trees, sampled indices and weights, bit for bit, through every
kind of write; and how the path is chosen when numba is missing."""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest

from agents.replay import compiled_tree
from agents.replay.numpy_tree import NumpySumMinTree

NEEDS_NUMBA = pytest.mark.skipif(
    not compiled_tree.numba_available(), reason="needs numba (cpu-replay extra)"
)


def _assert_same_trees(a: NumpySumMinTree, b: NumpySumMinTree, what: str) -> None:
    assert a.sum_tree.tobytes() == b.sum_tree.tobytes(), f"{what}: sum trees differ"
    assert a.min_tree.tobytes() == b.min_tree.tobytes(), f"{what}: min trees differ"
    assert a.max_value.tobytes() == b.max_value.tobytes(), f"{what}: running maxima differ"


@NEEDS_NUMBA
@pytest.mark.parametrize("capacity", [1, 3, 64, 1000, 5000])
def test_compiled_and_numpy_trees_stay_the_same_bits(capacity: int) -> None:
    """Sorted batches with repeats (as sample returns them), shuffled batches with repeats,
    zero priorities (leaves that can no longer be sampled), values far apart, fill_range across
    the end of the ring, and samples of several sizes and betas."""
    rng = np.random.default_rng(capacity)
    fast = NumpySumMinTree(capacity, seed=5, compiled=True)
    ref = NumpySumMinTree(capacity, seed=5, compiled=False)
    assert fast.compiled and not ref.compiled
    for tree in (fast, ref):
        tree.fill_range(capacity - capacity // 3, capacity // 2 + 1)  # wraps past the end
    _assert_same_trees(fast, ref, "fill_range")
    first = rng.choice([1e-12, 0.2, 3.0, 1e9], size=capacity)
    for tree in (fast, ref):
        tree.update(np.arange(capacity), first, alpha=0.6, epsilon=1e-6)
    _assert_same_trees(fast, ref, "first update")
    for k in range(40):
        batch = int(rng.choice([1, 2, 7, 64, 513]))
        beta = float(rng.choice([0.0, 0.4, 1.0]))
        got = fast.sample(batch, beta=beta)
        want = ref.sample(batch, beta=beta)
        assert got[0].tobytes() == want[0].tobytes(), f"round {k}: indices differ"
        assert got[1].tobytes() == want[1].tobytes(), f"round {k}: weights differ"
        idx = got[0]
        values = rng.exponential(size=batch) * rng.choice([1e-6, 1.0, 1e6])
        values[rng.random(batch) < 0.1] = 0.0
        if k % 3 == 1:  # unsorted, with repeats: the last occurrence must win
            order = rng.permutation(batch)
            idx, values = idx[order], values[order]
            idx[: batch // 4] = idx[-1]
        if k % 5 == 4:
            idx = rng.integers(0, capacity, batch)
        alpha, eps = (1.0, 0.0) if k % 2 else (0.6, 1e-6)
        for tree in (fast, ref):
            tree.update(idx, values, alpha=alpha, epsilon=eps)
        _assert_same_trees(fast, ref, f"round {k}")
        if fast.total() == 0.0:  # every sampled leaf set to 0: refill before the next sample
            for tree in (fast, ref):
                tree.fill_range(0, capacity)


@NEEDS_NUMBA
def test_compiled_tree_refuses_a_bad_batch_untouched() -> None:
    """Validation runs before either path writes: a bad entry leaves both trees as they were."""
    fast = NumpySumMinTree(100, compiled=True)
    fast.update(np.arange(100), np.ones(100))
    before = fast.sum_tree.copy()
    with pytest.raises(ValueError, match=r"priorities\[2\]"):
        fast.update([5, 3, 7], [1.0, 2.0, np.nan])
    fast.update([5, 3, 7], [1.0, 2.0, -1.0], check=False)
    assert fast.sum_tree.tobytes() == before.tobytes()


@NEEDS_NUMBA
def test_pickled_tree_keeps_its_path() -> None:
    for compiled in (True, False):
        tree = NumpySumMinTree(50, seed=2, compiled=compiled)
        tree.update(np.arange(50), np.linspace(0.1, 5.0, 50))
        back = pickle.loads(pickle.dumps(tree))
        assert back.compiled is compiled
        assert back.sample(8, beta=0.5)[0].tobytes() == tree.sample(8, beta=0.5)[0].tobytes()


def test_without_numba_the_numpy_code_runs_or_compiled_true_says_what_to_install(
    monkeypatch,
) -> None:
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    monkeypatch.setattr(compiled_tree, "_KERNELS", None)
    monkeypatch.setattr(compiled_tree, "_MISSING", None)
    assert not compiled_tree.numba_available()
    tree = NumpySumMinTree(10)
    assert not tree.compiled
    tree.update(np.arange(10), np.ones(10))
    assert tree.sample(4)[0].shape == (4,)
    with pytest.raises(ImportError, match=r"cpu-replay"):
        NumpySumMinTree(10, compiled=True)


@pytest.mark.parametrize("bad", [1, "yes", 0.0])
def test_compiled_must_be_none_or_a_bool(bad) -> None:
    with pytest.raises(TypeError, match="compiled must be None, True or False"):
        NumpySumMinTree(10, compiled=bad)
