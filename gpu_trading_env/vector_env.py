"""``TradingVectorEnv``: the Gymnasium ``VectorEnv`` over a NumPy or CUDA backend.

This class only translates the Gymnasium contract (spaces, seeding, options, autoreset modes,
info dicts, array types) onto a :class:`~gpu_trading_env.backends.base.Backend`; the step itself is
the backend's. On ``device="cuda"`` every array it returns is a torch CUDA tensor (or a CuPy
array with ``array_type="cupy"``) that shares memory with the backend's buffers through DLPack;
no step synchronises with the host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from gpu_trading_env.backends.base import CuriosityWeights
from gpu_trading_env.core.config import EnvConfig, parse_autoreset_mode
from gpu_trading_env.core.constants import COMPONENT_NAMES
from gpu_trading_env.core.state import (
    OUTPUT_FIELDS,
    STATE_FIELDS,
    StepOutputs,
    block_views,
    output_layout,
    outputs_block,
)
from gpu_trading_env.env_setup import (
    action_error,
    make_backend,
    reset_options,
    resolve_config,
    resolve_data,
    seed_keys,
)
from gpu_trading_env.library_checks import warn_if_skrl_is_loaded
from gpu_trading_env.output_pool import OutputPool, OutputSet, storage_use_count

ARRAY_TYPES = ("numpy", "torch", "cupy")

# The info arrays every step fills for every env, as (info key, step output field).
STEP_INFO_FIELDS = (
    ("reward_components", "components"),
    ("portfolio_value", "portfolio_value"),
    ("position", "position"),
    ("barrier_label", "barrier_label"),
)
# The episode statistics of the ended episodes, as (info key, step output field).
EPISODE_INFO_FIELDS = (("episode_return", "episode_return"), ("episode_length", "episode_length"))
# SAME_STEP's keys of the ended episodes, left out where no episode ended (host flags only).
FINAL_KEYS = ("final_obs", "_final_obs", "final_info", "_final_info")


class OneObjectEnvAttrs:
    """``call``, ``get_attr``, ``set_attr`` and ``render`` of a vector env whose N envs are rows
    of one object (``TradingVectorEnv``, ``PortfolioVectorEnv``): each attribute is read or set
    once and the answer repeated N times, the shape ``SyncVectorEnv`` returns."""

    num_envs: int

    def render(self) -> None:
        """Nothing to draw (``render_mode`` is None); returns None so that trainers that call
        ``render()`` or ``call("render")`` every step (skrl's default) run unchanged."""
        return None

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``getattr(self, name)(*args, **kwargs)`` (or the attribute's value if not callable),
        evaluated once (the N envs are rows of this one object) and repeated N times, the
        shape ``SyncVectorEnv.call`` returns."""
        value = getattr(self, name)
        result = value(*args, **kwargs) if callable(value) else value
        return (result,) * self.num_envs

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """``getattr(self, name)`` repeated N times (as ``SyncVectorEnv.get_attr``)."""
        return (getattr(self, name),) * self.num_envs

    def set_attr(self, name: str, values: Any) -> None:
        """``setattr(self, name, value)``: one value for all envs, or a list/tuple of N values
        that are all equal (the envs share one object, so they cannot differ)."""
        if isinstance(values, list | tuple):
            if len(values) != self.num_envs:
                raise ValueError(
                    f"set_attr({name!r}, values) with {len(values)} values is invalid: allowed "
                    f"is one value or {self.num_envs} values"
                )
            first = values[0]
            if not all(_same_value(v, first) for v in values[1:]):
                raise ValueError(
                    f"set_attr({name!r}, values) with differing values is invalid: the "
                    f"{self.num_envs} envs share one attribute; allowed is one value for all"
                )
            values = first
        setattr(self, name, values)


class TradingVectorEnv(OneObjectEnvAttrs, VectorEnv):
    """N independent trading episodes stepped together, on the CPU (NumPy) or a CUDA GPU.

    Args:
        num_envs: number of envs N; env i trades instrument ``i % n_instruments``.
        device: ``"cpu"`` (NumPy reference backend) or ``"cuda"``/``"cuda:N"`` (CuPy kernels).
        data: ``MarketData``, a DataFrame, a CSV/Parquet path, or None for the built-in data.
        config: an ``EnvConfig``; keyword arguments override its fields (``autoreset_mode``
            defaults to ``NEXT_STEP``, Gymnasium's own vector default).
        array_type: ``"numpy"`` (default on cpu), ``"torch"`` (default on cuda) or ``"cupy"``.
        copy_outputs: True (default): every array ``reset`` and ``step`` return (observations,
            rewards, flags, infos, ``final_obs``) is the caller's; no later call writes to it.
            The step writes straight into an output block that nothing outside the env refers
            to: one of a few kept blocks once the arrays (and anything derived from them:
            slices, exports, the info dict) of the step it last served are dropped, else a new
            one (see ``output_pool.py``); no copy, no host sync; with ``array_type="numpy"`` on
            a GPU, one device-to-host copy. False: the zero-copy
            double buffer: a step's arrays are overwritten two steps later, so copy what you
            keep longer (the fused rollout of ``agents`` does). :meth:`step_into` writes into
            arrays you allocated once (:meth:`make_outputs`), which a CUDA graph can capture.
        render_mode: None (the vector env does not render; the single env
            ``gym.make("GpuTrading-v0", render_mode="rgb_array")`` draws an episode).
        max_episode_steps: Gymnasium's time limit (``gym.make_vec(..., max_episode_steps=T)``
            passes it to vector entry points): every episode is truncated after at most T steps,
            as ``TimeLimit`` does for a single env. It sets ``episode_length`` to
            ``min(episode_length, T)``, so start bars are drawn to leave room for T steps.
            None (default): ``episode_length`` alone.

    Spaces: observation ``Box(-inf, inf, (N, F+3), float32)``, action ``MultiDiscrete`` of N
    ``Discrete(n_actions)``.

    Info keys (arrays with a leading N axis; each key ``k`` comes with ``_k``, the bool [N]
    mask of its valid rows, as in Gymnasium): ``reward_components`` [N, 5], ``portfolio_value``,
    ``position``, ``barrier_label`` (valid where ``SyncVectorEnv`` of single envs has them:
    not in the rows autoreset in the step, NEXT_STEP, or that ended, SAME_STEP, whose info is
    a reset's; where every row is valid, one all-True mask of the env, read-only with NumPy),
    and ``episode_return``/``episode_length`` of the episodes that ended in this step (each
    ended episode is reported once, masked by ``_episode_return``). In SAME_STEP mode
    ``final_obs`` [N, obs_dim] and ``final_info`` (the four step arrays and the episode
    statistics) of the episodes that ended, masked by ``done``; where
    the flags are host arrays (``device="cpu"`` or ``array_type="numpy"``) these keys are present
    only on steps where an episode ended, as in Gymnasium; on a GPU with torch or CuPy arrays
    they are present on every step (deciding would read the device; docs/INTEGRATIONS.md,
    "Deviations from Gymnasium"). The key ``"episode"`` is left to Gymnasium's
    ``RecordEpisodeStatistics``.
    """

    def __init__(
        self,
        num_envs: int = 1,
        device: Any = "cpu",
        data: Any = None,
        config: EnvConfig | None = None,
        array_type: str | None = None,
        copy_outputs: bool = True,
        render_mode: str | None = None,
        max_episode_steps: int | None = None,
        **config_kwargs: Any,
    ) -> None:
        if render_mode is not None:
            raise ValueError(
                f"render_mode = {render_mode!r} is invalid for the vector env: allowed is None "
                "(render a single env: gym.make('GpuTrading-v0', render_mode='rgb_array'))"
            )
        if not isinstance(copy_outputs, bool | np.bool_):
            raise TypeError(f"copy_outputs = {copy_outputs!r} is invalid: allowed is True or False")
        self.config = resolve_config(config, config_kwargs)
        self.config = limit_episode_length(self.config, max_episode_steps)
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
        # NumPy arrays of a GPU step: host copies, made anew every step.
        self._host_copies = array_type == "numpy" and self.device != "cpu"
        # Flags on the host: whether an episode ended is known without a device read.
        self._host_flags = array_type == "numpy" or self.device == "cpu"
        self._all_rows = self._all_rows_mask()
        # NEXT_STEP: the step arrays' mask of the next step, False on the rows it autoresets.
        self._fresh_rows = self._all_rows
        self.copy_outputs = bool(copy_outputs)
        self.autoreset_mode: AutoresetMode = self.config.autoreset_mode
        self.metadata = {"autoreset_mode": self.autoreset_mode, "render_modes": []}
        self.render_mode = None

        obs_dim = self.backend.obs_dim
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        self.single_action_space = gym.spaces.Discrete(self.config.n_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._seeded = False
        self._needs_reset = True
        self._skrl_warned = False  # see library_checks.warn_if_skrl_is_loaded
        self._views: dict[int, dict[str, Any]] = {}
        self._infos: dict[int, dict[str, Any]] = {}
        # Owned outputs: reused blocks (see output_pool.py); torch needs the storage use count.
        self._pool = OutputPool(
            self._build_output_set,
            reuse=self.array_type != "torch" or storage_use_count() is not None,
        )
        # step_into: the arrays last checked, their addresses, and the backend's bound handle.
        self._into_cache: tuple[tuple[Any, ...], tuple[int, ...], Any] | None = None

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
                reset_mask (a NumPy, torch or CuPy bool [N] array with a True value) resets only
                those envs (the others keep their state); it is checked as Gymnasium's
                ``SyncVectorEnv`` checks it: TypeError for another type or dtype, ValueError
                for another shape or an all-False mask.
        """
        self._check_open("reset")
        if not self._skrl_warned:  # skrl would store the NEXT_STEP reset steps
            self._skrl_warned = warn_if_skrl_is_loaded(self)
        options = reset_options(options)
        n = self.num_envs
        mask = self._host_mask(options.get("reset_mask"))
        if self._needs_reset and not mask.all():
            raise RuntimeError(
                "reset(options={'reset_mask': ...}) is invalid before a full reset(): the envs "
                "outside the mask have no episode yet; call reset() without a mask first"
            )
        start = self._start_index(options.get("start_index"))
        if seed is not None or not self._seeded:
            seeds = self._seed_array(seed)
            super().reset(seed=int(seeds[0] & np.uint64(2**63 - 1)) if seed is not None else None)
            self.backend.seed(seeds, mask)
            self._seeded = True
        self.backend.check_errors()
        obs = self.backend.reset(self.backend.xp.asarray(mask), self.backend.xp.asarray(start))
        assert obs.shape[0] == n
        if mask.all() or self._fresh_rows is self._all_rows:
            self._fresh_rows = self._all_rows
        else:  # the envs reset here are not autoreset by the next step
            self._fresh_rows = self._on_device(
                lambda: self._fresh_rows | self._to_array(self.backend.xp.asarray(mask))
            )
        self._needs_reset = False
        # observe() returns a fresh array every call: the caller owns it in either output mode.
        return self._to_array(obs), {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Advance every env by one bar.

        ``actions``: one integer per env (NumPy, torch or CuPy), shape ``(N,)`` or ``(N, 1)``;
        another shape raises ValueError, a scalar or a non-integer dtype TypeError
        (``check_action_layout``), as Gymnasium's vector envs do.
        """
        if self._needs_reset or self.closed:  # one test on the hot path
            self._check_open("step")
            raise RuntimeError(
                "step() called before reset(): call reset() first (after the env is built, or "
                "after set_autoreset_mode() left envs waiting for their reset)"
            )
        try:
            acts = self.backend.prepare_actions(actions)
        except (TypeError, ValueError) as err:
            raise action_error(err, actions, self.num_envs, self.single_action_space) from None
        if self.copy_outputs:
            if self._host_copies:
                views = self._host_views(self.backend.step(acts))
            else:
                # The step writes straight into a block that nothing outside the pool refers
                # to (a reused one or a new one): the caller owns it, and no copy is made.
                stream = self.backend.stream_handle()
                out, reused = self._pool.acquire(stream)
                views = out.views
                if reused and "final_obs" in views:  # the step writes only the rows that ended
                    self._zero(views["final_obs"])
                self.backend.step_bound(acts, out.bound, stream=stream)
            info = self._build_info(views)
        else:
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                # The step writes final_obs only where an episode ended: the other rows read
                # zero, as with owned outputs, not the episode that ended two steps ago.
                self._zero(self.backend.upcoming_outputs().final_obs)
            out = self.backend.step(acts)
            views = self._output_views(out)
            info = self._infos.get(id(out))
            if info is None or self._host_copies:
                info = self._infos[id(out)] = self._build_info(views)
            if self.autoreset_mode == AutoresetMode.DISABLED:
                info = self._with_episode_mask(info, views)
            info = dict(info)
        if self._host_flags and "final_obs" in info and not views["done"].any():
            for key in FINAL_KEYS:  # Gymnasium reports final_obs only where an episode ended
                del info[key]
        if self.autoreset_mode != AutoresetMode.DISABLED:
            self._mask_reset_rows(info, views["done"])
        return views["obs"], views["reward"], views["terminated"], views["truncated"], info

    def _mask_reset_rows(self, info: dict[str, Any], done: Any) -> None:
        """Set the step arrays' masks False on the rows whose info ``SyncVectorEnv`` takes from
        a reset (empty): in NEXT_STEP the rows autoreset in this step (those done in the last),
        in SAME_STEP the rows that ended (their step info is in ``final_info``).

        Where no row is such, the env's cached all-True mask; else a new ``~done`` (on a GPU one
        elementwise op on the device, no host read).
        """
        if self._host_flags and not done.any():
            not_done = self._all_rows
        else:
            not_done = self._on_device(lambda: ~done)
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            rows = not_done
        else:
            rows, self._fresh_rows = self._fresh_rows, not_done
        if rows is not self._all_rows:
            for key, _ in STEP_INFO_FIELDS:
                info["_" + key] = rows

    def make_outputs(self) -> dict[str, Any]:
        """A set of output arrays for :meth:`step_into`, in the env's array type, all views of one
        block allocated once: ``obs`` [N, obs_dim] float32, ``reward`` float32,
        ``terminated``/``truncated``/``done`` bool, ``components`` [N, 5] float32,
        ``final_obs`` [N, obs_dim] float32, ``portfolio_value``/``position`` float64,
        ``barrier_label`` int8, ``episode_return`` float32, ``episode_length`` int32 (all [N]
        unless noted; the fields of ``StepOutputs``)."""
        self._check_open("make_outputs")
        if self.array_type == "numpy" and self.device != "cpu":
            raise ValueError(
                "make_outputs() is invalid with array_type='numpy' on a CUDA device: the step "
                "writes device memory; allowed are array_type='torch' or 'cupy'"
            )
        return self._fresh_outputs(final_obs=True, zero=True)[1]

    def step_into(self, actions: Any, outputs: dict[str, Any]) -> None:
        """One step that writes its outputs into ``outputs`` (from :meth:`make_outputs`) and
        returns nothing: what a user's CUDA graph captures.

        On CUDA it is one kernel launch on torch's current stream: no allocation, no host sync,
        no Python state that a graph replay would leave stale but the curiosity bonus's on/off
        flag (see :meth:`set_curiosity_weights`). Pass actions as a contiguous
        int64 tensor on the env's device (other dtypes are converted, which allocates). An
        invalid action is recorded on the device, not raised here: :meth:`check_errors` (or the
        next ``reset``) raises it. ``final_obs`` is written in SAME_STEP mode only, on the rows
        that ended. See docs/PERFORMANCE.md, "Capturing the step in a CUDA graph".
        """
        self._check_open("step_into")
        if self._needs_reset:
            raise RuntimeError("step_into() called before reset(): call reset() first")
        try:
            acts = self.backend.prepare_actions(actions)
        except (TypeError, ValueError) as err:
            raise action_error(err, actions, self.num_envs, self.single_action_space) from None
        arrays = tuple(map(outputs.get, OUTPUT_FIELDS))
        cache = self._into_cache
        if (
            cache is None
            or any(a is not b for a, b in zip(arrays, cache[0], strict=True))
            or self._addresses(arrays) != cache[1]
        ):
            # Arrays not checked before (or moved): check them once, keep them referenced so
            # that their ids cannot be reused by other objects while cached.
            missing = sorted(set(OUTPUT_FIELDS) - set(outputs))
            if missing:
                raise ValueError(
                    f"outputs without {missing} are invalid: allowed is a dict from make_outputs()"
                )
            bound = self.backend.bind_outputs(outputs)
            cache = self._into_cache = (arrays, self._addresses(arrays), bound)
        self.backend.step_bound(acts, cache[2], check=False)

    def checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint saves of the env, as :meth:`restore_checkpoint` takes it back:
        ``{"arrays": {field: host copy} for every STATE_FIELDS array, "seeded": bool,
        "needs_reset": bool}`` (one host read of the state on CUDA)."""
        self._check_open("checkpoint_state")
        state = self.backend.state
        return {
            "arrays": {f: np.array(self._host(getattr(state, f))) for f in STATE_FIELDS},
            "seeded": bool(self._seeded),
            "needs_reset": bool(self._needs_reset),
        }

    def restore_checkpoint(
        self, arrays: dict[str, np.ndarray], seeded: bool, needs_reset: bool
    ) -> None:
        """Put a checkpoint's env state back: every ``STATE_FIELDS`` array of ``arrays`` into
        the backend's state (same shape and dtype, else ValueError naming the field), and the
        flags of :meth:`checkpoint_state`. The envs carry on from there, with no reset."""
        self._check_open("restore_checkpoint")
        state = self.backend.state
        for name in STATE_FIELDS:
            target = getattr(state, name)
            value = np.asarray(arrays[name])
            if tuple(value.shape) != tuple(target.shape) or value.dtype != np.dtype(target.dtype):
                raise ValueError(
                    f"env state {name} has shape {value.shape} and dtype {value.dtype}; the env "
                    f"has {tuple(target.shape)} {target.dtype} (other settings?)"
                )
        for name in STATE_FIELDS:
            getattr(state, name)[...] = self.backend.xp.asarray(np.asarray(arrays[name]))
        self.backend.state_restored()
        self._seeded = bool(seeded)
        self._needs_reset = bool(needs_reset)
        self._fresh_rows = self._all_rows
        waiting = np.asarray(arrays["done_flag"]) != 0  # NEXT_STEP autoresets these next step
        if self.autoreset_mode == AutoresetMode.NEXT_STEP and waiting.any():
            self._fresh_rows = self._on_device(
                lambda: self._to_array(self.backend.xp.asarray(~waiting))
            )

    def check_errors(self) -> None:
        """Raise ValueError for an invalid action that a CUDA step recorded on the device and has
        not raised yet (one host read: a sync). The NumPy backend raises in ``step`` itself."""
        self._check_open("check_errors")
        self.backend.check_errors()

    def _fresh_outputs(
        self, final_obs: bool | None = None, zero: bool = False
    ) -> tuple[Any, dict[str, Any]]:
        """``(block, {field: view})``: the output arrays of one new block, NumPy or torch on the
        CPU, torch or CuPy on a GPU.

        ``final_obs`` (default: in SAME_STEP mode only) is zeroed, as the step writes only the
        rows that ended; ``zero`` zeroes the whole block.
        """
        if final_obs is None:
            final_obs = self.autoreset_mode == AutoresetMode.SAME_STEP
        layout, nbytes = output_layout(self.num_envs, self.backend.obs_dim, final_obs)
        if self.array_type == "torch":
            import torch

            make = torch.zeros if zero else torch.empty
            block = make(nbytes, dtype=torch.uint8, device=self.device)
            views = block_views(block, layout)
        elif self.device == "cpu":
            block = np.zeros(nbytes, np.uint8) if zero else np.empty(nbytes, np.uint8)
            views = block_views(block, layout)
        else:
            cp = self.backend.xp
            with self.backend.device_scope(), self.backend.stream():
                block = (cp.zeros if zero else cp.empty)(nbytes, dtype=cp.uint8)
                views = block_views(block, layout)
        if final_obs and not zero:
            self._zero(views["final_obs"])
        return block, views

    def _on_device(self, op: Callable[[], Any]) -> Any:
        """``op()``, with CuPy arrays on the backend's device and stream (NumPy runs on the host,
        torch on its current stream, where the step ran)."""
        if self.array_type != "cupy":
            return op()
        with self.backend.device_scope(), self.backend.stream():
            return op()

    def _zero(self, arr: Any) -> None:
        """Zero ``arr`` (NumPy, torch, or CuPy on the backend's device and stream)."""
        if hasattr(arr, "zero_"):
            arr.zero_()
        elif isinstance(arr, np.ndarray):
            arr.fill(0)
        else:
            with self.backend.device_scope(), self.backend.stream():
                arr.fill(0)

    def _build_output_set(self, stream: int | None) -> OutputSet:
        """A new owned output set for the pool (see output_pool.py)."""
        block, views = self._fresh_outputs()
        bound = self.backend.bind_outputs(views, trusted=True)
        watched = (*views.values(), block)
        storage = use_count = None
        if self.array_type == "torch":
            storage = block.untyped_storage()._cdata  # noqa: SLF001 (what the count reads)
            use_count = storage_use_count()
        elif self.device != "cpu":
            watched += (block.data.mem,)  # every CuPy array over the allocation refers to it
        return OutputSet(views, bound, watched, storage, stream, use_count)

    def _addresses(self, arrays: tuple[Any, ...]) -> tuple[int, ...]:
        """Data addresses of torch tensors (which ``set_`` or ``.data =`` can move); a NumPy or
        CuPy array's memory is fixed for its life (a NumPy ``resize`` refuses while the cache
        refers to it), so those need no address read."""
        return tuple(a.data_ptr() for a in arrays if hasattr(a, "data_ptr"))

    def _build_info(self, views: dict[str, Any]) -> dict[str, Any]:
        """The info dict of one set of output arrays, every key with its ``_key`` mask.

        The step arrays are masked by the cached all-True mask (``step`` narrows it, see
        :meth:`_mask_reset_rows`); in SAME_STEP mode ``final_obs`` and ``final_info`` (this
        step's arrays: the last step's info of an ended episode is this step's info at its
        row) are valid where ``done``.
        """
        info: dict[str, Any] = {}
        for key, field in STEP_INFO_FIELDS:
            info[key] = views[field]
            info["_" + key] = self._all_rows
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            done = views["done"]
            final: dict[str, Any] = {}
            for key, field in (*STEP_INFO_FIELDS, *EPISODE_INFO_FIELDS):
                final[key] = views[field]
                final["_" + key] = done
            info["final_info"] = final
            info["_final_info"] = done
            info["final_obs"] = views["final_obs"]
            info["_final_obs"] = done
        return self._with_episode_mask(info, views)

    def _all_rows_mask(self) -> Any:
        """bool [N] of True in the env's array type: the ``_key`` mask of the info arrays every
        step fills for every env, made once (a new mask per step would allocate on the GPU).
        The NumPy one is read-only, so that no caller can change what later steps report."""
        n = self.num_envs
        if self.array_type == "numpy":
            mask = np.ones(n, dtype=np.bool_)
            mask.flags.writeable = False
            return mask
        if self.array_type == "torch":
            import torch

            return torch.ones(n, dtype=torch.bool, device=self.device)
        cp = self.backend.xp
        with self.backend.device_scope(), self.backend.stream():
            return cp.ones(n, dtype=cp.bool_)

    def _with_episode_mask(self, info: dict[str, Any], views: dict[str, Any]) -> dict[str, Any]:
        """Add the episode statistics; each ended episode is reported in one step only.

        In SAME_STEP and NEXT_STEP mode the mask is ``done``. In DISABLED mode an ended env
        stays terminated or truncated on the steps it waits for a reset, with length 0 there:
        the mask is ``episode_length > 0`` so those frozen steps report no episode.
        """
        length = views["episode_length"]
        mask = views["done"] if self.autoreset_mode != AutoresetMode.DISABLED else length > 0
        info["episode_return"] = views["episode_return"]
        info["_episode_return"] = mask
        info["episode_length"] = length
        info["_episode_length"] = mask
        return info

    def close_extras(self, **kwargs: Any) -> None:
        self._views.clear()
        self._infos.clear()
        self._pool.clear()
        self._into_cache = None

    def set_autoreset_mode(self, mode: AutoresetMode | str) -> None:
        """Switch the autoreset mode (used by adapters that need one, such as ``SB3VecEnv``).

        The modes differ only in what an ended env does, so running episodes carry on. If an
        env is waiting for its reset (NEXT_STEP or DISABLED after an episode ended), the next
        call must be ``reset()``. One host read of the envs' flags (a sync on CUDA).
        """
        self._check_open("set_autoreset_mode")
        mode = parse_autoreset_mode(mode)
        if mode == self.autoreset_mode:
            return
        self.backend.set_autoreset_mode(mode)
        self.config = self.config.replace(autoreset_mode=mode)
        self.autoreset_mode = mode
        self.metadata["autoreset_mode"] = mode
        self._fresh_rows = self._all_rows
        self._infos.clear()
        self._pool.clear()  # the owned outputs' layout has final_obs in SAME_STEP mode only
        waiting = bool((self.backend.state.done_flag != 0).any())
        self._needs_reset = self._needs_reset or waiting

    # ------------------------------------------------------------------ extras
    @property
    def max_position(self) -> np.ndarray:
        """float64 [n_instruments]: units held at exposure 1.0 with ``sizing="units"`` (the
        config value, or each instrument's default from its own median close)."""
        return self.backend.max_position

    @property
    def reward_component_names(self) -> tuple[str, ...]:
        return COMPONENT_NAMES

    def set_curiosity_weights(self, w1: Any, b1: Any, w2: Any, b2: Any) -> None:
        """Install the curiosity forward model ([out, in] layout, as torch ``nn.Linear``).

        Turning the bonus on changes an argument of the CUDA step launch: a CUDA graph that
        captured a step before must be captured again (new weights while the bonus is on are
        copied in place, and a graph sees them).
        """
        self.backend.set_curiosity_weights(CuriosityWeights(w1, b1, w2, b2))

    def clear_curiosity_weights(self) -> None:
        """Turn the curiosity bonus off (a CUDA graph of a step captured before keeps it on)."""
        self.backend.set_curiosity_weights(None)

    def observe(self) -> Any:
        """The current observation of every env, without stepping."""
        return self._to_array(self.backend.observe())

    # ------------------------------------------------------------------ helpers
    def _check_open(self, what: str) -> None:
        if self.closed:
            raise RuntimeError(f"{what}() called after close(): build a new env")

    def _host(self, arr: Any) -> np.ndarray:
        return arr.get() if hasattr(arr, "get") else np.asarray(arr)

    def _host_mask(self, mask: Any) -> np.ndarray:
        """bool [N] of ``options["reset_mask"]`` (see :func:`check_reset_mask`)."""
        return check_reset_mask(mask, self.num_envs)

    def _start_index(self, start: Any) -> np.ndarray:
        """int64 [N] start bars from an int or N ints (see :func:`check_start_index`)."""
        return check_start_index(
            start, self.num_envs, self.backend.hi_host - self.backend.lo_host - 2
        )

    def _seed_array(self, seed: Any) -> np.ndarray:
        n = self.num_envs
        if seed is None:
            entropy = np.random.SeedSequence().generate_state(2, dtype=np.uint32)
            return np.full(n, (int(entropy[1]) << 32) | int(entropy[0]), dtype=np.uint64)
        return seed_keys(seed, n)

    def _to_array(self, arr: Any) -> Any:
        if self.array_type == "numpy":
            return self._host(arr)
        if self.array_type == "torch":
            import torch

            return torch.from_dlpack(arr) if self.device != "cpu" else torch.from_numpy(arr)
        return arr

    def _host_views(self, out: StepOutputs) -> dict[str, Any]:
        """NumPy arrays of a CUDA step's outputs, from one device-to-host copy of their block on
        the stream the step ran on."""
        block, layout = outputs_block(out)
        with self.backend.stream():
            return block_views(block.get(), layout)

    def _output_views(self, out: StepOutputs) -> dict[str, Any]:
        """Arrays of ``out`` in the env's array type; torch views are made once per buffer."""
        views = self._views.get(id(out))
        if views is not None:
            return views
        fields = {k: v for k, v in vars(out).items() if not k.startswith("_")}
        if self.array_type == "numpy" and self.device == "cpu":
            views = fields
        elif self.array_type == "numpy":
            return {k: self._host(v) for k, v in fields.items()}
        else:
            views = {k: self._to_array(v) for k, v in fields.items()}
        self._views[id(out)] = views
        return views


def _same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except Exception:  # noqa: BLE001 - values that cannot be compared differ
        return False


def limit_episode_length(config: Any, max_episode_steps: Any) -> Any:
    """``config`` with ``episode_length`` at most ``max_episode_steps`` (None: unchanged), the
    limit Gymnasium's ``make_vec`` passes; a non-int raises TypeError, one below 1 ValueError."""
    if max_episode_steps is None:
        return config
    if isinstance(max_episode_steps, bool | np.bool_) or not isinstance(
        max_episode_steps, int | np.integer
    ):
        raise TypeError(
            f"max_episode_steps = {max_episode_steps!r} is invalid: allowed is an int >= 1 or None"
        )
    if max_episode_steps < 1:
        raise ValueError(
            f"max_episode_steps = {max_episode_steps} is invalid: allowed is an int >= 1 or None"
        )
    return config.replace(episode_length=min(config.episode_length, int(max_episode_steps)))


def check_reset_mask(mask: Any, n: int) -> np.ndarray:
    """bool [n] of ``options["reset_mask"]`` (NumPy, torch or CuPy; None: every env), checked
    as Gymnasium's ``SyncVectorEnv.reset`` checks it, with its messages and exception types:
    another type or dtype raises TypeError, another shape or no True value ValueError."""
    if mask is None:
        return np.ones(n, dtype=bool)
    if hasattr(mask, "detach"):
        mask = mask.detach().cpu().numpy()
    elif hasattr(mask, "__cuda_array_interface__") and hasattr(mask, "get"):
        mask = mask.get()  # a CuPy array
    if not isinstance(mask, np.ndarray):
        raise TypeError(
            "`options['reset_mask']` must be a numpy array (or a torch or CuPy array), got "
            f"{type(mask)}"
        )
    if mask.shape != (n,):
        raise ValueError(f"`options['reset_mask']` must have shape `({n},)`, got {mask.shape}")
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not mask.any():
        raise ValueError(
            "`options['reset_mask']` must contain a boolean array with at least one True "
            f"value, got reset_mask={mask}"
        )
    return mask


def check_start_index(start: Any, n: int, last: np.ndarray) -> np.ndarray:
    """int64 [n] start bars from an int or n ints (``options["start_index"]``; None: -1, draw);
    ``last`` int64 [n]: each env's last allowed value. Every value is range-checked as given,
    before any conversion (so uint64 2**64 - 1 cannot wrap to -1, "draw")."""
    if start is None:
        return np.full(n, -1, dtype=np.int64)

    def refuse(i: int, value: Any) -> ValueError:
        return ValueError(
            f"start_index[{i}] = {value} is invalid: allowed is -1 (draw) or 0..{int(last[i])} "
            "(a bar of env's instrument that leaves room for one step)"
        )

    if isinstance(start, int) and not isinstance(start, bool) and not -1 <= start <= last[0]:
        raise refuse(0, start)  # a Python int beyond int64 would not even convert
    arr = np.asarray(start.get() if hasattr(start, "get") else start)
    if arr.shape not in ((), (n,)) or arr.dtype.kind not in "iu":
        raise ValueError(f"start_index {start!r} is invalid: allowed is an int or {n} ints")
    big = arr > np.iinfo(np.int64).max if arr.dtype.kind == "u" else np.zeros(arr.shape, bool)
    if big.any():
        i = int(np.flatnonzero(big.reshape(-1))[0])
        raise refuse(i, int(arr.reshape(-1)[i]))
    arr = np.broadcast_to(arr.astype(np.int64), (n,)).copy()
    bad = (arr != -1) & ((arr < 0) | (arr > last))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise refuse(i, int(arr[i]))
    return arr
