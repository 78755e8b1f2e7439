"""``KernelLauncher``: packed leading arguments (``set_leading`` / ``launch_rest``) launch what a
full ``__call__`` launches, and a full call invalidates them."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

SOURCE = r"""
extern "C" __global__ void axpb(const double* x, double a, long long n, double b, double* y) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
"""


def _launcher():
    cp = pytest.importorskip("cupy")
    from gpu_runtime.device import F64, I64, PTR, KernelLauncher, current_stream

    if cp.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("no CUDA device")
    kernel = cp.RawModule(code=SOURCE).get_function("axpb")
    params = (("x", PTR), ("a", F64), ("n", I64), ("b", F64), ("y", PTR))
    return cp, KernelLauncher(kernel, params, 0), current_stream(0)


def test_launch_rest_uses_the_packed_leading_values():
    cp, launch, (stream, handle) = _launcher()
    n = 1000
    x = cp.arange(n, dtype=cp.float64)
    y1, y2 = cp.zeros(n), cp.zeros(n)
    launch.set_leading(x.data.ptr, 3.0, n)
    launch.launch_rest(4, 256, handle, 1.5, y1.data.ptr)
    launch.launch_rest(4, 256, handle, -2.0, y2.data.ptr)  # the leading values stay packed
    stream.synchronize()
    assert cp.array_equal(y1, 3.0 * x + 1.5)
    assert cp.array_equal(y2, 3.0 * x - 2.0)


def test_a_full_call_drops_the_leading_values():
    cp, launch, (stream, handle) = _launcher()
    n = 100
    x = cp.ones(n)
    y = cp.zeros(n)
    launch.set_leading(x.data.ptr, 2.0, n)
    launch(1, 128, handle, x.data.ptr, 5.0, n, 0.0, y.data.ptr)
    stream.synchronize()
    assert cp.array_equal(y, cp.full(n, 5.0))
    with pytest.raises(Exception, match="pack_into|argument"):
        launch.launch_rest(1, 128, handle, 1.0, y.data.ptr)  # 2 values for 5 slots
    with pytest.raises(ValueError, match="6 leading values"):
        launch.set_leading(1, 2.0, 3, 4.0, 5, 6)
