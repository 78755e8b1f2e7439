"""The fused rollout's device ring of finished episodes (runs on the CPU as on the GPU)."""

import numpy as np
import torch as th

from agents.rollouts.fused import EpisodeRing


def test_ring_drains_finished_episodes_in_order_and_keeps_the_newest():
    size = 7
    ring = EpisodeRing(th.device("cpu"), size=size)
    rng = np.random.default_rng(0)
    pending: list[dict] = []
    drained = 0
    for t in range(40):
        done = rng.random(5) < 0.4
        ret = rng.normal(size=5).astype(np.float32)
        length = rng.integers(1, 100, 5).astype(np.int32)
        ring.append(th.as_tensor(done), th.as_tensor(ret), th.as_tensor(length))
        pending += [
            {"r": float(r), "l": int(n)} for r, n, d in zip(ret, length, done, strict=True) if d
        ]
        if t % 4 == 3:  # sometimes more than `size` ended since the last drain
            n, got = ring.drain()
            assert n == len(pending)  # overwritten episodes are counted too
            assert got == pending[-size:]  # env order within a step, then step order
            drained += len(pending)
            pending = []
    assert drained > 40
    assert ring.drain() == (len(pending), pending[-size:])
    assert ring.drain() == (0, [])


def test_ring_drain_builds_only_the_entries_kept():
    ring = EpisodeRing(th.device("cpu"), size=16)
    ring.append(th.ones(10, dtype=th.bool), th.arange(10.0), th.arange(10, dtype=th.int32))
    n, got = ring.drain(keep=3)
    assert n == 10
    assert got == [{"r": 7.0, "l": 7}, {"r": 8.0, "l": 8}, {"r": 9.0, "l": 9}]
    ring.append(th.ones(2, dtype=th.bool), th.ones(2), th.ones(2, dtype=th.int32))
    assert ring.drain(keep=0) == (2, [])
