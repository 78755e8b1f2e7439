"""``EnvConfig``: every static knob of the trading environment, validated on construction.

The formulas each field enters are stated in ``docs/ENV_SPEC.md``. Both backends read the
config only through :func:`action_table` and :func:`step_scalars`, so the NumPy reference and
the CUDA kernel consume one derived parameter set and cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from gpu_runtime.philox import philox_stream_defines
from gpu_trading_env.core.constants import (
    CATEGORY_FLAT,
    CATEGORY_LONG,
    CATEGORY_SHORT,
    MODE_DISABLED,
    MODE_NEXT_STEP,
    MODE_SAME_STEP,
    kernel_constant_defines,
)
from gpu_trading_env.core.kernel_interface import interface_defines

FILL_MODES = ("close", "next_open")
SIZING_MODES = ("units", "equity")

_AUTORESET_ALIASES = {
    "same_step": AutoresetMode.SAME_STEP,
    "samestep": AutoresetMode.SAME_STEP,
    "next_step": AutoresetMode.NEXT_STEP,
    "nextstep": AutoresetMode.NEXT_STEP,
    "disabled": AutoresetMode.DISABLED,
}


# The source design's env where it differs from EnvConfig's defaults (EnvConfig.source_design).
# The defaults are the env `train` recommends: the reward is the portfolio's return after costs,
# and each shaping term of the source design pays for something other than the return:
# - the diversity penalty fires on any two-sided strategy whose long/short mix is not exactly
#   balanced, and on staying out;
# - the risk penalty arrives one step after the trade that caused it;
# - the triple barrier's reward scale halves the loss of a bar that hits the stop and adds half
#   to one that hits the profit target, so every barrier hit pays about half its move: being in
#   a volatile market pays whatever its direction, and the agent traded a driftless random walk;
#   the barriers themselves close positions that the strategy meant to hold.
# The source design's 45 actions hold each exposure nine times (three order types that differ
# only in cost, three sub-actions that change nothing), and a Q-learner estimates each of the 45
# from the transitions that took it: a ninth of the data per estimate, and argmax over nine noisy
# copies. On the market zoo that is the difference between finding an edge of a few basis points
# and trading noise. Short, flat, long: each exposure's value is learned from a third of the
# transitions instead of a fifth; the half exposures added nothing on the zoo's markets that the
# weak edges did not pay for (experiments/README.md, "Validation window and actions").
SOURCE_DESIGN: Mapping[str, Any] = MappingProxyType(
    {
        "exposure_levels": (-1.0, -0.5, 0.0, 0.5, 1.0),
        "order_cost_bps": (1.0, 0.5, 1.5),
        "sub_actions": 3,
        "barriers": True,
        "diversity_penalty": 0.1,
        "risk_penalty_scale": 0.5,
    }
)


def _fail(name: str, value: Any, allowed: str) -> None:
    raise ValueError(f"EnvConfig.{name} = {value!r} is invalid: allowed is {allowed}")


def parse_autoreset_mode(value: AutoresetMode | str) -> AutoresetMode:
    """Accept a gymnasium ``AutoresetMode`` or its name (``"same_step"``, ``"SameStep"``, ...)."""
    if isinstance(value, AutoresetMode):
        return value
    if isinstance(value, str):
        key = value.strip().lower().replace("-", "_")
        if key in _AUTORESET_ALIASES:
            return _AUTORESET_ALIASES[key]
        for mode in AutoresetMode:
            if value in (mode.value, mode.name):
                return mode
    _fail(
        "autoreset_mode", value, "AutoresetMode.SAME_STEP, NEXT_STEP or DISABLED (or their names)"
    )
    raise AssertionError  # unreachable


@dataclass(frozen=True)
class EnvConfig:
    """Static parameters of the trading environment.

    Money is in the data's quote currency, positions in units of the instrument, rates in basis
    points (1 bp = 1e-4) unless a field says otherwise. The defaults are the recommended env, the
    one ``gpu-trading-env train`` trains in: ``Discrete(3)`` actions (short, flat, long) at one
    order type of 1 bp, reward = the portfolio's return after costs (no triple barrier, no
    diversity or risk penalty). :meth:`source_design` gives the source design's env: 45 actions
    (5 exposures x 3 order types x 3 sub-actions), the triple barrier and both penalties on.
    """

    initial_capital: float = 100_000.0
    """Cash at the start of every episode (currency, > 0)."""
    max_position: float | None = None
    """Units held at exposure 1.0 with ``sizing="units"``; ``None``: per instrument,
    floor(initial_capital / that instrument's median close), at least 1."""
    exposure_levels: tuple[float, ...] = (-1.0, 0.0, 1.0)
    """Target exposure of each action group, as a fraction of ``max_position`` (each in [-1, 1])."""
    order_cost_bps: tuple[float, ...] = (1.0,)
    """Cost rate of each order type, bps of traded notional (the source design's three: market,
    limit, aggressive)."""
    sub_actions: int = 1
    """Size of the third action factor ``k``; it changes no trade (3 in the source design's
    45-action layout)."""
    reserve_pct: float = 0.0
    """Cash reserve, percent of the pre-trade portfolio value, that buys may not spend ([0, 100))."""
    spread: float = 0.0
    """Quoted spread shown as the last observation feature (fraction of price, >= 0)."""
    fill: str = "close"
    """``"close"``: trade at bar t's close; ``"next_open"``: trade at bar t+1's open."""

    barriers: bool = False
    """Enable the triple barrier (profit, stop, time)."""
    profit_target_bps: float = 100.0
    """Distance of the profit barrier from the entry price (bps, > 0)."""
    stop_loss_bps: float = 50.0
    """Distance of the stop barrier from the entry price (bps, > 0)."""
    max_holding_bars: int = 500
    """Time barrier: bars after the entry bar (>= 1)."""
    barrier_reward_scale: float = 1.0
    """A profit hit scales the step's pnl by 1 + 0.5*scale, a stop hit by 1 - 0.5*scale (>= 0)."""

    diversity_window: int = 100
    """Length of the ring of recent action categories per env (1..4096)."""
    diversity_threshold_bits: float = 1.0
    """Penalty when the ring's Shannon entropy (bits) is below this ([0, log2(3)])."""
    diversity_penalty: float = 0.0
    """Size of the diversity penalty (>= 0); the reward component is its negative."""
    diversity_min_entries: int = 3
    """No penalty while the ring holds fewer entries than this (>= 1)."""

    curiosity_state_dims: int = 32
    """Leading observation dims the curiosity forward model reads and predicts."""
    curiosity_hidden: int = 64
    """Hidden width of the curiosity forward model."""
    curiosity_scale: float = 1.0
    """Weight of the curiosity bonus (>= 0); the bonus is off until weights are set."""
    curiosity_max_reward: float = 0.1
    """Cap on the forward model's MSE before scaling (> 0)."""

    risk_threshold: float = 0.8
    """Risk penalty applies when |position feature| exceeds this (>= 0)."""
    risk_penalty_scale: float = 0.0
    """Risk penalty = scale * (|position feature| - threshold) (>= 0)."""

    episode_length: int = 500
    """Steps before truncation (>= 1)."""
    autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP
    """Gymnasium autoreset mode of the vector env (NEXT_STEP: Gymnasium's vector default)."""

    sizing: str = "units"
    """``"units"``: target = exposure x max_position units (fixed size); ``"equity"``: target
    notional = exposure x leverage x current equity (value at the fill price), so a position
    never exceeds what the account carries at ``leverage``."""
    leverage: float = 1.0
    """Notional per unit of equity at exposure 1.0 with ``sizing="equity"`` ((0, max_leverage],
    max_leverage in (0, ``LEVERAGE_MAX`` = 1000])."""
    max_leverage: float = 10.0
    """Leverage cap: ``sizing="equity"`` requires leverage x max|exposure| <= this; with
    ``sizing="units"`` the env warns when max_position x median close exceeds this x capital."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        # NumPy scalars (np.float32(1.0), np.int64(5)) are numbers like any other: stored as
        # Python floats and ints, so formulas, JSON and repr see one type.
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if value is None and name in _OPTIONAL_FIELDS:
                continue
            set_(self, name, _real(name, value))
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, np.integer):
                set_(self, name, int(value))
        if isinstance(self.barriers, np.bool_):
            set_(self, "barriers", bool(self.barriers))
        set_(self, "autoreset_mode", parse_autoreset_mode(self.autoreset_mode))
        set_(self, "exposure_levels", _float_tuple("exposure_levels", self.exposure_levels))
        set_(self, "order_cost_bps", _float_tuple("order_cost_bps", self.order_cost_bps))
        self._validate()

    def _validate(self) -> None:
        # Upper bounds keep float32 observations and rewards and float64 money finite: money
        # within MONEY_MAX, scales and penalties within SCALE_MAX (see docs/ENV_SPEC.md).
        _in_range("initial_capital", self.initial_capital, MONEY_MIN, MONEY_MAX, lo_open=False)
        if self.max_position is not None:
            _in_range("max_position", self.max_position, 0.0, MONEY_MAX, lo_open=True)
        if not self.exposure_levels:
            _fail("exposure_levels", self.exposure_levels, "a non-empty tuple of floats in [-1, 1]")
        for x in self.exposure_levels:
            if not (-1.0 <= x <= 1.0):
                _fail("exposure_levels", self.exposure_levels, "values in [-1, 1]")
        if not self.order_cost_bps:
            _fail("order_cost_bps", self.order_cost_bps, "a non-empty tuple of floats >= 0")
        for x in self.order_cost_bps:
            if not (math.isfinite(x) and 0.0 <= x < 10_000.0):
                _fail("order_cost_bps", self.order_cost_bps, "values in [0, 10000) bps")
        _int_range("sub_actions", self.sub_actions, 1, 1024)
        if self.n_actions > 2**31 - 1:
            _fail("sub_actions", self.sub_actions, "a layout of fewer than 2**31 actions")
        if not (0.0 <= self.reserve_pct < 100.0):
            _fail("reserve_pct", self.reserve_pct, "a percentage in [0, 100)")
        _in_range("spread", self.spread, 0.0, 1.0)
        if self.fill not in FILL_MODES:
            _fail("fill", self.fill, f"one of {FILL_MODES}")
        if not isinstance(self.barriers, bool):
            _fail("barriers", self.barriers, "True or False")
        _in_range("profit_target_bps", self.profit_target_bps, 0.0, 1e6, lo_open=True)
        _positive_finite("stop_loss_bps", self.stop_loss_bps)
        if self.stop_loss_bps >= 10_000.0:
            _fail("stop_loss_bps", self.stop_loss_bps, "a value below 10000 bps (100%)")
        _int_range("max_holding_bars", self.max_holding_bars, 1, 2**31 - 1)
        _in_range("barrier_reward_scale", self.barrier_reward_scale, 0.0, SCALE_MAX)
        _int_range("diversity_window", self.diversity_window, 1, 4096)
        if not (0.0 <= self.diversity_threshold_bits <= math.log2(3) + 1e-12):
            _fail("diversity_threshold_bits", self.diversity_threshold_bits, "[0, log2(3)]")
        _in_range("diversity_penalty", self.diversity_penalty, 0.0, SCALE_MAX)
        _int_range("diversity_min_entries", self.diversity_min_entries, 1, self.diversity_window)
        _int_range("curiosity_state_dims", self.curiosity_state_dims, 1, 4096)
        _int_range("curiosity_hidden", self.curiosity_hidden, 1, 4096)
        _in_range("curiosity_scale", self.curiosity_scale, 0.0, SCALE_MAX)
        _in_range("curiosity_max_reward", self.curiosity_max_reward, 0.0, SCALE_MAX, lo_open=True)
        _in_range("risk_threshold", self.risk_threshold, 0.0, SCALE_MAX)
        _in_range("risk_penalty_scale", self.risk_penalty_scale, 0.0, SCALE_MAX)
        _int_range("episode_length", self.episode_length, 1, 2**31 - 1)
        if self.sizing not in SIZING_MODES:
            _fail("sizing", self.sizing, f"one of {SIZING_MODES}")
        _in_range("max_leverage", self.max_leverage, 0.0, LEVERAGE_MAX, lo_open=True)
        _in_range("leverage", self.leverage, 0.0, LEVERAGE_MAX, lo_open=True)
        if self.sizing == "equity":
            peak = self.leverage * max(abs(x) for x in self.exposure_levels)
            if peak > self.max_leverage:
                _fail(
                    "leverage",
                    self.leverage,
                    f"at most max_leverage / max|exposure_levels| = {self.max_leverage} / "
                    f"{max(abs(x) for x in self.exposure_levels)} with sizing='equity' "
                    f"(the positions would reach {peak:g}x equity)",
                )

    @property
    def n_actions(self) -> int:
        """Size of the ``Discrete`` action space: levels x order types x sub-actions."""
        return len(self.exposure_levels) * len(self.order_cost_bps) * self.sub_actions

    @classmethod
    def source_design(cls, **changes: Any) -> EnvConfig:
        """The source design's env (the defaults of earlier versions): ``Discrete(45)`` actions (5
        exposures x 3 order types of 1, 0.5 and 1.5 bps x 3 sub-actions), the triple barrier,
        the diversity penalty 0.1 and the risk penalty 0.5 on (:data:`SOURCE_DESIGN`), the other
        fields at their defaults; ``changes`` of any field on top, validated as the constructor
        validates.

        :raises TypeError: on an unknown field name.
        """
        return cls().replace(**{**SOURCE_DESIGN, **changes})

    def replace(self, **changes: Any) -> EnvConfig:
        """A copy with ``changes`` applied (validated again); unknown names raise TypeError."""
        unknown = sorted(set(changes) - set(config_field_names()))
        if unknown:
            raise TypeError(
                f"EnvConfig has no field(s) {unknown}; known fields: {config_field_names()}"
            )
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every field as a JSON value: tuples as lists, ``autoreset_mode`` by its value
        (``"NextStep"``); :meth:`from_dict` inverts it."""
        out: dict[str, Any] = {}
        for name in config_field_names():
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, AutoresetMode):
                value = value.value
            out[name] = value
        return out

    @classmethod
    def from_dict(cls, fields: Any) -> EnvConfig:
        """The config :meth:`to_dict` wrote, validated as the constructor validates.

        :raises ValueError: where ``fields`` is not a dict of every field (names the missing
            and unknown ones) or a value is refused (names the field, the value and what is
            allowed).
        """
        if not isinstance(fields, dict):
            raise ValueError(
                f"EnvConfig fields of type {type(fields).__name__} are invalid: allowed is a "
                "dict of its fields"
            )
        names = config_field_names()
        unknown = sorted(str(k) for k in set(fields) - set(names))
        missing = [n for n in names if n not in fields]
        if unknown or missing:
            wrong = "; ".join(
                f"{what} {names_}"
                for what, names_ in (("unknown", unknown), ("missing", missing))
                if names_
            )
            raise ValueError(
                f"EnvConfig fields are invalid: {wrong}; allowed are EnvConfig's {len(names)} "
                "fields, each given"
            )
        return cls(**fields)

    def decode_action(self, action: int) -> tuple[int, int, int]:
        """``(exposure_index, order_type, k)`` of an action (see :func:`action_parts`)."""
        if not (0 <= int(action) < self.n_actions):
            raise ValueError(f"action = {action!r} is invalid: allowed is 0..{self.n_actions - 1}")
        e, o, k = action_parts(int(action), len(self.order_cost_bps), self.sub_actions)
        return int(e), int(o), int(k)

    def encode_action(self, exposure_index: int, order_type: int = 0, k: int = 0) -> int:
        """Inverse of :meth:`decode_action`."""
        o = len(self.order_cost_bps)
        if not 0 <= exposure_index < len(self.exposure_levels):
            raise ValueError(
                f"exposure_index = {exposure_index} is invalid: allowed is 0..{len(self.exposure_levels) - 1}"
            )
        if not 0 <= order_type < o:
            raise ValueError(f"order_type = {order_type} is invalid: allowed is 0..{o - 1}")
        if not 0 <= k < self.sub_actions:
            raise ValueError(f"k = {k} is invalid: allowed is 0..{self.sub_actions - 1}")
        return (exposure_index * o + order_type) * self.sub_actions + k  # action_parts inverted


