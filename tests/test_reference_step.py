"""The tuned NumPy backend is bit-identical to the scalar oracle (``step_oracle``, each env
through ``ScalarStep``), on random configs.

Both are stepped in lockstep from the same state with the same random actions; every output
field and every state array must agree bit for bit (``final_obs`` on the rows that ended, the
only rows where it is defined).
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import step_oracle as ref

from gpu_trading_env import EnvConfig, MarketData, TradingVectorEnv
from gpu_trading_env.core.state import EnvState, StepOutputs

STEPS = 120


def random_config(rng: np.random.Generator) -> dict:
    config: dict
    levels = sorted(set(np.round(rng.uniform(-1, 1, rng.integers(2, 6)), 2).tolist()) | {0.0})
    config = {
        "exposure_levels": tuple(levels),
        "order_cost_bps": tuple(np.round(rng.uniform(0, 3, rng.integers(1, 4)), 2).tolist()),
        "sub_actions": int(rng.integers(1, 4)),
        "reserve_pct": float(rng.choice([0.0, 10.0, 60.0])),
        "spread": float(rng.choice([0.0, 0.002])),
        "fill": str(rng.choice(["close", "next_open"])),
        "barriers": bool(rng.random() < 0.8),
        "profit_target_bps": float(rng.uniform(5, 150)),
        "stop_loss_bps": float(rng.uniform(3, 80)),
        "max_holding_bars": int(rng.integers(1, 40)),
        "barrier_reward_scale": float(rng.uniform(0, 2)),
        "diversity_window": int(rng.choice([1, 5, 30, 200, 700])),
        "diversity_threshold_bits": float(rng.uniform(0, 1.58)),
        "diversity_penalty": float(rng.uniform(0, 1)),
        "diversity_min_entries": 1,
        "curiosity_state_dims": int(rng.integers(1, 10)),
        "curiosity_hidden": int(rng.integers(1, 12)),
        "curiosity_scale": float(rng.uniform(0, 3)),
        "risk_threshold": float(rng.uniform(0, 1)),
        "risk_penalty_scale": float(rng.uniform(0, 2)),
        "episode_length": int(rng.integers(5, 60)),
        "autoreset_mode": str(rng.choice(["same_step", "next_step", "disabled"])),
        "max_position": None if rng.random() < 0.5 else float(rng.integers(1, 2000)),
        "sizing": str(rng.choice(["units", "equity"])),
        "leverage": float(rng.uniform(0.2, 3.0)),
    }
    config["diversity_min_entries"] = int(rng.integers(1, min(6, config["diversity_window"]) + 1))
    return config


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("case", range(12))
def test_numpy_backend_matches_reference_step(case: int):
    rng = np.random.default_rng(1000 + case)
    config = EnvConfig(**random_config(rng))
    n_envs = int(rng.choice([1, 7, 64, 300]))
    data = MarketData.synthetic("gbm", n_bars=400, n_instruments=int(rng.integers(1, 4)), seed=case)
    env = TradingVectorEnv(n_envs, data=data, config=config)
    backend = env.backend
    if rng.random() < 0.5:
        d, h = config.curiosity_state_dims, config.curiosity_hidden
        env.set_curiosity_weights(
            rng.normal(0, 0.5, (h, d + 3)).astype(np.float32),
            rng.normal(0, 0.1, h).astype(np.float32),
            rng.normal(0, 0.5, (d, h)).astype(np.float32),
            rng.normal(0, 0.1, d).astype(np.float32),
        )
    env.reset(seed=case)
    state = EnvState(**{k: v.copy() for k, v in vars(backend.state).items()})
    ended_any = False
    for t in range(STEPS):
        actions = rng.integers(0, config.n_actions, n_envs)
        state, expected = ref.step(state, actions, backend)
        got: StepOutputs = backend.step(backend.prepare_actions(actions))
        done = expected.done
        ended_any |= bool(done.any())
        for f in fields(StepOutputs):
            e, g = getattr(expected, f.name), getattr(got, f.name)
            if f.name == "final_obs":  # defined on the rows that ended (SAME_STEP)
                rows = done if config.autoreset_mode.name == "SAME_STEP" else []
                e, g = e[rows], g[rows]
            assert same_bits(e, g), f"step {t}: output {f.name} differs"
        for f in fields(EnvState):
            assert same_bits(getattr(state, f.name), getattr(backend.state, f.name)), (
                f"step {t}: state {f.name} differs"
            )
    assert ended_any, "no episode ended: the case does not exercise resets"


def test_numpy_start_bars_across_cache_refills_match_the_reference_draws():
    """Envs that reset at very different rates: the backend's cache of start-bar draws, refilled
    by rows in chunks, hands every env the reference draw of its own counter, before and after
    its cache is invalidated (new seeds)."""
    from gpu_trading_env.backends import numpy_backend

    rng = np.random.default_rng(7)
    n_envs = numpy_backend.START_CHUNK_ROWS + 45  # two chunks, the second one partial
    data = MarketData.synthetic("gbm", n_bars=700, n_instruments=3, seed=3)
    env = TradingVectorEnv(n_envs, data=data, config=EnvConfig(episode_length=50))
    env.reset(seed=11)
    backend = env.backend
    s = backend.state
    # Env i resets with probability rate[i] a round: from never to every round.
    rate = np.linspace(0.0, 1.0, n_envs)
    rounds = 5 * numpy_backend.START_CACHE
    drawn = np.zeros(n_envs, dtype=np.int64)
    for k in range(rounds):
        if k == rounds // 2:
            backend.seed(np.arange(n_envs, dtype=np.uint64) + 99, np.ones(n_envs, dtype=bool))
        mask = rng.random(n_envs) < rate
        rows = np.flatnonzero(mask)
        counter = s.episode_count[rows].copy()
        backend.reset(mask, np.full(n_envs, -1, dtype=np.int64))
        n_starts = s.hi[rows] - s.lo[rows] - backend.params.episode_length
        expected = ref.draw_start_bars(s.seed[rows], rows, counter, s.lo[rows], n_starts)
        assert same_bits(s.bar[rows], expected), f"round {k}: start bars differ"
        assert same_bits(s.episode_count[rows], counter + np.uint64(1))
        drawn += mask
    assert drawn.max() > 2 * numpy_backend.START_CACHE, "no env drew past its cache twice"
    # ... while others drew too few to be refilled in any pass (the partial refills).
    assert (drawn < numpy_backend.START_CACHE // 2).sum() >= 10


@pytest.mark.parametrize("part", ["pnl", "barrier", "risk", "diversity", "curiosity", "total"])
def test_the_numpy_step_takes_each_reward_part_from_core_reward(monkeypatch, part: str):
    """The reward is written once for NumPy: a change to one function of ``core/reward.py``
    reaches the NumPy backend's outputs (the recipe "Change the reward", docs/ARCHITECTURE.md)."""
    from gpu_trading_env.core import reward
    from gpu_trading_env.core.constants import COMPONENT_NAMES

    config = EnvConfig.source_design(  # barriers and penalties on: every part is exercised
        risk_threshold=0.0,
        risk_penalty_scale=0.5,
        diversity_window=1,
        diversity_min_entries=1,
        autoreset_mode="same_step",  # every env steps at every step
    )
    data = MarketData.synthetic("gbm", n_bars=800, seed=1)
    rng = np.random.default_rng(3)
    d, h = config.curiosity_state_dims, config.curiosity_hidden
    weights = (
        rng.normal(0, 0.5, (h, d + 3)).astype(np.float32),
        rng.normal(0, 0.1, h).astype(np.float32),
        rng.normal(0, 0.5, (d, h)).astype(np.float32),
        rng.normal(0, 0.1, d).astype(np.float32),
    )
    actions = [rng.integers(0, config.n_actions, 16) for _ in range(5)]

    def run() -> tuple[np.ndarray, np.ndarray]:
        env = TradingVectorEnv(16, data=data, config=config)
        env.set_curiosity_weights(*weights)
        env.reset(seed=0)
        outs = [env.backend.step(env.backend.prepare_actions(a)) for a in actions]
        return np.stack([o.reward for o in outs]), np.stack([o.components for o in outs])

    reward0, comp0 = run()
    original = getattr(reward, part)
    monkeypatch.setattr(reward, part, lambda *args: original(*args) + 1.0)
    reward1, comp1 = run()
    if part == "total":
        np.testing.assert_array_equal(comp1, comp0)
        np.testing.assert_allclose(reward1, reward0 + 1.0, rtol=1e-5)
    else:
        k = COMPONENT_NAMES.index(part)
        others = [j for j in range(len(COMPONENT_NAMES)) if j != k]
        assert part != "pnl" or not np.array_equal(
            comp1[..., 1], comp0[..., 1]
        )  # pnl feeds barrier
        if part != "pnl":
            np.testing.assert_array_equal(comp1[..., others], comp0[..., others])
        np.testing.assert_allclose(comp1[..., k], comp0[..., k] + 1.0, rtol=1e-5)
        assert not np.array_equal(reward1, reward0)


def test_the_reward_recipe_names_places_that_exist():
    """docs/ARCHITECTURE.md's "Change the reward" names the module, the kernel section and the
    parity test; each must exist under that name."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "ARCHITECTURE.md").read_text()
    recipe = doc[doc.index("### Change the reward") :]
    for path in (
        "gpu_trading_env/core/reward.py",
        "gpu_trading_env/backends/kernels/trading_env.cuh",
        "tests/test_cuda_backend.py",
    ):
        assert f"`{path}" in recipe and (root / path).exists(), path
    kernel = (root / "gpu_trading_env/backends/kernels/trading_env.cuh").read_text()
    assert "// --- mark to market, reward" in kernel
    assert "def test_cuda_matches_numpy(" in (root / "tests/test_cuda_backend.py").read_text()
