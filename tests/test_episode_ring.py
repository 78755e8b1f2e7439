"""The fused rollout's device ring of finished episodes (runs on the CPU as on the GPU)."""

import numpy as np
import pytest
import torch as th

from agents.rollouts.episode_ring import EpisodeRing


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


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 37, 4096, 65_536])
def test_ring_kernel_appends_as_the_torch_path(n: int):
    """The one-launch CUDA append writes the same slots, values and counter as the torch path,
    over steps where more than the ring's size finished between drains."""
    pytest.importorskip("cupy")
    if not th.cuda.is_available():
        pytest.skip("needs a CUDA device")
    dev = th.device("cuda")
    kernel = EpisodeRing(dev, size=1000)
    plain = EpisodeRing(dev, size=1000, use_kernel=False)
    assert kernel._kernel is not None and plain._kernel is None
    gen = th.Generator(device=dev).manual_seed(n)
    for step in range(12):
        done = th.rand(n, device=dev, generator=gen) < (0.05 if step % 3 else 0.9)
        ret = th.randn(n, device=dev, generator=gen)
        length = th.randint(1, 500, (n,), device=dev, generator=gen, dtype=th.int32)
        kernel.append(done, ret, length)
        plain.append(done, ret, length)
        assert int(kernel.last) == int(plain.last)
        assert th.equal(kernel.returns[:1000], plain.returns[:1000])
        assert th.equal(kernel.lengths[:1000], plain.lengths[:1000])
        if step % 4 == 3:
            assert kernel.drain() == plain.drain()
