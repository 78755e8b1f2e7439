"""``PortfolioVectorEnv``: the Gymnasium ``VectorEnv`` of the portfolio env (``GpuPortfolio-v0``).

N envs, each holding K instruments of one :class:`PortfolioData` grid (docs/ENV_SPEC.md,
"Portfolio env"). This class translates the Gymnasium contract (spaces, seeding, options,
autoreset modes, info dicts) onto a portfolio backend picked by ``device``, as
``TradingVectorEnv`` does for the single-instrument env, with its reset checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from gpu_runtime.device import cuda_index
from gpu_trading_env.backends.portfolio_base import PortfolioBackend
from gpu_trading_env.core.config import parse_autoreset_mode
from gpu_trading_env.core.portfolio_config import PortfolioConfig, portfolio_field_names
from gpu_trading_env.core.portfolio_state import PORTFOLIO_COMPONENT_NAMES, PortfolioStepOutputs
from gpu_trading_env.data.portfolio_data import PortfolioData, as_portfolio_data
from gpu_trading_env.env_setup import action_error, reset_options, seed_keys
from gpu_trading_env.library_checks import warn_if_skrl_is_loaded
from gpu_trading_env.vector_env import (
    OneObjectEnvAttrs,
    check_reset_mask,
    check_start_index,
    limit_episode_length,
)

# The info arrays every step fills for every env, as (info key, step output field).
PORTFOLIO_INFO_FIELDS = (
    ("reward_components", "components"),
    ("portfolio_value", "portfolio_value"),
    ("positions", "positions"),
    ("costs", "costs"),
)


def make_portfolio_backend(
    device: Any, data: PortfolioData, config: PortfolioConfig, num_envs: int
) -> PortfolioBackend:
    """The portfolio backend of ``device``: ``"cpu"`` the NumPy reference, ``"cuda"`` or
    ``"cuda:N"`` the CUDA one (imported only then: the CPU path never loads CuPy)."""
    name = str(device)
    if name == "cpu":
        from gpu_trading_env.backends.portfolio_numpy import PortfolioNumpyBackend

        return PortfolioNumpyBackend(data, config, num_envs)
    if name == "cuda" or name.startswith("cuda:"):
        from gpu_trading_env.backends.portfolio_cuda import PortfolioCudaBackend

        return PortfolioCudaBackend(data, config, num_envs, device_index=cuda_index(name))
    raise ValueError(
        f"device = {device!r} is invalid for the portfolio env: allowed is 'cpu', 'cuda' or "
        "'cuda:N'"
    )


def resolve_portfolio_config(
    config: PortfolioConfig | None, overrides: dict[str, Any]
) -> PortfolioConfig:
    """``config`` (default ``PortfolioConfig()``) with ``overrides`` of its fields; an unknown
    keyword raises Python's own TypeError text."""
    base = config if config is not None else PortfolioConfig()
    if not isinstance(base, PortfolioConfig):
        raise TypeError(
            f"config of type {type(config).__name__} is invalid: allowed is PortfolioConfig"
        )
    for name in overrides:
        if name not in portfolio_field_names():
            raise TypeError(
                f"PortfolioVectorEnv.__init__() got an unexpected keyword argument {name!r}"
            )
    return base.replace(**overrides) if overrides else base


