"""SHA-256 fingerprints of the NumPy backend on 15 varied configurations.

A refactoring that must keep behaviour bit-identical runs this before and after and compares the
printed lines: one per configuration, hashing every returned array, every info entry and the
final ``EnvState`` arrays of ~300 steps of seeded random actions.

    python3 -m benchmarks.numpy_fingerprint
"""

from __future__ import annotations

import hashlib
from dataclasses import fields
from typing import Any

import numpy as np

from gpu_trading_env import EnvConfig, MarketData, TradingVectorEnv

STEPS = 300

# (name, num_envs, n_instruments, curiosity, EnvConfig overrides)
CASES: list[tuple[str, int, int, bool, dict[str, Any]]] = [
    ("default_1", 1, 1, False, {}),
    ("same_step_64", 64, 1, False, {"episode_length": 40}),
    ("next_step_64", 64, 1, False, {"autoreset_mode": "next_step", "episode_length": 40}),
    ("disabled_32", 32, 1, False, {"autoreset_mode": "disabled", "episode_length": 50}),
    ("next_open_128", 128, 2, False, {"fill": "next_open", "episode_length": 60}),
    ("reserve_256", 256, 1, False, {"reserve_pct": 20.0, "spread": 0.001}),
    ("curiosity_64", 64, 1, True, {"curiosity_state_dims": 8, "curiosity_hidden": 16}),
    (
        "curiosity_next_open_48",
        48,
        3,
        True,
        {
            "fill": "next_open",
            "curiosity_state_dims": 12,
            "curiosity_hidden": 8,
            "curiosity_scale": 3.0,
        },
    ),
    ("no_barriers_100", 100, 1, False, {"barriers": False, "episode_length": 70}),
    (
        "tight_barriers_200",
        200,
        4,
        False,
        {
            "profit_target_bps": 5.0,
            "stop_loss_bps": 3.0,
            "max_holding_bars": 7,
            "barrier_reward_scale": 2.0,
        },
    ),
    (
        "diversity_75",
        75,
        2,
        False,
        {
            "diversity_window": 7,
            "diversity_min_entries": 2,
            "diversity_threshold_bits": 1.5,
            "diversity_penalty": 0.7,
        },
    ),
    (
        "risk_levels_90",
        90,
        1,
        False,
        {
            "exposure_levels": (-1.0, 0.0, 0.25, 1.0),
            "order_cost_bps": (2.0, 0.1),
            "sub_actions": 2,
            "risk_threshold": 0.2,
            "risk_penalty_scale": 2.0,
        },
    ),
    (
        "maxpos_next_step_512",
        512,
        3,
        False,
        {
            "max_position": 3.0,
            "autoreset_mode": "next_step",
            "fill": "next_open",
            "episode_length": 25,
        },
    ),
    (
        "mix_1024",
        1024,
        2,
        True,
        {
            "reserve_pct": 50.0,
            "episode_length": 33,
            "curiosity_state_dims": 4,
            "curiosity_hidden": 4,
        },
    ),
    ("wide_4096", 4096, 4, False, {"episode_length": 120, "autoreset_mode": "disabled"}),
]


def _hash_tree(h: Any, obj: Any) -> None:
    if isinstance(obj, dict):
        for key in sorted(obj):
            h.update(key.encode())
            _hash_tree(h, obj[key])
    elif obj is None:
        h.update(b"None")
    else:
        a = np.ascontiguousarray(np.asarray(obj))
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())


def fingerprint(num_envs: int, n_instruments: int, curiosity: bool, overrides: dict) -> str:
    data = MarketData.synthetic("gbm", n_bars=600, n_instruments=n_instruments, seed=7)
    # The source design's env, so the hashes of checkouts before and after its defaults agree.
    env = TradingVectorEnv(num_envs, data=data, config=EnvConfig.source_design(**overrides))
    if curiosity:
        c = env.config
        rng = np.random.default_rng(11)
        d, hid = c.curiosity_state_dims, c.curiosity_hidden
        env.set_curiosity_weights(
            rng.normal(0, 0.3, (hid, d + 3)).astype(np.float32),
            rng.normal(0, 0.1, hid).astype(np.float32),
            rng.normal(0, 0.3, (d, hid)).astype(np.float32),
            rng.normal(0, 0.1, d).astype(np.float32),
        )
    h = hashlib.sha256()
    obs, info = env.reset(seed=[1000 + i for i in range(num_envs)])
    _hash_tree(h, obs)
    rng = np.random.default_rng(3)
    for t in range(STEPS):
        actions = rng.integers(0, env.config.n_actions, num_envs)
        obs, reward, term, trunc, info = env.step(actions)
        for a in (obs, reward, term, trunc):
            _hash_tree(h, a)
        _hash_tree(h, info)
        ended = np.asarray(term | trunc)
        if t == STEPS // 2 and env.autoreset_mode.name == "DISABLED" and ended.any():
            obs, _ = env.reset(options={"reset_mask": ended})
            _hash_tree(h, obs)
    state = env.backend.state
    for f in fields(state):
        _hash_tree(h, getattr(state, f.name))
    _hash_tree(h, env.observe())
    return h.hexdigest()


def main() -> None:
    for name, n, k, cur, overrides in CASES:
        print(f"{name:26s} {fingerprint(n, k, cur, overrides)}", flush=True)


if __name__ == "__main__":
    main()
