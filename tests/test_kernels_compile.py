"""The CUDA sources agree with Python and compile.

Constants shared by Python and CUDA are written once, in Python, and reach the kernels as
generated ``#define`` lines (NVRTC on the GPU, ``-D`` flags here). These tests fail when a kernel
file spells one of them out again (a second copy that could drift), when a generated name is no
longer read by any kernel, and, where nvcc is on PATH, when a .cu file does not compile with the
generated defines (a CUDA syntax error fails CI even on machines without a GPU).
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agents.replay.tree_kernels import tree_kernel_defines
from gpu_runtime.device import F64, I32, I64, INCLUDE_DIR, PTR, U32
from gpu_trading_env.core.config import kernel_defines

NVCC = shutil.which("nvcc")
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpu_trading_env", "agents")
SOURCES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.cu"))
KERNEL_FILES = sorted(
    p for pkg in PACKAGES for ext in ("*.cu", "*.cuh") for p in (ROOT / pkg).rglob(ext)
)
HEADER_DIRS = sorted({p.parent for p in KERNEL_FILES if p.suffix == ".cuh"})
GENERATED = dict(kernel_defines() + tree_kernel_defines())


def test_kernel_sources_exist():
    names = {p.name for p in SOURCES}
    assert {"trading_step.cu", "segment_tree.cu", "monolithic_rollout.cu"} <= names


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
def test_no_kernel_redefines_a_generated_constant(path: Path):
    defined = set(re.findall(r"^\s*#\s*define\s+(\w+)", path.read_text(), flags=re.M))
    copies = sorted(defined & set(GENERATED))
    assert not copies, f"{path.name} defines {copies}; they are generated from Python"


def test_every_generated_constant_is_read_by_a_kernel():
    text = "\n".join(p.read_text() for p in KERNEL_FILES)
    unused = sorted(k for k in GENERATED if not re.search(rf"\b{k}\b", text))
    assert not unused, f"generated #defines no kernel reads: {unused}"


def test_state_codes_match_the_step_semantics():
    # The arithmetic of both backends relies on these orderings (e.g. a label's sign is the
    # barrier's direction); a change here must be a deliberate change of the spec.
    from gpu_trading_env.core import constants as c

    assert (c.LABEL_PROFIT, c.LABEL_STOP) == (1, -1)
    assert (c.CATEGORY_SHORT, c.CATEGORY_FLAT, c.CATEGORY_LONG) == tuple(range(c.N_CATEGORIES))
    assert c.N_COMPONENTS == len(c.COMPONENT_NAMES)


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_compiles_with_nvcc(source: Path, tmp_path: Path):
    defines = [f"-D{k}={v}" for k, v in GENERATED.items()]
    includes = [f"-I{d}" for d in (source.parent, INCLUDE_DIR, *HEADER_DIRS)]
    cmd = [
        NVCC,
        "--std=c++17",
        "-arch=sm_90",
        "--fmad=false",
        "-Werror",
        "all-warnings",
        *defines,
        *includes,
        "-c",
        str(source),
        "-o",
        str(tmp_path / "k.o"),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def c_kernel_params(source: str, kernel: str) -> list[tuple[str, str]]:
    """``(name, type)`` of a kernel's parameters in a .cu source (types as KernelLauncher's)."""
    match = re.search(rf"\b{kernel}(?:_##SUFFIX|_f64)?\s*\((.*?)\)\s*\{{", source, flags=re.S)
    assert match, f"kernel {kernel} not found"
    scalar = {"long long": I64, "int": I32, "unsigned int": U32, "double": F64}
    params = []
    for decl in match.group(1).replace("\\", " ").split(","):
        words = decl.replace("*", " * ").split()
        name = words[-1]
        ctype = " ".join(w for w in words[:-1] if w not in ("const", "__restrict__"))
        params.append((name, PTR if "*" in ctype else scalar[ctype]))
    return params


def test_tree_launch_parameters_match_the_kernel_source():
    from agents.replay.tree_kernels import KERNEL_FILE, TREE_KERNEL_PARAMS

    source = KERNEL_FILE.read_text()
    for kernel, declared in TREE_KERNEL_PARAMS.items():
        assert list(declared) == c_kernel_params(source, kernel), kernel


def test_store_launch_parameters_match_the_kernel_source():
    from agents.replay.step_store import STORE_KERNEL_FILE, STORE_KERNEL_PARAMS

    source = STORE_KERNEL_FILE.read_text()
    assert list(STORE_KERNEL_PARAMS) == c_kernel_params(source, "store_step")


def test_env_launch_width_fills_the_sms_first():
    from gpu_trading_env.backends.cuda_backend import launch_block

    # An H200 has 132 SMs: 4,096 envs in 64-thread blocks (64 blocks), 2^20 in 256-thread ones.
    assert [launch_block(n, 132) for n in (1, 4096, 20_000, 40_000, 2**20)] == [
        64,
        64,
        128,
        256,
        256,
    ]
    assert all(launch_block(n, sm) % 32 == 0 for n in (1, 999, 10**6) for sm in (1, 80, 132))


def test_ring_launch_parameters_match_the_kernel_source():
    from agents.rollouts.fused import RING_KERNEL_FILE, RING_KERNEL_PARAMS

    source = RING_KERNEL_FILE.read_text()
    assert list(RING_KERNEL_PARAMS) == c_kernel_params(source, "ring_append")


def test_cast_launch_parameters_match_the_kernel_source():
    from agents.rollouts.acting import CAST_KERNEL_FILE, CAST_KERNEL_PARAMS

    source = CAST_KERNEL_FILE.read_text()
    assert list(CAST_KERNEL_PARAMS) == c_kernel_params(source, "cast_bf16")
