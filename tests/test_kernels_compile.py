"""Every .cu file compiles with nvcc (where nvcc is on PATH), so a CUDA syntax error fails CI
even on machines without a GPU. NVRTC on the GPU compiles the same sources with the same
generated #defines."""

import shutil
import subprocess
from pathlib import Path

import pytest

from gpu_trading_env.core.config import kernel_param_defines
from gpu_trading_env.gpu.device import INCLUDE_DIR

NVCC = shutil.which("nvcc")
ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for pkg in ("gpu_trading_env", "agents") for p in (ROOT / pkg).rglob("*.cu"))
HEADER_DIRS = sorted(
    {p.parent for pkg in ("gpu_trading_env", "agents") for p in (ROOT / pkg).rglob("*.cuh")}
)


def test_kernel_sources_exist():
    names = {p.name for p in SOURCES}
    assert "trading_step.cu" in names


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_compiles_with_nvcc(source: Path, tmp_path: Path):
    defines = [f"-D{k}={v}" for k, v in kernel_param_defines()]
    includes = [f"-I{d}" for d in (source.parent, INCLUDE_DIR, *HEADER_DIRS)]
    cmd = [
        NVCC,
        "--std=c++17",
        "-arch=sm_90",
        "--fmad=false",
        *defines,
        *includes,
        "-c",
        str(source),
        "-o",
        str(tmp_path / "k.o"),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
