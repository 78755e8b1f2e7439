"""``SB3VecEnv``: a Stable-Baselines3 ``VecEnv`` over a Gymnasium vector env (``TradingVectorEnv``).

SB3 expects NumPy arrays, one info dict per env, automatic resets in the same step with the last
observation of the finished episode in ``info["terminal_observation"]``, time-limit truncations
flagged as ``info["TimeLimit.truncated"]`` and Monitor-style ``info["episode"]`` statistics. The
trading env can reset in the same step (``AutoresetMode.SAME_STEP``, to which this adapter
switches it) and reports episode returns, so this adapter only changes the layout: no extra copy
of the environment is stepped.

Switching the mode underneath Gymnasium vector wrappers is only safe for wrappers that work per
step: observation wrappers (``TransformObservation``, ``NormalizeObservation``, ...) would not
transform ``info["final_obs"]``, so they are refused; wrappers that remember the mode they were
built over (``RecordEpisodeStatistics``, ``NormalizeReward``) are told about the switch.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.vector import VectorEnv as GymVectorEnv
from gymnasium.wrappers import RecordEpisodeStatistics as SingleRecordEpisodeStatistics
from gymnasium.wrappers.vector import RecordEpisodeStatistics
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnv,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
)

from gpu_runtime.device import to_numpy
from gpu_trading_env.env import TradingEnv
from gpu_trading_env.integrations.mode_switch import (
    switch_to_same_step,
    wrapper_chain,
)
from gpu_trading_env.portfolio_env import PortfolioVectorEnv
from gpu_trading_env.vector_env import TradingVectorEnv

__all__ = ["SB3VecEnv"]

# Keys of the vector info that are translated rather than passed through per env.
_SPECIAL_KEYS = ("episode", "episode_return", "episode_length", "final_obs", "final_info")


def _autoreset_mode(venv: GymVectorEnv) -> Any:
    mode = getattr(venv, "autoreset_mode", None)
    if mode is None:
        mode = (getattr(venv, "metadata", None) or {}).get("autoreset_mode")
    return mode


def _reports_episodes(venv: GymVectorEnv) -> bool:
    """Whether every ended episode of ``venv`` comes with its return and length in the info."""
    if any(isinstance(w, RecordEpisodeStatistics) for w in wrapper_chain(venv)):
        return True
    raw = venv.unwrapped
    if isinstance(raw, TradingVectorEnv | PortfolioVectorEnv):
        return True
    if isinstance(raw, SyncVectorEnv):  # sub-envs are in this process: look at them
        return all(_single_env_reports_episodes(env) for env in raw.envs)
    return False


def _single_env_reports_episodes(env: gym.Env) -> bool:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, SingleRecordEpisodeStatistics):
            return True
        if isinstance(env, gym.wrappers.TimeLimit):
            # TimeLimit ends episodes the env does not know of; those report nothing.
            return False
        env = env.env
    return isinstance(env, TradingEnv)


def _same_step_advice(venv: GymVectorEnv) -> str:
    """How to build ``venv`` in ``SAME_STEP`` mode: Gymnasium's own vector envs take the mode
    as a constructor argument, which ``gym.make_vec`` passes through ``vector_kwargs`` (its
    other keywords go to each single env)."""
    if isinstance(venv.unwrapped, SyncVectorEnv | AsyncVectorEnv):
        spec = getattr(venv.unwrapped, "spec", None)
        env_id = spec.id if spec is not None else "GpuTrading-v0"
        kind = "sync" if isinstance(venv.unwrapped, SyncVectorEnv) else "async"
        return (
            f"build it with gym.make_vec({env_id!r}, num_envs={venv.num_envs}, "
            f"vectorization_mode={kind!r}, "
            "vector_kwargs={'autoreset_mode': AutoresetMode.SAME_STEP}, ...) "
            f"(AutoresetMode of gymnasium.vector), or {type(venv.unwrapped).__name__}(env_fns, "
            "autoreset_mode=AutoresetMode.SAME_STEP)"
        )
    return "build the env with autoreset_mode=AutoresetMode.SAME_STEP"


class SB3VecEnv(VecEnv):
    """Stable-Baselines3 ``VecEnv`` adapter for a Gymnasium ``VectorEnv`` in ``SAME_STEP`` mode.

    Built for :class:`~gpu_trading_env.TradingVectorEnv` (either device), it works with any
    Gymnasium vector env that resets in the same step and reports ``final_obs``. A vector env
    that offers ``set_autoreset_mode`` (the trading env, also under Gymnasium vector wrappers)
    is switched to ``SAME_STEP`` here; SB3 resets it before its first step.

    ``step`` returns NumPy arrays: observations ``[N, D]`` float32 (a copy: the trading env
    reuses its output buffers), rewards ``[N]`` float32, dones ``[N]`` bool
    (terminated or truncated) and a list of N info dicts. On a CUDA env each array crosses to
    the host once per step. Each info dict holds the env's per-env info values plus:

    - ``"TimeLimit.truncated"``: bool, truncated and not terminated (SB3's replay buffer then
      bootstraps through the time limit);
    - ``"terminal_observation"``: float32 ``[D]``, the observation that ended the episode (only
      for envs that are done in this step; the returned observation is the new episode's first);
    - ``"episode"``: ``{"r": return, "l": length, "t": seconds since this adapter was built}``
      in SB3 ``Monitor`` format (only for done envs), which feeds ``rollout/ep_rew_mean``;
      taken from the env's ``episode_return``/``episode_length`` info, or from a Gymnasium
      ``RecordEpisodeStatistics`` wrapper's ``episode`` dict.

    ``get_attr``, ``set_attr`` and ``env_method`` act once on the single underlying vector env
    and return a list with one (identical) entry per requested index, as SB3 expects.

    Episode statistics are read from the top-level info (the trading vector env,
    ``RecordEpisodeStatistics``) or, for ``SyncVectorEnv``/``AsyncVectorEnv`` in ``SAME_STEP``,
    from ``info["final_info"]`` (the last step's info of each ended sub-env episode).
    ``env_is_wrapped(Monitor)`` is True where every ended episode reports them (the trading
    env, a ``RecordEpisodeStatistics`` wrapper, a ``SyncVectorEnv`` of trading envs), so that
    SB3's ``evaluate_policy`` takes its returns from ``info["episode"]``.

    :param venv: The Gymnasium vector env, for example
        ``gym.make_vec("GpuTrading-v0", num_envs=N, device="cuda")``.
    :param keep_info: Also pass the env's other per-env info values (reward components,
        portfolio value, position, barrier label, ...). ``False`` skips them, which saves
        Python work per env and step when N is large.
    :raises ValueError: If ``venv`` does not autoreset in the same step and cannot be switched,
        or if switching it would bypass an observation wrapper (see the module docstring).
    """

    def __init__(self, venv: GymVectorEnv, keep_info: bool = True) -> None:
        if not isinstance(venv, GymVectorEnv):
            raise TypeError(
                f"venv of type {type(venv).__name__} is invalid: allowed is a gymnasium "
                "VectorEnv such as gpu_trading_env.TradingVectorEnv"
            )
        mode = _autoreset_mode(venv)
        if mode != AutoresetMode.SAME_STEP and hasattr(venv.unwrapped, "set_autoreset_mode"):
            switch_to_same_step(venv, mode)
            mode = _autoreset_mode(venv)
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(
                f"venv.autoreset_mode = {mode!r} is invalid: SB3VecEnv needs "
                f"AutoresetMode.SAME_STEP; {_same_step_advice(venv)}"
            )
        allowed = gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.Box
        if not isinstance(venv.single_action_space, allowed):
            raise TypeError(
                f"single_action_space {venv.single_action_space} is invalid: allowed is "
                "Discrete, MultiDiscrete or Box"
            )
        self.venv = venv
        self.keep_info = bool(keep_info)
        self._reports_episodes = _reports_episodes(venv)
        self._actions: np.ndarray | None = None
        self._t_start = time.time()
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)

    # ------------------------------------------------------------------ VecEnv API
    def reset(self) -> VecEnvObs:
        """Reset every env, with the seeds of :meth:`seed` and options of :meth:`set_options`.

        Per-env options are merged into the vector env's single options dict: identical dicts
        are passed as they are; differing ``start_index`` values become one ``[N]`` array.

        :return: Observations ``[N, D]`` float32.
        """
        seed = self._merged_seeds()
        options = self._merged_options()
        obs, info = self.venv.reset(seed=seed, options=options)
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = self._split_infos(info, None, None, None)
        return np.array(to_numpy(obs), copy=True)

    def step_async(self, actions: np.ndarray) -> None:
        """Remember ``actions`` ``[N]`` (int for ``Discrete``; ``[N, K]`` int for
        ``MultiDiscrete``) for :meth:`step_wait`."""
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Step every env with the actions of :meth:`step_async`.

        :return: ``(obs [N, D] float32, rewards [N] float32, dones [N] bool, infos)``.
        """
        if self._actions is None:
            raise RuntimeError("step_wait() called without step_async(); call step_async first")
        actions = np.asarray(self._actions)
        if isinstance(self.action_space, gym.spaces.Discrete):
            actions = actions.reshape(self.num_envs).astype(np.int64, copy=False)
        elif isinstance(self.action_space, gym.spaces.MultiDiscrete):
            shape = (self.num_envs, *self.action_space.shape)
            actions = actions.reshape(shape).astype(np.int64, copy=False)
        self._actions = None
        obs, reward, terminated, truncated, info = self.venv.step(actions)
        obs_np = np.array(to_numpy(obs), copy=True)
        rewards = np.array(to_numpy(reward), dtype=np.float32, copy=True).reshape(self.num_envs)
        term = to_numpy(terminated).astype(bool).reshape(self.num_envs)
        trunc = to_numpy(truncated).astype(bool).reshape(self.num_envs)
        dones = term | trunc
        infos = self._split_infos(info, dones, term, trunc)
        return obs_np, rewards, dones, infos

    def close(self) -> None:
        self.venv.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """``getattr(venv, attr_name)`` once, repeated for each index."""
        value = getattr(self.venv, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """``setattr(venv, attr_name, value)`` once: the attribute is shared by all N envs."""
        setattr(self.venv, attr_name, value)

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        """Call ``venv.method_name(*args, **kwargs)`` once; its result repeated per index."""
        result = getattr(self.venv, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._get_indices(indices)]

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
    ) -> list[bool]:
        """False, except for SB3's ``Monitor`` where the adapter reports Monitor's
        ``info["episode"]`` for every ended episode: the envs are rows of one vector env, not
        wrapped ``gym.Env`` objects, but that is what SB3 asks ``Monitor`` for."""
        wrapped = self._reports_episodes and wrapper_class is Monitor
        return [wrapped for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        raise NotImplementedError("SB3VecEnv does not render: the trading env has no images")

    # ------------------------------------------------------------------ helpers
    def _get_indices(self, indices: VecEnvIndices) -> Iterable[int]:
        if indices is None:
            return range(self.num_envs)
        if isinstance(indices, int | np.integer):
            return [int(indices)]
        return list(indices)

    def _merged_seeds(self) -> list[int] | None:
        seeds = list(self._seeds)
        if all(s is None for s in seeds):
            return None
        if any(s is None for s in seeds):
            raise ValueError(
                f"seeds {seeds} are invalid: allowed is a seed for every env or for none"
            )
        return [int(s) for s in seeds]

    def _merged_options(self) -> dict[str, Any] | None:
        opts = [dict(o or {}) for o in self._options]
        if all(not o for o in opts):
            return None
        keys = set().union(*opts)
        merged: dict[str, Any] = {}
        for key in keys:
            values = [o.get(key) for o in opts]
            if key == "start_index" and not all(_same(v, values[0]) for v in values):
                merged[key] = np.asarray([-1 if v is None else int(v) for v in values], np.int64)
            elif all(_same(v, values[0]) for v in values):
                merged[key] = values[0]
            else:
                raise ValueError(
                    f"reset option {key!r} differs between envs: allowed per env is only "
                    "'start_index'; pass one value for all envs otherwise"
                )
        return merged

    def _split_infos(
        self,
        info: dict[str, Any],
        dones: np.ndarray | None,
        terminated: np.ndarray | None,
        truncated: np.ndarray | None,
    ) -> list[dict[str, Any]]:
        """The vector info dict (arrays + ``_key`` masks) as N per-env dicts."""
        n = self.num_envs
        infos: list[dict[str, Any]] = [{} for _ in range(n)]
        rows: dict[int, tuple[Any, np.ndarray]] = {}  # keys sharing one mask read it once
        if self.keep_info:
            for key, value in info.items():
                if key.startswith("_") or key in _SPECIAL_KEYS:
                    continue
                _scatter(infos, key, value, info.get(f"_{key}"), rows)
        if dones is None:
            return infos
        timeouts = truncated & ~terminated
        for i in range(n):
            infos[i]["TimeLimit.truncated"] = bool(timeouts[i])
        done_idx = np.flatnonzero(dones)
        if done_idx.size == 0:
            return infos
        if "final_info" in info and self.keep_info:
            final = info["final_info"]
            for key, value in final.items():
                if not key.startswith("_") and key not in _SPECIAL_KEYS:
                    mask = final.get(f"_{key}", info.get("_final_info"))
                    _scatter(infos, key, value, mask, rows)
        if "final_obs" in info:
            final_obs = to_numpy(info["final_obs"])
            for i in done_idx:
                infos[i]["terminal_observation"] = np.array(final_obs[i], copy=True)
        stats = _episode_stats(info)
        if stats is None and isinstance(info.get("final_info"), dict):
            # SyncVectorEnv/AsyncVectorEnv in SAME_STEP: the last step's info of each ended
            # episode; the top-level info is the new episode's reset info.
            stats = _episode_stats(info["final_info"])
        if stats is not None:
            ep_r, ep_l, mask = stats
            has_ep = dones if mask is None else to_numpy(mask).astype(bool)
            r = to_numpy(ep_r)
            length = to_numpy(ep_l)
            t = round(time.time() - self._t_start, 6)
            for i in np.flatnonzero(has_ep):
                infos[i]["episode"] = {"r": float(r[i]), "l": int(length[i]), "t": t}
        return infos


def _episode_stats(info: dict[str, Any]) -> tuple[Any, Any, Any] | None:
    """``(returns, lengths, mask)`` of the episodes an info dict reports, or None."""
    if "episode_return" in info:
        return info["episode_return"], info["episode_length"], info.get("_episode_return")
    if isinstance(info.get("episode"), dict):  # Gymnasium's RecordEpisodeStatistics
        return info["episode"]["r"], info["episode"]["l"], info.get("_episode")
    return None


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except Exception:  # noqa: BLE001 - unlike objects simply differ
        return a is b


def _masked_rows(mask: Any, rows: dict[int, tuple[Any, np.ndarray]]) -> np.ndarray:
    """The indices where ``mask`` is True, read once per mask object (a device mask is one
    device-to-host copy); ``rows`` holds each mask with its indices, so ids stay unique."""
    hit = rows.get(id(mask))
    if hit is None or hit[0] is not mask:
        hit = rows[id(mask)] = (mask, np.flatnonzero(to_numpy(mask)))
    return hit[1]


def _scatter(
    infos: list[dict[str, Any]],
    key: str,
    value: Any,
    mask: Any,
    rows: dict[int, tuple[Any, np.ndarray]],
) -> None:
    """Write row i of ``value`` (array or dict of arrays) into ``infos[i][key]`` where masked
    (``rows``: the masks read so far, see :func:`_masked_rows`)."""
    n = len(infos)
    if isinstance(value, dict):
        sub: list[dict[str, Any]] = [{} for _ in range(n)]
        for k, v in value.items():
            if not k.startswith("_"):
                _scatter(sub, k, v, value.get(f"_{k}", mask), rows)
        for i in range(n):
            if sub[i]:
                infos[i][key] = sub[i]
        return
    arr = to_numpy(value)
    if arr.ndim == 0 or arr.shape[0] != n:
        return
    masked = range(n) if mask is None else _masked_rows(mask, rows)
    if arr.ndim == 1 and arr.dtype != object:
        vals = arr.tolist()
        for i in masked:
            infos[i][key] = vals[i]
    else:
        for i in masked:
            row = arr[i]
            infos[i][key] = row.copy() if isinstance(row, np.ndarray) else row
