"""``TradingEnv``: one trading episode as a plain ``gymnasium.Env`` returning NumPy.

It is the vector env with one env and autoreset disabled, so single-env tools (``check_env``,
SB3's ``DummyVecEnv``, wrappers) see exactly the vector env's semantics. On the CPU the vector
env resets it and :class:`~gpu_trading_env.backends.step_oracle.ScalarStep`, the step's oracle
in Python scalars, steps it (bit-identical to the NumPy backend, and many times faster than
NumPy calls on 1-element arrays); on a GPU the vector env steps it too.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.env_setup import reset_options, resolve_config
from gpu_trading_env.library_checks import refuse_autoreset_mode, refuse_torchrl_async_by_id
from gpu_trading_env.vector_env import TradingVectorEnv


class TradingEnv(gym.Env):
    """A single trading env returning NumPy. Keyword arguments are ``EnvConfig`` fields.

    Observation ``Box(-inf, inf, (F+3,), float32)``; action ``Discrete(n_actions)``;
    ``info`` holds the reward components and the portfolio value and position after the step,
    and on the episode's last step ``episode_return`` and ``episode_length`` (the key
    ``"episode"`` is left to Gymnasium's ``RecordEpisodeStatistics``). ``device`` picks the
    backend that steps it (``"cpu"``, ``"cuda"``, ``"cuda:N"``); outputs are NumPy either way.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        data: Any = None,
        config: EnvConfig | None = None,
        render_mode: str | None = None,
        device: Any = "cpu",
        **config_kwargs: Any,
    ) -> None:
        refuse_torchrl_async_by_id()  # its data would be wrong; the error names the way that works
        if render_mode not in (None, "rgb_array"):
            raise ValueError(
                f"render_mode = {render_mode!r} is invalid: allowed is None or 'rgb_array'"
            )
        self.render_mode = render_mode
        if "autoreset_mode" in config_kwargs:
            refuse_autoreset_mode(config_kwargs["autoreset_mode"])
        config = resolve_config(config, config_kwargs, owner="TradingEnv.__init__")
        self._open(device, data, config.replace(autoreset_mode="disabled"))
        self.config = self._venv.config
        self.observation_space = self._venv.single_observation_space
        self.action_space = self._venv.single_action_space
        self._needs_reset = True
        self._history: list[tuple[float, float, float]] = []
        self._ready = None
        self._n_actions = int(self.action_space.n)
        self._curiosity: tuple[Any, ...] | None = None  # installed again when reset reopens

    def _open(self, device: Any, data: Any, config: EnvConfig) -> None:
        """Build the inner vector env (and, on the CPU, its scalar step): at construction, and
        when ``reset`` reopens a closed env."""
        self._venv = TradingVectorEnv(1, device, data=data, config=config, array_type="numpy")
        self._scalar = None
        if self._venv.device == "cpu":
            from gpu_trading_env.backends.step_oracle import ScalarStep

            self._scalar = ScalarStep(self._venv.backend)
        self._seeded = False  # the first reset draws a seed (vector env) if none is given

    @property
    def data(self) -> Any:
        return self._venv.data

    @property
    def max_position(self) -> np.ndarray:
        return self._venv.max_position

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if self._venv.closed:  # as Gymnasium's own envs: close() frees, reset() reopens
            self._open(self._venv.device, self._venv.data, self.config)
            if self._curiosity is not None:
                self._venv.set_curiosity_weights(*self._curiosity)
        if seed is not None and (
            isinstance(seed, bool | np.bool_) or not isinstance(seed, int | np.integer)
        ):
            raise TypeError(
                f"seed = {seed!r} ({type(seed).__name__}) is invalid: allowed is an int in "
                "[0, 2**64) or None"
            )
        if seed is not None and not 0 <= int(seed) < 2**64:
            # Checked before gymnasium's own check, which raises gymnasium.error.Error.
            raise ValueError(
                f"seed = {seed} is out of range: allowed is an int in [0, 2**64) or None"
            )
        opts = reset_options(options, allowed=("start_index",))
        super().reset(seed=None if seed is None else int(seed))
        if self._scalar is not None and self._seeded and seed is None and not opts:
            obs = self._scalar.reset()  # the vector env's reset, on the scalars alone
            bar = self._scalar.bar
        else:
            obs = self._venv.reset(seed=seed, options=opts)[0][0]
            self._seeded = True
            if self._scalar is not None:
                self._scalar.load()
            bar = int(self._venv.backend.state.bar[0])
        self._needs_reset = False
        # The scalar step's fast path (see step) is open until the episode ends or close().
        self._ready = self._scalar if self.render_mode is None else None
        if self.render_mode is not None:  # what render() draws; nothing reads it otherwise
            self._history = [(float(self._venv.backend.close[bar]), 1.0, 0.0)]
        return obs, {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        s = self._ready
        if s is not None and type(action) is int and 0 <= action < self._n_actions:
            # The hot path: open, reset, no frame history, a valid int action.
            result = s.step(action)
            if result[2] or result[3]:
                self._needs_reset = True
                self._ready = None
            return result
        return self._checked_step(action)

    def _checked_step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """:meth:`step` with every check (the env may be closed or need a reset, the action may
        be of any type), and the render history."""
        if self._needs_reset or self._venv.closed:
            self._check_open("step")
            raise RuntimeError(
                "step() called before reset() or after the episode ended: call reset() first"
            )
        if type(action) is int and 0 <= action < self._n_actions:
            a = action  # the common case, checked without a call
        else:
            a = self._action_index(action)
        s = self._scalar
        result = s.step(a) if s is not None else self._vector_step(a)
        self._needs_reset = result[2] or result[3]
        if self._needs_reset:
            self._ready = None
        if self.render_mode is not None:
            bar = s.bar if s is not None else int(self._venv.backend.state.bar[0])
            info = result[4]
            value = info["portfolio_value"] / self.config.initial_capital
            self._history.append((float(self._venv.backend.close[bar]), value, info["position"]))
        return result

    def _action_index(self, action: Any) -> int:
        """``action`` as an int in ``0..n_actions-1``: what ``action_space.contains`` accepts (a
        Python or NumPy integer, or a 0-d integer array) but bools; ValueError for anything
        else, naming its type, shape and dtype (``np.array([3])`` is not an element of
        ``Discrete``: a batch of one would hide a vector env's action where one is expected)."""
        if isinstance(action, int | np.integer) and not isinstance(action, bool | np.bool_):
            if 0 <= action < self._n_actions:
                return int(action)
        elif isinstance(action, np.ndarray) and action.shape == () and action.dtype.kind in "iu":
            if 0 <= action < self._n_actions:
                return int(action)
        given = type(action).__name__
        if hasattr(action, "shape") and hasattr(action, "dtype"):
            given += f" of shape {tuple(action.shape)}, dtype {action.dtype}"
        raise ValueError(
            f"action = {action!r} is invalid: allowed is an int in 0..{self._n_actions - 1}, an "
            f"element of action_space {self.action_space} (a Python or NumPy integer, or a 0-d "
            f"integer array); given: {given}"
        )

    def _vector_step(self, a: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One step through the vector env (device="cuda"), as row 0 of its outputs."""
        obs, reward, terminated, truncated, info = self._venv.step(np.array([a], dtype=np.int64))
        te, tr = bool(terminated[0]), bool(truncated[0])
        step_info = {
            "reward_components": info["reward_components"][0],
            "portfolio_value": float(info["portfolio_value"][0]),
            "position": float(info["position"][0]),
            "barrier_label": int(info["barrier_label"][0]),
        }
        if te or tr:
            step_info["episode_return"] = float(info["episode_return"][0])
            step_info["episode_length"] = int(info["episode_length"][0])
        return obs[0], float(reward[0]), te, tr, step_info

    def render(self) -> np.ndarray | None:
        """With ``render_mode="rgb_array"``: a uint8 [320, 480, 3] frame of the episode so far
        (price over position shading, portfolio value); None otherwise."""
        if self.render_mode != "rgb_array":
            return None
        from gpu_trading_env.render import render_episode

        prices, values, positions = (
            (np.array(c) for c in zip(*self._history, strict=True))
            if self._history
            else ([], [], [])
        )
        return render_episode(np.asarray(prices), np.asarray(values), np.asarray(positions))

    def close(self) -> None:
        """Close the inner vector env too, freeing its arrays (device memory on a GPU): ``step``
        raises afterwards, and ``reset`` builds it again (as Gymnasium's own envs reopen after
        ``close``, which SB3's ``check_env`` relies on)."""
        self._ready = None
        self._venv.close()
        super().close()

    def _check_open(self, what: str) -> None:
        if self._venv.closed:
            raise RuntimeError(f"{what}() called after close(): call reset() first (it reopens)")

    def set_curiosity_weights(self, w1: Any, b1: Any, w2: Any, b2: Any) -> None:
        self._venv.set_curiosity_weights(w1, b1, w2, b2)
        self._curiosity = (w1, b1, w2, b2)
