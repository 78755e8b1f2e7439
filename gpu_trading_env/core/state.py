"""The dynamic state of N trading envs, and the buffers a step writes, as struct-of-arrays.

One definition serves both backends: ``xp`` is ``numpy`` or ``cupy``, and the CUDA kernel takes
these arrays' pointers in the order of :data:`STATE_FIELDS`. Rows are envs; the diversity ring is
stored position-major (``[window, N]``) so that env i's entry at a ring slot sits next to env
i+1's, which keeps the kernel's accesses coalesced.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from gpu_trading_env.core.constants import COMPONENT_NAMES, N_CATEGORIES


@dataclass
class EnvState:
    """Per-env state. Shapes: [N] unless noted; money in float64 (see ENV_SPEC.md)."""

    bar: Any  # int64, the bar t the next step trades at (global row of MarketData)
    step_in_episode: Any  # int32, steps taken in the current episode
    lo: Any  # int64, first bar of the env's instrument
    hi: Any  # int64, one past the last bar of the env's instrument
    cash: Any  # float64, currency
    position: Any  # float64, units (negative = short)
    costs: Any  # float64, cumulative transaction costs of the episode, currency
    entry_price: Any  # float64, fill price of the last opening (0 when flat)
    entry_bar: Any  # int64, bar of the last opening
    barrier_status: Any  # int8, BARRIER_NONE / ARMED / FIRED
    div_ring: Any  # uint8 [window, N], recent action categories
    div_cursor: Any  # int32, next ring slot to write
    div_count: Any  # int32, entries in the ring (<= window)
    div_hist: Any  # int32 [N_CATEGORIES, N], count of each category in the ring
    seed: Any  # uint64, Philox key of the env
    episode_count: Any  # uint64, start-bar draws taken so far (Philox counter)
    done_flag: Any  # uint8, RUNNING / WAIT_TERMINATED / WAIT_TRUNCATED
    episode_return: Any  # float64, sum of rewards in the current episode

    @property
    def num_envs(self) -> int:
        return int(self.bar.shape[0])


STATE_FIELDS = tuple(f.name for f in fields(EnvState))


def allocate_state(xp: Any, num_envs: int, window: int, lo: np.ndarray, hi: np.ndarray) -> EnvState:
    """Zeroed state for ``num_envs`` envs; ``lo``/``hi`` [N] give each env's bar range."""
    n = num_envs
    return EnvState(
        bar=xp.asarray(lo, dtype=xp.int64).copy(),
        step_in_episode=xp.zeros(n, dtype=xp.int32),
        lo=xp.asarray(lo, dtype=xp.int64),
        hi=xp.asarray(hi, dtype=xp.int64),
        cash=xp.zeros(n, dtype=xp.float64),
        position=xp.zeros(n, dtype=xp.float64),
        costs=xp.zeros(n, dtype=xp.float64),
        entry_price=xp.zeros(n, dtype=xp.float64),
        entry_bar=xp.zeros(n, dtype=xp.int64),
        barrier_status=xp.zeros(n, dtype=xp.int8),
        div_ring=xp.zeros((window, n), dtype=xp.uint8),
        div_cursor=xp.zeros(n, dtype=xp.int32),
        div_count=xp.zeros(n, dtype=xp.int32),
        div_hist=xp.zeros((N_CATEGORIES, n), dtype=xp.int32),
        seed=xp.zeros(n, dtype=xp.uint64),
        episode_count=xp.zeros(n, dtype=xp.uint64),
        done_flag=xp.zeros(n, dtype=xp.uint8),
        episode_return=xp.zeros(n, dtype=xp.float64),
    )


@dataclass
class StepOutputs:
    """What one vector step writes. Shapes: [N] unless noted."""

    obs: Any  # float32 [N, obs_dim], the observation to act on next
    reward: Any  # float32
    terminated: Any  # bool
    truncated: Any  # bool
    done: Any  # bool, terminated | truncated (written by the step, so no extra launch is needed)
    components: Any  # float32 [N, 5], COMPONENT_NAMES; sums to reward
    final_obs: Any  # float32 [N, obs_dim], last observation of an ended episode (SAME_STEP)
    portfolio_value: Any  # float64, value after the step at bar t+1's close
    position: Any  # float64, units held after the step's trade
    barrier_label: Any  # int8, LABEL_*
    episode_return: Any  # float32, return of the episode that ended this step (else 0)
    episode_length: Any  # int32, length of the episode that ended this step (else 0)


Layout = tuple[tuple[str, Any, tuple[int, ...], int], ...]
"""Where the arrays of a :class:`StepOutputs` lie in one byte block: ``(name, dtype, shape,
byte offset)`` per array."""