def action_parts(action: Any, n_order_types: int, sub_actions: int) -> tuple[Any, Any, Any]:
    """``(exposure_index, order_type, k)`` of actions laid out as
    ``a = (exposure_index * n_order_types + order_type) * sub_actions + k``: the one copy of the
    layout (``encode_action`` inverts it). ``action`` is an int or an int array."""
    rest, k = divmod(action, sub_actions)
    exposure_index, order_type = divmod(rest, n_order_types)
    return exposure_index, order_type, k


def config_field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(EnvConfig)]


def _float_tuple(name: str, value: Any) -> tuple[float, ...]:
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        _fail(name, value, "a tuple of numbers")
    items = tuple(value)
    if any(
        isinstance(x, bool | np.bool_) or not isinstance(x, int | float | np.integer | np.floating)
        for x in items
    ):
        _fail(name, value, "a tuple of numbers")
    out = tuple(_to_float(name, x) for x in items)
    if not all(math.isfinite(x) for x in out):
        _fail(name, value, "finite floats")
    return out


# Bounds that keep outputs finite: float64 money up to 1e15 (cents stay exact up to ~1e13),
# float32 reward components up to SCALE_MAX times a bounded factor.
MONEY_MIN = 1e-2
MONEY_MAX = 1e15
SCALE_MAX = 1e6
# Leverage above any broker's (125x crypto perpetuals, 1000:1 offshore FX) only hastens the
# overflow of the compounding equity: the position feature is leverage x value / capital in
# float32, infinite (rewards -inf) once that passes 3.4e38, after a few hundred bars at 1e5.
LEVERAGE_MAX = 1e3

