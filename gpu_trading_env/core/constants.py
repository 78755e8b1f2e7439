"""Constants shared by the Python step and the CUDA kernels: the one place they are written.

The kernels do not spell these values out; :func:`kernel_constant_defines` gives them as ``#define``
lines when NVRTC compiles a module (as it does for the parameter slots of ``config.py``), and
``tests/test_kernels_compile.py`` fails if a kernel file defines one of these names itself.
"""

from __future__ import annotations

# Barrier status values (EnvState.barrier_status).
BARRIER_NONE, BARRIER_ARMED, BARRIER_FIRED = 0, 1, 2
# Barrier labels reported per step (StepOutputs.barrier_label).
LABEL_NONE, LABEL_PROFIT, LABEL_STOP, LABEL_TIME = 0, 1, -1, 2
# EnvState.done_flag: why an env waits for a reset (NEXT_STEP and DISABLED modes).
RUNNING, WAIT_TERMINATED, WAIT_TRUNCATED = 0, 1, 2
# Autoreset mode codes (the autoreset_mode int parameter).
MODE_SAME_STEP, MODE_NEXT_STEP, MODE_DISABLED = 0, 1, 2
# Action categories used by the diversity ring and the curiosity one-hot.
CATEGORY_SHORT, CATEGORY_FLAT, CATEGORY_LONG = 0, 1, 2
N_CATEGORIES = 3
# Reward component columns (StepOutputs.components).
COMPONENT_NAMES = ("pnl", "barrier", "risk", "diversity", "curiosity")
N_COMPONENTS = len(COMPONENT_NAMES)
# Observation values after the market features: portfolio value, position, spread.
PORTFOLIO_FEATURE_NAMES = ("value", "position", "spread")
N_PORTFOLIO_FEATURES = len(PORTFOLIO_FEATURE_NAMES)
# Negative slope of the LeakyReLU in the curiosity forward model (and the agents' networks).
LEAKY_RELU_SLOPE = 0.01
# Largest curiosity hidden width the kernel's per-thread array holds.
CURIOSITY_MAX_HIDDEN = 256
# Threads per block of the env kernels.
BLOCK = 256


def kernel_constant_defines() -> tuple[tuple[str, str], ...]:
    """``(NAME, value)`` pairs of every constant above that the kernels read."""
    ints = {
        "BARRIER_NONE": BARRIER_NONE,
        "BARRIER_ARMED": BARRIER_ARMED,
        "BARRIER_FIRED": BARRIER_FIRED,
        "LABEL_NONE": LABEL_NONE,
        "LABEL_PROFIT": LABEL_PROFIT,
        "LABEL_STOP": LABEL_STOP,
        "LABEL_TIME": LABEL_TIME,
        "RUNNING": RUNNING,
        "WAIT_TERMINATED": WAIT_TERMINATED,
        "WAIT_TRUNCATED": WAIT_TRUNCATED,
        "MODE_SAME_STEP": MODE_SAME_STEP,
        "MODE_NEXT_STEP": MODE_NEXT_STEP,
        "MODE_DISABLED": MODE_DISABLED,
        "N_CATEGORIES": N_CATEGORIES,
        "N_COMPONENTS": N_COMPONENTS,
        "N_PORTFOLIO_FEATURES": N_PORTFOLIO_FEATURES,
        "CURIOSITY_MAX_HIDDEN": CURIOSITY_MAX_HIDDEN,
        "BLOCK": BLOCK,
    }
    ints |= {f"COMPONENT_{name.upper()}": k for k, name in enumerate(COMPONENT_NAMES)}
    defs = [(k, f"({v})") for k, v in ints.items()]
    defs.append(("LEAKY_RELU_SLOPE", f"{LEAKY_RELU_SLOPE!r}f"))
    return tuple(defs)
