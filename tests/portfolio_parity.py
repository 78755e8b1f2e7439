"""Parity runs of two portfolio envs: random configs and actions, every output compared.

Shared by the CPU run of the kernel source (``tests/test_portfolio_cuda_kernel.py``, the
kernels compiled for the host) and the GPU run (``tests/test_portfolio_cuda.py``). Tolerance:
everything bit for bit, except with ``reward="log"`` the reward and the episode returns (the
log is each math library's own, which may differ in the last bit), held to 2^-23 relative
(one float32 step) plus 1e-12 absolute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpu_runtime.device import to_numpy
from gpu_trading_env.core.portfolio_config import PortfolioConfig
from gpu_trading_env.data.market_data import MarketData

MODES = ("next_step", "same_step", "disabled")
LOG_RTOL = 2.0**-23
LOG_ATOL = 1e-12
# Outputs compared bit for bit (info keys, then step returns); the log-tolerant ones apart.
EXACT_INFO = ("reward_components", "portfolio_value", "positions", "costs", "episode_length")
EXACT_STATE = ("bar", "step_in_episode", "cash", "seed", "episode_count", "done_flag")
EXACT_STATE += ("position", "costs")


def random_config(rng: np.random.Generator, mode: str, k: int) -> PortfolioConfig:
    """A config of K instruments where the gross cap, the reserve, reversals and both fills
    all occur; levels and leverage not powers of two, so a reordered product rounds apart."""
    choices = [-1.0, -0.7, -0.3, 0.0, 0.3, 0.6, 1.0]
    levels = tuple(sorted(rng.choice(choices, int(rng.integers(2, 6)), replace=False)))
    leverage = float(rng.choice([0.7, 1.0, 1.3, 3.0]))
    costs: Any = float(rng.choice([0.0, 1.0, 7.5, 50.0]))
    if k > 1 and rng.random() < 0.5:
        costs = tuple(float(x) for x in rng.choice([0.0, 2.0, 7.5, 30.0], k))
    return PortfolioConfig(
        initial_capital=float(rng.choice([1000.0, 1e5, 3.3e6])),
        exposure_levels=levels,
        cost_bps=costs,
        leverage=leverage,
        max_leverage=float(rng.choice([0.5, 1.0, 2.0, float(k)])) * leverage,
        reserve_pct=float(rng.choice([0.0, 0.0, 5.0, 30.0])),
        fill=str(rng.choice(["close", "next_open"])),
        reward=str(rng.choice(["simple", "log"])),
        episode_length=int(rng.integers(3, 40)),
        autoreset_mode=mode,
    )


def random_market(rng: np.random.Generator, k: int, n_bars: int = 160) -> MarketData:
    kind = str(rng.choice(["gbm", "regime", "planted"]))
    return MarketData.synthetic(kind, n_bars=n_bars, n_instruments=k, seed=int(rng.integers(99)))


@dataclass
class ParityReport:
    """What a parity run saw: the episodes compared and the mismatches (first few kept)."""

    episodes: int = 0
    mismatched_episodes: set = field(default_factory=set)
    problems: list = field(default_factory=list)

    def note(self, what: str, rows: np.ndarray, episode_ids: np.ndarray) -> None:
        if not rows.any():
            return
        for i in np.flatnonzero(rows):
            self.mismatched_episodes.add((int(i), int(episode_ids[i])))
        if len(self.problems) < 10:
            self.problems.append(f"{what}: envs {np.flatnonzero(rows)[:8].tolist()}")


def _rows_differ(a: Any, b: Any, tolerant: bool) -> np.ndarray:
    """bool [N]: the rows (leading axis) where a and b differ (NaN equal to NaN)."""
    a, b = np.asarray(to_numpy(a)), np.asarray(to_numpy(b))
    if a.shape != b.shape:
        return np.ones(a.shape[0] if a.ndim else 1, dtype=bool)
    if tolerant:
        bad = ~np.isclose(a, b, rtol=LOG_RTOL, atol=LOG_ATOL, equal_nan=True)
    else:
        bad = ~((a == b) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind == "f" else (a == b))
    return bad.reshape(bad.shape[0], -1).any(axis=1) if bad.ndim > 1 else bad


def run_parity(
    reference: Any,
    candidate: Any,
    rng: np.random.Generator,
    steps: int,
    report: ParityReport,
    candidate_actions: Any = None,
) -> None:
    """Step two ``PortfolioVectorEnv``s (same data and config) with the same seed and actions,
    noting every mismatching output row in ``report`` by (env, episode).

    ``candidate_actions``: how the candidate receives the int64 [N, K] host actions (e.g. as
    a CUDA tensor); default as they are.
    """
    config = reference.config
    n, k = reference.num_envs, reference.n_instruments
    log = config.reward == "log"
    seed = int(rng.integers(2**63))
    episode = np.zeros(n, dtype=np.int64)
    ro, _ = reference.reset(seed=seed)
    co, _ = candidate.reset(seed=seed)
    report.note("reset obs", _rows_differ(ro, co, False), episode)
    for step in range(steps):
        if config.autoreset_mode.name == "DISABLED" and step % 9 == 8:
            mask = rng.random(n) < 0.5
            mask[0] = True
            start = np.where(rng.random(n) < 0.3, rng.integers(0, reference.data.n_bars - 2, n), -1)
            options = {"reset_mask": mask, "start_index": start}
            ro, _ = reference.reset(options=options)
            co, _ = candidate.reset(options=options)
            episode += mask
            report.note(
                f"obs after reset_mask at step {step}", _rows_differ(ro, co, False), episode
            )
            continue
        a = rng.integers(0, config.n_levels, (n, k))
        if rng.random() < 0.3:  # hold some rows' previous levels: positions rebalance
            a[: n // 2] = a[: n // 2, :1]
        ro, rr, rte, rtr, ri = reference.step(a)
        co, cr, cte, ctr, ci = candidate.step(
            a if candidate_actions is None else candidate_actions(a)
        )
        checks = [
            ("obs", ro, co, False),
            ("reward", rr, cr, log),
            ("terminated", rte, cte, False),
            ("truncated", rtr, ctr, False),
            ("episode_return", ri["episode_return"], ci["episode_return"], log),
            ("_episode_return", ri["_episode_return"], ci["_episode_return"], False),
        ]
        checks += [(key, ri[key], ci[key], False) for key in EXACT_INFO]
        if "final_obs" in ri or "final_obs" in ci:
            done = np.asarray(to_numpy(rte)) | np.asarray(to_numpy(rtr))
            # Rows that did not end are zeros in both (the reference's absent array: all rows).
            ref_final = ri.get("final_obs", np.zeros_like(ro))
            checks.append(("final_obs", ref_final, ci["final_obs"], False))
            checks.append(("_final_obs", done, to_numpy(ci["_final_obs"]), False))
        for name, x, y, tolerant in checks:
            report.note(f"{name} at step {step}", _rows_differ(x, y, tolerant), episode)
        ended = np.asarray(ri["episode_length"]) > 0  # not the frozen steps of DISABLED
        report.episodes += int(ended.sum())
        episode += ended
    rs, cs = reference.backend.state, candidate.backend.state
    for name in EXACT_STATE:
        # [K, N] arrays compared per env: transposed to [N, K].
        x, y = np.asarray(getattr(rs, name)), np.asarray(to_numpy(getattr(cs, name)))
        report.note(f"state {name}", _rows_differ(x.T, y.T, False), episode)
    rows = _rows_differ(rs.episode_return, cs.episode_return, log)
    report.note("state episode_return", rows, episode)
    report.episodes += n  # the episodes still running at the end
