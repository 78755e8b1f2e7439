"""The parameter lists of the portfolio env's kernels, written once, in Python.

As :mod:`gpu_trading_env.core.kernel_interface` does for the single env: a kernel takes one
pointer per array, so the lists of ``kernels/portfolio_step.cu`` are generated here from
:class:`~gpu_trading_env.core.portfolio_state.PortfolioState`'s and
:class:`~gpu_trading_env.core.portfolio_state.PortfolioStepOutputs`' fields (with the dtypes
their allocators give them) and reach NVRTC as ``#define`` lines:

* ``PORTFOLIO_STATE_MEMBERS`` / ``_ARGS`` / ``_VIEW(v)``: the state struct, the parameters
  ``ps_<field>`` and the statement that gathers them;
* the same three for the market arrays (``PORTFOLIO_MARKET_*``) and the parameters
  (``PORTFOLIO_PARAM_*``);
* ``PORTFOLIO_OUTPUT_ARGS``: the output pointers, named as the fields;
* ``PPF_<NAME>`` / ``PPI_<NAME>``: the slots of the float64 and int64 parameter arrays.

:data:`PORTFOLIO_KERNEL_PARAMS` is each kernel's whole parameter list, as
``PortfolioCudaBackend`` launches it; ``tests/test_kernel_interface.py`` compares it with the
source.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from gpu_runtime.philox import philox_stream_defines
from gpu_trading_env.core.constants import kernel_constant_defines
from gpu_trading_env.core.kernel_interface import C_TYPES, KernelSignature
from gpu_trading_env.core.portfolio_config import RUIN_LOG_REWARD, PortfolioParams
from gpu_trading_env.core.portfolio_state import (
    PortfolioState,
    PortfolioStepOutputs,
    allocate_portfolio_outputs,
    allocate_portfolio_state,
)

__all__ = [
    "PORTFOLIO_FLOAT_PARAMS",
    "PORTFOLIO_INT_PARAMS",
    "PORTFOLIO_KERNEL_PARAMS",
    "PORTFOLIO_OUTPUT_FIELDS",
    "PORTFOLIO_STATE_FIELDS",
    "portfolio_kernel_defines",
    "portfolio_param_arrays",
]

PORTFOLIO_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(PortfolioState))
PORTFOLIO_OUTPUT_FIELDS = tuple(f.name for f in dataclasses.fields(PortfolioStepOutputs))
# The slots of the parameter arrays pp_pf (float64) and pp_pi (int64), in this order.
PORTFOLIO_FLOAT_PARAMS = ("initial_capital", "leverage", "max_leverage", "reserve_frac")
PORTFOLIO_INT_PARAMS = (
    "fill_next_open",
    "reward_log",
    "episode_length",
    "autoreset_mode",
    "n_levels",
    "n_bars",
    "n_instruments",
    "n_features",
)
# State arrays no kernel writes (the Philox key).
_READ_ONLY_STATE = frozenset({"seed"})

PORTFOLIO_MARKET_PARAMS: KernelSignature = (
    ("pm_features", "const float*"),  # [T, K, F]
    ("pm_open_px", "const double*"),  # [T, K]
    ("pm_close_px", "const double*"),  # [T, K]
)
PORTFOLIO_PARAM_PARAMS: KernelSignature = (
    ("pp_pf", "const double*"),  # PPF_* slots
    ("pp_pi", "const long long*"),  # PPI_* slots
    ("pp_exposure", "const double*"),  # [L]
    ("pp_rate", "const double*"),  # [K]
)


@functools.cache
def portfolio_state_params() -> KernelSignature:
    """``(ps_<field>, C pointer type)`` of every :class:`PortfolioState` array, in field order."""
    state = allocate_portfolio_state(np, 1, 1)
    return tuple(
        (
            f"ps_{f}",
            ("const " if f in _READ_ONLY_STATE else "")
            + C_TYPES[np.dtype(getattr(state, f).dtype)]
            + "*",
        )
        for f in PORTFOLIO_STATE_FIELDS
    )


@functools.cache
def portfolio_output_params() -> KernelSignature:
    """``(field, C pointer type)`` of every :class:`PortfolioStepOutputs` array, in order."""
    out = allocate_portfolio_outputs(np, 1, 1, 3)
    return tuple(
        (f, C_TYPES[np.dtype(getattr(out, f).dtype)] + "*") for f in PORTFOLIO_OUTPUT_FIELDS
    )


@functools.cache
def _kernel_params() -> dict[str, KernelSignature]:
    state = portfolio_state_params()
    return {
        "portfolio_step": (
            *state,
            *PORTFOLIO_MARKET_PARAMS,
            *PORTFOLIO_PARAM_PARAMS,
            ("actions", "const long long*"),
            *portfolio_output_params(),
            ("error", "long long*"),
            ("n", "int"),
        ),
        "portfolio_reset": (
            *state,
            *PORTFOLIO_PARAM_PARAMS,
            ("mask", "const bool*"),
            ("start_index", "const long long*"),
            ("n", "int"),
        ),
        "portfolio_observe": (
            *state,
            *PORTFOLIO_MARKET_PARAMS,
            *PORTFOLIO_PARAM_PARAMS,
            ("obs", "float*"),
            ("n", "int"),
        ),
    }


PORTFOLIO_KERNEL_PARAMS: dict[str, KernelSignature] = _kernel_params()
"""Each portfolio kernel's parameters, in the order ``PortfolioCudaBackend`` passes them."""


