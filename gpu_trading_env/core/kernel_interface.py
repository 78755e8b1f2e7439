"""The parameter lists of the env kernels, written once, in Python.

CuPy and the CUDA driver pass a kernel pointers and scalars, not structs, so a kernel that reads
the struct-of-arrays state (:class:`~gpu_trading_env.core.state.EnvState`) or writes the step's
outputs (:class:`~gpu_trading_env.core.state.StepOutputs`) takes one pointer per array, in field
order. Those lists, and the device structs that gather them, are generated here from the
dataclasses' fields and the dtypes :func:`~gpu_trading_env.core.state.allocate_state` and
:func:`~gpu_trading_env.core.state.output_layout` allocate, and reach the kernels as ``#define``
lines prepended at compile time (see :func:`~gpu_runtime.device.load_module`):

* ``ENV_STATE_MEMBERS`` / ``ENV_STATE_ARGS`` / ``ENV_STATE_VIEW(s)``: the state struct's members,
  the kernel parameters ``st_<field>`` and the statement that gathers them into the struct;
* the same three for the market (``MARKET_*``), the parameter tables (``PARAM_*``) and the
  curiosity weights (``CURIOSITY_*``), whose lists are written below;
* ``STEP_OUTPUT_ARGS``: the output pointers of ``trading_step``, named as the fields.

:data:`ENV_KERNEL_PARAMS` is the whole parameter list of each env kernel, as the backend launches
it; ``tests/test_kernel_interface.py`` parses every kernel's parameter list from its source and
fails when count, order, name or C type differ from the Python description.
"""

from __future__ import annotations

import functools

import numpy as np

from gpu_trading_env.core.state import OUTPUT_FIELDS, STATE_FIELDS, allocate_state, output_layout

__all__ = [
    "C_TYPES",
    "ENV_KERNEL_PARAMS",
    "KernelSignature",
    "interface_defines",
    "launcher_kind",
    "state_params",
    "output_params",
]

KernelSignature = tuple[tuple[str, str], ...]
"""A kernel's parameters in order as ``(name, C type)``, e.g. ``("st_cash", "double*")``."""

# C spelling of each NumPy dtype an env array has.
C_TYPES: dict[np.dtype, str] = {
    np.dtype(np.float64): "double",
    np.dtype(np.float32): "float",
    np.dtype(np.int64): "long long",
    np.dtype(np.int32): "int",
    np.dtype(np.int8): "signed char",
    np.dtype(np.uint64): "unsigned long long",
    np.dtype(np.uint8): "unsigned char",
    np.dtype(np.bool_): "bool",
}
# State arrays no kernel writes (the instrument's bar range and the Philox key).
READ_ONLY_STATE = frozenset({"lo", "hi", "seed"})

MARKET_PARAMS: KernelSignature = (
    ("mk_features", "const float*"),  # [T, F]
    ("mk_open_px", "const double*"),  # [T]
    ("mk_close_px", "const double*"),  # [T]
    ("mk_n_features", "int"),
)
PARAM_PARAMS: KernelSignature = (
    ("pr_pf", "const double*"),  # PF_* slots, then max_position per instrument
    ("pr_pi", "const long long*"),  # PI_* slots
    ("pr_act_exposure", "const double*"),  # [A]
    ("pr_act_rate", "const double*"),  # [A]
    ("pr_act_cat", "const unsigned char*"),  # [A]
)
CURIOSITY_PARAMS: KernelSignature = (
    ("cu_w1", "const float*"),
    ("cu_b1", "const float*"),
    ("cu_w2", "const float*"),
    ("cu_b2", "const float*"),
    ("cu_on", "int"),
)
# Each group's device struct in trading_env.cuh: its members are the parameters without their
# three-letter prefix, in this order, and (NAME)_VIEW(v) declares one from the parameters.
_GROUPS = {
    "ENV_STATE": ("EnvStateView", None),
    "MARKET": ("MarketView", MARKET_PARAMS),
    "PARAM": ("ParamView", PARAM_PARAMS),
    "CURIOSITY": ("CuriosityView", CURIOSITY_PARAMS),
}


