"""``PortfolioConfig``: the static knobs of the portfolio env (K instruments per env), validated.

The formulas each field enters are in ``docs/ENV_SPEC.md`` ("Portfolio env").
:func:`portfolio_scalars` is the one derived parameter set a backend reads, and
:func:`single_instrument_config` the single-instrument ``EnvConfig`` that K = 1 equals bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from gpu_trading_env.core.config import (
    AUTORESET_CODES,
    FILL_MODES,
    LEVERAGE_MAX,
    MONEY_MAX,
    MONEY_MIN,
    EnvConfig,
    parse_autoreset_mode,
)

REWARD_KINDS = ("simple", "log")
MAX_LEVELS = 64
# The log reward where the value after the step is <= 0 (ruin, which terminates the episode).
RUIN_LOG_REWARD = math.log(2.0**-52)


def _fail(name: str, value: Any, allowed: str) -> None:
    raise ValueError(f"PortfolioConfig.{name} = {value!r} is invalid: allowed is {allowed}")


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool | np.bool_) or not isinstance(
        value, int | float | np.integer | np.floating
    ):
        _fail(name, value, f"a number (got {type(value).__name__})")
    try:
        return float(value)
    except OverflowError:
        _fail(name, value, "a finite number")
        raise AssertionError from None  # unreachable


def _in_range(name: str, value: float, lo: float, hi: float, lo_open: bool = False) -> None:
    ok = math.isfinite(value) and (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        _fail(name, value, f"a finite number in {'(' if lo_open else '['}{lo:g}, {hi:g}]")


def _numbers(name: str, value: Any) -> tuple[float, ...]:
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        _fail(name, value, "a tuple of numbers")
    return tuple(_number(name, x) for x in value)


@dataclass(frozen=True)
class PortfolioConfig:
    """Static parameters of the portfolio env.

    Money is in the data's quote currency, positions in units of each instrument, rates in
    basis points (1 bp = 1e-4).
    """

    initial_capital: float = 100_000.0
    """Cash at the start of every episode (currency, in [0.01, 1e15])."""
    exposure_levels: tuple[float, ...] = (-1.0, 0.0, 1.0)
    """Target exposure of each level of an instrument's action (each in [-1, 1], 1..64 levels)."""
    cost_bps: float | tuple[float, ...] = 1.0
    """Cost rate on traded notional, bps in [0, 10000): one value for every instrument, or one
    per instrument (K values, checked against the data by :meth:`cost_rates`)."""
    leverage: float = 1.0
    """Notional per unit of equity of an instrument at exposure 1 ((0, 1000])."""
    max_leverage: float = 1.0
    """Cap on the gross exposure ``leverage x sum_k |e_k|``; above it every exposure is scaled
    down by the same factor ((0, 1000])."""
    reserve_pct: float = 0.0
    """Cash reserve, percent of the pre-trade value, that buys may not spend ([0, 100))."""
    fill: str = "close"
    """``"close"``: trade at bar t's closes; ``"next_open"``: at bar t+1's opens."""
    reward: str = "simple"
    """``"simple"``: (V1 - V0) / V0; ``"log"``: log(V1 / V0) (RUIN_LOG_REWARD where V1 <= 0)."""
    episode_length: int = 500
    """Steps before truncation (>= 1)."""
    autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP
    """Gymnasium autoreset mode of the vector env."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name in ("initial_capital", "leverage", "max_leverage", "reserve_pct"):
            set_(self, name, _number(name, getattr(self, name)))
        set_(self, "exposure_levels", _numbers("exposure_levels", self.exposure_levels))
        if isinstance(self.cost_bps, int | float | np.integer | np.floating) and not isinstance(
            self.cost_bps, bool | np.bool_
        ):
            set_(self, "cost_bps", _number("cost_bps", self.cost_bps))
        else:
            set_(self, "cost_bps", _numbers("cost_bps", self.cost_bps))
        try:
            set_(self, "autoreset_mode", parse_autoreset_mode(self.autoreset_mode))
        except ValueError:
            _fail(
                "autoreset_mode",
                self.autoreset_mode,
                "AutoresetMode.SAME_STEP, NEXT_STEP or DISABLED (or their names)",
            )
        if isinstance(self.episode_length, np.integer):
            set_(self, "episode_length", int(self.episode_length))
        self._validate()

    def _validate(self) -> None:
        _in_range("initial_capital", self.initial_capital, MONEY_MIN, MONEY_MAX)
        levels = self.exposure_levels
        if not 1 <= len(levels) <= MAX_LEVELS or not all(-1.0 <= x <= 1.0 for x in levels):
            _fail("exposure_levels", levels, f"1..{MAX_LEVELS} numbers, each in [-1, 1]")
        costs = self.cost_bps if isinstance(self.cost_bps, tuple) else (self.cost_bps,)
        if not costs or not all(math.isfinite(x) and 0.0 <= x < 10_000.0 for x in costs):
            _fail("cost_bps", self.cost_bps, "a number or a non-empty tuple, each in [0, 10000)")
        _in_range("leverage", self.leverage, 0.0, LEVERAGE_MAX, lo_open=True)
        _in_range("max_leverage", self.max_leverage, 0.0, LEVERAGE_MAX, lo_open=True)
        if not (math.isfinite(self.reserve_pct) and 0.0 <= self.reserve_pct < 100.0):
            _fail("reserve_pct", self.reserve_pct, "a percentage in [0, 100)")
        if self.fill not in FILL_MODES:
            _fail("fill", self.fill, f"one of {FILL_MODES}")
        if self.reward not in REWARD_KINDS:
            _fail("reward", self.reward, f"one of {REWARD_KINDS}")
        n = self.episode_length
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 2**31 - 1:
            _fail("episode_length", n, f"an integer in [1, {2**31 - 1}]")

    @property
    def n_levels(self) -> int:
        """L: the levels of one instrument's action (``MultiDiscrete([L] * K)``)."""
        return len(self.exposure_levels)

    def cost_rates(self, n_instruments: int) -> np.ndarray:
        """float64 [K]: each instrument's cost rate, ``cost_bps / 1e4``.

        :raises ValueError: where ``cost_bps`` is a tuple of another length than K.
        """
        if isinstance(self.cost_bps, tuple):
            if len(self.cost_bps) != n_instruments:
                _fail(
                    "cost_bps",
                    self.cost_bps,
                    f"one number or {n_instruments} numbers (one per instrument of the data)",
                )
            bps = self.cost_bps
        else:
            bps = (self.cost_bps,) * n_instruments
        return np.asarray(bps, dtype=np.float64) / 10_000.0

    def replace(self, **changes: Any) -> PortfolioConfig:
        """A copy with ``changes`` applied (validated again); unknown names raise TypeError."""
        names = [f.name for f in dataclasses.fields(self)]
        unknown = sorted(set(changes) - set(names))
        if unknown:
            raise TypeError(f"PortfolioConfig has no field(s) {unknown}; known fields: {names}")
        return dataclasses.replace(self, **changes)