@functools.lru_cache(maxsize=64)
def output_layout(num_envs: int, obs_dim: int, final_obs: bool = True) -> tuple[Layout, int]:
    """Where each :class:`StepOutputs` array lies in one byte block: ``(layout, total bytes)``.

    Arrays are packed by decreasing item size (float64, float32, int32, bool, int8), so each
    starts at a multiple of its own item size with no gaps: the block splits into its arrays
    by byte counts alone (one ``split`` call for torch). ``final_obs=False`` leaves
    ``final_obs`` out (the step returns it in SAME_STEP mode only).
    """
    n = num_envs
    specs = (
        ("portfolio_value", np.float64, (n,)),
        ("position", np.float64, (n,)),
        ("obs", np.float32, (n, obs_dim)),
        ("final_obs", np.float32, (n, obs_dim)),
        ("reward", np.float32, (n,)),
        ("components", np.float32, (n, len(COMPONENT_NAMES))),
        ("episode_return", np.float32, (n,)),
        ("episode_length", np.int32, (n,)),
        ("terminated", np.bool_, (n,)),
        ("truncated", np.bool_, (n,)),
        ("done", np.bool_, (n,)),
        ("barrier_label", np.int8, (n,)),
    )
    layout = []
    offset = 0
    for name, dtype, shape in specs:
        if name == "final_obs" and not final_obs:
            continue
        layout.append((name, np.dtype(dtype), shape, offset))
        offset += math.prod(shape) * np.dtype(dtype).itemsize
    return tuple(layout), max(offset, 16)


def outputs_from_block(block: Any, layout: Layout) -> StepOutputs:
    """:class:`StepOutputs` of views into ``block`` (uint8, NumPy, CuPy or torch); ``layout``
    must hold every field."""
    return StepOutputs(**block_views(block, layout))


@functools.lru_cache(maxsize=64)
def _split_plan(
    layout: Layout, nbytes: int
) -> tuple[tuple[int, ...], tuple[tuple[str, str, tuple[int, ...] | None], ...]]:
    """Byte counts that split a block of ``nbytes`` into the arrays of ``layout`` (and a tail),
    and per array: name, dtype char, and the shape to view it as (None when 1-D)."""
    sizes, fields = [], []
    end = 0
    for name, dtype, shape, offset in layout:
        assert offset == end, "output_layout packs arrays without gaps"
        end = offset + math.prod(shape) * dtype.itemsize
        sizes.append(end - offset)
        fields.append((name, dtype.char, shape if len(shape) > 1 else None))
    if nbytes > end:
        sizes.append(nbytes - end)
    return tuple(sizes), tuple(fields)


def block_views(block: Any, layout: Layout) -> dict[str, Any]:
    """``{name: view}`` of the arrays of ``layout`` in ``block`` (uint8, NumPy, CuPy or torch).

    This runs on every owned-output step: NumPy makes one ndarray per array over the block's
    buffer; torch one ``split`` of the block and one dtype view per array (plus a shape view
    for the 2-D ones), with no Python loop over bytes or dtypes.
    """
    if isinstance(block, np.ndarray):
        return {
            name: np.ndarray(shape, dtype, buffer=block, offset=offset)
            for name, dtype, shape, offset in layout
        }
    sizes, fields = _split_plan(layout, int(block.shape[0]))
    if hasattr(block, "data_ptr"):  # torch
        import torch

        arrays = {}
        for part, (name, char, shape) in zip(block.split(sizes), fields, strict=False):
            view = part.view(_TORCH_DTYPES[char](torch))
            arrays[name] = view if shape is None else view.view(shape)
        return arrays
    return {  # CuPy
        name: block[offset : offset + math.prod(shape) * dtype.itemsize].view(dtype).reshape(shape)
        for name, dtype, shape, offset in layout
    }


_TORCH_DTYPES = {
    "f": lambda t: t.float32,
    "d": lambda t: t.float64,
    "?": lambda t: t.bool,
    "b": lambda t: t.int8,
    "i": lambda t: t.int32,
}


def allocate_outputs(xp: Any, num_envs: int, obs_dim: int) -> StepOutputs:
    """Zeroed outputs for ``num_envs`` envs, all views of one block (see :func:`output_layout`)."""
    layout, nbytes = output_layout(num_envs, obs_dim)
    block = xp.zeros(nbytes, dtype=xp.uint8)
    out = outputs_from_block(block, layout)
    # An attribute outside the dataclass fields: fields(StepOutputs) stays the kernel's list.
    out._block = (block, layout)  # type: ignore[attr-defined]  # noqa: SLF001 (this module's)
    return out


def outputs_block(out: StepOutputs) -> tuple[Any, Layout] | None:
    """``(uint8 block, layout)`` behind outputs made by :func:`allocate_outputs`, else None."""
    return getattr(out, "_block", None)


OUTPUT_FIELDS = tuple(f.name for f in fields(StepOutputs))


def instrument_bounds(offsets: np.ndarray, num_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """Env i trades instrument ``i % n_instruments``; its bars are ``[lo[i], hi[i])``."""
    offsets = np.asarray(offsets, dtype=np.int64)
    n_inst = len(offsets) - 1
    inst = np.arange(num_envs) % n_inst
    return offsets[inst].copy(), offsets[inst + 1].copy()
