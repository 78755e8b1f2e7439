"""The single env on the CPU against gym-anytrading's ``stocks-v0``: steps per second, interleaved.

``gym.make("GpuTrading-v0")`` is what ``check_env``, SB3's ``DummyVecEnv`` and people coming
from gym-anytrading step. Both envs take random actions, reset when an episode ends, and are
timed in alternating blocks of ``--block`` steps within one process, so slow phases of a shared
machine hit both alike; the figure per env is the median block rate, and the ratio is
GpuTrading's over gym-anytrading's::

    pip install gym-anytrading      # the comparison (skipped with a note without it)
    python3 -m benchmarks.single_env_throughput --out single_env.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from benchmarks.run_info import commit
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties), that of docs/PERFORMANCE.md.
SOURCE = EnvConfig.source_design()


def _block_rate(env: gym.Env, actions: np.ndarray) -> float:
    """Steps per second over one block of ``actions`` (an ended episode is reset, and counted)."""
    step, reset = env.step, env.reset
    t0 = time.perf_counter()
    for a in actions.tolist():
        _, _, terminated, truncated, _ = step(a)
        if terminated or truncated:
            reset()
    return actions.size / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20, help="timed blocks per env")
    parser.add_argument("--block", type=int, default=2000, help="steps per block")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()

    envs = {"GpuTrading-v0": gym.make("GpuTrading-v0", config=SOURCE).unwrapped}
    note = None
    try:
        import gym_anytrading  # noqa: F401  (registers stocks-v0)

        envs["gym-anytrading stocks-v0"] = gym.make("stocks-v0").unwrapped
    except ImportError as exc:
        note = f"gym-anytrading skipped ({exc}); pip install gym-anytrading"
        print(note)
    rng = np.random.default_rng(0)
    plans = {}
    for k, (name, env) in enumerate(envs.items()):
        env.reset(seed=k)
        env.action_space.seed(k)
        plans[name] = rng.integers(0, env.action_space.n, (args.blocks + 1, args.block))
        _block_rate(env, plans[name][-1])  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in envs}
    for b in range(args.blocks):
        for name, env in envs.items():
            rates[name].append(_block_rate(env, plans[name][b]))
    rows = {
        name: {
            "median_steps_per_s": statistics.median(r),
            "best_steps_per_s": max(r),
            "us_per_step": 1e6 / statistics.median(r),
        }
        for name, r in rates.items()
    }
    print(f"# single env on the CPU  commit={commit()}  {args.blocks} x {args.block} steps")
    for name, row in rows.items():
        print(
            f"{name:28s} {row['median_steps_per_s']:10.3e} steps/s (median block), "
            f"{row['us_per_step']:6.2f} us/step, best {row['best_steps_per_s']:.3e}"
        )
    ratio = None
    if len(rows) == 2:
        ours, theirs = (r["median_steps_per_s"] for r in rows.values())
        ratio = ours / theirs
        print(f"GpuTrading-v0 / stocks-v0: {ratio:.2f}x")
    if args.out:
        meta = {"commit": commit(), "python": platform.python_version(), "note": note}
        meta["machine"] = platform.processor() or platform.machine()
        result = {"meta": meta, "rows": rows, "ratio_to_anytrading": ratio}
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