@functools.cache
def _state_dtypes() -> dict[str, np.dtype]:
    one = np.zeros(1, np.int64)
    state = allocate_state(np, 1, 1, one, one + 2)
    return {f: getattr(state, f).dtype for f in STATE_FIELDS}


@functools.cache
def state_params() -> KernelSignature:
    """``(st_<field>, C pointer type)`` of every :class:`EnvState` array, in field order."""
    dtypes = _state_dtypes()
    return tuple(
        (f"st_{f}", ("const " if f in READ_ONLY_STATE else "") + C_TYPES[dtypes[f]] + "*")
        for f in STATE_FIELDS
    )


@functools.cache
def output_params() -> KernelSignature:
    """``(field, C pointer type)`` of every :class:`StepOutputs` array, in field order."""
    layout, _ = output_layout(1, 1)
    dtypes = {name: np.dtype(dtype) for name, dtype, _, _ in layout}
    return tuple((f, C_TYPES[dtypes[f]] + "*") for f in OUTPUT_FIELDS)


@functools.cache
def _env_kernel_params() -> dict[str, KernelSignature]:
    state = state_params()
    return {
        "trading_step": (
            *state,
            *MARKET_PARAMS,
            *PARAM_PARAMS,
            *CURIOSITY_PARAMS,
            ("actions", "const long long*"),
            *output_params(),
            ("error", "long long*"),
            ("n", "int"),
        ),
        "trading_reset": (
            *state,
            *PARAM_PARAMS,
            ("mask", "const bool*"),
            ("start_index", "const long long*"),
            ("n", "int"),
        ),
        "trading_observe": (*state, *MARKET_PARAMS, *PARAM_PARAMS, ("obs", "float*"), ("n", "int")),
    }


ENV_KERNEL_PARAMS: dict[str, KernelSignature] = _env_kernel_params()
"""Each env kernel's parameters, in the order ``CudaBackend`` passes its arguments."""

# KernelLauncher's parameter kinds (gpu_runtime.device) of the C scalar types.
_SCALAR_KINDS = {"long long": "i64", "int": "i32", "unsigned int": "u32", "double": "f64"}


def launcher_kind(ctype: str) -> str:
    """The :class:`~gpu_runtime.device.KernelLauncher` kind of a C parameter type:
    ``"ptr"`` for any pointer, else the scalar's kind (ValueError for a type it cannot pass)."""
    if ctype.endswith("*"):
        return "ptr"
    try:
        return _SCALAR_KINDS[ctype]
    except KeyError:
        raise ValueError(
            f"C type {ctype!r} is invalid for KernelLauncher: allowed are pointers and "
            f"{sorted(_SCALAR_KINDS)}"
        ) from None


def _arg_list(params: KernelSignature, restrict: bool = False) -> str:
    qualifier = " __restrict__" if restrict else ""
    return ", ".join(
        f"{ctype}{qualifier if ctype.endswith('*') else ''} {name}" for name, ctype in params
    )


def interface_defines() -> tuple[tuple[str, str], ...]:
    """The generated parameter lists and device-struct layouts, as ``(NAME, body)`` pairs."""
    defs = []
    for group, (struct, params) in _GROUPS.items():
        params = state_params() if params is None else params
        names = ", ".join(name for name, _ in params)
        defs += [
            (f"{group}_MEMBERS", " ".join(f"{ctype} {name[3:]};" for name, ctype in params)),
            (f"{group}_ARGS", _arg_list(params)),
            (f"{group}_VIEW(v)", f"{struct} v = {{{names}}}"),
        ]
    defs.append(("STEP_OUTPUT_ARGS", _arg_list(output_params(), restrict=True)))
    return tuple(defs)
