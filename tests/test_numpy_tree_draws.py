"""The NumPy sum/min tree's fast paths keep its results: draws computed ahead for later sample
calls equal those computed per call, and a pickled tree samples and updates like the original."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import agents.replay.numpy_tree as numpy_tree
from agents.replay.numpy_tree import NumpySumMinTree

CAPACITY = 5000


def _filled(seed: int = 3) -> NumpySumMinTree:
    tree = NumpySumMinTree(CAPACITY, seed=seed)
    rng = np.random.default_rng(0)
    tree.update(np.arange(CAPACITY), rng.exponential(size=CAPACITY), alpha=0.6, epsilon=1e-6)
    return tree


def _rounds(tree: NumpySumMinTree, batches: list[int]) -> list[np.ndarray]:
    """Sample + update rounds; between rounds 3 and 4 the counter goes back (as a load does)."""
    rng = np.random.default_rng(1)
    got = []
    for k, b in enumerate(batches):
        if k == 4:
            tree.sample_calls -= 2
        idx, w = tree.sample(b, beta=0.4)
        got += [idx, w]
        tree.update(idx, rng.exponential(size=b), alpha=0.6, epsilon=1e-6)
    return got


@pytest.mark.parametrize("cache", [16, 4096, 1 << 16])
def test_draws_computed_ahead_equal_draws_per_call(monkeypatch, cache: int) -> None:
    batches = [64, 64, 64, 16, 64, 64, 100, 64, 64]
    monkeypatch.setattr(numpy_tree, "DRAW_CACHE", 1)  # one sample call per Philox pass
    want = _rounds(_filled(), batches)
    monkeypatch.setattr(numpy_tree, "DRAW_CACHE", cache)
    ahead = _filled()
    got = _rounds(ahead, batches)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    if cache >= 4 * 64:
        assert ahead._draws is not None and ahead._draws[3].shape[0] > 1


def test_reset_and_a_new_seed_do_not_reuse_draws() -> None:
    tree = _filled(seed=3)
    first = tree.sample(64)[0]
    tree.sample_calls = 0
    np.testing.assert_array_equal(tree.sample(64)[0], first)
    other = _filled(seed=4)
    other._draws = tree._draws  # draws of another seed must not be taken
    other.sample_calls = 0
    np.testing.assert_array_equal(other.sample(64)[0], _filled(seed=4).sample(64)[0])


def test_pickled_tree_samples_and_updates_like_the_original() -> None:
    tree = _filled()
    tree.sample(32)
    copy = pickle.loads(pickle.dumps(tree))
    assert np.shares_memory(copy._sum_pairs, copy.sum_tree)
    for t in (tree, copy):
        t.update(np.arange(0, CAPACITY, 7), np.full(len(range(0, CAPACITY, 7)), 5.0))
    np.testing.assert_array_equal(copy.sum_tree, tree.sum_tree)
    np.testing.assert_array_equal(copy.min_tree, tree.min_tree)
    a, b = tree.sample(128, beta=0.5), copy.sample(128, beta=0.5)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
