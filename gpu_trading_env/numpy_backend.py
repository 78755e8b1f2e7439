"""The NumPy reference backend: the executable form of ``docs/ENV_SPEC.md``.

Every formula of a step is written once here, vectorised over envs. The CUDA kernel
(``kernels/trading_step.cu``) performs the same float64 operations in the same order, compiled
without fused multiply-add, so both backends hold bit-identical positions and cash.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_trading_env.backend import Backend, CuriosityWeights, StepParams
from gpu_trading_env.config import AUTORESET_CODES
from gpu_trading_env.philox import STREAM_START_BAR, philox4x32, split_u64, uniform_index
from gpu_trading_env.state import (
    BARRIER_ARMED,
    BARRIER_FIRED,
    BARRIER_NONE,
    LABEL_NONE,
    LABEL_PROFIT,
    LABEL_STOP,
    RUNNING,
    WAIT_TERMINATED,
    WAIT_TRUNCATED,
    EnvState,
    StepOutputs,
)

SAME_STEP, NEXT_STEP, DISABLED = (AUTORESET_CODES[m] for m in AUTORESET_CODES)
START_CACHE = 64
ENTROPY_TABLE_MAX_WINDOW = 512
PENALTY_TABLE_MAX_WINDOW = 128


def draw_start_bars(
    seed: np.ndarray, env_id: np.ndarray, counter: np.ndarray, lo: np.ndarray, n_starts: np.ndarray
) -> np.ndarray:
    """Start bar of an episode: ``lo + uniform_index(philox(counter, env, STREAM).x0, n_starts)``.

    Keyed by the env's seed; the counter is the number of draws the env has taken, so the k-th
    episode of env i starts at the same bar on every backend and in every run.
    """
    k0, k1 = split_u64(seed)
    c0, c1 = split_u64(counter)
    x0, _, _, _ = philox4x32(c0, c1, env_id.astype(np.uint32), STREAM_START_BAR, k0, k1)
    return lo + uniform_index(x0, n_starts)


def observation(
    padded_features: np.ndarray,
    close: np.ndarray,
    p: StepParams,
    bar: np.ndarray,
    cash: np.ndarray,
    position: np.ndarray,
    out: np.ndarray,
    px: np.ndarray | None = None,
    value: np.ndarray | None = None,
) -> np.ndarray:
    """Observation rows into ``out`` float32 [n, F+3]: features of ``bar``, then
    value / initial capital, position / (initial capital / close), spread.

    ``padded_features`` is [T, F+3]: the features, two spare columns and the spread, so whole
    rows are gathered into ``out`` in one contiguous take. Callers that already hold
    ``px = close[bar]`` and ``value = cash + position * px`` pass them (same bits, fewer ops).
    """
    n_f = padded_features.shape[1] - 3
    np.take(padded_features, bar, axis=0, out=out, mode="clip")
    if px is None:
        px = close[bar]
    if value is None:
        value = cash + position * px
    c0 = p.initial_capital
    out[:, n_f] = value / c0
    out[:, n_f + 1] = position / (c0 / px)
    return out


def curiosity_bonus(
    w: CuriosityWeights, obs0: np.ndarray, obs1: np.ndarray, category: np.ndarray, p: StepParams
) -> np.ndarray:
    """ICM forward-model bonus, float32 [n]: min(MSE(f(s[:D], onehot), s'[:D]), cap) * scale."""
    d = p.curiosity_state_dims
    n = obs0.shape[0]
    x = np.zeros((n, d + 3), dtype=np.float32)
    x[:, :d] = obs0[:, :d]
    x[np.arange(n), d + category] = 1.0
    h = x @ w.w1.T + w.b1
    h = np.where(h > 0, h, np.float32(0.01) * h)
    pred = h @ w.w2.T + w.b2
    err = pred - obs1[:, :d]
    mse = np.mean(err * err, axis=1, dtype=np.float32)
    return np.minimum(mse, np.float32(p.curiosity_max_reward)) * np.float32(p.curiosity_scale)


class NumpyBackend(Backend):
    """Reference backend on NumPy arrays (float64 money, float32 observations)."""

    xp = np
    device = "cpu"

    def __init__(self, data: Any, config: Any, num_envs: int) -> None:
        super().__init__(data, config, num_envs)
        self.features = np.zeros((data.n_bars, self.obs_dim), dtype=np.float32)
        self.features[:, : self.n_features] = data.features
        self.features[:, -1] = self.params.spread  # the constant last observation feature
        self.open = np.ascontiguousarray(data.open, dtype=np.float64)
        self.close = np.ascontiguousarray(data.close, dtype=np.float64)
        self._env_ids = np.arange(self.num_envs, dtype=np.int64)
        # Start bars for the next START_CACHE draws of every env, filled in one vectorised Philox
        # call: the draws are a pure function of (seed, env, counter), so caching changes nothing.
        self._start_cache = np.zeros((self.num_envs, START_CACHE), dtype=np.int64)
        self._cache_base = np.zeros(self.num_envs, dtype=np.uint64)
        self._cache_valid = False
        n = self.config.diversity_window
        # -(h/n) log2(h/n) for n, h in 0..window: entropy = T[n,h0] + T[n,h1] + T[n,h2] rounds
        # exactly as 0 - a0 - a1 - a2 does (x - y == x + (-y) in IEEE arithmetic), as the kernel sums.
        self._entropy_table = None
        if n <= ENTROPY_TABLE_MAX_WINDOW:
            nn = np.maximum(np.arange(n + 1, dtype=np.float64)[:, None], 1.0)
            pr = np.arange(n + 1, dtype=np.float64)[None, :] / nn
            with np.errstate(divide="ignore", invalid="ignore"):
                self._entropy_table = np.where(
                    pr > 0, -(pr * np.log2(np.where(pr > 0, pr, 1.0))), 0.0
                ).ravel()
        self._penalised = None
        if n <= PENALTY_TABLE_MAX_WINDOW:
            # penalised[count, h0, h1] from the same entropy sums (h2 = count - h0 - h1).
            w1 = n + 1
            cnt, g0, g1 = np.meshgrid(np.arange(w1), np.arange(w1), np.arange(w1), indexing="ij")
            g2 = np.clip(cnt - g0 - g1, 0, n)
            tab = self._entropy_table
            entropy = tab[cnt * w1 + g0] + tab[cnt * w1 + g1] + tab[cnt * w1 + g2]
            self._penalised = (
                (cnt >= self.config.diversity_min_entries)
                & (entropy < self.config.diversity_threshold_bits)
            ).ravel()
        self._obs_scratch = np.zeros((self.num_envs, self.obs_dim), dtype=np.float32)

    # ---------------------------------------------------------------- contract
    def seed(self, seeds: np.ndarray, mask: np.ndarray) -> None:
        mask = np.asarray(mask, dtype=bool)
        self.state.seed[mask] = np.asarray(seeds, dtype=np.uint64)[mask]
        self.state.episode_count[mask] = 0
        self._cache_valid = False

    def _draw_starts(self, envs: np.ndarray) -> np.ndarray:
        """Start bars of the next draw of ``envs`` (global indices); advances their counters."""
        s = self.state
        offset = (s.episode_count[envs] - self._cache_base[envs]).astype(np.int64)
        if not self._cache_valid or offset.max() >= START_CACHE:
            all_envs = self._env_ids
            base = s.episode_count.copy()
            counters = base[:, None] + np.arange(START_CACHE, dtype=np.uint64)[None, :]
            lo, hi = s.lo[:, None], s.hi[:, None]
            self._start_cache[...] = draw_start_bars(
                s.seed[:, None],
                all_envs[:, None],
                counters,
                lo,
                hi - lo - self.params.episode_length,
            )
            self._cache_base[...] = base
            self._cache_valid = True
            offset = (s.episode_count[envs] - base[envs]).astype(np.int64)
        s.episode_count[envs] += np.uint64(1)
        return self._start_cache[envs, offset]

    def observe(self) -> np.ndarray:
        s = self.state
        out = np.empty((self.num_envs, self.obs_dim), dtype=np.float32)
        return observation(self.features, self.close, self.params, s.bar, s.cash, s.position, out)

    def reset(self, mask: np.ndarray, start_index: np.ndarray) -> np.ndarray:
        idx = np.flatnonzero(mask)
        if idx.size:
            self._reset_rows(idx, np.asarray(start_index, dtype=np.int64)[idx])
        return self.observe()

    def set_curiosity_weights(self, weights: CuriosityWeights | None) -> None:
        if weights is not None:
            weights = CuriosityWeights(
                *(
                    np.ascontiguousarray(np.asarray(getattr(weights, k)), dtype=np.float32)
                    for k in ("w1", "b1", "w2", "b2")
                )
            )
        super().set_curiosity_weights(weights)

    def step(self, actions: np.ndarray) -> StepOutputs:
        s, p, out = self.state, self.params, self._next_outputs()
        mode = p.autoreset_mode
        waiting = s.done_flag != RUNNING
        any_waiting = bool(waiting.any())
        if not any_waiting:
            self._transition(s, actions, self._env_ids, out, rows=None)
        else:
            if mode == NEXT_STEP:
                # Envs that ended last step start anew; their actions are ignored this step.
                self._reset_rows(np.flatnonzero(waiting), np.full(int(waiting.sum()), -1))
            active = np.flatnonzero(~waiting)
            if active.size:
                sub = _take_rows(s, active)
                self._transition(sub, actions[active], active, out, rows=active)
                _put_rows(s, active, sub)
            quiet = np.flatnonzero(waiting)
            obs = self.observe()
            out.obs[quiet] = obs[quiet]
            out.reward[quiet] = 0.0
            out.components[quiet] = 0.0
            out.portfolio_value[quiet] = (s.cash + s.position * self.close[s.bar])[quiet]
            out.position[quiet] = s.position[quiet]
            out.barrier_label[quiet] = LABEL_NONE
            out.episode_return[quiet] = 0.0
            out.episode_length[quiet] = 0
            if mode == DISABLED:
                out.terminated[quiet] = s.done_flag[quiet] == WAIT_TERMINATED
                out.truncated[quiet] = s.done_flag[quiet] == WAIT_TRUNCATED
            else:
                out.terminated[quiet] = False
                out.truncated[quiet] = False

        done = np.logical_or(out.terminated, out.truncated, out=out.done)
        if mode == SAME_STEP:
            ended = np.flatnonzero(done)
            if ended.size:
                out.final_obs[ended] = out.obs[ended]
                self._reset_rows(ended, np.full(ended.size, -1))
                obs = observation(
                    self.features,
                    self.close,
                    p,
                    s.bar[ended],
                    s.cash[ended],
                    s.position[ended],
                    np.empty((ended.size, self.obs_dim), dtype=np.float32),
                )
                out.obs[ended] = obs
        else:
            fresh = done & (s.done_flag == RUNNING)
            s.done_flag[fresh & out.terminated] = WAIT_TERMINATED
            s.done_flag[fresh & ~out.terminated] = WAIT_TRUNCATED
        return out

    # ---------------------------------------------------------------- internals
    def _reset_rows(self, idx: np.ndarray, start_index: np.ndarray) -> None:
        s, p = self.state, self.params
        lo = s.lo[idx]
        draw = start_index < 0
        start = lo + start_index
        if draw.any():
            start[draw] = self._draw_starts(idx[draw])
        s.bar[idx] = start
        s.step_in_episode[idx] = 0
        s.cash[idx] = p.initial_capital
        s.position[idx] = 0.0
        s.costs[idx] = 0.0
        s.entry_price[idx] = 0.0
        s.entry_bar[idx] = 0
        s.barrier_status[idx] = BARRIER_NONE
        s.div_cursor[idx] = 0
        s.div_count[idx] = 0
        s.div_hist[:, idx] = 0
        s.done_flag[idx] = RUNNING
        s.episode_return[idx] = 0.0

    def _transition(
        self, s: EnvState, a: np.ndarray, env_ids: np.ndarray, out: StepOutputs, rows: Any
    ) -> None:
        """Advance the envs of ``s`` by one bar; write outputs at ``rows`` (None = all)."""
        p = self.params
        n = s.bar.shape[0]
        t = s.bar
        t1 = t + 1
        close_t = self.close[t]
        close_1 = self.close[t1]
        fill = self.open[t1] if p.fill_next_open else close_t
        exposure = p.exposure[a]
        rate = p.cost_rate[a]
        cat = p.category[a]
        c0 = p.initial_capital

        pos0 = s.position
        cash0 = s.cash
        value0 = cash0 + pos0 * close_t
        pos_feat = pos0 / (c0 / close_t)
        need_obs0 = self.curiosity is not None
        if need_obs0:
            obs0 = observation(
                self.features,
                self.close,
                p,
                t,
                cash0,
                pos0,
                np.empty((n, self.obs_dim), np.float32),
            )

        # --- trade (ENV_SPEC "Portfolio")
        # With fill="close", value_pre is value0's expression: the same bits, computed once.
        value_pre = cash0 + pos0 * fill if p.fill_next_open else value0
        # reserve_frac * value_pre is +-0.0 when reserve_frac == 0, which no result below
        # can tell from the scalar 0.0.
        reserve = p.reserve_frac * value_pre if p.reserve_frac > 0.0 else 0.0
        target = exposure * p.max_position
        delta = target - pos0
        if p.reserve_frac > 0.0:
            capped = (delta > 0.0) & (cash0 - delta * fill < reserve)
            affordable = np.floor(np.maximum(cash0 - reserve, 0.0) / fill)
            delta = np.where(capped, np.minimum(delta, affordable), delta)
        cost = np.abs(delta) * fill * rate
        cash1 = cash0 - delta * fill - cost
        pos1 = pos0 + delta
        reversal = ((pos0 > 0.0) & (target < 0.0)) | ((pos0 < 0.0) & (target > 0.0))
        if reversal.any():
            close_cost = np.abs(pos0) * fill * rate
            cash_c = cash0 + pos0 * fill - close_cost
            units = np.minimum(
                np.floor(np.maximum(cash_c - reserve, 0.0) / (fill * (1.0 + rate))), np.abs(target)
            )
            new_pos = np.copysign(units, target)  # target != 0 on a reversal
            open_cost = units * fill * rate
            r = np.flatnonzero(reversal)
            cash1[r] = (cash_c - new_pos * fill - open_cost)[r]
            pos1[r] = new_pos[r]
            cost[r] = (close_cost + open_cost)[r]

        # --- triple barrier (ENV_SPEC "Triple barrier")
        opened = (reversal | (pos0 == 0.0)) & (pos1 != 0.0)
        flat = pos1 == 0.0
        keep = ~(opened | flat)
        status = s.barrier_status * keep  # int8: 0 where opened or flat
        status += opened  # BARRIER_ARMED == 1
        entry = np.where(opened, fill, s.entry_price * keep)  # entry prices are > 0
        entry_bar = np.where(opened, t, s.entry_bar)
        if p.barriers:
            armed = status == BARRIER_ARMED
            is_long = pos1 > 0.0
            profit_hit = armed & np.where(
                is_long,
                fill >= entry * (1.0 + p.profit_frac),
                fill <= entry * (1.0 - p.profit_frac),
            )
            stop_hit = (
                armed
                & ~profit_hit
                & np.where(
                    is_long,
                    fill <= entry * (1.0 - p.stop_frac),
                    fill >= entry * (1.0 + p.stop_frac),
                )
            )
            time_hit = armed & ~profit_hit & ~stop_hit & (t >= entry_bar + p.max_holding_bars)
            # LABEL_PROFIT = 1, LABEL_STOP = -1, LABEL_TIME = 2, from the bool masks' bytes.
            label = profit_hit.view(np.int8) - stop_hit.view(np.int8) + 2 * time_hit.view(np.int8)
            status[profit_hit | stop_hit | time_hit] = BARRIER_FIRED
        else:
            label = np.zeros(n, dtype=np.int8)

        # --- action diversity (ENV_SPEC "Diversity")
        window = p.diversity_window
        cursor, count = s.div_cursor, s.div_count
        n_all = s.div_hist.shape[1]
        ring = s.div_ring.reshape(-1)
        hist = s.div_hist.reshape(-1)
        rows_n = np.arange(n) if n != self.num_envs else self._env_ids
        slot = cursor.astype(np.int64) * n_all + rows_n
        full = count >= window
        if full.any():
            hist[ring[slot[full]].astype(np.int64) * n_all + np.flatnonzero(full)] -= 1
        ring[slot] = cat
        hist[cat.astype(np.int64) * n_all + rows_n] += 1
        count = np.minimum(count + 1, window)
        h0, h1, h2 = s.div_hist
        if self._penalised is not None:
            # The ring's (count, h0, h1) fixes h2, so the whole penalty decision is one lookup.
            w1 = window + 1
            penalised = self._penalised[(count * w1 + h0) * w1 + h1]
        else:
            if self._entropy_table is not None:
                row = count * (window + 1)
                tab = self._entropy_table
                entropy = tab[row + h0] + tab[row + h1] + tab[row + h2]
            else:
                nf = count.astype(np.float64)
                entropy = np.zeros(n, dtype=np.float64)
                for h in (h0, h1, h2):
                    pr = h / nf
                    entropy -= np.where(h > 0, pr * np.log2(np.where(h > 0, pr, 1.0)), 0.0)
            penalised = (count >= p.diversity_min_entries) & (entropy < p.diversity_threshold_bits)
        diversity = np.where(penalised, -p.diversity_penalty, 0.0)

        # --- mark to market, reward (ENV_SPEC "Reward")
        value1 = cash1 + pos1 * close_1
        pnl = (value1 - value0) / value0
        barrier_scale = np.where(
            label == LABEL_PROFIT,
            p.barrier_half_scale,
            np.where(label == LABEL_STOP, -p.barrier_half_scale, 0.0),
        )
        barrier = pnl * barrier_scale
        excess = np.abs(pos_feat) - p.risk_threshold
        risk = np.minimum(-(p.risk_penalty_scale * excess), 0.0)  # = -(scale*excess) if excess > 0

        # --- commit state
        steps = s.step_in_episode + 1
        s.bar[...] = t1
        s.step_in_episode[...] = steps
        s.cash[...] = cash1
        s.position[...] = pos1
        s.costs[...] = s.costs + cost
        s.entry_price[...] = entry
        s.entry_bar[...] = entry_bar
        s.barrier_status[...] = status
        cursor += 1
        cursor[cursor == window] = 0
        s.div_count[...] = count

        sel = slice(None) if rows is None else rows
        obs1 = observation(
            self.features,
            self.close,
            p,
            t1,
            cash1,
            pos1,
            out.obs if rows is None else self._obs_scratch[:n],
            px=close_1,
            value=value1,
        )
        curiosity = np.zeros(n, dtype=np.float64)
        if need_obs0:
            curiosity = curiosity_bonus(self.curiosity, obs0, obs1, cat, p).astype(np.float64)
        reward = pnl + barrier + risk + diversity + curiosity
        s.episode_return[...] = s.episode_return + reward

        # Profit (1) and stop (-1) are the odd labels; time (2) and none (0) are even.
        terminated = (label & 1).view(np.bool_) | (value1 <= 0.0)
        truncated = ~terminated & ((steps >= p.episode_length) | (t1 + 1 >= s.hi))
        ended = terminated | truncated

        if rows is not None:
            out.obs[rows] = obs1
        out.reward[sel] = reward
        out.terminated[sel] = terminated
        out.truncated[sel] = truncated
        comp = out.components if rows is None else np.empty((n, 5), dtype=np.float32)
        comp[:, 0] = pnl
        comp[:, 1] = barrier
        comp[:, 2] = risk
        comp[:, 3] = diversity
        comp[:, 4] = curiosity
        if rows is not None:
            out.components[rows] = comp
        out.portfolio_value[sel] = value1
        out.position[sel] = pos1
        out.barrier_label[sel] = label
        out.episode_return[sel] = s.episode_return * ended
        out.episode_length[sel] = steps * ended


def _take_rows(s: EnvState, idx: np.ndarray) -> EnvState:
    values = {}
    for name, arr in vars(s).items():
        # C order matters: the step updates the ring and histogram through flat views.
        values[name] = (
            np.ascontiguousarray(arr[:, idx]) if name in ("div_ring", "div_hist") else arr[idx]
        )
    return EnvState(**values)


def _put_rows(s: EnvState, idx: np.ndarray, sub: EnvState) -> None:
    for name, arr in vars(s).items():
        if name in ("div_ring", "div_hist"):
            arr[:, idx] = getattr(sub, name)
        else:
            arr[idx] = getattr(sub, name)
