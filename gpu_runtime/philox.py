"""Philox4x32-10, the counter-based RNG shared by the NumPy and CUDA backends.

Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11). A draw is a pure function
of a 128-bit counter and a 64-bit key, so the NumPy backend, the CUDA kernels
(``kernels/philox.cuh``) and the replay buffer produce bit-identical streams from the same
``(key, counter)`` without any stored generator state.
"""

from __future__ import annotations

import numpy as np

_MASK32 = np.uint64(0xFFFFFFFF)
# Per round: the multipliers of [c0, c2] and the key increments of [k0, k1].
_FACTORS = np.array([0xD2511F53, 0xCD9E8D57], dtype=np.uint64)
_BUMP = np.array([0x9E3779B9, 0xBB67AE85], dtype=np.uint64)
_SHIFT32 = np.uint64(32)

# Counter word 3 names the purpose of a draw, so streams for different uses never overlap.
STREAM_START_BAR = 0x5354  # "ST": episode start bars in the env
STREAM_PER_SAMPLE = 0x5052  # "PR": stratified draws of the prioritized replay buffer
STREAM_EXPLORE = 0x4558  # "EX": epsilon-greedy draws of the monolithic rollout kernel


def philox_stream_defines() -> tuple[tuple[str, str], ...]:
    """``PHILOX_STREAM_*`` for kernels that include ``philox.cuh``: the stream ids above."""
    streams = {
        "START_BAR": STREAM_START_BAR,
        "PER_SAMPLE": STREAM_PER_SAMPLE,
        "EXPLORE": STREAM_EXPLORE,
    }
    return tuple((f"PHILOX_STREAM_{k}", f"{v:#x}u") for k, v in streams.items())


def _word_pair(a: np.ndarray, b: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """uint64 [2, *shape] holding the uint32 words ``a`` and ``b`` broadcast to ``shape``."""
    pair = np.empty((2, *shape), dtype=np.uint64)
    pair[0] = a
    pair[1] = b
    return pair


def philox4x32(
    c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, k0: np.ndarray, k1: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ten Philox rounds over broadcastable uint32 arrays; returns four uint32 arrays.

    The words travel in uint64 pairs, ``[c0, c2]`` (the multiplied words) and ``[c1, c3]``, so
    a round is five array operations: the two products, their high halves XORed with the other
    pair and the round keys, and their low halves, whatever the batch size.
    """
    words = [np.asarray(x, dtype=np.uint32) for x in (c0, c1, c2, c3, k0, k1)]
    shape = np.broadcast_shapes(*(w.shape for w in words))
    mul = _word_pair(words[0], words[2], shape)
    other = _word_pair(words[1], words[3], shape)
    key_shape = np.broadcast_shapes(words[4].shape, words[5].shape)
    key = _word_pair(words[4], words[5], key_shape)
    key = key.reshape((2,) + (1,) * (len(shape) - len(key_shape)) + key_shape)
    bump = _BUMP.reshape((2,) + (1,) * len(shape))
    factors = _FACTORS.reshape((2,) + (1,) * len(shape))
    # Round key r: (k0 + r*W0, k1 + r*W1) mod 2**32, all ten in one array.
    rounds = np.arange(10, dtype=np.uint64).reshape((10,) + (1,) * key.ndim)
    round_keys = (key + rounds * bump) & _MASK32
    for round_key in round_keys:
        p = mul * factors  # [c0 * M0, c2 * M1], each below 2**64
        mul = (p >> _SHIFT32)[::-1]  # [hi1, hi0]
        mul ^= other
        mul ^= round_key  # [hi1 ^ c1 ^ k0, hi0 ^ c3 ^ k1]: the new c0 and c2
        other = (p & _MASK32)[::-1]  # [lo1, lo0]: the new c1 and c3
    return (
        mul[0].astype(np.uint32),
        other[0].astype(np.uint32),
        mul[1].astype(np.uint32),
        other[1].astype(np.uint32),
    )


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