def portfolio_field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(PortfolioConfig)]


@dataclass(frozen=True)
class PortfolioParams:
    """The derived parameters of a portfolio step (docs/ENV_SPEC.md, "State": Parameters)."""

    initial_capital: float
    leverage: float
    max_leverage: float
    reserve_frac: float
    fill_next_open: int
    reward_log: int
    episode_length: int
    autoreset_mode: int
    exposure: np.ndarray  # float64 [L]
    rate: np.ndarray  # float64 [K]


def portfolio_params(config: PortfolioConfig, n_instruments: int) -> PortfolioParams:
    """The parameters a backend reads, computed once (the reference and a kernel share them)."""
    return PortfolioParams(
        initial_capital=float(config.initial_capital),
        leverage=float(config.leverage),
        max_leverage=float(config.max_leverage),
        reserve_frac=float(config.reserve_pct) / 100.0,
        fill_next_open=int(config.fill == "next_open"),
        reward_log=int(config.reward == "log"),
        episode_length=int(config.episode_length),
        autoreset_mode=AUTORESET_CODES[config.autoreset_mode],
        exposure=np.asarray(config.exposure_levels, dtype=np.float64),
        rate=config.cost_rates(n_instruments),
    )


def single_instrument_config(config: PortfolioConfig, cost_bps: float | None = None) -> EnvConfig:
    """The single-instrument ``EnvConfig`` whose env equals this portfolio at K = 1 bit for bit
    (docs/ENV_SPEC.md, "K = 1 is the single env"); ``cost_bps`` defaults to the config's one value.

    :raises ValueError: where ``leverage x max|exposure_levels| > max_leverage`` (the single env
        refuses it) or ``cost_bps`` is a tuple of more than one value and none is given.
    """
    if cost_bps is None:
        costs = config.cost_bps if isinstance(config.cost_bps, tuple) else (config.cost_bps,)
        if len(costs) != 1:
            _fail("cost_bps", config.cost_bps, "one value for the single-instrument config")
        cost_bps = costs[0]
    return EnvConfig(
        initial_capital=config.initial_capital,
        exposure_levels=config.exposure_levels,
        order_cost_bps=(float(cost_bps),),
        sub_actions=1,
        reserve_pct=config.reserve_pct,
        spread=0.0,
        fill=config.fill,
        barriers=False,
        diversity_penalty=0.0,
        risk_penalty_scale=0.0,
        episode_length=config.episode_length,
        autoreset_mode=config.autoreset_mode,
        sizing="equity",
        leverage=config.leverage,
        max_leverage=config.max_leverage,
    )
