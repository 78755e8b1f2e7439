"""Every path of the CUDA sum/min tree for compute-sanitizer (memcheck, racecheck, synccheck):
one-launch updates (sorted, unsorted, with duplicates, rejected), two-launch updates of large
batches (sorted and unsorted), wrapping range fills, sampling, weights, and host views; a
capacity that is not a power of two and one whose depth is not a multiple of four::

    compute-sanitizer --tool memcheck python3 -m benchmarks.sanitize_tree
"""

import numpy as np

from agents.replay.segment_tree import CudaSumMinTree, NumpySumMinTree

rng = np.random.default_rng(0)
for capacity in (1000, 2**17 + 3):
    tree, ref = CudaSumMinTree(capacity, seed=3), NumpySumMinTree(capacity, seed=3)
    for t in (tree, ref):
        t.fill_range(capacity - 100, 300)  # wraps around
    for n in (1, 37, 4096, 9000):
        for presorted in (True, False):
            idx = rng.integers(0, capacity, size=n)
            idx = np.sort(idx) if presorted else idx
            vals = rng.exponential(size=n)
            for t in (tree, ref):
                t.update(idx, vals, alpha=0.6, epsilon=1e-6)
    try:
        tree.update(np.array([0, 1]), np.array([1.0, np.nan]))
    except ValueError:
        pass
    i, w = tree.sample(5000, beta=0.4)
    vals = rng.exponential(size=5000)
    tree.update(i, vals)
    ref.update(i.get(), vals)
    tree.weights(i, 0.4)
    s0, s1 = ref.to_numpy()[0], tree.to_numpy()[0]
    assert np.allclose(s0, s1, rtol=1e-12), "trees differ"
print("sanitize_tree: done")
