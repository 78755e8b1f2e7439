"""Finished episodes' returns and lengths, gathered on the device (``EpisodeRing``): the fused
rollout appends each step's ended episodes to a ring without a host sync, and the host reads
the ring every few steps for SB3's ``ep_info_buffer``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch as th

from gpu_runtime.device import (
    I64,
    PTR,
    KernelLauncher,
    KernelParams,
    ModuleSpec,
    cupy_or_none,
    current_stream,
    load_module,
    require_cupy,
)

__all__ = ["STATS_RING", "EpisodeRing", "ring_kernel_defines"]

STATS_RING = 4096


RING_KERNEL_FILE = Path(__file__).resolve().parent / "kernels" / "episode_ring.cu"
RING_KERNEL_PARAMS: KernelParams = (
    ("done", PTR),
    ("returns", PTR),
    ("lengths", PTR),
    ("n", I64),
    ("size", I64),
    ("ring_returns", PTR),
    ("ring_lengths", PTR),
    ("last", PTR),
)
# Envs up to which the one-block kernel appends: each of its 1,024 threads reads a chunk of
# n / 1,024 done flags twice (64 at this bound), serially; above it the torch path's scan
# spreads over the GPU. The bound is chosen, not measured: the rollout was timed at 4,096 envs.
RING_KERNEL_MAX_ENVS = 65_536
RING_THREADS = 1024


def ring_kernel_defines() -> tuple[tuple[str, str], ...]:
    """``episode_ring.cu``'s block size (its ``__launch_bounds__``), as launched."""
    return (("RING_THREADS", str(RING_THREADS)),)


def ring_module_spec() -> ModuleSpec:
    """:func:`~gpu_runtime.device.load_module`'s arguments for ``episode_ring.cu``."""
    return (RING_KERNEL_FILE, ring_kernel_defines(), (), ())


class EpisodeRing:
    """Returns and lengths of finished episodes, appended on the device without a host sync.

    Each step writes the finished envs' values to consecutive ring slots, in env order;
    :meth:`drain` copies the ring to the host once and yields the entries written since the
    last drain (at most ``size``; older ones are overwritten). On a CUDA device with CuPy, up
    to :data:`RING_KERNEL_MAX_ENVS` envs, an append is one launch of ``kernels/episode_ring.cu``;
    elsewhere about a dozen torch launches (a cumulative sum over the done mask, then scatters).

    :param device: where the ring lives.
    :param size: entries kept between drains.
    :param use_kernel: ``None`` (default): the kernel where it applies; ``False``: torch only.
    """

    def __init__(self, device: th.device, size: int = STATS_RING, use_kernel: bool | None = None):
        self.size = size
        self.returns = th.zeros(size + 1, dtype=th.float32, device=device)  # slot `size` = sink
        self.lengths = th.zeros(size + 1, dtype=th.int32, device=device)
        # Entries written so far, minus one: the slot of a step's k-th finished env (from 1) is
        # (last + k) mod size, with no extra launch for the "- 1".
        self.last = th.full((), -1, dtype=th.int64, device=device)
        self._read = 0
        self._kernel: KernelLauncher | None = None
        if use_kernel is not False and self.returns.device.type == "cuda" and cupy_or_none():
            self._load_kernel()

    def _load_kernel(self) -> None:
        cp = require_cupy("the episode ring's kernel")
        index = self.returns.device.index
        with cp.cuda.Device(index):
            kernel = load_module(*ring_module_spec()).get_function("ring_append")
            self._kernel = KernelLauncher(kernel, RING_KERNEL_PARAMS, index)
            # One launch over no env now (it writes last back unchanged): the module is loaded
            # here, not at a first append inside a graph capture.
            self._launch(None, None, None, 0)

    def _launch(self, done: Any, returns: Any, lengths: Any, n: int) -> None:
        assert self._kernel is not None
        index = self.returns.device.index
        self._kernel(
            1,
            RING_THREADS,
            current_stream(index)[1],
            0 if done is None else done.data_ptr(),
            0 if returns is None else returns.data_ptr(),
            0 if lengths is None else lengths.data_ptr(),
            n,
            self.size,
            self.returns.data_ptr(),
            self.lengths.data_ptr(),
            self.last.data_ptr(),
        )

    def append(self, done: th.Tensor, returns: th.Tensor, lengths: th.Tensor) -> None:
        """Append the finished envs' ``returns`` (float32 [N]) and ``lengths`` (int32 [N]),
        ``done`` (bool [N]) marking them; capturable in a CUDA graph."""
        n = done.numel()
        if (
            self._kernel is not None
            and n <= RING_KERNEL_MAX_ENVS
            and done.dtype == th.bool
            and returns.dtype == th.float32
            and lengths.dtype == th.int32
            and all(
                t.is_contiguous() and t.device == self.returns.device
                for t in (done, returns, lengths)
            )
        ):
            self._launch(done, returns, lengths, n)
            return
        k = th.cumsum(done, 0, dtype=th.int64)
        # Only the newest `size` of a step are written: duplicate scatter indices leave either.
        keep = done & (k > k[-1] - self.size)
        slot = th.where(keep, th.remainder(k + self.last, self.size), self.size)
        self.returns.scatter_(0, slot, returns.to(th.float32))
        self.lengths.scatter_(0, slot, lengths.to(th.int32))
        self.last += k[-1]

    def drain(self, keep: int | None = None) -> tuple[int, list[dict[str, float]]]:
        """Episodes finished since the last drain: ``(how many, their entries)``, one host read.

        The entries are the newest ``min(how many, size, keep)`` in order (``keep=None``: no
        limit beyond the ring's size); the count includes episodes the ring overwrote. SB3's
        ``ep_info_buffer`` keeps 100 entries, so building a dict for each of thousands of
        episodes was most of a drain's host time.
        """
        written = int(self.last.item()) + 1
        new = written - self._read
        self._read = written
        if new <= 0:
            return 0, []
        n = min(new, self.size, new if keep is None else max(int(keep), 0))
        if n == 0:
            return new, []
        slots = th.arange(written - n, written) % self.size
        r = self.returns[: self.size].cpu()[slots].tolist()
        ln = self.lengths[: self.size].cpu()[slots].tolist()
        return new, [{"r": ri, "l": li} for ri, li in zip(r, ln, strict=True)]