# Field kinds from the annotations (strings under ``from __future__ import annotations``).
_FLOAT_FIELDS = tuple(
    f.name for f in dataclasses.fields(EnvConfig) if f.type in ("float", "float | None")
)
_OPTIONAL_FIELDS = tuple(f.name for f in dataclasses.fields(EnvConfig) if f.type == "float | None")
_INT_FIELDS = tuple(f.name for f in dataclasses.fields(EnvConfig) if f.type == "int")


def _real(name: str, value: Any) -> float:
    """``value`` as a Python float if it is a real number (int, float, NumPy scalar), else the
    field's ValueError (bools and strings are not numbers here)."""
    if isinstance(value, bool | np.bool_) or not isinstance(
        value, int | float | np.integer | np.floating
    ):
        allowed = "a number or None" if name in _OPTIONAL_FIELDS else "a number"
        _fail(name, value, f"{allowed} (got {type(value).__name__})")
    return _to_float(name, value)


def _to_float(name: str, value: Any) -> float:
    """``float(value)``, or the field's ValueError for an int beyond float range (10**400)."""
    try:
        return float(value)
    except OverflowError:
        digits = len(str(abs(int(value))))
        raise ValueError(
            f"EnvConfig.{name} = <an integer of {digits} digits> is invalid: allowed is a finite "
            "number (this one is beyond the float range, about 1.8e308)"
        ) from None


