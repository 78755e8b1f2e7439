"""Every CUDA kernel's parameter list agrees with the Python description used to launch it.

CuPy and the driver pass a kernel its arguments by position, with no check of count, order or
type: a kernel whose parameters are reordered reads the wrong arrays silently. These CPU tests
parse each ``extern "C" __global__`` kernel's parameter list from its .cu source (expanding the
parameter-list macros that ``kernel_interface.py`` generates) and compare names, order and C
types with the Python description its launcher uses: ``ENV_KERNEL_PARAMS`` for the env,
``*_KERNEL_PARAMS`` beside each agents kernel. A kernel without a description fails too.
"""

import re
from pathlib import Path

import pytest

from agents.replay.step_store import STORE_KERNEL_FILE, STORE_KERNEL_PARAMS
from agents.replay.tree_kernels import KERNEL_FILE as TREE_KERNEL_FILE
from agents.replay.tree_kernels import TREE_KERNEL_PARAMS, WEIGHTS_KERNEL_PARAMS
from agents.rollouts.acting import CAST_KERNEL_FILE, CAST_KERNEL_PARAMS
from agents.rollouts.episode_ring import RING_KERNEL_FILE, RING_KERNEL_PARAMS
from agents.rollouts.monolithic import KERNEL_FILE as MONO_KERNEL_FILE
from agents.rollouts.monolithic import MONOLITHIC_KERNEL_PARAMS
from gpu_runtime.device import _ARG_FORMATS
from gpu_trading_env.backends.cuda_backend import KERNEL_FILE as ENV_KERNEL_FILE
from gpu_trading_env.backends.portfolio_cuda import PORTFOLIO_KERNEL_FILE
from gpu_trading_env.core.config import kernel_defines
from gpu_trading_env.core.kernel_interface import ENV_KERNEL_PARAMS, launcher_kind
from gpu_trading_env.core.portfolio_kernel_interface import (
    PORTFOLIO_KERNEL_PARAMS,
    portfolio_kernel_defines,
)

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for pkg in ("gpu_trading_env", "agents") for p in (ROOT / pkg).rglob("*.cu"))

# Python descriptions by kernel file, then kernel name (without its _f32/_f64 variant suffix).
DESCRIPTIONS = {
    ENV_KERNEL_FILE: ENV_KERNEL_PARAMS,
    PORTFOLIO_KERNEL_FILE: PORTFOLIO_KERNEL_PARAMS,
    TREE_KERNEL_FILE: {**TREE_KERNEL_PARAMS, "seg_tree_weights": WEIGHTS_KERNEL_PARAMS},
    STORE_KERNEL_FILE: {"store_step": STORE_KERNEL_PARAMS},
    RING_KERNEL_FILE: {"ring_append": RING_KERNEL_PARAMS},
    CAST_KERNEL_FILE: {"cast_bf16": CAST_KERNEL_PARAMS},
    MONO_KERNEL_FILE: {"monolithic_rollout": MONOLITHIC_KERNEL_PARAMS},
}
# The generated object-like macros a parameter list may use (ENV_STATE_ARGS, STEP_OUTPUT_ARGS...).
LIST_MACROS = {
    k: v for k, v in kernel_defines() + portfolio_kernel_defines() if k.endswith("_ARGS")
}
# Element types of the templated kernels' variant pointers (float or double per variant).
TEMPLATE_TYPES = {"INPUT_T", "W"}

_KERNEL = re.compile(
    r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?'
    r"(\w+?)(?:_##SUFFIX)?\s*\(([^)]*)\)",
    flags=re.S,
)


def normalize(decl: str) -> tuple[str, str]:
    """``(name, C type)`` of one parameter declaration, without ``__restrict__`` and spacing."""
    words = decl.replace("\\", " ").replace("*", " * ").split()
    words = [w for w in words if w != "__restrict__"]
    if len(words) < 2:
        raise ValueError(f"cannot read the parameter declaration {decl!r}")
    ctype = " ".join(words[:-1]).replace(" *", "*")
    return words[-1], ctype


def source_kernels(source: str) -> dict[str, list[tuple[str, str]]]:
    """``{kernel: [(name, C type), ...]}`` of every ``extern "C" __global__`` kernel in a .cu
    source, the generated list macros expanded; variants ``_f32``/``_f64`` and ``_##SUFFIX``
    are listed once under their base name (the first declaration wins)."""
    kernels: dict[str, list[tuple[str, str]]] = {}
    for match in _KERNEL.finditer(source):
        name = re.sub(r"_f(?:32|64)$", "", match.group(1))
        params = match.group(2)
        for macro, body in LIST_MACROS.items():
            params = re.sub(rf"\b{macro}\b", body, params)
        decls = [d for d in params.split(",") if d.strip()]
        kernels.setdefault(name, [normalize(d) for d in decls])
    return kernels


def mismatches(kernel: str, source: list, described: tuple) -> list[str]:
    """What differs between a kernel's parsed parameters and its Python description."""
    problems = []
    if len(source) != len(described):
        problems.append(
            f"{kernel}: the source declares {len(source)} parameters, Python describes "
            f"{len(described)}"
        )
    for k, ((name, ctype), (d_name, d_type)) in enumerate(zip(source, described, strict=False)):
        if d_type in _ARG_FORMATS:  # described by KernelLauncher kind: compare kinds
            element = ctype.rstrip("*").split()[-1]
            got = "ptr" if ctype.endswith("*") else launcher_kind(ctype)
            same = got == d_type and (element not in TEMPLATE_TYPES or got == "ptr")
        else:
            got, same = ctype, ctype == d_type
        if name != d_name or not same:
            problems.append(
                f"{kernel} parameter {k}: the source has {name} ({ctype}), Python describes "
                f"{d_name} ({d_type})"
            )
    return problems


def test_every_kernel_file_is_described():
    assert set(SOURCES) == set(DESCRIPTIONS), "a kernel file without a Python description"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_kernel_parameters_match_their_python_description(path: Path):
    kernels = source_kernels(path.read_text())
    described = DESCRIPTIONS[path]
    assert set(kernels) == set(described), f"{path.name}: kernels {sorted(kernels)}"
    problems = [p for k in kernels for p in mismatches(k, kernels[k], tuple(described[k]))]
    assert not problems, "\n".join(problems)


def test_a_swapped_parameter_is_reported():
    # The check itself: swapping two parameters of the env's reset kernel in its source text
    # (same count, both pointers) must be reported with their names and types.
    text = ENV_KERNEL_FILE.read_text()
    original = "const bool* __restrict__ mask, const long long* __restrict__ start_index"
    assert original in text
    swapped = text.replace(
        original, "const long long* __restrict__ start_index, const bool* __restrict__ mask"
    )
    reset = source_kernels(swapped)["trading_reset"]
    problems = mismatches("trading_reset", reset, ENV_KERNEL_PARAMS["trading_reset"])
    assert len(problems) == 2 and "start_index (const long long*)" in problems[0]


def test_the_env_state_list_follows_the_state_dataclass():
    # The generated list is the dataclass's field order with each array's allocated dtype.
    from gpu_trading_env.core.kernel_interface import state_params
    from gpu_trading_env.core.state import STATE_FIELDS

    assert [name for name, _ in state_params()] == [f"st_{f}" for f in STATE_FIELDS]
    types = dict(state_params())
    assert types["st_cash"] == "double*" and types["st_seed"] == "const unsigned long long*"
    assert types["st_barrier_status"] == "signed char*"
