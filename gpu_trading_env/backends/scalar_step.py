"""One env's step in Python scalars: what the single env ``gym.make("GpuTrading-v0")`` runs.

A step of one env through :class:`~gpu_trading_env.backends.numpy_backend.NumpyBackend` is
dozens of NumPy calls on 1-element arrays; here it is plain float and int arithmetic on the
env's state held as Python values, the same IEEE float64 operations in the same order as the
NumPy step, so every output is bit-identical (``tests/test_single_env.py`` holds the two
together over random configs and action sequences). What is not per-step arithmetic is the
NumPy backend's own: the reset and its Philox draws, the observation rows, the diversity
lookup tables, the curiosity bonus, the reversal formula
(:func:`~gpu_trading_env.core.reference_step.reversal_trade`, one statement for arrays
and floats) and, with a cash reserve, the whole trade
(:func:`~gpu_trading_env.backends.numpy_step_parts.trade` on 1-element arrays).

Autoreset is DISABLED (the single env's mode): an ended episode waits for ``reset``.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from gpu_trading_env.backends.numpy_backend import NumpyBackend
from gpu_trading_env.backends.numpy_step_parts import trade
from gpu_trading_env.core.constants import BARRIER_ARMED, BARRIER_NONE
from gpu_trading_env.core.reference_step import SCALAR_MATH, curiosity_bonus, reversal_trade

_F32 = np.float32
# Start bars drawn per Philox pass for the single env: one pass costs ~100 us of array calls
# whatever its length up to a few thousand draws, and random actions end an episode every
# ~15 steps, so the backend's own batch (numpy_backend.START_CACHE, 64) cost ~2 us a reset.
SCALAR_START_DRAWS = 1024
_F32_BYTES = struct.Struct("f")
# Bound once: the step rounds to float32 inline (a function call costs as much as the rounding).
_PACK_F32, _UNPACK_F32 = _F32_BYTES.pack, _F32_BYTES.unpack
_array = np.array
_F32_DTYPE = np.dtype(np.float32)


def _round_f32(x: float) -> float:
    """``float(np.float32(x))`` (round to nearest float32), in a fifth of its time."""
    return _UNPACK_F32(_PACK_F32(x))[0]


class ScalarEnv:
    """Env 0 of a one-env :class:`NumpyBackend`, stepped in Python scalars.

    :meth:`load` copies the backend's state after a reset (the backend's arrays are then
    stale until the next reset: nothing else reads them in between); :meth:`step` advances
    the scalars. ``backend.curiosity`` is read at every step, so installed weights apply.
    """

    def __init__(self, backend: NumpyBackend) -> None:
        if backend.num_envs != 1:
            raise ValueError(f"num_envs = {backend.num_envs} is invalid: allowed is 1")
        self.backend = backend
        p = backend.params
        self.p = p
        # Python lists: indexing one returns a Python float, several times faster than NumPy.
        self.close = backend.close.tolist()
        self.open = backend.open.tolist()
        self.category = [int(c) for c in p.category]
        self.exposure = p.exposure.tolist()
        self.cost_rate = p.cost_rate.tolist()
        self.target = backend.unit_targets[0].tolist()  # env 0 trades instrument 0
        self.hi = int(backend.state.hi[0])
        self.window = p.diversity_window
        self.ring = [0] * self.window
        self.hist = [0, 0, 0]
        penalised = backend.penalised_table
        self.penalised = penalised.tolist() if penalised is not None else None
        self.n_features = backend.n_features
        # The parameters every step reads, unpacked at once (one attribute read, not twelve).
        self._consts = (
            p.initial_capital,
            bool(p.fill_next_open),
            p.reserve_frac,
            bool(p.barriers),
            p.risk_penalty_scale,
            p.risk_threshold,
            bool(p.sizing_equity),
            p.diversity_penalty,
            p.barrier_half_scale,
            p.episode_length,
        )
        # One array per bar: a list lookup and a copy make an observation row.
        self.rows = list(backend.features)
        self.load()

    def load(self) -> None:
        """Take env 0's state from the backend (after its reset, which may have re-seeded it)."""
        s = self.backend.state
        self._draws: list[int] = []
        self._draws_base = 0
        self.bar = int(s.bar[0])
        self.step_in_episode = int(s.step_in_episode[0])
        self.cash = float(s.cash[0])
        self.position = float(s.position[0])
        self.costs = float(s.costs[0])
        self.entry_price = float(s.entry_price[0])
        self.entry_bar = int(s.entry_bar[0])
        self.barrier_status = int(s.barrier_status[0])
        self.ring[:] = s.div_ring[:, 0].tolist()
        self.hist[:] = s.div_hist[:, 0].tolist()
        self.cursor = int(s.div_cursor[0])
        self.count = int(s.div_count[0])
        self.episode_return = float(s.episode_return[0])

    def reset(self) -> np.ndarray:
        """A new episode at the env's next drawn start bar (as ``backend.reset`` without a start
        index: the same Philox draw, the same counter); returns its first observation.

        Only the scalars are reset: the backend's state arrays keep the seed and draw counter
        its own resets read, and are rewritten whole by its next reset.
        """
        # The env's next start bars are drawn SCALAR_START_DRAWS at a time, by the backend's
        # own function; the backend's draw counter advances by one per episode, as in its reset.
        counter = self.backend.state.episode_count
        k = int(counter[0])
        offset = k - self._draws_base
        if not 0 <= offset < len(self._draws):
            self._draws = self.backend.start_bars(0, SCALAR_START_DRAWS).tolist()
            self._draws_base, offset = k, 0
        counter[0] = k + 1
        self.bar = self._draws[offset]
        self.step_in_episode = 0
        self.cash = self.p.initial_capital
        self.position = 0.0
        self.costs = 0.0
        self.entry_price = 0.0
        self.entry_bar = 0
        self.barrier_status = BARRIER_NONE
        self.hist[:] = (0, 0, 0)
        self.cursor = 0
        self.count = 0  # the ring's old entries are never read again (count < window)
        self.episode_return = 0.0
        return self.observe()

    def observe(self) -> np.ndarray:
        """float32 [F+3]: the observation of the current state."""
        c0 = self.p.initial_capital
        px = self.close[self.bar]
        return self._obs(self.bar, self.cash + self.position * px, self.position, px, c0)

    def _obs(self, bar: int, value: float, position: float, px: float, c0: float) -> np.ndarray:
        # observation()'s expressions on one row: value / c0, position / (c0 / px), as float32.
        obs = self.rows[bar].copy()
        obs[self.n_features] = value / c0
        obs[self.n_features + 1] = position / (c0 / px)
        return obs

    def step(self, a: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One step with a valid action ``a``; the single env's ``(obs, reward, terminated,
        truncated, info)``, reward and info values as the vector env's row 0 gives them."""
        p = self.p
        (
            c0,
            fill_next_open,
            reserve_frac,
            barriers,
            risk_scale,
            risk_threshold,
            sizing_equity,
            diversity_penalty,
            barrier_half_scale,
            episode_length,
        ) = self._consts
        t = self.bar
        t1 = t + 1
        close = self.close
        close_t = close[t]
        close_1 = close[t1]
        fill = self.open[t1] if fill_next_open else close_t
        pos0 = self.position
        cash0 = self.cash
        value0 = cash0 + pos0 * close_t
        # Risk (ENV_SPEC "Risk"): min(-(scale * excess), 0) as np.minimum rounds it.
        risk = -(risk_scale * (abs(pos0 / (c0 / close_t)) - risk_threshold))
        if risk > 0.0:  # min(risk, 0.0) without the call: NaN and -0.0 pass through as in min
            risk = 0.0
        curiosity_w = self.backend.curiosity
        obs0 = self._obs(t, value0, pos0, close_t, c0) if curiosity_w is not None else None

        # Trade (ENV_SPEC "Portfolio", "Position sizing").
        value_pre = cash0 + pos0 * fill if fill_next_open else value0
        if sizing_equity:
            target = self.exposure[a] * (p.leverage * max(value_pre, 0.0) / fill)
        else:
            target = self.target[a]
        rate = self.cost_rate[a]
        reversal = (pos0 > 0.0 and target < 0.0) or (pos0 < 0.0 and target > 0.0)
        if reserve_frac > 0.0:  # buys cut by the cash reserve: trade() on 1-element arrays
            reserve = np.array([reserve_frac * value_pre])
            arrays = (np.array([x]) for x in (target, rate, fill, cash0, pos0))
            c1, q1, k1, _ = trade(p, *arrays, reserve)
            cash1, pos1, cost = float(c1[0]), float(q1[0]), float(k1[0])
        elif reversal:
            cash1, pos1, cost = reversal_trade(SCALAR_MATH, pos0, target, cash0, fill, rate, 0.0)
        else:  # trade()'s arithmetic outside a reversal
            delta = target - pos0
            cost = abs(delta) * fill * rate
            cash1 = cash0 - delta * fill - cost
            pos1 = pos0 + delta
        self.cash = cash1
        self.position = pos1
        self.costs += cost

        # Triple barrier (ENV_SPEC "Triple barrier"), check_barriers() on one env.
        if (reversal or pos0 == 0.0) and pos1 != 0.0:  # opened
            self.barrier_status = status = BARRIER_ARMED
            self.entry_price = fill
            self.entry_bar = t
        elif pos1 == 0.0:
            self.barrier_status = status = BARRIER_NONE
            self.entry_price = 0.0
        else:
            status = self.barrier_status
        sign = label = 0
        closing = False
        if barriers and status == BARRIER_ARMED:
            entry = self.entry_price
            if pos1 > 0.0:
                profit = fill >= entry * (1.0 + p.profit_frac)
                stop = not profit and fill <= entry * (1.0 - p.stop_frac)
            else:
                profit = fill <= entry * (1.0 - p.profit_frac)
                stop = not profit and fill >= entry * (1.0 + p.stop_frac)
            time_hit = not (profit or stop) and t >= self.entry_bar + p.max_holding_bars
            sign = profit - stop
            label = sign + 2 * time_hit
            closing = profit or stop
            if closing or time_hit:
                self.barrier_status = status + 1  # BARRIER_FIRED

        # Action diversity (ENV_SPEC "Diversity"): NumpyBackend._diversity on one ring.
        cat = self.category[a]
        window = self.window
        hist = self.hist
        cursor = self.cursor
        count = self.count
        if count >= window:
            hist[self.ring[cursor]] -= 1  # the oldest entry leaves a full ring
        else:
            self.count = count = count + 1
        self.ring[cursor] = cat
        hist[cat] += 1
        cursor += 1
        self.cursor = 0 if cursor == window else cursor
        table = self.penalised
        if table is not None:
            penalised = table[(count * (window + 1) + hist[0]) * (window + 1) + hist[1]]
        else:  # windows too wide for the table: the backend's expression on one ring
            penalised = self.backend.penalised_rows(
                np.array([count]), *(np.array([h]) for h in hist)
            )[0]
        diversity = -diversity_penalty if penalised else 0.0

        # Mark to market and reward (ENV_SPEC "Reward"), summed in the spec's order.
        value1 = cash1 + pos1 * close_1
        pnl = (value1 - value0) / value0
        barrier = pnl * (sign * barrier_half_scale)
        reward = pnl + barrier
        reward += risk
        reward += diversity
        obs1 = self.rows[t1].copy()  # _obs(t1, value1, pos1, close_1, c0), inlined
        f = self.n_features
        obs1[f] = value1 / c0
        obs1[f + 1] = pos1 / (c0 / close_1)
        if obs0 is not None:
            bonus = curiosity_bonus(curiosity_w, obs0[None], obs1[None], np.array([cat]), p)
            curiosity = float(bonus[0])  # float32 to float64, as the backend's astype
        else:
            curiosity = 0.0
        reward += curiosity
        self.episode_return += reward

        steps = self.step_in_episode = self.step_in_episode + 1
        terminated = value1 <= 0.0 or closing
        truncated = not terminated and (steps >= episode_length or t1 + 1 >= self.hi)
        self.bar = t1
        info: dict[str, Any] = {
            "reward_components": _array((pnl, barrier, risk, diversity, curiosity), _F32_DTYPE),
            "portfolio_value": value1,
            "position": pos1,
            "barrier_label": label,
        }
        if terminated or truncated:
            info["episode_return"] = _UNPACK_F32(_PACK_F32(self.episode_return))[0]
            info["episode_length"] = steps
        return obs1, _UNPACK_F32(_PACK_F32(reward))[0], terminated, truncated, info