def _arg_list(params: KernelSignature, restrict: bool = False) -> str:
    qualifier = " __restrict__" if restrict else ""
    return ", ".join(
        f"{ctype}{qualifier if ctype.endswith('*') else ''} {name}" for name, ctype in params
    )


def portfolio_param_arrays(params: PortfolioParams, n_bars: int, n_features: int) -> tuple:
    """The host arrays ``(pf float64, pi int64)`` of the PPF_* and PPI_* slots."""
    values = {
        **{name: getattr(params, name) for name in PORTFOLIO_FLOAT_PARAMS},
        **{
            name: getattr(params, name)
            for name in PORTFOLIO_INT_PARAMS
            if name not in ("n_levels", "n_bars", "n_instruments", "n_features")
        },
        "n_levels": params.exposure.size,
        "n_bars": n_bars,
        "n_instruments": params.rate.size,
        "n_features": n_features,
    }
    pf = np.array([values[k] for k in PORTFOLIO_FLOAT_PARAMS], dtype=np.float64)
    pi = np.array([values[k] for k in PORTFOLIO_INT_PARAMS], dtype=np.int64)
    return pf, pi


@functools.cache
def portfolio_kernel_defines() -> tuple[tuple[str, str], ...]:
    """Every ``#define`` the portfolio kernels are compiled with: the parameter slots, the
    shared constants and Philox stream ids, the ruin reward and the generated lists."""
    defs = [(f"PPF_{k.upper()}", str(i)) for i, k in enumerate(PORTFOLIO_FLOAT_PARAMS)]
    defs += [(f"PPI_{k.upper()}", str(i)) for i, k in enumerate(PORTFOLIO_INT_PARAMS)]
    # repr is the shortest decimal that reads back as this double: the same bits in C.
    defs.append(("PORTFOLIO_RUIN_LOG_REWARD", f"({RUIN_LOG_REWARD!r})"))
    groups = {
        "PORTFOLIO_STATE": ("PortfolioStateView", portfolio_state_params()),
        "PORTFOLIO_MARKET": ("PortfolioMarketView", PORTFOLIO_MARKET_PARAMS),
        "PORTFOLIO_PARAM": ("PortfolioParamView", PORTFOLIO_PARAM_PARAMS),
    }
    for group, (struct, params) in groups.items():
        names = ", ".join(name for name, _ in params)
        defs += [
            (f"{group}_MEMBERS", " ".join(f"{ctype} {name[3:]};" for name, ctype in params)),
            (f"{group}_ARGS", _arg_list(params)),
            (f"{group}_VIEW(v)", f"{struct} v = {{{names}}}"),
        ]
    defs.append(("PORTFOLIO_OUTPUT_ARGS", _arg_list(portfolio_output_params(), restrict=True)))
    return (*kernel_constant_defines(), *philox_stream_defines(), *defs)
