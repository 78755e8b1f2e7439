"""The step's oracle: one env's transition in Python scalars, and the CPU single env's step.

The env step has two implementations, the NumPy backend and the CUDA kernel. This module states
one env's transition once more, on its own, in plain float and int arithmetic: the trade,
position sizing, barriers, diversity ring and end flags, the same IEEE float64 operations in the
same order as the NumPy step, written to be read. It is the test oracle of the NumPy backend
(``tests/test_reference_step.py`` steps every env of a vector env through it, in every autoreset
mode, and holds the two bit-identical), and what the single env ``gym.make("GpuTrading-v0")``
runs on the CPU, where a step of NumPy calls on 1-element arrays costs about 40 times more.

What it takes from the NumPy side: the reward's parts (:mod:`gpu_trading_env.core.reward`, the
one place they are written), the start-bar draws, the observation rows, the diversity lookup
tables, the curiosity bonus and, with a cash reserve, the whole trade
(:func:`~gpu_trading_env.backends.numpy_step_parts.trade` on 1-element arrays).
"""

from __future__ import annotations

import copy
import math
import struct
from typing import Any

import numpy as np

from gpu_trading_env.backends.numpy_backend import NumpyBackend
from gpu_trading_env.backends.numpy_step_parts import trade
from gpu_trading_env.core import reward
from gpu_trading_env.core.constants import BARRIER_ARMED, BARRIER_NONE
from gpu_trading_env.core.state import EnvState

# Start bars drawn per Philox pass for the single env: one pass costs as much in array calls
# whatever its length up to a few thousand draws, and random actions end an episode every
# ~15 steps.
SCALAR_START_DRAWS = 1024
_F32_BYTES = struct.Struct("f")
# Bound once: the step rounds to float32 inline (a function call costs as much as the rounding).
_PACK_F32, _UNPACK_F32 = _F32_BYTES.pack, _F32_BYTES.unpack
_array = np.array
_F32_DTYPE = np.dtype(np.float32)
_floor, _copysign = math.floor, math.copysign
_pnl, _barrier, _risk, _diversity, _total = (
    reward.pnl,
    reward.barrier,
    reward.risk,
    reward.diversity,
    reward.total,
)


