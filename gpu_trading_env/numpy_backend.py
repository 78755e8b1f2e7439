"""The NumPy reference backend: the executable form of ``docs/ENV_SPEC.md``.

Every formula of a step is written once here, vectorised over envs. The CUDA kernel
(``kernels/trading_step.cu``) performs the same float64 operations in the same order, compiled
without fused multiply-add, so both backends hold bit-identical positions and cash.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_trading_env.backend import Backend, CuriosityWeights, StepParams, check_curiosity_weights
from gpu_trading_env.config import AUTORESET_CODES
from gpu_trading_env.philox import STREAM_START_BAR, philox4x32, split_u64, uniform_index
from gpu_trading_env.state import (
    BARRIER_ARMED,
    BARRIER_NONE,
    LABEL_NONE,
    OUTPUT_FIELDS,
    RUNNING,
    WAIT_TERMINATED,
    WAIT_TRUNCATED,
    EnvState,
    StepOutputs,
    allocate_outputs,
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
        px = close.take(bar)
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
        # Target position per instrument and action ("units" sizing): exposure[a] *
        # max_position[k], the kernel's product. Env i trades instrument i % I.
        self._target = self.params.exposure[None, :] * self.params.max_position[:, None]
        self._n_inst = int(self.params.max_position.shape[0])

    # ---------------------------------------------------------------- contract
    def seed(self, seeds: np.ndarray, mask: np.ndarray) -> None:
        mask = np.asarray(mask, dtype=bool)
        self.state.seed[mask] = np.asarray(seeds, dtype=np.uint64)[mask]
        self.state.episode_count[mask] = 0
        self._cache_valid = False

    def _draw_starts(self, envs: np.ndarray) -> np.ndarray:
        """Start bars of the next draw of ``envs`` (global indices); advances their counters."""
        s = self.state
        count = s.episode_count[envs]
        offset = (count - self._cache_base[envs]).astype(np.int64)
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
            offset = (count - base[envs]).astype(np.int64)
        s.episode_count[envs] = count + np.uint64(1)
        return self._start_cache.reshape(-1).take(envs * START_CACHE + offset)

    def observe(self) -> np.ndarray:
        s = self.state
        out = np.empty((self.num_envs, self.obs_dim), dtype=np.float32)
        return observation(self.features, self.close, self.params, s.bar, s.cash, s.position, out)

    def reset(self, mask: np.ndarray, start_index: np.ndarray) -> np.ndarray:
        idx = np.flatnonzero(mask)
        if idx.size:
            start_index = np.asarray(start_index, dtype=np.int64)[idx]
            start = self.state.lo[idx] + start_index
            draw = start_index < 0
            if draw.any():
                start[draw] = self._draw_starts(idx[draw])
            self._reset_rows(idx, start)
        return self.observe()

    def set_curiosity_weights(self, weights: CuriosityWeights | None) -> None:
        if weights is not None:
            check_curiosity_weights(
                weights, self.config.curiosity_state_dims, self.config.curiosity_hidden
            )
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
        px = value = None
        if not s.done_flag.any():  # every env is RUNNING (0)
            px, value = self._transition(s, actions, out)
            if mode == SAME_STEP:
                ended = out.done.nonzero()[0]
                if ended.size:
                    out.final_obs[ended] = observation(
                        self.features,
                        self.close,
                        p,
                        s.bar[ended],
                        s.cash[ended],
                        s.position[ended],
                        np.empty((ended.size, self.obs_dim), dtype=np.float32),
                        px=px[ended],
                        value=value[ended],
                    )
                    self._reset_rows(ended)
                    # The new episodes' price and value, by observation()'s own expressions.
                    px[ended] = self.close.take(s.bar[ended])
                    value[ended] = s.cash[ended] + s.position[ended] * px[ended]
        else:
            waiting = s.done_flag != RUNNING
            if mode == NEXT_STEP:
                # Envs that ended last step start anew; their actions are ignored this step.
                self._reset_rows(waiting.nonzero()[0])
            active = (~waiting).nonzero()[0]
            if active.size:
                sub = _take_rows(s, active)
                # obs_dim 0: the observations of all envs are gathered below.
                sub_out = allocate_outputs(np, active.size, 0)
                self._transition(sub, actions[active], sub_out, rows=active)
                _put_rows(s, active, sub)
                for name in OUTPUT_FIELDS:
                    if name not in ("obs", "final_obs"):
                        getattr(out, name)[active] = getattr(sub_out, name)
            quiet = waiting.nonzero()[0]
            out.reward[quiet] = 0.0
            out.components[quiet] = 0.0
            px_quiet = self.close.take(s.bar[quiet])
            out.portfolio_value[quiet] = s.cash[quiet] + s.position[quiet] * px_quiet
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
            np.logical_or(out.terminated, out.truncated, out=out.done)

        if mode != SAME_STEP:
            fresh = out.done & (s.done_flag == RUNNING)
            s.done_flag[fresh & out.terminated] = WAIT_TERMINATED
            s.done_flag[fresh & ~out.terminated] = WAIT_TRUNCATED
        # One gather for every env, after any reset: for an env that stepped, the state holds
        # (t+1, cash', pos'), so this is obs(t+1); otherwise the first or the frozen observation.
        observation(
            self.features, self.close, p, s.bar, s.cash, s.position, out.obs, px=px, value=value
        )
        return out

    # ---------------------------------------------------------------- internals
    def _reset_rows(self, idx: np.ndarray, start: np.ndarray | None = None) -> None:
        """Start new episodes for envs ``idx`` at global bars ``start`` (None: drawn)."""
        s, p = self.state, self.params
        s.bar[idx] = self._draw_starts(idx) if start is None else start
        s.step_in_episode[idx] = 0
        s.cash[idx] = p.initial_capital
        s.position[idx] = 0.0
        s.costs[idx] = 0.0
        s.entry_price[idx] = 0.0
        s.entry_bar[idx] = 0
        s.barrier_status[idx] = BARRIER_NONE
        s.div_cursor[idx] = 0
        s.div_count[idx] = 0
        for hist in s.div_hist:  # a 1-D scatter per category row beats one [:, idx] scatter
            hist[idx] = 0
        s.done_flag[idx] = RUNNING
        s.episode_return[idx] = 0.0

    def _transition(
        self, s: EnvState, a: np.ndarray, out: StepOutputs, rows: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Advance the envs of ``s`` by one bar and fill every field of ``out`` (the same rows)
        except ``obs`` and ``final_obs``, which the caller gathers after any reset. ``rows``:
        the global env ids of a state from ``_take_rows`` (None: ``s`` holds every env).

        Returns new arrays ``close[t+1]`` and the value after the step, the observation's inputs.
        State fields are updated in place once nothing reads their old values, and arrays are
        dropped as soon as they are dead: at 4096 envs the step is bound by memory traffic, and
        memory that is reused soon is still in cache.
        """
        p = self.params
        n = s.bar.shape[0]
        c0 = p.initial_capital
        t = s.bar
        t1 = t + 1
        close_t = self.close.take(t)
        close_1 = self.close.take(t1)
        fill = self.open.take(t1) if p.fill_next_open else close_t
        cat = p.category.take(a)
        pos0 = s.position
        cash0 = s.cash
        value0 = cash0 + pos0 * close_t
        # --- risk (ENV_SPEC "Risk"), from the position feature before the trade
        excess = np.abs(pos0 / (c0 / close_t)) - p.risk_threshold
        risk = np.minimum(-(p.risk_penalty_scale * excess), 0.0)  # = -(scale*excess) if excess > 0
        del excess
        obs0 = None
        if self.curiosity is not None:
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
        # --- position sizing (ENV_SPEC "Position sizing")
        if p.sizing_equity:
            # Notional at full exposure = leverage x equity at the fill price (none when <= 0).
            target = p.exposure.take(a) * (p.leverage * np.maximum(value_pre, 0.0) / fill)
        elif self._n_inst == 1:
            target = self._target[0].take(a)
        else:
            env_ids = self._env_ids if rows is None else rows
            target = self._target[env_ids % self._n_inst, a]
        del value_pre
        cash1, pos1, cost, reversal = _trade(
            p, target, p.cost_rate.take(a), fill, cash0, pos0, reserve
        )
        del target
        del reserve
        opened = (reversal | (pos0 == 0.0)) & (pos1 != 0.0)
        del reversal
        # Nothing below reads the cash and position before the trade.
        s.cash[...] = cash1
        s.position[...] = pos1
        s.costs += cost
        del cash0, pos0, cash1, cost  # cash0 and pos0 are views of the updated state

        # --- triple barrier (ENV_SPEC "Triple barrier")
        closing_sign, label, closing = _barrier(p, s, t, fill, pos1, opened)
        del opened

        # --- action diversity (ENV_SPEC "Diversity")
        diversity = self._diversity(s, cat, rows)

        # --- mark to market, reward (ENV_SPEC "Reward"), summed in the spec's order
        value1 = s.cash + pos1 * close_1
        pnl = (value1 - value0) / value0
        del value0
        # barrier_scale: +-barrier_half_scale on a profit or stop label, else 0 (+-1 * h is exact).
        barrier = pnl * (closing_sign * p.barrier_half_scale)
        comp = out.components
        reward = pnl + barrier
        comp[:, 0] = pnl
        comp[:, 1] = barrier
        del pnl, barrier
        reward += risk
        comp[:, 2] = risk
        del risk
        reward += diversity
        comp[:, 3] = diversity
        del diversity
        if obs0 is not None:
            obs1 = observation(
                self.features,
                self.close,
                p,
                t1,
                s.cash,
                pos1,
                self._obs_scratch[:n],
                px=close_1,
                value=value1,
            )
            curiosity = curiosity_bonus(self.curiosity, obs0, obs1, cat, p).astype(np.float64)
        else:
            curiosity = 0.0  # the scalar 0.0 adds as a zero array does (-0.0 + 0.0 is 0.0)
        reward += curiosity
        comp[:, 4] = curiosity
        out.reward[...] = reward
        s.episode_return += reward
        del reward

        steps = s.step_in_episode
        steps += 1
        terminated = np.less_equal(value1, 0.0, out=out.terminated)
        if closing is not None:
            terminated |= closing  # profit and stop end the episode, time does not
        truncated = np.greater_equal(steps, p.episode_length, out=out.truncated)
        truncated |= t1 + 1 >= s.hi
        truncated &= ~terminated
        ended = np.logical_or(terminated, truncated, out=out.done)
        s.bar[...] = t1

        out.portfolio_value[...] = value1
        out.position[...] = pos1
        out.barrier_label[...] = label
        np.multiply(s.episode_return, ended, out=out.episode_return)
        np.multiply(steps, ended, out=out.episode_length)
        return close_1, value1

    def _diversity(self, s: EnvState, cat: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """Push ``cat`` into the rings of ``s`` (in place); the diversity reward component.

        ``rows``: the envs' columns in ``s.div_ring`` and ``s.div_hist``, which ``_take_rows``
        leaves whole (None: ``s`` holds every env).
        """
        p = self.params
        window = p.diversity_window
        n = cat.shape[0]
        n_all = s.div_hist.shape[1]
        ids = self._env_ids if rows is None else rows
        # Flat indices into the [window, N] ring and the [3, N] histogram: row * N + env.
        ring = s.div_ring.reshape(-1)
        hist = s.div_hist.reshape(-1)
        slot = np.multiply(s.div_cursor, n_all, dtype=np.int64)
        slot += ids
        full = (s.div_count >= window).nonzero()[0]
        if full.size:
            # The entry at the cursor is the oldest one; it leaves a full ring.
            dropped = ring.take(slot.take(full)).astype(np.int64)
            hist[dropped * n_all + ids.take(full)] -= 1
        ring[slot] = cat
        del slot
        cell = np.multiply(cat, n_all, dtype=np.int64)
        cell += ids
        hist[cell] += 1
        if rows is None:
            h0, h1, h2 = s.div_hist
        else:
            h0, h1, h2 = (h.take(rows) for h in s.div_hist)
        cursor = s.div_cursor
        cursor += 1
        cursor[cursor == window] = 0
        count = s.div_count
        count += 1
        np.minimum(count, window, out=count)
        if self._penalised is not None:
            # The ring's (count, h0, h1) fixes h2, so the whole penalty decision is one lookup.
            w1 = window + 1
            penalised = self._penalised.take((count * w1 + h0) * w1 + h1)
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
        diversity = np.zeros(n)  # a scatter: np.where costs several times more inside a step
        diversity[penalised.nonzero()[0]] = -p.diversity_penalty
        return diversity


def _trade(
    p: StepParams,
    target: np.ndarray,
    rate: np.ndarray,
    fill: np.ndarray,
    cash: np.ndarray,
    pos: np.ndarray,
    reserve: np.ndarray | float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cash, position and cost after trading towards ``target`` (ENV_SPEC "Trade"), and
    where the trade was a reversal."""
    delta = target - pos
    if p.reserve_frac > 0.0:
        capped = (delta > 0.0) & (cash - delta * fill < reserve)
        affordable = np.floor(np.maximum(cash - reserve, 0.0) / fill)
        delta = np.where(capped, np.minimum(delta, affordable), delta)
    cost = np.abs(delta) * fill * rate
    cash1 = cash - delta * fill - cost
    pos1 = pos + delta
    del delta
    reversal = ((pos > 0.0) & (target < 0.0)) | ((pos < 0.0) & (target > 0.0))
    r = reversal.nonzero()[0]
    if r.size:
        # Reversals, on their rows only (elementwise, so the same bits as on all rows).
        fill_r, rate_r, pos_r, target_r = fill[r], rate[r], pos[r], target[r]
        reserve_r = reserve[r] if p.reserve_frac > 0.0 else 0.0
        close_cost = np.abs(pos_r) * fill_r * rate_r
        cash_c = cash[r] + pos_r * fill_r - close_cost
        units = np.minimum(
            np.floor(np.maximum(cash_c - reserve_r, 0.0) / (fill_r * (1.0 + rate_r))),
            np.abs(target_r),
        )
        new_pos = np.copysign(units, target_r)  # target != 0 on a reversal
        open_cost = units * fill_r * rate_r
        cash1[r] = cash_c - new_pos * fill_r - open_cost
        pos1[r] = new_pos
        cost[r] = close_cost + open_cost
    return cash1, pos1, cost, reversal


def _barrier(
    p: StepParams,
    s: EnvState,
    t: np.ndarray,
    fill: np.ndarray,
    pos1: np.ndarray,
    opened: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Set, keep or clear the barriers of ``s`` (in place) and check them at ``fill``.

    Returns ``(profit - stop, label, profit | stop)`` as int8, int8 and bool arrays (the last
    None with barriers off).
    """
    flat = pos1 == 0.0
    keep = ~(opened | flat)
    status = s.barrier_status
    status *= keep  # 0 where opened or flat
    status += opened  # BARRIER_ARMED == 1
    # Scatters at the opened rows: np.where costs several times more inside a step.
    o = opened.nonzero()[0]
    entry = s.entry_price
    entry *= keep  # 0 where flat; entry prices are > 0
    entry[o] = fill[o]
    entry_bar = s.entry_bar
    entry_bar[o] = t[o]
    if not p.barriers:
        zeros = np.zeros(t.shape[0], dtype=np.int8)
        return zeros, zeros, None
    armed = status == BARRIER_ARMED
    is_long = pos1 > 0.0
    is_short = ~is_long
    # (long & x) | (short & y) is np.where(is_long, x, y) on bools, without np.where.
    profit_hit = armed & (
        (is_long & (fill >= entry * (1.0 + p.profit_frac)))
        | (is_short & (fill <= entry * (1.0 - p.profit_frac)))
    )
    unhit = armed & ~profit_hit
    stop_hit = unhit & (
        (is_long & (fill <= entry * (1.0 - p.stop_frac)))
        | (is_short & (fill >= entry * (1.0 + p.stop_frac)))
    )
    time_hit = unhit & ~stop_hit & (t >= entry_bar + p.max_holding_bars)
    # LABEL_PROFIT = 1, LABEL_STOP = -1, LABEL_TIME = 2, from the bool masks' bytes.
    closing_sign = profit_hit.view(np.int8) - stop_hit.view(np.int8)
    label = closing_sign + 2 * time_hit.view(np.int8)
    closing = profit_hit | stop_hit
    status += closing | time_hit  # a hit needs BARRIER_ARMED (1): +1 is BARRIER_FIRED
    return closing_sign, label, closing


def _take_rows(s: EnvState, idx: np.ndarray) -> EnvState:
    """The envs ``idx`` of ``s`` as a new state. The ring and the histogram stay the whole
    arrays (shared, not copied): ``_diversity`` addresses their columns by ``idx``."""
    return EnvState(
        **{
            name: arr if name in ("div_ring", "div_hist") else arr[idx]
            for name, arr in vars(s).items()
        }
    )


def _put_rows(s: EnvState, idx: np.ndarray, sub: EnvState) -> None:
    for name, arr in vars(s).items():
        if name not in ("div_ring", "div_hist"):
            arr[idx] = getattr(sub, name)
