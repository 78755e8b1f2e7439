import os

import pytest
import torch

from gpu_runtime.device import cuda_available, cupy_or_none


def pytest_configure(config):
    """``GTE_TEST_DEVICE=N`` runs the GPU tier on ``cuda:N``: it becomes the current device of
    torch and CuPy, which is what ``device="cuda"`` means in the tests (and in the project)."""
    index = os.environ.get("GTE_TEST_DEVICE")
    if not index:
        return
    cp = cupy_or_none()
    if cp is None:
        raise pytest.UsageError(f"GTE_TEST_DEVICE = {index!r} is set but no CUDA device is visible")
    count = cp.cuda.runtime.getDeviceCount()
    if not index.isdigit() or int(index) >= count:
        raise pytest.UsageError(
            f"GTE_TEST_DEVICE = {index!r} is invalid: allowed is a device index 0..{count - 1}"
        )
    torch.cuda.set_device(int(index))
    cp.cuda.Device(int(index)).use()


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device and CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one intra-op thread for a test module: its networks are small, and a second
    thread only adds contention on a busy 2-core runner."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def small_bar_file(tmp_path):
    """A CSV of 400 daily bars after the features' warm-up (a seeded random walk), for the
    commands' end-to-end tests: the built-in data's 20,000 bars make every train run spend
    seconds backtesting and bootstrapping whatever the training budget."""
    from random_bars import write_daily_bar_csv

    from gpu_trading_env.data.features import WARMUP_BARS

    return write_daily_bar_csv(tmp_path / "bars.csv", WARMUP_BARS + 400)


@pytest.fixture(params=[1, 3], ids=["K1", "K3"])
def vec_env_k(request):
    """A factory ``(num_envs, **kwargs) -> VectorEnv`` of K instruments per env, both by their
    ids: K = 1 ``gym.make_vec("GpuTrading-v0", ...)`` (Discrete actions), K = 3
    ``gym.make_vec("GpuPortfolio-v0", ..., data=<3 small instruments>)`` (MultiDiscrete)."""
    import gymnasium as gym

    import gpu_trading_env  # noqa: F401 - registers the ids

    def make(num_envs: int, **kwargs):
        if request.param == 1:
            return gym.make_vec("GpuTrading-v0", num_envs=num_envs, **kwargs)
        from test_portfolio_env import three_instruments

        data = three_instruments(200)
        return gym.make_vec("GpuPortfolio-v0", num_envs=num_envs, data=data, **kwargs)

    make.k = request.param
    return make