class ScalarStep:
    """Env ``env`` of a :class:`NumpyBackend`, stepped in Python scalars.

    :meth:`load` copies the env's row of a state (the backend's after a reset, whose arrays are
    then stale for this env until :meth:`store` or the next reset); :meth:`step` advances the
    scalars. ``backend.curiosity`` is read at every step, so installed weights apply. The
    single env (``env=0`` of a one-env backend, autoreset DISABLED) also resets through
    :meth:`reset`, on the scalars alone.
    """

    def __init__(self, backend: NumpyBackend, env: int = 0) -> None:
        if not 0 <= env < backend.num_envs:
            raise ValueError(
                f"env = {env} is invalid: allowed is 0..{backend.num_envs - 1} (the backend's envs)"
            )
        self.backend = backend
        self.env = env
        p = backend.params
        self.p = p
        # Python lists: indexing one returns a Python float, several times faster than NumPy.
        self.close = backend.close.tolist()
        self.open = backend.open.tolist()
        self.category = [int(c) for c in p.category]
        self.exposure = p.exposure.tolist()
        self.cost_rate = p.cost_rate.tolist()
        # Env i trades instrument i mod I.
        self.target = backend.unit_targets[env % backend.unit_targets.shape[0]].tolist()
        self.hi = int(backend.state.hi[env])
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

    def for_env(self, env: int) -> ScalarStep:
        """The same step for another env of the backend, sharing this one's read-only tables
        (price lists, observation rows, the diversity table); its state loaded from the
        backend's."""
        if not 0 <= env < self.backend.num_envs:
            raise ValueError(
                f"env = {env} is invalid: allowed is 0..{self.backend.num_envs - 1} "
                "(the backend's envs)"
            )
        other = copy.copy(self)
        other.env = env
        targets = self.backend.unit_targets
        other.target = targets[env % targets.shape[0]].tolist()
        other.hi = int(self.backend.state.hi[env])
        other.ring = [0] * self.window
        other.hist = [0, 0, 0]
        other.load()
        return other

    def load(self, state: EnvState | None = None) -> None:
        """Take the env's row of ``state`` (default: the backend's, after its reset, which may
        have re-seeded it)."""
        s = self.backend.state if state is None else state
        i = self.env
        self._draws: list[int] = []
        self._draws_base = 0
        self.bar = int(s.bar[i])
        self.step_in_episode = int(s.step_in_episode[i])
        self.cash = float(s.cash[i])
        self.position = float(s.position[i])
        self.costs = float(s.costs[i])
        self.entry_price = float(s.entry_price[i])
        self.entry_bar = int(s.entry_bar[i])
        self.barrier_status = int(s.barrier_status[i])
        self.ring[:] = s.div_ring[:, i].tolist()
        self.hist[:] = s.div_hist[:, i].tolist()
        self.cursor = int(s.div_cursor[i])
        self.count = int(s.div_count[i])
        self.episode_return = float(s.episode_return[i])

    def store(self, state: EnvState) -> None:
        """Write the env's scalars back into its row of ``state`` (``seed``, ``episode_count``,
        ``lo``, ``hi`` and ``done_flag`` are not the step's)."""
        i = self.env
        state.bar[i] = self.bar
        state.step_in_episode[i] = self.step_in_episode
        state.cash[i] = self.cash
        state.position[i] = self.position
        state.costs[i] = self.costs
        state.entry_price[i] = self.entry_price
        state.entry_bar[i] = self.entry_bar
        state.barrier_status[i] = self.barrier_status
        state.div_ring[:, i] = self.ring
        state.div_hist[:, i] = self.hist
        state.div_cursor[i] = self.cursor
        state.div_count[i] = self.count
        state.episode_return[i] = self.episode_return

    def reset(self) -> np.ndarray:
        """A new episode at the env's next drawn start bar (as ``backend.reset`` without a start
        index: the same Philox draw, the same counter); returns its first observation.

        Only the scalars are reset: the backend's state arrays keep the seed and draw counter
        its own resets read, and are rewritten whole by its next reset.
        """
        # The env's next start bars are drawn SCALAR_START_DRAWS at a time, by the backend's
        # own function; the backend's draw counter advances by one per episode, as in its reset.
        counter = self.backend.state.episode_count
        i = self.env
        k = int(counter[i])
        offset = k - self._draws_base
        if not 0 <= offset < len(self._draws):
            self._draws = self.backend.start_bars(i, SCALAR_START_DRAWS).tolist()
            self._draws_base, offset = k, 0
        counter[i] = k + 1
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

    def step(
        self, a: int, bonus: float | None = None
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One step with a valid action ``a``; the single env's ``(obs, reward, terminated,
        truncated, info)``, reward and info values as the vector env's row 0 gives them.

        ``bonus``: the curiosity bonus when the caller computes it for a batch of envs at once
        (the NumPy backend's float32 products over a batch can round otherwise than over one
        row); None: computed here from the backend's weights, if any.
        """
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
        # Risk (ENV_SPEC "Risk"), from the position feature before the trade.
        risk = _risk(pos0 / (c0 / close_t), risk_threshold, risk_scale, min)
        curiosity_w = self.backend.curiosity if bonus is None else None
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
            # Close the position, then open towards the target what the cash pays for, in whole
            # units (an int: its products and min() give the floats of a float floor).
            close_cost = abs(pos0) * fill * rate
            cash_c = cash0 + pos0 * fill - close_cost
            units = min(_floor(max(cash_c, 0.0) / (fill * (1.0 + rate))), abs(target))
            pos1 = _copysign(units, target)
            open_cost = units * fill * rate
            cash1 = cash_c - pos1 * fill - open_cost
            cost = close_cost + open_cost
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
        diversity = _diversity(penalised, diversity_penalty)

        # Mark to market and reward (ENV_SPEC "Reward"), summed in the spec's order.
        value1 = cash1 + pos1 * close_1
        pnl = _pnl(value0, value1)
        barrier = _barrier(pnl, sign, barrier_half_scale)
        obs1 = self.rows[t1].copy()  # _obs(t1, value1, pos1, close_1, c0), inlined
        f = self.n_features
        obs1[f] = value1 / c0
        obs1[f + 1] = pos1 / (c0 / close_1)
        if obs0 is not None:
            one = reward.curiosity(curiosity_w, obs0[None], obs1[None], np.array([cat]), p)
            curiosity = float(one[0])
        else:
            curiosity = 0.0 if bonus is None else bonus
        total = _total(pnl, barrier, risk, diversity, curiosity)
        self.episode_return += total

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
        return obs1, _UNPACK_F32(_PACK_F32(total))[0], terminated, truncated, info
