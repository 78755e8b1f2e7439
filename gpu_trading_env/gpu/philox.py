"""Philox4x32-10, the counter-based RNG shared by the NumPy and CUDA backends.

Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11). A draw is a pure function
of a 128-bit counter and a 64-bit key, so the NumPy backend, the CUDA kernels
(``kernels/philox.cuh``) and the replay buffer produce bit-identical streams from the same
``(key, counter)`` without any stored generator state.
"""

from __future__ import annotations

import numpy as np

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint32(0x9E3779B9)
_W1 = np.uint32(0xBB67AE85)
_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)

# Counter word 3 names the purpose of a draw, so streams for different uses never overlap.
STREAM_START_BAR = 0x5354  # "ST": episode start bars in the env
STREAM_PER_SAMPLE = 0x5052  # "PR": stratified draws of the prioritized replay buffer


def philox4x32(
    c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, k0: np.ndarray, k1: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ten Philox rounds over broadcastable uint32 arrays; returns four uint32 arrays."""
    c0, c1, c2, c3, k0, k1 = (np.asarray(x, dtype=np.uint32) for x in (c0, c1, c2, c3, k0, k1))
    c0, c1, c2, c3, k0, k1 = np.broadcast_arrays(c0, c1, c2, c3, k0, k1)
    k0 = k0.copy()
    k1 = k1.copy()
    with np.errstate(over="ignore"):
        for r in range(10):
            p0 = c0.astype(np.uint64) * _M0
            p1 = c2.astype(np.uint64) * _M1
            hi0 = (p0 >> _SHIFT32).astype(np.uint32)
            lo0 = (p0 & _MASK32).astype(np.uint32)
            hi1 = (p1 >> _SHIFT32).astype(np.uint32)
            lo1 = (p1 & _MASK32).astype(np.uint32)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
            if r < 9:
                k0 = k0 + _W0
                k1 = k1 + _W1
    return c0, c1, c2, c3


def split_u64(x: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Low and high uint32 words of a uint64 (array or Python int)."""
    x = np.asarray(x, dtype=np.uint64)
    return (x & _MASK32).astype(np.uint32), (x >> _SHIFT32).astype(np.uint32)


def uniform_index(word: np.ndarray, n: np.ndarray | int) -> np.ndarray:
    """Map a uniform uint32 word to an integer in ``[0, n)`` by multiply-high.

    ``(word * n) >> 32`` never returns ``n`` (the seed's ``(int)(u * 45) % 45`` could) and its
    bias is at most ``n / 2**32``. ``n`` must be below ``2**32``.
    """
    w = np.asarray(word, dtype=np.uint64)
    return ((w * np.asarray(n, dtype=np.uint64)) >> _SHIFT32).astype(np.int64)


def uniform_float64(hi_word: np.ndarray, lo_word: np.ndarray) -> np.ndarray:
    """A float64 in ``[0, 1)`` from two uint32 words (53 random bits; never 1.0)."""
    hi = np.asarray(hi_word, dtype=np.uint64) >> np.uint64(5)  # 27 bits
    lo = np.asarray(lo_word, dtype=np.uint64) >> np.uint64(6)  # 26 bits
    return ((hi << np.uint64(26)) | lo).astype(np.float64) * (1.0 / 9007199254740992.0)
