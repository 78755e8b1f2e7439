"""Sum/min tree: the same tests on the NumPy tree (CPU tier) and the CUDA tree (GPU tier)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from agents.replay.compiled_tree import numba_available
from agents.replay.segment_tree import NumpySumMinTree, SumMinTree, make_tree

BACKENDS = ["numpy", pytest.param("cuda", marks=pytest.mark.gpu)]
NEEDS_NUMBA = pytest.mark.skipif(not numba_available(), reason="needs numba (cpu-replay extra)")


def _np(x) -> np.ndarray:
    """NumPy copy of a NumPy or CuPy array."""
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)


def _check_structure(tree: SumMinTree) -> None:
    """Every internal node is exactly recomputed from its children."""
    s, m = tree.to_numpy()
    p = tree.pow2
    n = np.arange(1, p)
    np.testing.assert_array_equal(s[n], s[2 * n] + s[2 * n + 1])
    np.testing.assert_array_equal(m[n], np.minimum(m[2 * n], m[2 * n + 1]))
    leaves = s[p:]
    np.testing.assert_array_equal(m[p:], np.where(leaves > 0, leaves, np.inf))
    assert np.all(leaves[tree.capacity :] == 0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("capacity", [1, 2, 3, 777, 1000, 1024])
def test_layout(backend, capacity):
    tree = make_tree(backend, capacity)
    assert tree.pow2 >= capacity and tree.pow2 & (tree.pow2 - 1) == 0
    assert tree.pow2 < 2 * capacity
    assert tree.levels == int(math.log2(tree.pow2))
    s, m = tree.to_numpy()
    assert s.shape == m.shape == (2 * tree.pow2,)
    assert s.dtype == m.dtype == np.float64
    assert tree.total() == 0.0 and tree.min() == math.inf
    assert tree.max_value_host() == 1.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_capacity_validation(backend):
    with pytest.raises(ValueError, match="capacity"):
        make_tree(backend, 0)
    with pytest.raises(TypeError, match="capacity"):
        make_tree(backend, 2.5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sampling_distribution_matches_priority_alpha(backend):
    capacity, alpha, eps = 1000, 0.6, 1e-3
    rng = np.random.default_rng(1)
    td = rng.uniform(0.05, 3.0, size=capacity)
    tree = make_tree(backend, capacity, seed=11)
    tree.update(rng.permutation(capacity), np.ones(capacity))  # unsorted batch, then overwrite
    tree.update(np.arange(capacity), td, alpha=alpha, epsilon=eps)
    p = (td + eps) ** alpha
    p /= p.sum()
    counts = np.zeros(capacity, dtype=np.int64)
    draws, batch = 0, 5000
    while draws < 1_000_000:
        idx, _ = tree.sample(batch)
        counts += np.bincount(_np(idx), minlength=capacity)
        draws += batch
    assert counts.sum() == draws
    res = stats.chisquare(counts, p * draws)
    assert res.pvalue > 1e-3, res
    # A wrong law (plain priorities, alpha ignored) is rejected by the same test.
    q = td + eps
    q /= q.sum()
    assert stats.chisquare(counts, q * draws).pvalue < 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_is_weights_equal_formula(backend, beta):
    capacity, filled = 777, 500
    rng = np.random.default_rng(2)
    vals = rng.uniform(0.01, 5.0, size=filled)
    tree = make_tree(backend, capacity, seed=5)
    tree.update(np.arange(filled), vals)
    idx, w = tree.sample(4096, beta=beta)
    idx, w = _np(idx), _np(w)
    prob = vals / math.fsum(vals)
    brute_all = (filled * prob) ** -beta
    expected = (filled * prob[idx]) ** -beta / brute_all.max()
    np.testing.assert_allclose(w, expected, rtol=1e-12)
    assert np.all((w > 0) & (w <= 1.0 + 1e-15))
    np.testing.assert_allclose(_np(tree.weights(idx, beta)), expected, rtol=1e-12)
    _, w32 = tree.sample(16, beta=beta, weights_dtype=np.float32)
    assert _np(w32).dtype == np.float32


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch", [10, 1000, 5000, 20000])
@pytest.mark.parametrize("presorted", [False, True])
def test_repeated_indices_last_write_wins(backend, batch, presorted):
    capacity = 3000
    rng = np.random.default_rng(batch)
    idx = rng.integers(0, min(capacity, max(2, batch // 4)), size=batch)
    if presorted:
        idx = np.sort(idx)
    vals = rng.uniform(0.0, 10.0, size=batch)
    vals[rng.random(batch) < 0.1] = 0.0  # zero priorities are allowed (never sampled)
    tree = make_tree(backend, capacity)
    tree.update(idx, vals)
    expected = np.zeros(capacity)
    for i, v in zip(idx, vals, strict=True):
        expected[i] = v
    np.testing.assert_array_equal(tree.leaves(), expected)
    _check_structure(tree)
    assert tree.max_value_host() == max(1.0, vals.max())


@pytest.mark.parametrize("backend", BACKENDS)
def test_million_random_updates_root_and_min_exact(backend):
    capacity = 100_003
    rng = np.random.default_rng(3)
    tree = make_tree(backend, capacity)
    for step in range(1000):
        idx = rng.integers(0, capacity, size=1000)
        if step % 3 == 0:
            idx = np.sort(idx)
        vals = rng.lognormal(0.0, 2.0, size=1000)
        vals[rng.random(1000) < 0.01] = 0.0
        tree.update(idx, vals)
    leaves = tree.leaves()
    assert tree.total() == pytest.approx(math.fsum(leaves), rel=1e-9, abs=0)
    assert tree.min() == leaves[leaves > 0].min()
    _check_structure(tree)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("capacity", [1, 3, 777, 1000, 4096])
def test_sampled_indices_are_filled_and_nonzero(backend, capacity):
    """Fill like a ring buffer (with wrap-around), mix extreme and zero priorities, sample."""
    rng = np.random.default_rng(capacity)
    tree = make_tree(backend, capacity, seed=capacity)
    step = max(1, capacity // 7)
    start, filled = 0, 0
    for _ in range(12):  # several laps around the ring
        count = min(step, capacity)
        tree.fill_range(start, count)
        filled = min(capacity, filled + count)
        start = (start + count) % capacity
        idx, _ = tree.sample(2048)
        idx = _np(idx)
        leaves = tree.leaves()
        assert np.all((idx >= 0) & (idx < filled)), (idx.min(), idx.max(), filled)
        assert np.all(leaves[idx] > 0)
        # New priorities for what was sampled: tiny, huge and zero values next to each other.
        new = rng.choice([0.0, 1e-300, 1e-12, 1.0, 1e12], size=idx.size)
        tree.update(idx, new, n_valid=filled)
        if tree.total() == 0.0:
            tree.update([0], [1.0], n_valid=filled)
        idx, w = tree.sample(4096, beta=0.7)
        idx, w = _np(idx), _np(w)
        leaves = tree.leaves()
        assert np.all((idx >= 0) & (idx < filled))
        assert np.all(leaves[idx] > 0)
        assert np.all(np.isfinite(w)) and np.all(w > 0)
    # A single non-zero leaf at the far end is always the one sampled.
    tree.reset()
    tree.update([capacity - 1], [1e-300])
    idx, _ = tree.sample(1000)
    assert np.all(_np(idx) == capacity - 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stratified_sample_is_sorted_and_covers_slices(backend):
    tree = make_tree(backend, 64, seed=9)
    tree.update(np.arange(64), np.ones(64))
    idx, _ = tree.sample(64)
    # Equal priorities and one draw per equal slice: every leaf exactly once.
    np.testing.assert_array_equal(_np(idx), np.arange(64))
    idx2, _ = tree.sample(300)
    idx2 = _np(idx2)
    assert np.all(np.diff(idx2) >= 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sampling_is_reproducible_per_seed(backend):
    def draw(seed):
        tree = make_tree(backend, 500, seed=seed)
        tree.update(np.arange(500), np.linspace(0.1, 3.0, 500))
        return [_np(tree.sample(100)[0]) for _ in range(3)]

    a, b, c = draw(1), draw(1), draw(2)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[1], a[2])  # the call counter advances the stream
    assert any(not np.array_equal(x, y) for x, y in zip(a, c, strict=True))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("indices", "values", "kwargs", "match"),
    [
        ([1, 2], [1.0, np.nan], {}, r"priorities\[1\] = nan"),
        ([1, 2], [np.inf, 1.0], {}, r"priorities\[0\] = inf"),
        ([1, 2, 3], [1.0, 2.0, -0.5], {}, r"priorities\[2\] = -0.5 .*>= 0"),
        ([1, 20], [1.0, 2.0], {"n_valid": 10}, r"indices\[1\] = 20 is out of range"),
        ([-1], [1.0], {}, r"indices\[0\] = -1"),
        ([0], [1e300], {"alpha": 2.0, "epsilon": 1e-6}, "overflows"),
        ([0, 1], [1.0, -np.inf], {"name": "td_errors"}, r"td_errors\[1\] = -inf"),
    ],
)
def test_bad_priorities_rejected(backend, indices, values, kwargs, match):
    tree = make_tree(backend, 50)
    tree.update(np.arange(50), np.full(50, 2.0))
    before = tree.to_numpy()[0].copy()
    with pytest.raises(ValueError, match=match):
        tree.update(np.array(indices), np.array(values), **kwargs)
    np.testing.assert_array_equal(tree.to_numpy()[0], before)  # nothing was written
    assert tree.max_value_host() == 2.0
    tree.update(np.array(indices), np.array(values), check=False, **kwargs)  # refused silently
    np.testing.assert_array_equal(tree.to_numpy()[0], before)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("presorted", [False, True])
def test_first_bad_entry_of_a_large_batch_is_named(backend, presorted):
    # Large enough that the CUDA check spreads the batch over several blocks.
    rng = np.random.default_rng(5)
    tree = make_tree(backend, 100_000)
    tree.update(np.arange(100_000), rng.exponential(size=100_000))
    before = tree.to_numpy()[0].copy()
    max_before = tree.max_value_host()
    idx = rng.integers(0, 100_000, size=9000)
    idx = np.sort(idx) if presorted else idx
    values = rng.exponential(size=9000) * 1e3
    values[[7000, 8999]] = -1.0
    values[3100] = np.nan
    with pytest.raises(ValueError, match=r"priorities\[3100\] = nan"):
        tree.update(idx, values)
    np.testing.assert_array_equal(tree.to_numpy()[0], before)
    assert tree.max_value_host() == max_before
    values[[3100, 7000, 8999]] = 1.0
    tree.update(idx, values)  # the scratch state of the refused batch is gone
    assert tree.max_value_host() == max(max_before, values.max())


@pytest.mark.parametrize("backend", BACKENDS)
def test_length_mismatch_rejected(backend):
    tree = make_tree(backend, 10)
    with pytest.raises(ValueError, match="same length"):
        tree.update(np.arange(3), np.ones(2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_transform_and_running_max(backend):
    tree = make_tree(backend, 10)
    tree.fill_range(8, 4)  # wraps: slots 8, 9, 0, 1 get the initial max 1.0
    np.testing.assert_array_equal(tree.leaves(), [1, 1, 0, 0, 0, 0, 0, 0, 1, 1])
    td = np.array([0.5, 3.0], dtype=np.float32)
    tree.update([0, 1], td, alpha=0.5, epsilon=0.25)
    np.testing.assert_allclose(tree.leaves()[:2], (td.astype(np.float64) + 0.25) ** 0.5, rtol=1e-15)
    assert tree.max_value_host() == pytest.approx(3.25**0.5, rel=1e-15)
    tree.fill_range(2, 1)
    assert tree.leaves()[2] == pytest.approx(3.25**0.5, rel=1e-15)
    _check_structure(tree)
    tree.update([3], [0.0], alpha=0.0, epsilon=1.0)  # alpha = 0: every priority is 1
    assert tree.leaves()[3] == 1.0


@pytest.mark.gpu
@pytest.mark.parametrize("capacity", [1, 777, 2**16 + 3, 2**20 + 5])
def test_cuda_tree_matches_numpy_tree(capacity):
    rng = np.random.default_rng(capacity)
    trees = [make_tree("numpy", capacity, seed=42), make_tree("cuda", capacity, seed=42)]
    for step in range(20):
        n = int(rng.integers(1, 6000))
        idx = rng.integers(0, capacity, size=n)
        vals = rng.lognormal(0.0, 3.0, size=n)
        vals[rng.random(n) < 0.05] = 0.0
        if step % 4 == 0:
            start, count = int(rng.integers(0, capacity)), int(rng.integers(1, capacity + 1))
            for t in trees:
                t.fill_range(start, count)
        for t in trees:
            t.update(idx, vals)
        if trees[0].total() == 0.0:
            for t in trees:
                t.update([0], [1.0])
        s0, m0 = trees[0].to_numpy()
        s1, m1 = trees[1].to_numpy()
        np.testing.assert_array_equal(s0, s1)
        np.testing.assert_array_equal(m0, m1)
        b = int(rng.integers(1, 70000))
        i0, w0 = trees[0].sample(b, beta=0.6)
        i1, w1 = trees[1].sample(b, beta=0.6)
        np.testing.assert_array_equal(i0, _np(i1))
        np.testing.assert_allclose(w0, _np(w1), rtol=1e-14)
        # The hot path: new priorities for the sampled (sorted, repeating) indices, float32.
        # No transform here: CUDA's pow may differ from NumPy's in the last bit.
        td = rng.exponential(size=b).astype(np.float32)
        trees[0].update(i0, td)
        trees[1].update(i1, td)
        s0, m0 = trees[0].to_numpy()
        s1, m1 = trees[1].to_numpy()
        np.testing.assert_array_equal(s0, s1)
        np.testing.assert_array_equal(m0, m1)
        assert trees[0].max_value_host() == trees[1].max_value_host()


@pytest.mark.gpu
def test_cuda_tree_accepts_torch_tensors():
    import torch

    tree = make_tree("cuda", 100)
    idx = torch.arange(10, device="cuda")
    td = torch.linspace(0.0, 1.0, 10, device="cuda", dtype=torch.float32)
    tree.update(idx, td, alpha=0.7, epsilon=0.01)
    ref = NumpySumMinTree(100)
    ref.update(np.arange(10), td.cpu().numpy(), alpha=0.7, epsilon=0.01)
    np.testing.assert_allclose(tree.leaves(), ref.leaves(), rtol=1e-14)
    # Other dtypes are cast on the device; float indices and bad values are refused by name.
    tree.update(
        torch.tensor([3, 3, 1], device="cuda", dtype=torch.int32),
        torch.ones(3, device="cuda", dtype=torch.float16),
    )
    assert tree.leaves()[3] == 1.0 and tree.leaves()[1] == 1.0
    with pytest.raises(TypeError, match="indices must be integers"):
        tree.update(torch.zeros(2, device="cuda"), torch.ones(2, device="cuda"))
    bad = torch.tensor([0.5, float("nan"), 1.0], device="cuda", dtype=torch.float64)
    with pytest.raises(ValueError, match=r"td_errors\[1\] = nan"):
        tree.update(torch.tensor([0, 1, 2], device="cuda"), bad, name="td_errors")


def test_numpy_tree_sampling_empty_raises():
    with pytest.raises(ValueError, match="all 0"):
        NumpySumMinTree(10).sample(4)


def test_sample_argument_validation():
    tree = NumpySumMinTree(10)
    tree.update([0], [1.0])
    with pytest.raises(ValueError, match="batch_size"):
        tree.sample(0)
    with pytest.raises(ValueError, match="beta"):
        tree.sample(4, beta=1.5)


def _spec_descent(tree: NumpySumMinTree, u: float) -> int:
    """The specification's descent, one draw in plain floats: left when the left sum is
    non-zero and ``u < left``, or the right sum is zero; otherwise subtract and go right."""
    s = tree.sum_tree
    node = 1
    for _ in range(tree.levels):
        left, right = float(s[2 * node]), float(s[2 * node + 1])
        if left > 0.0 and (u < left or right == 0.0):
            node = 2 * node
        else:
            u -= left
            node = 2 * node + 1
    return node


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=NEEDS_NUMBA)])
@pytest.mark.parametrize("capacity", [1, 2, 5, 1000, 4096])
def test_numpy_descent_is_the_specifications_rule(capacity, compiled):
    """Draws at and past the total (where rounding puts them) and zero subtrees on both sides
    take the specification's path, leaf for leaf, in the NumPy code and in numba's kernel."""
    rng = np.random.default_rng(capacity)
    tree = NumpySumMinTree(capacity, compiled=compiled)
    assert tree.compiled is compiled
    filled = max(1, capacity * 2 // 3)
    values = rng.choice([0.0, 1e-300, 0.1, 0.3, 7.0, 1e12], size=filled)
    values[-1] = 0.3  # a zero tail after the last non-zero leaf makes zero right sums
    tree.update(np.arange(filled), values)
    if capacity > 4:
        tree.update(np.arange(2), [0.0, 0.0])  # zero left sums at the front
    total = tree.total()
    u = np.concatenate(
        [
            rng.uniform(0.0, total, 500),
            [0.0, total, np.nextafter(total, np.inf), total * (1 + 1e-12)],
            np.cumsum(tree.leaves())[: min(capacity, 200)],  # exactly on the boundaries
        ]
    )
    got = tree._descend(u.copy())
    want = np.array([_spec_descent(tree, float(x)) for x in u])
    np.testing.assert_array_equal(got, want)
    assert np.all(tree.sum_tree[got] > 0.0)


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ((0, 0, 0, 0, 0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 6, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_philox_known_answers_scalar_and_broadcast(words, expected):
    """Random123's Philox4x32-10 known-answer vectors (the draws the sample stratifies), as
    scalars and broadcast over a batch with per-element and scalar keys alike."""
    from gpu_runtime.philox import philox4x32

    assert tuple(int(x) for x in philox4x32(*words)) == expected
    c = [np.full(3, w, dtype=np.uint32) for w in words]
    for keys in (c[4:], words[4:]):
        out = philox4x32(*c[:4], *keys)
        for got, want in zip(out, expected, strict=True):
            assert got.dtype == np.uint32 and got.shape == (3,)
            np.testing.assert_array_equal(got, want)
