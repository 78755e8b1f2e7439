"""The CUDA sources agree with Python and compile.

Constants shared by Python and CUDA are written once, in Python, and reach the kernels as
generated ``#define`` lines prepended to the source (by NVRTC's loader on the GPU, here too). These tests fail when a kernel
file spells one of them out again (a second copy that could drift), when a generated name is no
longer read by any kernel, and, where nvcc is on PATH, when a .cu file does not compile with the
generated defines (a CUDA syntax error fails CI even on machines without a GPU). The parameter
lists are checked against their Python descriptions by ``tests/test_kernel_interface.py``.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agents.replay.tree_kernels import tree_kernel_defines
from agents.rollouts.episode_ring import ring_kernel_defines
from agents.rollouts.monolithic import monolithic_kernel_defines
from gpu_runtime.device import INCLUDE_DIR
from gpu_trading_env.core.config import kernel_defines
from gpu_trading_env.core.portfolio_kernel_interface import portfolio_kernel_defines

NVCC = shutil.which("nvcc")
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpu_runtime", "gpu_trading_env", "agents")
SOURCES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.cu"))
KERNEL_FILES = sorted(
    p for pkg in PACKAGES for ext in ("*.cu", "*.cuh") for p in (ROOT / pkg).rglob(ext)
)
HEADER_DIRS = sorted({p.parent for p in KERNEL_FILES if p.suffix == ".cuh"})
GENERATED = dict(
    kernel_defines()
    + tree_kernel_defines()
    + ring_kernel_defines()
    + monolithic_kernel_defines()
    + portfolio_kernel_defines()
)
# Macro names without a function-like macro's parameters: ENV_STATE_VIEW(v) -> ENV_STATE_VIEW.
GENERATED_NAMES = {k.split("(")[0] for k in GENERATED}


def test_kernel_sources_exist():
    names = {p.name for p in SOURCES}
    assert {"trading_step.cu", "segment_tree.cu", "monolithic_rollout.cu"} <= names


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
def test_no_kernel_redefines_a_generated_constant(path: Path):
    defined = set(re.findall(r"^\s*#\s*define\s+(\w+)", path.read_text(), flags=re.M))
    copies = sorted(defined & GENERATED_NAMES)
    assert not copies, f"{path.name} defines {copies}; they are generated from Python"


def test_every_generated_constant_is_read_by_a_kernel():
    text = "\n".join(p.read_text() for p in KERNEL_FILES)
    unused = sorted(k for k in GENERATED_NAMES if not re.search(rf"\b{k}\b", text))
    assert not unused, f"generated #defines no kernel reads: {unused}"


def test_state_codes_match_the_step_semantics():
    # The arithmetic of both backends relies on these orderings (e.g. a label's sign is the
    # barrier's direction); a change here must be a deliberate change of the spec.
    from gpu_trading_env.core import constants as c

    assert (c.LABEL_PROFIT, c.LABEL_STOP) == (1, -1)
    assert (c.CATEGORY_SHORT, c.CATEGORY_FLAT, c.CATEGORY_LONG) == tuple(range(c.N_CATEGORIES))
    assert c.N_COMPONENTS == len(c.COMPONENT_NAMES)


@pytest.fixture(scope="module")
def nvcc_results(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every source compiled by nvcc, all at once (each nvcc is one process on one core; one
    after another they took twice as long on a 2-core runner): name -> its finished process."""
    folder = tmp_path_factory.mktemp("nvcc")
    defines = "".join(f"#define {k} {v}\n" for k, v in GENERATED.items())
    procs = {}
    for source in SOURCES:
        # As load_module does: the generated #define lines, then the source (function-like
        # macros with braces do not survive -D through nvcc's host compiler command line).
        # Device code alone (-cubin), as NVRTC compiles it at run time: the host compiler adds
        # nothing the kernels use, only seconds.
        code = folder / source.name
        code.write_text(defines + source.read_text())
        includes = [f"-I{d}" for d in (source.parent, INCLUDE_DIR, *HEADER_DIRS)]
        cmd = [
            NVCC,
            "--std=c++17",
            "-arch=sm_90",
            "--fmad=false",
            "-Werror",
            "all-warnings",
            *includes,
            "-cubin",
            str(code),
            "-o",
            str(folder / f"{source.stem}.cubin"),
        ]
        procs[source.name] = (
            cmd,
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
        )
    results = {}
    for name, (cmd, proc) in procs.items():
        out, err = proc.communicate(timeout=300)
        results[name] = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    return results


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_compiles_with_nvcc(source: Path, nvcc_results):
    result = nvcc_results[source.name]
    assert result.returncode == 0, result.stderr


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
