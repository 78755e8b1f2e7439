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
            got = ring.drain()
            assert got == pending[-size:]  # env order within a step, then step order
            drained += len(pending)
            pending = []
    assert drained > 40
    assert ring.drain() == pending[-size:]
    assert ring.drain() == []
