"""``TradingVectorEnv``: the Gymnasium ``VectorEnv`` over a NumPy or CUDA backend.

This class only translates the Gymnasium contract (spaces, seeding, options, autoreset modes,
info dicts, array types) onto a :class:`~gpu_trading_env.backends.base.Backend`; the step itself is
the backend's. On ``device="cuda"`` every array it returns is a torch CUDA tensor (or a CuPy
array with ``array_type="cupy"``) that shares memory with the backend's buffers through DLPack;
no step synchronises with the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from gpu_trading_env.backends.base import Backend, CuriosityWeights
from gpu_trading_env.core.config import EnvConfig, config_field_names
from gpu_trading_env.core.constants import COMPONENT_NAMES
from gpu_trading_env.core.state import StepOutputs

ARRAY_TYPES = ("numpy", "torch", "cupy")
RESET_OPTIONS = ("start_index", "reset_mask")


def resolve_data(data: Any) -> Any:
    """``MarketData`` from None (the built-in default), a DataFrame, a CSV/Parquet path, or itself."""
    from gpu_trading_env.data.market_data import MarketData

    if data is None:
        return MarketData.default()
    if isinstance(data, MarketData):
        return data
    if isinstance(data, str | PathLike):
        path = Path(data)
        if path.suffix.lower() in (".parquet", ".pq"):
            return MarketData.from_parquet(path)
        if path.suffix.lower() in (".csv", ".txt") or path.name.lower().endswith(".csv.gz"):
            return MarketData.from_csv(path)
        raise ValueError(f"data = {str(data)!r} is invalid: allowed is a .csv or .parquet file")
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


def resolve_config(config: EnvConfig | None, overrides: dict[str, Any]) -> EnvConfig:
    base = config if config is not None else EnvConfig()
    if not isinstance(base, EnvConfig):
        raise TypeError(f"config of type {type(config).__name__} is invalid: allowed is EnvConfig")
    if not overrides:
        return base
    unknown = sorted(set(overrides) - set(config_field_names()))
    if unknown:
        raise TypeError(
            f"unknown keyword argument(s) {unknown}; EnvConfig fields: {config_field_names()}"
        )
    return base.replace(**overrides)


def make_backend(device: Any, data: Any, config: EnvConfig, num_envs: int) -> Backend:
    name = str(device)
    if name == "cpu":
        from gpu_trading_env.backends.numpy_backend import NumpyBackend

        return NumpyBackend(data, config, num_envs)
    if name == "cuda" or name.startswith("cuda:"):
        from gpu_trading_env.backends.cuda_backend import CudaBackend

        index = int(name.split(":")[1]) if ":" in name else None
        return CudaBackend(data, config, num_envs, device_index=index)
    raise ValueError(f"device = {device!r} is invalid: allowed is 'cpu', 'cuda' or 'cuda:N'")


class TradingVectorEnv(VectorEnv):
    """N independent trading episodes stepped together, on the CPU (NumPy) or a CUDA GPU.

    Args:
        num_envs: number of envs N; env i trades instrument ``i % n_instruments``.
        device: ``"cpu"`` (NumPy reference backend) or ``"cuda"``/``"cuda:N"`` (CuPy kernels).
        data: ``MarketData``, a DataFrame, a CSV/Parquet path, or None for the built-in data.
        config: an ``EnvConfig``; keyword arguments override its fields.
        array_type: ``"numpy"`` (default on cpu), ``"torch"`` (default on cuda) or ``"cupy"``.

    Spaces: observation ``Box(-inf, inf, (N, F+3), float32)``, action ``MultiDiscrete`` of N
    ``Discrete(n_actions)``. Arrays returned by ``step`` live in two buffers used in turn:
    copy what you keep for longer than one further step.
    """

    def __init__(
        self,
        num_envs: int = 1,
        device: Any = "cpu",
        data: Any = None,
        config: EnvConfig | None = None,
        array_type: str | None = None,
        **config_kwargs: Any,
    ) -> None:
        self.config = resolve_config(config, config_kwargs)
        self.data = resolve_data(data)
        self.backend = make_backend(device, self.data, self.config, num_envs)
        self.device = self.backend.device
        self.num_envs = self.backend.num_envs
        if array_type is None:
            array_type = "numpy" if self.device == "cpu" else "torch"
        if array_type not in ARRAY_TYPES:
            raise ValueError(
                f"array_type = {array_type!r} is invalid: allowed is one of {ARRAY_TYPES}"
            )
        if array_type == "cupy" and self.device == "cpu":
            raise ValueError(
                "array_type = 'cupy' is invalid with device='cpu': allowed is 'numpy' or 'torch'"
            )
        self.array_type = array_type
        self.autoreset_mode: AutoresetMode = self.config.autoreset_mode
        self.metadata = {"autoreset_mode": self.autoreset_mode, "render_modes": []}
        self.render_mode = None

        obs_dim = self.backend.obs_dim
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        self.single_action_space = gym.spaces.Discrete(self.config.n_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._seeded = False
        self._views: dict[int, dict[str, Any]] = {}
        self._infos: dict[int, dict[str, Any]] = {}

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start new episodes.

        Args:
            seed: an int (every env keyed by it), a sequence of N ints, or None (keep the
                current streams; the first reset without a seed draws one from the OS).
            options: ``{"start_index": int or [N] ints, "reset_mask": bool [N]}``. start_index
                pins the start bar, counted from the env's instrument's first bar, -1 = draw;
                reset_mask resets only those envs (the others keep their state).
        """
        options = dict(options or {})
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(
                f"reset options {unknown} are invalid: allowed keys are {list(RESET_OPTIONS)}"
            )
        n = self.num_envs
        mask = self._host_mask(options.get("reset_mask"))
        start = self._start_index(options.get("start_index"))
        if seed is not None or not self._seeded:
            seeds = self._seed_array(seed)
            super().reset(seed=int(seeds[0] & np.uint64(2**63 - 1)) if seed is not None else None)
            self.backend.seed(seeds, mask)
            self._seeded = True
        self.backend.check_errors()
        obs = self.backend.reset(self.backend.xp.asarray(mask), self.backend.xp.asarray(start))
        assert obs.shape[0] == n
        return self._to_array(obs), {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Advance every env by one bar. ``actions``: N ints (NumPy, torch or CuPy)."""
        acts = self.backend.prepare_actions(actions)
        out = self.backend.step(acts)
        views = self._output_views(out)
        info = self._infos.get(id(out))
        if info is None or self.array_type == "numpy" and self.device != "cpu":
            info = self._infos[id(out)] = self._build_info(views)
        return views["obs"], views["reward"], views["terminated"], views["truncated"], dict(info)

    def _build_info(self, views: dict[str, Any]) -> dict[str, Any]:
        """The info dict of one output buffer set; its arrays are refilled by every step."""
        info: dict[str, Any] = {
            "reward_components": views["components"],
            "portfolio_value": views["portfolio_value"],
            "position": views["position"],
            "barrier_label": views["barrier_label"],
            "episode": {"r": views["episode_return"], "l": views["episode_length"]},
            "_episode": views["done"],
        }
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            # The last step's info of an ended episode is this step's info at its row.
            info["final_info"] = dict(info)
            info["_final_info"] = views["done"]
            info["final_obs"] = views["final_obs"]
            info["_final_obs"] = views["done"]
        return info

    def close_extras(self, **kwargs: Any) -> None:
        self._views.clear()
        self._infos.clear()

    # ------------------------------------------------------------------ extras
    @property
    def max_position(self) -> float:
        """Units held at exposure 1.0 (config value or the data's default)."""
        return self.backend.max_position

    @property
    def reward_component_names(self) -> tuple[str, ...]:
        return COMPONENT_NAMES

    def set_curiosity_weights(self, w1: Any, b1: Any, w2: Any, b2: Any) -> None:
        """Install the curiosity forward model ([out, in] layout, as torch ``nn.Linear``)."""
        self.backend.set_curiosity_weights(CuriosityWeights(w1, b1, w2, b2))

    def clear_curiosity_weights(self) -> None:
        """Turn the curiosity bonus off."""
        self.backend.set_curiosity_weights(None)

    def observe(self) -> Any:
        """The current observation of every env, without stepping."""
        return self._to_array(self.backend.observe())

    # ------------------------------------------------------------------ helpers
    def _host(self, arr: Any) -> np.ndarray:
        return arr.get() if hasattr(arr, "get") else np.asarray(arr)

    def _host_mask(self, mask: Any) -> np.ndarray:
        n = self.num_envs
        if mask is None:
            return np.ones(n, dtype=bool)
        if hasattr(mask, "detach"):
            mask = mask.detach().cpu().numpy()
        mask = self._host(mask)
        if mask.shape != (n,) or mask.dtype != np.bool_:
            raise ValueError(
                f"reset_mask of shape {mask.shape} and dtype {mask.dtype} is invalid: allowed is bool ({n},)"
            )
        return mask

    def _start_index(self, start: Any) -> np.ndarray:
        n = self.num_envs
        if start is None:
            return np.full(n, -1, dtype=np.int64)
        arr = np.asarray(self._host(start) if hasattr(start, "get") else start)
        if arr.ndim == 0 and arr.dtype.kind in "iu":
            arr = np.full(n, int(arr), dtype=np.int64)
        if arr.shape != (n,) or arr.dtype.kind not in "iu":
            raise ValueError(f"start_index {start!r} is invalid: allowed is an int or {n} ints")
        arr = arr.astype(np.int64)
        last = self.backend.hi_host - self.backend.lo_host - 2
        bad = (arr != -1) & ((arr < 0) | (arr > last))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"start_index[{i}] = {int(arr[i])} is invalid: allowed is -1 (draw) or 0..{int(last[i])} "
                "(a bar of env's instrument that leaves room for one step)"
            )
        return arr

    def _seed_array(self, seed: Any) -> np.ndarray:
        n = self.num_envs
        if seed is None:
            entropy = np.random.SeedSequence().generate_state(2, dtype=np.uint32)
            return np.full(n, (int(entropy[1]) << 32) | int(entropy[0]), dtype=np.uint64)
        if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
            if seed < 0:
                raise ValueError(f"seed = {seed} is invalid: allowed is an int >= 0")
            return np.full(n, int(seed) & (2**64 - 1), dtype=np.uint64)
        seeds = list(seed)
        if len(seeds) != n or any(not isinstance(s, int | np.integer) or s < 0 for s in seeds):
            raise ValueError(f"seed = {seed!r} is invalid: allowed is an int >= 0 or {n} such ints")
        return np.asarray([int(s) & (2**64 - 1) for s in seeds], dtype=np.uint64)

    def _to_array(self, arr: Any) -> Any:
        if self.array_type == "numpy":
            return self._host(arr)
        if self.array_type == "torch":
            import torch

            return torch.from_dlpack(arr) if self.device != "cpu" else torch.from_numpy(arr)
        return arr

    def _output_views(self, out: StepOutputs) -> dict[str, Any]:
        """Arrays of ``out`` in the env's array type; torch views are made once per buffer."""
        key = id(out)
        if self.array_type == "numpy" and self.device == "cpu":
            return vars(out)
        if self.array_type == "numpy":
            return {k: self._host(v) for k, v in vars(out).items()}
        if key not in self._views:
            self._views[key] = {k: self._to_array(v) for k, v in vars(out).items()}
        return self._views[key]