def _in_range(name: str, value: float, lo: float, hi: float, lo_open: bool = False) -> None:
    ok = math.isfinite(value) and (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        _fail(name, value, f"a finite number in {'(' if lo_open else '['}{lo:g}, {hi:g}]")


def _positive_finite(name: str, value: Any) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        _fail(name, value, "a finite number > 0")


def _int_range(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not lo <= value <= hi:
        _fail(name, value, f"an integer in [{lo}, {hi}]")


# --------------------------------------------------------------------------------------------
# Derived parameters: the one place both backends get their numbers from.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActionTable:
    """Per-action lookup arrays, shape [n_actions]."""

    exposure: np.ndarray  # float64, fraction of max_position
    cost_rate: np.ndarray  # float64, fraction of notional (bps / 1e4)
    category: np.ndarray  # uint8, CATEGORY_SHORT / FLAT / LONG


def action_table(config: EnvConfig) -> ActionTable:
    """Expand the action layout (:func:`action_parts`) into lookup arrays."""
    e_idx, o_idx, _ = action_parts(
        np.arange(config.n_actions), len(config.order_cost_bps), config.sub_actions
    )
    exposure = np.asarray(config.exposure_levels, dtype=np.float64)[e_idx]
    cost_rate = np.asarray(config.order_cost_bps, dtype=np.float64)[o_idx] / 10_000.0
    category = np.where(
        exposure < 0, CATEGORY_SHORT, np.where(exposure > 0, CATEGORY_LONG, CATEGORY_FLAT)
    ).astype(np.uint8)
    return ActionTable(exposure=exposure, cost_rate=cost_rate, category=category)


def sizing_price_limit(config: EnvConfig, units: float) -> float:
    """The dearest close (currency per unit) at which full exposure of ``units`` units stays
    within ``max_leverage`` x ``initial_capital``: max_leverage x capital / (units x
    max|exposure|); ``inf`` with ``sizing="equity"``, whose notional follows the account."""
    if config.sizing == "equity":
        return math.inf
    peak = max(abs(x) for x in config.exposure_levels)
    if peak == 0.0:
        return math.inf
    return config.max_leverage * config.initial_capital / (units * peak)


def resolve_max_positions(
    config: EnvConfig,
    close: np.ndarray,
    offsets: np.ndarray,
    instruments: Sequence[str] | None = None,
) -> np.ndarray:
    """float64 [I]: ``max_position`` for every instrument, or per instrument k its default
    floor(initial_capital / median close of k), at least 1 unit.

    :param close: float64 [T], currency per unit; ``offsets`` int64 [I + 1].
    :param instruments: names for the message (default: ``instrument <k>``).
    :raises ValueError: where the default is 1 unit (the median close is above the capital)
        and that unit at the median close is more than ``max_leverage`` x capital: the default
        cannot size the instrument, and its accounting would run at that leverage.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n_inst = len(offsets) - 1
    if config.max_position is not None:
        return np.full(n_inst, float(config.max_position), dtype=np.float64)
    close = np.asarray(close, dtype=np.float64)
    out = np.empty(n_inst, dtype=np.float64)
    for k in range(n_inst):
        bars = close[offsets[k] : offsets[k + 1]]
        median = float(np.median(bars))
        out[k] = max(1.0, math.floor(config.initial_capital / median))
        limit = sizing_price_limit(config, 1.0)
        if median > limit:
            name = repr(instruments[k]) if instruments is not None else f"{k}"
            i = int(np.argmax(bars > limit))
            peak = max(abs(x) for x in config.exposure_levels)
            raise ValueError(
                f"column 'close' of instrument {name} is too dear for the default "
                f"max_position: its median close {median:g} (first above {limit:g}: "
                f"{float(bars[i]):g} at its bar {i}) makes the 1-unit floor "
                f"{peak * median / config.initial_capital:.4g}x leverage on initial_capital "
                f"{config.initial_capital:g}, above EnvConfig.max_leverage = "
                f"{config.max_leverage:g}; allowed is a median close up to {limit:g} "
                "(docs/ENV_SPEC.md, 'Price range'): use sizing='equity' (notional = exposure x "
                "leverage x equity, fractional units), a fractional max_position (e.g. "
                f"{config.initial_capital / median:.3g}), or initial_capital >= "
                f"{peak * median / config.max_leverage:.4g}"
            )
    return out


def implied_leverage(config: EnvConfig, close: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """float64 [I]: notional at full exposure over initial capital, at each instrument's median
    close: max_position x max|exposure| x median / capital (``sizing="units"``), or
    leverage x max|exposure| (``sizing="equity"``, where it holds at every step)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    peak = max(abs(x) for x in config.exposure_levels)
    if config.sizing == "equity":
        return np.full(len(offsets) - 1, config.leverage * peak)
    units = resolve_max_positions(config, close, offsets)
    close = np.asarray(close, dtype=np.float64)
    medians = np.array(
        [np.median(close[offsets[k] : offsets[k + 1]]) for k in range(len(offsets) - 1)]
    )
    return units * peak * medians / config.initial_capital


# Scalar parameters in the order the CUDA kernel reads them (P_<NAME> slots, generated defines).
FLOAT_PARAMS = (
    "initial_capital",
    "leverage",
    "reserve_frac",
    "spread",
    "profit_frac",
    "stop_frac",
    "barrier_half_scale",
    "diversity_threshold_bits",
    "diversity_penalty",
    "curiosity_scale",
    "curiosity_max_reward",
    "risk_threshold",
    "risk_penalty_scale",
)
INT_PARAMS = (
    "n_actions",
    "fill_next_open",
    "barriers",
    "max_holding_bars",
    "diversity_window",
    "diversity_min_entries",
    "curiosity_state_dims",
    "curiosity_hidden",
    "episode_length",
    "autoreset_mode",
    "sizing_equity",
    "n_instruments",
)
AUTORESET_CODES = {
    AutoresetMode.SAME_STEP: MODE_SAME_STEP,
    AutoresetMode.NEXT_STEP: MODE_NEXT_STEP,
    AutoresetMode.DISABLED: MODE_DISABLED,
}


def step_scalars(config: EnvConfig, n_instruments: int) -> tuple[dict[str, float], dict[str, int]]:
    """The scalar parameters of a step, precomputed once so both backends do the same arithmetic.

    The per-instrument ``max_position`` values follow these slots in the kernel's float array
    (slot ``PF_MAX_POSITION_BASE + instrument``).
    """
    floats = {
        "initial_capital": float(config.initial_capital),
        "leverage": float(config.leverage),
        "reserve_frac": float(config.reserve_pct) / 100.0,
        "spread": float(config.spread),
        "profit_frac": float(config.profit_target_bps) / 10_000.0,
        "stop_frac": float(config.stop_loss_bps) / 10_000.0,
        "barrier_half_scale": 0.5 * float(config.barrier_reward_scale),
        "diversity_threshold_bits": float(config.diversity_threshold_bits),
        "diversity_penalty": float(config.diversity_penalty),
        "curiosity_scale": float(config.curiosity_scale),
        "curiosity_max_reward": float(config.curiosity_max_reward),
        "risk_threshold": float(config.risk_threshold),
        "risk_penalty_scale": float(config.risk_penalty_scale),
    }
    ints = {
        "n_actions": config.n_actions,
        "fill_next_open": int(config.fill == "next_open"),
        "barriers": int(config.barriers),
        "max_holding_bars": int(config.max_holding_bars),
        "diversity_window": int(config.diversity_window),
        "diversity_min_entries": int(config.diversity_min_entries),
        "curiosity_state_dims": int(config.curiosity_state_dims),
        "curiosity_hidden": int(config.curiosity_hidden),
        "episode_length": int(config.episode_length),
        "autoreset_mode": AUTORESET_CODES[config.autoreset_mode],
        "sizing_equity": int(config.sizing == "equity"),
        "n_instruments": int(n_instruments),
    }
    assert tuple(floats) == FLOAT_PARAMS and tuple(ints) == INT_PARAMS
    return floats, ints


def kernel_param_defines() -> tuple[tuple[str, str], ...]:
    """``#define P_<NAME> <slot>`` lines for the CUDA kernel, from the lists above."""
    defs = [(f"PF_{n.upper()}", str(i)) for i, n in enumerate(FLOAT_PARAMS)]
    defs += [(f"PI_{n.upper()}", str(i)) for i, n in enumerate(INT_PARAMS)]
    defs += [("PF_MAX_POSITION_BASE", str(len(FLOAT_PARAMS)))]
    return tuple(defs)


def kernel_defines() -> tuple[tuple[str, str], ...]:
    """Every ``#define`` the env kernels are compiled with: parameter slots, shared constants,
    Philox stream ids and the generated parameter lists (see ``kernel_interface.py``)."""
    return (
        kernel_param_defines()
        + kernel_constant_defines()
        + philox_stream_defines()
        + interface_defines()
    )
