"""What a vector env is built from and reset with, checked: its config (``EnvConfig`` with
keyword overrides), its data (``MarketData`` from a path, a DataFrame or the built-in default),
its backend (NumPy or CUDA by device), the Philox keys of a seed, and reset options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from gpu_runtime.device import cuda_index
from gpu_trading_env.backends.base import Backend
from gpu_trading_env.core.config import EnvConfig, config_field_names

__all__ = [
    "RESET_OPTIONS",
    "action_error",
    "make_backend",
    "reset_options",
    "resolve_config",
    "resolve_data",
    "seed_keys",
]

RESET_OPTIONS = ("start_index", "reset_mask")


def seed_keys(seed: Any, n: int) -> np.ndarray:
    """uint64 [n] Philox keys from an int in [0, 2**64) (every env) or a sequence of n such ints.

    Out-of-range ints raise (2**64 + 7 would otherwise alias 7), as do floats and strings.
    """
    allowed = f"an int in [0, 2**64) or a sequence of {n} such ints"
    if isinstance(seed, AbstractSet | Mapping):
        raise TypeError(
            f"seed = {seed!r} ({type(seed).__name__}) is invalid: it has no order, so which env "
            f"gets which seed would be arbitrary; allowed is {allowed} (a list or an array)"
        )
    if isinstance(seed, int | np.integer) and not isinstance(seed, bool | np.bool_):
        if not 0 <= int(seed) < 2**64:
            raise ValueError(f"seed = {seed} is out of range: allowed is {allowed}")
        return np.full(n, int(seed), dtype=np.uint64)
    if isinstance(seed, str | bytes | float | bool | np.floating | np.bool_) or not hasattr(
        seed, "__iter__"
    ):
        raise TypeError(
            f"seed = {seed!r} ({type(seed).__name__}) is invalid: allowed is {allowed} or None"
        )
    seeds = list(seed)
    if len(seeds) != n:
        raise ValueError(f"seed has {len(seeds)} entries: allowed is {allowed}")
    for k, s in enumerate(seeds):
        if isinstance(s, bool | np.bool_) or not isinstance(s, int | np.integer):
            raise TypeError(
                f"seed[{k}] = {s!r} ({type(s).__name__}) is invalid: allowed is {allowed}"
            )
        if not 0 <= int(s) < 2**64:
            raise ValueError(f"seed[{k}] = {s} is out of range: allowed is {allowed}")
    return np.asarray([int(s) for s in seeds], dtype=np.uint64)


def action_error(err: Exception, actions: Any, num_envs: int, single_space: Any) -> Exception:
    """``err`` (a backend's refusal of a batch of actions, naming the bad shape, dtype or
    value) re-made to name what was given (type, shape, dtype) and the action space.

    :param single_space: one env's action space (``Discrete`` or ``MultiDiscrete``).
    """
    shape, dtype = getattr(actions, "shape", None), getattr(actions, "dtype", None)
    given = type(actions).__name__
    if shape is not None:
        given += f" of shape {tuple(shape)}, dtype {dtype}"
    return type(err)(f"{err} (actions given: {given}; action_space: {num_envs} x {single_space})")


def reset_options(options: Any, allowed: Sequence[str] = RESET_OPTIONS) -> dict[str, Any]:
    """A copy of ``reset(options=...)`` as a dict, refusing what is not a mapping or has a key
    outside ``allowed`` (``options="x"`` failed inside ``dict()`` naming nothing)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(
            f"options = {options!r} ({type(options).__name__}) is invalid: allowed is None or a "
            f"dict with keys among {list(allowed)}"
        )
    unknown = sorted(set(options) - set(allowed), key=str)
    if unknown:
        raise ValueError(f"reset options {unknown} are invalid: allowed keys are {list(allowed)}")
    return dict(options)


def resolve_data(data: Any) -> Any:
    """``MarketData`` from None (the built-in default), a DataFrame, a CSV/Parquet path, or itself."""
    from gpu_trading_env.data.market_data import MarketData

    if data is None:
        return MarketData.default()
    if isinstance(data, MarketData):
        return data
    if isinstance(data, str | PathLike):
        from gpu_trading_env.data.loaders import load_bars  # the one reader of bar files

        return load_bars(Path(data))
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        pd = None
    if pd is not None and isinstance(data, pd.DataFrame):
        return MarketData.from_dataframe(data)
    raise TypeError(
        f"data of type {type(data).__name__} is invalid: allowed is None, MarketData, a pandas "
        "DataFrame, or a path to a CSV/Parquet file"
    )


def resolve_config(
    config: EnvConfig | None, overrides: dict[str, Any], owner: str = "TradingVectorEnv.__init__"
) -> EnvConfig:
    """``config`` (default ``EnvConfig()``) with ``overrides`` of its fields.

    An unknown keyword raises Python's own ``TypeError`` text (``owner() got an unexpected
    keyword argument 'x'``), which tools such as TorchRL's ``GymEnv`` match to drop optional
    keywords.
    """
    base = config if config is not None else EnvConfig()
    if not isinstance(base, EnvConfig):
        raise TypeError(f"config of type {type(config).__name__} is invalid: allowed is EnvConfig")
    if not overrides:
        return base
    known = set(config_field_names())
    for name in overrides:
        if name not in known:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")
    return base.replace(**overrides)


def make_backend(device: Any, data: Any, config: EnvConfig, num_envs: int) -> Backend:
    """The backend of ``device``: ``"cpu"`` the NumPy one, ``"cuda"`` or ``"cuda:N"`` the CUDA
    one (imported only then: the CPU path never loads CuPy)."""
    name = str(device)
    if name == "cpu":
        from gpu_trading_env.backends.numpy_backend import NumpyBackend

        return NumpyBackend(data, config, num_envs)
    if name == "cuda" or name.startswith("cuda:"):
        from gpu_trading_env.backends.cuda_backend import CudaBackend

        return CudaBackend(data, config, num_envs, device_index=cuda_index(name))
    raise ValueError(f"device = {device!r} is invalid: allowed is 'cpu', 'cuda' or 'cuda:N'")
