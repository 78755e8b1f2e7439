"""What every portfolio backend shares: setup from (data, config), and the contract.

A portfolio backend owns the market arrays of a :class:`PortfolioData` on its device and a
:class:`PortfolioState`, and steps N envs of K instruments each (docs/ENV_SPEC.md, "Portfolio
env"). :class:`~gpu_trading_env.backends.portfolio_numpy.PortfolioNumpyBackend` is the
reference; a CUDA backend implements the same methods on device arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_trading_env.core.config import AUTORESET_CODES
from gpu_trading_env.core.portfolio_config import PortfolioConfig, portfolio_params
from gpu_trading_env.core.portfolio_state import (
    PortfolioState,
    PortfolioStepOutputs,
    allocate_portfolio_state,
    portfolio_obs_dim,
)
from gpu_trading_env.data.portfolio_data import PortfolioData


class PortfolioBackend:
    """Base class: validated setup; subclasses implement the step on their device."""

    xp: Any = np
    device: str = "cpu"

    def __init__(self, data: PortfolioData, config: PortfolioConfig, num_envs: int) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
            raise ValueError(f"num_envs = {num_envs!r} is invalid: allowed is an integer >= 1")
        if not isinstance(data, PortfolioData):
            raise TypeError(
                f"data of type {type(data).__name__} is invalid: allowed is PortfolioData"
            )
        if not isinstance(config, PortfolioConfig):
            raise TypeError(
                f"config of type {type(config).__name__} is invalid: allowed is PortfolioConfig"
            )
        need = config.episode_length + 1
        if data.n_bars < need:
            raise ValueError(
                f"the instruments {list(data.instruments)} have {data.n_bars} bars on their "
                f"grid; PortfolioConfig.episode_length = {config.episode_length} needs at least "
                f"{need} (one episode plus the bar it is marked to)"
            )
        self.config = config
        self.data = data
        self.num_envs = int(num_envs)
        self.n_instruments = data.n_instruments
        self.n_features = data.n_features
        self.n_levels = config.n_levels
        self.obs_dim = portfolio_obs_dim(self.n_instruments, self.n_features)
        self.params = portfolio_params(config, self.n_instruments)
        self.state: PortfolioState = allocate_portfolio_state(
            self.xp, self.num_envs, self.n_instruments
        )

    @property
    def last_start_index(self) -> int:
        """The last ``start_index`` a reset may pin: a bar that leaves room for one step."""
        return self.data.n_bars - 2

    # The contract. Arrays are of the backend's array module.
    def seed(self, seeds: np.ndarray, mask: np.ndarray) -> None:
        """Set the Philox key (host uint64 [N]) of the envs in ``mask`` (host bool [N]) and
        restart their start-bar counters."""
        raise NotImplementedError

    def reset(self, mask: Any, start_index: Any) -> Any:
        """Start new episodes where ``mask`` (bool [N]); ``start_index`` int64 [N], -1 = draw.
        Returns the observation float32 [N, D] of every env."""
        raise NotImplementedError

    def prepare_actions(self, actions: Any) -> Any:
        """Actions (NumPy or torch, int [N, K]) as the int64 [N, K] array :meth:`step` takes;
        ValueError for another shape or a value outside 0..L-1, TypeError for a scalar or a
        non-integer dtype."""
        raise NotImplementedError

    def step(self, actions: Any) -> PortfolioStepOutputs:
        """One vector step into new output arrays (the caller owns them)."""
        raise NotImplementedError

    def observe(self) -> Any:
        """The current observation of every env, float32 [N, D]."""
        raise NotImplementedError

    def check_errors(self) -> None:
        """Raise ValueError for an invalid action recorded but not raised yet (none here)."""

    def set_autoreset_mode(self, mode: Any) -> None:
        """Switch to ``mode`` (an ``AutoresetMode``); running envs carry on."""
        self.config = self.config.replace(autoreset_mode=mode)
        object.__setattr__(self.params, "autoreset_mode", AUTORESET_CODES[mode])
