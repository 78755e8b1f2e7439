"""Owned step outputs from a small pool of output blocks, reused only while nothing else sees them.

An owned step (``copy_outputs=True``) promises that no later step writes an array it returned.
Allocating one block per step keeps that promise, but every step then pays the allocation (the
page faults of a fresh block of a few MB on the CPU), a dozen views over it and the reads of
their addresses: on a GPU host that was most of a step's host time. Here up to
:data:`POOL_SIZE` output sets (block, views, the backend's bound handle) are kept, and a set is
written again only when nothing outside the pool can observe it:

- every view's and the block's Python reference count equals its count measured right after
  the set was built (a returned array, the info dict that holds it, a NumPy slice or
  ``np.asarray`` of it, ``torch.from_numpy``, a memoryview: each holds a reference to a view
  or, through ``.base``, to the block);
- with CuPy, the allocation's ``Memory`` object too (every CuPy array over it holds one);
- with torch, the block's storage is shared by no tensor beyond the set's own (a user's slice,
  ``view``, ``detach`` or DLPack export of ``obs`` shares the storage without referring to the
  Python ``obs``, and outlives it). torch builds without ``torch._C._storage_Use_Count`` have
  no way to see those, so there every step gets a new set (the pool never reuses).

Counts are measured and checked by the one function :func:`observers`, so the references of
the call itself (which differ across Python versions) cancel out. On a GPU a set is reused only
on the stream that last wrote it, so kernels a user queued on that stream to read it have run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

POOL_SIZE = 4


def storage_use_count() -> Callable[[int], int] | None:
    """torch's ``_storage_Use_Count`` (tensors sharing a storage), or None without it."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    # torch has no public count of a storage's users; without this one, no torch pooling.
    return getattr(torch._C, "_storage_Use_Count", None)  # noqa: SLF001


@dataclass(eq=False)
class OutputSet:
    """One block of step outputs and what a step needs to write into it again.

    ``views``: ``{field: array}`` in the env's array type. ``bound``: the backend's handle for
    ``step_bound``. ``watched``: the objects whose reference counts show an observer.
    ``storage``: the torch storage's ``_cdata`` whose use count (``use_count(storage)``, from
    :func:`storage_use_count`) is watched too (None: not torch). ``stream``: the CUDA stream
    handle the set was last written on (None on the CPU).
    """

    views: dict[str, Any]
    bound: Any
    watched: tuple[Any, ...]
    storage: int | None
    stream: int | None
    use_count: Callable[[int], int] | None = None
    baseline: tuple[int, ...] = ()


def observers(s: OutputSet) -> tuple[int, ...]:
    """The reference counts of ``s.watched`` (and the storage's use count): equal to
    ``s.baseline`` exactly when nothing outside the pool refers to the set."""
    counts = tuple(map(sys.getrefcount, s.watched))
    if s.storage is not None:
        counts += (s.use_count(s.storage),)
    return counts


class OutputPool:
    """Up to ``size`` output sets; :meth:`acquire` hands out one that nobody can observe.

    ``build(stream)`` makes a new :class:`OutputSet`. ``reuse=False`` never reuses a set
    (each :meth:`acquire` builds one), for outputs whose observers cannot be counted.
    """

    def __init__(
        self,
        build: Callable[[int | None], OutputSet],
        size: int = POOL_SIZE,
        reuse: bool = True,
    ) -> None:
        if size < 1:
            raise ValueError(f"size = {size} is invalid: allowed is an int >= 1")
        self._build = build
        self.size = size
        self.reuse = reuse
        self._sets: list[OutputSet] = []  # oldest hand-out first

    def acquire(self, stream: int | None = None) -> tuple[OutputSet, bool]:
        """``(set, reused)``: the oldest set nobody observes on ``stream``, else a new one.

        A new set, when the pool is full, replaces the oldest: the pool drops its reference
        and whoever still holds the arrays keeps them alive.
        """
        sets = self._sets
        for k, s in enumerate(sets):
            if s.stream == stream and observers(s) == s.baseline:
                if k != len(sets) - 1:
                    sets.append(sets.pop(k))
                return s, True
        s = self._build(stream)
        if not self.reuse:
            return s, False
        if len(sets) >= self.size:
            del sets[0]
        sets.append(s)
        # Measured here, after build() returned: none of its locals still hold the arrays.
        s.baseline = observers(s)
        return s, False

    def clear(self) -> None:
        """Forget every set (the layout changed, or the env closed)."""
        self._sets.clear()

    def __len__(self) -> int:
        return len(self._sets)
