"""The CUDA side of the sum/min tree's kernels: their file, launch geometry and parameters.

``kernels/segment_tree.cu`` is compiled with the geometry of :func:`tree_kernel_defines` (the one
copy of those numbers) and launched by :class:`~agents.replay.segment_tree.CudaSumMinTree`
through :class:`~gpu_runtime.device.KernelLauncher` with the parameters of
``TREE_KERNEL_PARAMS``, which ``tests/test_kernel_interface.py`` checks against the source.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpu_runtime.device import F64, I32, I64, PTR, U32, KernelParams, ModuleSpec
from gpu_runtime.philox import philox_stream_defines

__all__ = [
    "KERNEL_FILE",
    "SCRATCH_INIT",
    "TREE_KERNEL_PARAMS",
    "VERDICT_SEQ_SHIFT",
    "WEIGHTS_KERNEL_PARAMS",
    "tree_kernel_defines",
]

KERNEL_FILE = Path(__file__).resolve().parent / "kernels" / "segment_tree.cu"
CHECK_THREADS = 1024  # entries per block of the check kernel (one per thread)
MIN_CHUNK, MAX_CHUNK = 128, 1024  # entries per block of the levels kernel
SAMPLE_THREADS = 256
SMEM_KEYS = 4096  # the largest batch updated in one launch (keys sorted in shared memory)
UPDATE_THREADS = 256  # block size (and chunk) of seg_tree_update_*
GROUP = 4  # levels between stored levels
WEIGHT_THREADS = 256
# The check kernel's int64 scratch words (ST_SCRATCH_<NAME> is the index) and the value each
# holds between updates (its last block restores them): the smallest bad position (INT64_MAX:
# none), the bits of the largest leaf value (non-negative doubles order as ints), 1 when some
# index is smaller than the one before it, and the count of blocks done.
SCRATCH_INIT = {"bad": int(np.iinfo(np.int64).max), "vmax": 0, "unsorted": 0, "ticket": 0}
# The verdict word the kernels publish to host-mapped memory: the update's sequence number in
# the bits from VERDICT_SEQ_SHIFT up, the first bad position + 1 (0: accepted) below them.
VERDICT_SEQ_SHIFT = 32


def tree_kernel_defines() -> tuple[tuple[str, str], ...]:
    """The tree geometry ``segment_tree.cu`` is compiled with: the one copy of these numbers."""
    scratch = tuple((f"ST_SCRATCH_{name.upper()}", str(k)) for k, name in enumerate(SCRATCH_INIT))
    return (
        ("ST_SMEM_KEYS", str(SMEM_KEYS)),
        ("ST_MAX_THREADS", str(max(CHECK_THREADS, MAX_CHUNK))),
        ("ST_GROUP", str(GROUP)),
        ("ST_UPDATE_THREADS", str(UPDATE_THREADS)),
        ("ST_VERDICT_SEQ_SHIFT", str(VERDICT_SEQ_SHIFT)),
        *scratch,
        *philox_stream_defines(),
    )


def tree_module_spec() -> ModuleSpec:
    """:func:`~gpu_runtime.device.load_module`'s arguments for ``segment_tree.cu``."""
    return (KERNEL_FILE, tree_kernel_defines(), (), ())


# The kernels' parameters, named and typed as in segment_tree.cu (tests/test_kernel_interface.py
# compares them with the source). "in" and the weights are float or double per variant.
_TREE = (("sum", PTR), ("mn", PTR))
_INPUT = (("idx", PTR), ("in", PTR), ("n", I64))
TREE_KERNEL_PARAMS: dict[str, KernelParams] = {
    "seg_tree_check": (
        *_INPUT,
        ("transform", I32),
        ("alpha", F64),
        ("eps", F64),
        ("n_valid", I64),
        ("max_value", PTR),
        ("status", PTR),
        ("status_host", PTR),
        ("seq", U32),
        ("flags", PTR),
        ("keys", PTR),
        ("scratch", PTR),
    ),
    "seg_tree_levels": (
        *_TREE,
        *_INPUT,
        ("capacity", I64),
        ("pow2", I64),
        ("levels", I32),
        ("transform", I32),
        ("alpha", F64),
        ("eps", F64),
        ("range_start", I64),
        ("range_start_at", PTR),  # 0, or a device int64 that replaces range_start
        ("max_value", PTR),
        ("status", PTR),
        ("flags", PTR),
        ("keys", PTR),
        ("ticket", PTR),
    ),
    "seg_tree_sample": (
        *_TREE,
        ("pow2", I64),
        ("levels", I32),
        ("batch", I64),
        ("k0", U32),
        ("k1", U32),
        ("c1", U32),
        ("c2", U32),
        ("beta", F64),
        ("out_idx", PTR),
        ("out_w", PTR),
    ),
    "seg_tree_sample_dev": (
        *_TREE,
        ("pow2", I64),
        ("levels", I32),
        ("batch", I64),
        ("k0", U32),
        ("k1", U32),
        ("calls", PTR),
        ("beta", PTR),
        ("out_idx", PTR),
        ("out_w", PTR),
    ),
    "seg_tree_update": (
        *_TREE,
        *_INPUT,
        ("pow2", I64),
        ("levels", I32),
        ("transform", I32),
        ("alpha", F64),
        ("eps", F64),
        ("may_overflow", I32),
        ("n_valid", I64),
        ("max_value", PTR),
        ("status", PTR),
        ("status_host", PTR),
        ("seq", U32),
        ("ticket", PTR),
    ),
}
# seg_tree_weights, launched through RawKernel (one variant, off the hot path).
WEIGHTS_KERNEL_PARAMS: KernelParams = (
    *_TREE,
    ("pow2", I64),
    ("idx", PTR),
    ("n", I64),
    ("beta", F64),
    ("out_w", PTR),
)
