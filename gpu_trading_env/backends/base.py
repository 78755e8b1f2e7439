"""What the NumPy and CUDA backends share: setup from (data, config), buffers, and their contract.

A backend owns the market arrays on its device, the :class:`~gpu_trading_env.core.state.EnvState`
and two sets of :class:`~gpu_trading_env.core.state.StepOutputs` that steps fill in turn (so the
observation returned by step k is not overwritten by step k+1). It knows nothing of Gymnasium;
:class:`~gpu_trading_env.vector_env.TradingVectorEnv` translates the Gymnasium contract onto it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_runtime.device import to_numpy
from gpu_trading_env.core.config import (
    AUTORESET_CODES,
    EnvConfig,
    action_table,
    implied_leverage,
    resolve_max_positions,
    step_scalars,
)
from gpu_trading_env.core.constants import N_CATEGORIES, N_PORTFOLIO_FEATURES
from gpu_trading_env.core.state import (
    EnvState,
    StepOutputs,
    allocate_outputs,
    allocate_state,
    instrument_bounds,
    output_layout,
)


@dataclass(frozen=True)
class StepParams:
    """Scalars and per-action tables of a step (host copies; backends upload what they need)."""

    floats: dict[str, float]
    ints: dict[str, int]
    exposure: np.ndarray  # float64 [A]
    cost_rate: np.ndarray  # float64 [A]
    category: np.ndarray  # uint8 [A]
    max_position: np.ndarray  # float64 [I], units at exposure 1.0 per instrument ("units" sizing)

    def __post_init__(self) -> None:
        # Plain attributes (p.initial_capital, ...) for the NumPy backend's hot loop; the names
        # come from the dicts, so there is still one list of parameters (config.py).
        for values in (self.floats, self.ints):
            for name, value in values.items():
                object.__setattr__(self, name, value)


@dataclass
class CuriosityWeights:
    """ICM forward model, torch ``nn.Linear`` layout ([out, in]); float32 on the backend's device.

    Input: the first ``D = curiosity_state_dims`` observation dims and a one-hot of the action
    category (3); ``w1`` [H, D+3], ``b1`` [H], ``w2`` [D, H], ``b2`` [D].
    """

    w1: Any
    b1: Any
    w2: Any
    b2: Any


_F32_MAX = float(np.finfo(np.float32).max)


def check_action_layout(shape: Any, dtype: Any, is_integer: bool, num_envs: int) -> None:
    """Raise unless actions are one integer per env: shape ``(N,)`` or the column ``(N, 1)``
    that some RL libraries use, of an integer dtype.

    The exception types are Gymnasium's vector envs': TypeError for a scalar (one action for
    a vector env) and for a non-integer dtype, ValueError for an array of another shape.
    Reads only the array's metadata, so the CUDA path calls it without a host sync. Any other
    shape of N elements (``[2, 2]`` for 4 envs) is refused rather than flattened, since which
    env gets which action would be a guess; floats are refused, integral or not, on every
    backend (a float policy output is a bug to cast explicitly, not to round).
    """
    shape = tuple(int(d) for d in shape)
    if shape == ():
        raise TypeError(
            f"actions of shape () (a scalar) are invalid: allowed is an array of {num_envs} "
            f"integers, shape ({num_envs},) or ({num_envs}, 1), one action per env"
        )
    if shape not in ((num_envs,), (num_envs, 1)):
        raise ValueError(
            f"actions of shape {shape} are invalid: allowed is ({num_envs},) or "
            f"({num_envs}, 1), one action per env"
        )
    if not is_integer:
        raise TypeError(
            f"actions of dtype {dtype} are invalid: allowed is an integer dtype (floats are "
            "refused even when integral: cast them, e.g. actions.astype(np.int64))"
        )


def check_curiosity_weights(weights: CuriosityWeights, state_dims: int, hidden: int) -> None:
    """Raise ValueError unless every weight has its shape and is finite in float32.

    A NaN or float32-overflowing weight would turn every reward NaN, far from the cause; the
    check runs before anything is installed, so a rejected call leaves the old weights.
    """
    d, h = int(state_dims), int(hidden)
    expected = {"w1": (h, d + N_CATEGORIES), "b1": (h,), "w2": (d, h), "b2": (d,)}
    for name, shape in expected.items():
        arr = np.asarray(to_numpy(getattr(weights, name)))
        if tuple(arr.shape) != shape:
            raise ValueError(
                f"curiosity weight {name} has shape {tuple(arr.shape)}; expected {shape} "
                f"(curiosity_state_dims={d}, curiosity_hidden={h})"
            )
        if arr.dtype.kind not in "iuf":
            raise ValueError(
                f"curiosity weight {name} has dtype {arr.dtype}: allowed is a real float array"
            )
        with np.errstate(invalid="ignore"):
            bad = ~(np.abs(arr.astype(np.float64)) <= _F32_MAX)
        if bad.any():
            pos = tuple(int(k) for k in np.argwhere(bad)[0])
            raise ValueError(
                f"curiosity weight {name}{list(pos)} = {arr[pos]!r} is invalid: allowed are "
                f"finite values representable in float32 (|x| <= {_F32_MAX:.4g})"
            )


def check_output_arrays(outputs: dict[str, Any], num_envs: int, obs_dim: int) -> None:
    """Raise ValueError unless ``outputs`` holds a writable, contiguous host array (NumPy or a
    torch CPU tensor) of each output's dtype and shape (``final_obs`` may be missing)."""
    layout, _ = output_layout(num_envs, obs_dim)
    for name, dtype, shape, _ in layout:
        if name == "final_obs" and name not in outputs:
            continue
        arr = outputs.get(name)
        host = arr.numpy() if hasattr(arr, "numpy") and hasattr(arr, "is_cuda") else arr
        if not (
            isinstance(host, np.ndarray)
            and host.dtype == dtype
            and host.shape == shape
            and host.flags.c_contiguous
            and host.flags.writeable
        ):
            raise ValueError(
                f"outputs[{name!r}] = {type(arr).__name__} is invalid: allowed is a writable, "
                f"contiguous {dtype.name} {shape} array (see make_outputs())"
            )


