"""The NumPy backend: the env step on the CPU, the reference the CUDA kernel matches.

One of the step's two implementations (the other is the CUDA kernel, ``kernels/trading_env.cuh``
and ``kernels/trading_step.cu``, compiled without fused multiply-add so that both compute the
same float64 operations in the same order and agree bit for bit). It is tuned for the CPU:
in-place updates, lookup tables for the diversity entropy and a cache of start-bar draws. The
reward's parts are :mod:`gpu_trading_env.core.reward`'s functions; ``tests/step_oracle.py``
states the rest of the step plainly and ``tests/test_reference_step.py`` holds this backend
bit-identical to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_trading_env.backends.base import (
    Backend,
    CuriosityWeights,
    check_action_layout,
    check_curiosity_weights,
    check_output_arrays,
)
from gpu_trading_env.backends.numpy_step_parts import (
    check_barriers,
    draw_start_bars,
    observation,
    put_rows,
    reset_rows,
    seed_rows,
    take_rows,
    trade,
)
from gpu_trading_env.core import reward
from gpu_trading_env.core.constants import (
    LABEL_NONE,
    MODE_DISABLED,
    MODE_NEXT_STEP,
    MODE_SAME_STEP,
    RUNNING,
    WAIT_TERMINATED,
    WAIT_TRUNCATED,
)
from gpu_trading_env.core.state import (
    OUTPUT_FIELDS,
    EnvState,
    StepOutputs,
    allocate_outputs,
)

SAME_STEP, NEXT_STEP, DISABLED = MODE_SAME_STEP, MODE_NEXT_STEP, MODE_DISABLED
# The step sets done_flag from the bytes of terminated and truncated: 2 * truncated | terminated.
assert (RUNNING, WAIT_TERMINATED, WAIT_TRUNCATED) == (0, 1, 2)
START_CACHE = 64
START_CHUNK_ROWS = 256  # 16,384 draws: Philox's uint64 temporaries are 128 KB each
ENTROPY_TABLE_MAX_WINDOW = 512
PENALTY_TABLE_MAX_WINDOW = 128


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
        # Start bars for the next START_CACHE draws of every env, filled by vectorised Philox
        # calls: the draws are a pure function of (seed, env, counter), so caching changes nothing.
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
        # Offset of each action's category row in the flattened [3, N] diversity histogram.
        self._category_row = self.params.category.astype(np.int64) * self.num_envs

    @property
    def unit_targets(self) -> np.ndarray:
        """float64 [I, A]: the position action ``a`` targets on instrument ``k`` with
        ``sizing="units"`` (``exposure[a] * max_position[k]``)."""
        return self._target

    @property
    def penalised_table(self) -> np.ndarray | None:
        """bool [(W+1)^3]: whether a diversity ring of ``count`` entries holding ``h0`` shorts
        and ``h1`` flats is penalised, at ``(count * (W+1) + h0) * (W+1) + h1``; None when the
        window W is above ``PENALTY_TABLE_MAX_WINDOW`` (the entropy is computed instead)."""
        return self._penalised

    # ---------------------------------------------------------------- contract
    def seed(self, seeds: np.ndarray, mask: np.ndarray) -> None:
        seed_rows(self.state, seeds, mask)
        self._cache_valid = False

    def state_restored(self) -> None:
        self._cache_valid = False  # start bars drawn ahead for the old counters

    def _draw_starts(self, envs: np.ndarray) -> np.ndarray:
        """Start bars of the next draw of ``envs`` (global indices); advances their counters."""
        s = self.state
        count = s.episode_count[envs]
        offset = (count - self._cache_base[envs]).astype(np.int64)
        if not self._cache_valid or offset.max() >= START_CACHE:
            self._refill_start_cache()
            offset = (count - self._cache_base[envs]).astype(np.int64)
        s.episode_count[envs] = count + np.uint64(1)
        return self._start_cache.reshape(-1).take(envs * START_CACHE + offset)

    def _refill_start_cache(self) -> None:
        """Draw the next START_CACHE start bars of every env that has used at least half of its
        cached ones (of every env when the cache is invalid).

        Envs end episodes at different rates, so refilling every env whenever the fastest one
        runs out computed about two draws for each one taken; rows are drawn in chunks of
        START_CHUNK_ROWS, whose Philox temporaries stay in cache.
        """
        s = self.state
        if self._cache_valid:
            used = s.episode_count - self._cache_base
            rows = (used >= np.uint64(START_CACHE // 2)).nonzero()[0]
        else:
            rows = self._env_ids
        steps = np.arange(START_CACHE, dtype=np.uint64)[None, :]
        span = self.params.episode_length
        for first in range(0, rows.size, START_CHUNK_ROWS):
            r = rows[first : first + START_CHUNK_ROWS]
            base = s.episode_count[r]
            lo, hi = s.lo[r, None], s.hi[r, None]
            self._start_cache[r] = draw_start_bars(
                s.seed[r, None], r[:, None], base[:, None] + steps, lo, hi - lo - span
            )
            self._cache_base[r] = base
        self._cache_valid = True

    def start_bars(self, env: int, count: int) -> np.ndarray:
        """int64 [count]: the start bars of env ``env``'s next ``count`` episodes (draws
        ``episode_count`` onwards), without taking them."""
        s = self.state
        counters = s.episode_count[env] + np.arange(count, dtype=np.uint64)
        lo, hi = s.lo[env], s.hi[env]
        return draw_start_bars(
            s.seed[env], self._env_ids[env], counters, lo, hi - lo - self.params.episode_length
        )

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

    def prepare_actions(self, actions: Any) -> np.ndarray:
        """Actions as an int64 [N] NumPy array; raises ValueError naming the first bad one."""
        a = actions
        if hasattr(a, "detach"):
            a = a.detach().cpu().numpy()
        a = np.asarray(a)
        check_action_layout(a.shape, a.dtype, a.dtype.kind in "iu", self.num_envs)
        a = a.reshape(self.num_envs)
        if a.dtype.kind == "i" and a.dtype.itemsize >= 4:
            # Seen as unsigned, a negative action is >= 2**31 > n_actions: one reduction.
            out_of_range = a.view(a.dtype.str.replace("i", "u")).max() >= self.config.n_actions
        else:
            out_of_range = a.min() < 0 or a.max() >= self.config.n_actions
        if out_of_range:  # reductions: cheaper per step than an elementwise mask
            bad = (a < 0) | (a >= self.config.n_actions)
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"actions[{i}] = {int(a[i])} is invalid: allowed is 0..{self.config.n_actions - 1}"
            )
        return a.astype(np.int64, copy=False)

    def bind_outputs(self, outputs: dict[str, Any], trusted: bool = False) -> StepOutputs:
        """The arrays of ``outputs`` as :class:`StepOutputs` of NumPy arrays (torch CPU tensors
        as the arrays that share their memory), after checking them unless ``trusted``."""
        if not trusted:
            check_output_arrays(outputs, self.num_envs, self.obs_dim)
        arrays = {k: v if isinstance(v, np.ndarray) else v.numpy() for k, v in outputs.items()}
        if "final_obs" not in arrays:  # never written outside SAME_STEP: any array will do
            arrays["final_obs"] = self._outputs[0].final_obs
        return StepOutputs(**arrays)

    def step_bound(
        self, actions: np.ndarray, bound: StepOutputs, check: bool = True, stream: None = None
    ) -> None:
        self.step(actions, bound)

    def step(self, actions: np.ndarray, out: StepOutputs | None = None) -> StepOutputs:
        """One step into ``out`` (default: the next zero-copy output set)."""
        s, p = self.state, self.params
        out = self._next_outputs() if out is None else out
        mode = p.autoreset_mode
        px = value = None
        all_running = not s.done_flag.any()  # every env is RUNNING (0)
        if all_running:
            px, value = self._transition(s, actions, out)
            if mode == SAME_STEP:
                self._reset_ended(s, out, px, value)
        else:
            waiting = s.done_flag != RUNNING
            quiet = waiting.nonzero()[0]
            few = 5 * quiet.size <= waiting.size  # a few waiting envs
            if mode == NEXT_STEP:
                all_running = True  # once the quiet envs are reset, here or in _step_around
                if not few:
                    # Envs that ended last step start anew; their actions are ignored this step.
                    self._reset_rows(quiet)
            if few:
                px, value = self._step_around(s, actions, out, quiet, mode)
            elif quiet.size < waiting.size:
                self._step_rows(s, actions, out, (~waiting).nonzero()[0])
            self._quiet_outputs(s, out, quiet, value, mode)

        if mode != SAME_STEP and all_running:
            # Terminated and truncated exclude each other, so the new flags are
            # WAIT_TERMINATED (1), WAIT_TRUNCATED (2) or RUNNING (0): 2 * truncated | terminated.
            np.left_shift(out.truncated.view(np.uint8), 1, out=s.done_flag)
            s.done_flag |= out.terminated.view(np.uint8)
        elif mode != SAME_STEP:
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
    def _reset_ended(
        self, s: EnvState, out: StepOutputs, px: np.ndarray, value: np.ndarray
    ) -> None:
        """SAME_STEP: the ended envs' final observations into ``out.final_obs``, their reset, and
        their new episodes' price and value written into ``px`` and ``value`` (float64 [N])."""
        p = self.params
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

    def _step_rows(
        self, s: EnvState, actions: np.ndarray, out: StepOutputs, active: np.ndarray
    ) -> None:
        """Step the envs ``active`` (int64 indices) as a gathered subset; every output but the
        observations written at their rows of ``out``."""
        sub = take_rows(s, active)
        # obs_dim 0: the observations of all envs are gathered by step.
        sub_out = allocate_outputs(np, active.size, 0)
        self._transition(sub, actions[active], sub_out, rows=active)
        put_rows(s, active, sub)
        for name in OUTPUT_FIELDS:
            if name not in ("obs", "final_obs"):
                getattr(out, name)[active] = getattr(sub_out, name)

    def _quiet_outputs(
        self,
        s: EnvState,
        out: StepOutputs,
        quiet: np.ndarray,
        value: np.ndarray | None,
        mode: int,
    ) -> None:
        """The outputs of the envs ``quiet`` (waiting for a reset): no reward, their held value
        and position, the waiting flags in DISABLED mode; then ``out.done`` of every env."""
        out.reward[quiet] = 0.0
        out.components[quiet] = 0.0
        if value is None:
            px_quiet = self.close.take(s.bar[quiet])
            out.portfolio_value[quiet] = s.cash[quiet] + s.position[quiet] * px_quiet
        else:  # _step_around computed the quiet envs' value by the same expression
            out.portfolio_value[quiet] = value.take(quiet)
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

    def _step_around(
        self, s: EnvState, actions: np.ndarray, out: StepOutputs, quiet: np.ndarray, mode: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Step every env, then put the ``quiet`` ones (waiting for a reset, a few) back.

        Cheaper than stepping the running envs as a gathered subset when they are most of the
        envs (NEXT_STEP mode after any episode ended): the transition is elementwise per env,
        so the running envs' results are the same bits either way, and the quiet envs' results
        are discarded. In NEXT_STEP mode the quiet envs ended last step and start anew now
        (their actions ignored): they are reset after the transition, which writes every field
        the transition writes but the ring slot at their cursor, put back. Their bar, cash and
        position are set to the new episode's first before it, so that the discarded step
        reads bars in range and a positive value (an episode can end on the instrument's last
        bar, or ruined). A DISABLED env waits frozen where its episode ended; it is stepped
        from a reset state at its first bar instead and its rows of state are restored from a
        copy taken before. Returns the transition's ``(px, value)`` with the quiet envs' own.
        """
        if mode == NEXT_STEP:
            start = self._draw_starts(quiet)
            s.bar[quiet] = start
            s.cash[quiet] = self.params.initial_capital
            s.position[quiet] = 0.0
            cursor = s.div_cursor.take(quiet)  # the ring slot the transition writes
            ring = s.div_ring[cursor, quiet]
            px, value = self._transition(s, actions, out)
            reset_rows(s, self.params, quiet, start)
            s.div_ring[cursor, quiet] = ring
        else:
            saved = take_rows(s, quiet)  # copies, but of the shared ring and histogram
            hist = s.div_hist[:, quiet]
            reset_rows(s, self.params, quiet, s.lo[quiet])
            cursor = s.div_cursor[quiet]  # the ring slot the transition writes
            ring = s.div_ring[cursor, quiet]
            px, value = self._transition(s, actions, out)
            put_rows(s, quiet, saved)
            s.div_hist[:, quiet] = hist
            s.div_ring[cursor, quiet] = ring
        px[quiet] = self.close.take(s.bar[quiet])
        value[quiet] = s.cash[quiet] + s.position[quiet] * px[quiet]
        return px, value

    def _reset_rows(self, idx: np.ndarray, start: np.ndarray | None = None) -> None:
        """Start new episodes for envs ``idx`` at global bars ``start`` (None: drawn)."""
        reset_rows(self.state, self.params, idx, self._draw_starts(idx) if start is None else start)

    def _transition(
        self, s: EnvState, a: np.ndarray, out: StepOutputs, rows: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Advance the envs of ``s`` by one bar and fill every field of ``out`` (the same rows)
        except ``obs`` and ``final_obs``, which the caller gathers after any reset. ``rows``:
        the global env ids of a state from ``take_rows`` (None: ``s`` holds every env).

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
        risk = reward.risk(pos0 / (c0 / close_t), p.risk_threshold, p.risk_penalty_scale)
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
        cash1, pos1, cost, reversal = trade(
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
        closing_sign, label, closing = check_barriers(p, s, t, fill, pos1, opened)
        del opened

        # --- action diversity (ENV_SPEC "Diversity")
        diversity = self._diversity(s, a, cat, rows)

        # --- mark to market, reward (ENV_SPEC "Reward"): core/reward.py's parts
        value1 = s.cash + pos1 * close_1
        pnl = reward.pnl(value0, value1)
        del value0
        barrier = reward.barrier(pnl, closing_sign, p.barrier_half_scale)
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
            curiosity = reward.curiosity(self.curiosity, obs0, obs1, cat, p)
        else:
            curiosity = 0.0  # the scalar 0.0 adds as a zero array does (-0.0 + 0.0 is 0.0)
        parts = (pnl, barrier, risk, diversity, curiosity)  # COMPONENT_NAMES' order
        total = reward.total(*parts)
        comp = out.components
        for k, part in enumerate(parts):
            comp[:, k] = part
        del parts, pnl, barrier, risk, diversity, curiosity
        out.reward[...] = total
        s.episode_return += total
        del total

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

    def penalised_rows(
        self, count: np.ndarray, h0: np.ndarray, h1: np.ndarray, h2: np.ndarray
    ) -> np.ndarray:
        """bool [n]: rings of ``count`` entries with category counts ``h0, h1, h2`` (int [n])
        whose entropy is below the threshold (ENV_SPEC "Diversity")."""
        p = self.params
        window = p.diversity_window
        if self._penalised is not None:
            # The ring's (count, h0, h1) fixes h2, so the whole penalty decision is one lookup.
            w1 = window + 1
            return self._penalised.take((count * w1 + h0) * w1 + h1)
        if self._entropy_table is not None:
            row = count * (window + 1)
            tab = self._entropy_table
            entropy = tab[row + h0] + tab[row + h1] + tab[row + h2]
        else:
            nf = count.astype(np.float64)
            entropy = np.zeros(count.shape[0], dtype=np.float64)
            for h in (h0, h1, h2):
                pr = h / nf
                entropy -= np.where(h > 0, pr * np.log2(np.where(h > 0, pr, 1.0)), 0.0)
        return (count >= p.diversity_min_entries) & (entropy < p.diversity_threshold_bits)

    def _diversity(
        self, s: EnvState, a: np.ndarray, cat: np.ndarray, rows: np.ndarray | None
    ) -> np.ndarray:
        """Push ``cat``, the category of actions ``a``, into the rings of ``s`` (in place); the
        diversity reward component.

        ``rows``: the envs' columns in ``s.div_ring`` and ``s.div_hist``, which ``take_rows``
        leaves whole (None: ``s`` holds every env).
        """
        p = self.params
        window = p.diversity_window
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
        if rows is None:
            # One pass per category row costs less than a scatter of one cell per env.
            for k, h in enumerate(s.div_hist):
                h += cat == k
            h0, h1, h2 = s.div_hist
        else:
            cell = self._category_row.take(a)
            cell += ids
            hist[cell] += 1
            h0, h1, h2 = (h.take(rows) for h in s.div_hist)
        cursor = s.div_cursor
        cursor += 1
        cursor[cursor == window] = 0
        count = s.div_count
        count += 1
        np.minimum(count, window, out=count)
        return reward.diversity(self.penalised_rows(count, h0, h1, h2), p.diversity_penalty)