class PortfolioVectorEnv(OneObjectEnvAttrs, VectorEnv):
    """N portfolio envs of K instruments stepped together.

    Args:
        num_envs: number of envs N.
        device: ``"cpu"`` (the NumPy reference backend), ``"cuda"`` or ``"cuda:N"`` (the CUDA
            kernel: arrays returned are torch tensors on that GPU, and nothing waits for it).
        data: ``PortfolioData``, a ``MarketData`` (its instruments), a sequence of
            ``MarketData`` or of bar file paths (one instrument each), or None (two instruments
            of the built-in synthetic market).
        config: a ``PortfolioConfig``; keyword arguments override its fields.
        align: None (instruments must share their timestamps) or ``"ffill"`` (see
            :meth:`PortfolioData.from_market_data`); ignored for ``PortfolioData``.
        max_episode_steps: Gymnasium's time limit: ``episode_length`` becomes
            ``min(episode_length, max_episode_steps)``.

    Spaces: observation ``Box(-inf, inf, (N, D), float32)`` with ``D = K*F + 1 + K``; action
    ``MultiDiscrete`` of shape ``(N, K)``, each entry ``0..L-1`` (an exposure level).

    Info keys (leading N axis, each with its ``_key`` bool mask): ``reward_components`` float32
    [N, 2] (gross and cost returns), ``portfolio_value`` float64 [N], ``positions`` and
    ``costs`` float64 [N, K] (valid in every row), ``episode_return``/``episode_length`` of the
    episodes that ended in this step; in SAME_STEP mode, on steps where one ended,
    ``final_obs`` and ``final_info`` masked by ``done`` (on CUDA on every step, as reading
    whether one ended would wait for the GPU). Every array returned is the caller's.
    """

    def __init__(
        self,
        num_envs: int = 1,
        device: Any = "cpu",
        data: Any = None,
        config: PortfolioConfig | None = None,
        align: str | None = None,
        render_mode: str | None = None,
        max_episode_steps: int | None = None,
        **config_kwargs: Any,
    ) -> None:
        if render_mode is not None:
            raise ValueError(
                f"render_mode = {render_mode!r} is invalid for the portfolio env: allowed is None"
            )
        self.config = resolve_portfolio_config(config, config_kwargs)
        self.config = limit_episode_length(self.config, max_episode_steps)
        self.data = as_portfolio_data(data, align)
        self.backend = make_portfolio_backend(device, self.data, self.config, num_envs)
        self.device = self.backend.device
        self.num_envs = self.backend.num_envs
        self.n_instruments = self.backend.n_instruments
        self.autoreset_mode: AutoresetMode = self.config.autoreset_mode
        self.metadata = {"autoreset_mode": self.autoreset_mode, "render_modes": []}
        self.render_mode = None
        obs_dim = self.backend.obs_dim
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        self.single_action_space = gym.spaces.MultiDiscrete(
            np.full(self.n_instruments, self.config.n_levels, dtype=np.int64)
        )
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._on_device = self.device != "cpu"
        if self._on_device:
            import torch

            self._all_rows = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        else:
            self._all_rows = np.ones(self.num_envs, dtype=bool)
            self._all_rows.flags.writeable = False
        self._seeded = False
        self._needs_reset = True
        self._skrl_warned = False  # see library_checks.warn_if_skrl_is_loaded

    @property
    def reward_component_names(self) -> tuple[str, ...]:
        return PORTFOLIO_COMPONENT_NAMES

    def reset(
        self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start new episodes; ``seed`` and ``options`` (``start_index``, ``reset_mask``) as
        ``TradingVectorEnv.reset`` takes them (start_index counts bars of the grid)."""
        if self.closed:
            raise RuntimeError("reset() called after close(): build a new env")
        if not self._skrl_warned:  # skrl would store the NEXT_STEP reset steps
            self._skrl_warned = warn_if_skrl_is_loaded(self)
        options = reset_options(options)
        n = self.num_envs
        mask = check_reset_mask(options.get("reset_mask"), n)
        if self._needs_reset and not mask.all():
            raise RuntimeError(
                "reset(options={'reset_mask': ...}) is invalid before a full reset(): the envs "
                "outside the mask have no episode yet; call reset() without a mask first"
            )
        start = check_start_index(
            options.get("start_index"), n, np.full(n, self.backend.last_start_index)
        )
        if seed is not None or not self._seeded:
            if seed is None:
                entropy = np.random.SeedSequence().generate_state(2, dtype=np.uint32)
                seeds = np.full(n, (int(entropy[1]) << 32) | int(entropy[0]), dtype=np.uint64)
            else:
                seeds = seed_keys(seed, n)
            super().reset(seed=int(seeds[0] & np.uint64(2**63 - 1)) if seed is not None else None)
            self.backend.seed(seeds, mask)
            self._seeded = True
        obs = self.backend.reset(mask, start)
        self._needs_reset = False
        return obs, {}

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Advance every env by one bar; ``actions`` int [N, K], one level per instrument."""
        if self.closed:
            raise RuntimeError("step() called after close(): build a new env")
        if self._needs_reset:
            raise RuntimeError(
                "step() called before reset(): call reset() first (after the env is built, or "
                "after set_autoreset_mode() left envs waiting for their reset)"
            )
        try:
            acts = self.backend.prepare_actions(actions)
        except (TypeError, ValueError) as err:
            raise action_error(err, actions, self.num_envs, self.single_action_space) from None
        out = self.backend.step(acts)
        return out.obs, out.reward, out.terminated, out.truncated, self._info(out)

    def _info(self, out: PortfolioStepOutputs) -> dict[str, Any]:
        info: dict[str, Any] = {}
        for key, field in PORTFOLIO_INFO_FIELDS:
            info[key] = getattr(out, field)
            info["_" + key] = self._all_rows
        disabled = self.autoreset_mode == AutoresetMode.DISABLED
        mask = out.episode_length > 0 if disabled else out.done
        info["episode_return"] = out.episode_return
        info["_episode_return"] = mask
        info["episode_length"] = out.episode_length
        info["_episode_length"] = mask
        if self.autoreset_mode == AutoresetMode.SAME_STEP and (self._on_device or out.done.any()):
            final: dict[str, Any] = {}
            for key, field in PORTFOLIO_INFO_FIELDS:
                final[key] = getattr(out, field)
                final["_" + key] = out.done
            info["final_info"] = final
            info["_final_info"] = out.done
            info["final_obs"] = out.final_obs
            info["_final_obs"] = out.done
        return info

    def observe(self) -> np.ndarray:
        """The current observation of every env, without stepping."""
        return self.backend.observe()

    def set_autoreset_mode(self, mode: AutoresetMode | str) -> None:
        """Switch the autoreset mode; running episodes carry on, and if an env waits for its
        reset the next call must be ``reset()``."""
        mode = parse_autoreset_mode(mode)
        if mode == self.autoreset_mode:
            return
        self.backend.set_autoreset_mode(mode)
        self.config = self.config.replace(autoreset_mode=mode)
        self.autoreset_mode = mode
        self.metadata["autoreset_mode"] = mode
        self._needs_reset = self._needs_reset or bool((self.backend.state.done_flag != 0).any())