def warn_leverage(
    config: EnvConfig, data: Any, leverage: np.ndarray, max_position: np.ndarray
) -> None:
    """Warn (once per env construction) when full exposure implies leverage above the cap."""
    over = np.flatnonzero(leverage > config.max_leverage)
    if over.size == 0:
        return
    k = int(over[np.argmax(leverage[over])])
    warnings.warn(
        f"position sizing implies {float(leverage[k]):.4g}x leverage on instrument "
        f"{data.instruments[k]!r} ({config.sizing} sizing: max_position "
        f"{float(max_position[k]):g} units at its median close, initial_capital "
        f"{config.initial_capital:g}), above "
        f"EnvConfig.max_leverage = {config.max_leverage:g}"
        + (f" ({over.size} instruments in all)" if over.size > 1 else "")
        + "; use sizing='equity' or a smaller max_position",
        UserWarning,
        stacklevel=6,  # the caller of TradingVectorEnv(...)
    )


class Backend:
    """Base class: validated setup shared by :class:`NumpyBackend` and :class:`CudaBackend`."""

    xp: Any = np
    device: str = "cpu"

    def __init__(self, data: Any, config: EnvConfig, num_envs: int) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
            raise ValueError(f"num_envs = {num_envs!r} is invalid: allowed is an integer >= 1")
        self.config = config
        self.num_envs = int(num_envs)
        self.n_features = int(data.n_features)
        self.obs_dim = self.n_features + N_PORTFOLIO_FEATURES
        if config.curiosity_state_dims > self.obs_dim:
            raise ValueError(
                f"EnvConfig.curiosity_state_dims = {config.curiosity_state_dims} is invalid: "
                f"allowed is at most the observation size {self.obs_dim}"
            )
        bars = np.asarray(data.bars_per_instrument, dtype=np.int64)
        need = config.episode_length + 1
        for k, n in enumerate(bars):
            if n < need:
                raise ValueError(
                    f"instrument {data.instruments[k]!r} has {int(n)} bars after warm-up; "
                    f"EnvConfig.episode_length = {config.episode_length} needs at least {need} "
                    "(one episode plus the bar it is marked to)"
                )
        offsets = np.asarray(data.instrument_offsets, dtype=np.int64)
        self.max_position = resolve_max_positions(
            config, np.asarray(data.close), offsets, data.instruments
        )
        warn_leverage(
            config,
            data,
            implied_leverage(config, np.asarray(data.close), offsets),
            self.max_position,
        )
        floats, ints = step_scalars(config, len(offsets) - 1)
        table = action_table(config)
        self.params = StepParams(
            floats, ints, table.exposure, table.cost_rate, table.category, self.max_position
        )
        self.lo_host, self.hi_host = instrument_bounds(data.instrument_offsets, self.num_envs)
        self.state: EnvState = allocate_state(
            self.xp, self.num_envs, config.diversity_window, self.lo_host, self.hi_host
        )
        self._outputs = [allocate_outputs(self.xp, self.num_envs, self.obs_dim) for _ in range(2)]
        self._turn = 0
        self.curiosity: CuriosityWeights | None = None

    def _next_outputs(self) -> StepOutputs:
        self._turn ^= 1
        return self._outputs[self._turn]

    def upcoming_outputs(self) -> StepOutputs:
        """The zero-copy output set that the next :meth:`step` writes (the one two steps ago)."""
        return self._outputs[self._turn ^ 1]

    # The contract each backend implements. Arrays are of the backend's array module.
    def seed(self, seeds: np.ndarray, mask: np.ndarray) -> None:
        """Set the Philox key (host uint64 [N]) of the envs in ``mask`` (host bool [N]) and
        restart their start-bar counters; other envs keep their streams."""
        raise NotImplementedError

    def reset(self, mask: Any, start_index: Any) -> Any:
        """Start new episodes where ``mask`` (bool [N]); ``start_index`` int64 [N], -1 = draw.

        Returns the observation float32 [N, obs_dim] of every env (others unchanged).
        """
        raise NotImplementedError

    def prepare_actions(self, actions: Any) -> Any:
        """Actions (NumPy, torch or CuPy, N integers) as the int64 [N] array :meth:`step` takes.

        Raises ValueError naming the shape or first bad value, TypeError naming a scalar or
        a non-integer dtype (``check_action_layout``); a backend that checks
        values on its device instead reports them through :meth:`check_errors`.
        """
        raise NotImplementedError

    def step(self, actions: Any) -> StepOutputs:
        """One vector step for int64 actions [N] from :meth:`prepare_actions`, into the next of
        the two output sets (the zero-copy double buffer)."""
        raise NotImplementedError

    def step_into(
        self, actions: Any, outputs: dict[str, Any], check: bool = True, trusted: bool = False
    ) -> None:
        """One vector step that writes into ``outputs``: ``{field: array}`` for the fields of
        :class:`StepOutputs` (NumPy arrays; torch CUDA tensors or CuPy arrays on this GPU).

        ``final_obs`` may be left out outside SAME_STEP mode, which does not write it; in
        SAME_STEP mode only the rows that ended are written. Every other array is written
        whole. ``check=False``: no host read of the deferred error word (a CUDA graph capture
        must not contain one); see :meth:`check_errors`. ``trusted``: the caller allocated the
        arrays with the right dtypes and shapes (a backend may then skip checking them).
        """
        self.step_bound(actions, self.bind_outputs(outputs, trusted), check)

    def bind_outputs(self, outputs: dict[str, Any], trusted: bool = False) -> Any:
        """Check ``outputs`` (as :meth:`step_into` takes them; skipped when ``trusted``) once
        and return what :meth:`step_bound` writes into: the per-step work of ``step_into``
        without the per-call checks, for callers that step into the same arrays many times.

        The handle keeps ``outputs``' arrays alive; it is valid while they keep their memory.
        """
        raise NotImplementedError

    def step_bound(
        self, actions: Any, bound: Any, check: bool = True, stream: int | None = None
    ) -> None:
        """:meth:`step_into` into the arrays of ``bound`` (from :meth:`bind_outputs`);
        ``stream``: :meth:`stream_handle`'s value, when the caller has read it already."""
        raise NotImplementedError

    def stream_handle(self) -> int | None:
        """The handle of the stream a step would run on now (None on the CPU): output memory
        written on one stream is reused only on that stream."""
        return None

    def state_restored(self) -> None:
        """Called after the state arrays were overwritten from outside (a checkpoint's): drop
        anything derived from the old values. Nothing is, by default."""

    def check_errors(self) -> None:
        """Raise ValueError for an invalid action the backend recorded but has not raised yet.

        The NumPy backend raises in :meth:`prepare_actions`, so it has nothing deferred.
        """

    def observe(self) -> Any:
        """The current observation of every env, float32 [N, obs_dim]."""
        raise NotImplementedError

    def set_autoreset_mode(self, mode: Any) -> None:
        """Switch to ``mode`` (an ``AutoresetMode``). Running envs carry on; the caller resets
        any env that waits for a reset before the next step."""
        code = AUTORESET_CODES[mode]
        self.config = self.config.replace(autoreset_mode=mode)
        self.params.ints["autoreset_mode"] = code
        object.__setattr__(self.params, "autoreset_mode", code)

    def set_curiosity_weights(self, weights: CuriosityWeights | None) -> None:
        if weights is None:
            self.curiosity = None
            return
        # Backends call check_curiosity_weights on the caller's arrays before converting them.
        self.curiosity = weights
