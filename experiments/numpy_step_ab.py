"""The NumPy step of two or more checkouts, interleaved in one run: is a change in env-steps/s
the code's or the machine's?

Each checkout runs in its own process with its own ``sys.path`` (``OMP_NUM_THREADS=1``); the
processes take turns in blocks of ``--steps`` steps of ``TradingVectorEnv(num_envs, "cpu")`` in
the source design's env with seeded random actions, so a slow phase of a shared machine hits them alike. Prints the
median block's env-steps/s of each and its ratio to the first::

    git worktree add /tmp/old a1ca480
    python3 -m experiments.numpy_step_ab old=/tmp/old new=. --copy-outputs 0 --blocks 31
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SOURCE_DESIGN = {
    "exposure_levels": (-1.0, -0.5, 0.0, 0.5, 1.0),
    "order_cost_bps": (1.0, 0.5, 1.5),
    "sub_actions": 3,
    "barriers": True,
    "diversity_penalty": 0.1,
    "risk_penalty_scale": 0.5,
}


def worker(root: str, num_envs: int, steps: int, copy_outputs: bool) -> None:
    """One side: build the env from ``root``'s packages, then time a block per stdin line."""
    sys.path.insert(0, root)
    import numpy as np

    from gpu_trading_env import EnvConfig, MarketData
    from gpu_trading_env.vector_env import TradingVectorEnv

    # The source design's env (EnvConfig.source_design()) spelled out, so that checkouts before
    # and after EnvConfig's defaults changed step the same env.
    config = EnvConfig(**SOURCE_DESIGN)
    env = TradingVectorEnv(
        num_envs, "cpu", data=MarketData.default(), config=config, copy_outputs=copy_outputs
    )
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 45, (16, num_envs))
    for k in range(10):
        env.step(actions[k % 16])
    print("ready", flush=True)
    for _ in sys.stdin:
        t0 = time.perf_counter()
        for k in range(steps):
            env.step(actions[k % 16])
        print(num_envs * steps / (time.perf_counter() - t0), flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:  # one side, started by the run below
        root, n, steps, copy = sys.argv[2:6]
        worker(root, int(n), int(steps), bool(int(copy)))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sides", nargs="+", help="name=checkout_root, the first is the baseline")
    ap.add_argument("--num-envs", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=60, help="steps per block")
    ap.add_argument("--blocks", type=int, default=21)
    ap.add_argument("--copy-outputs", type=int, choices=(0, 1), default=1)
    args = ap.parse_args()
    sides = {}
    for side in args.sides:
        name, sep, root = side.partition("=")
        if not sep or not Path(root, "gpu_trading_env").is_dir():
            raise SystemExit(f"side {side!r} is invalid: allowed is name=ROOT of a checkout")
        sides[name] = str(Path(root).resolve())
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs = {}
    for name, root in sides.items():
        cmd = [sys.executable, __file__, "--worker", root, str(args.num_envs)]
        cmd += [str(args.steps), str(args.copy_outputs)]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        if p.stdout.readline().strip() != "ready":
            raise SystemExit(f"side {name!r} did not start")
        procs[name] = p
    names = list(procs)
    rates: dict[str, list[float]] = {k: [] for k in names}
    for b in range(args.blocks):
        for name in names[b % len(names) :] + names[: b % len(names)]:  # rotate who goes first
            procs[name].stdin.write("go\n")
            procs[name].stdin.flush()
            rates[name].append(float(procs[name].stdout.readline()))
    for p in procs.values():
        p.stdin.close()
        p.wait()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {load}; {args.num_envs} envs, copy_outputs={args.copy_outputs}")
    base = statistics.median(rates[names[0]])
    for name in names:
        m = statistics.median(rates[name])
        print(f"{name:>12}: median {m:.3e} env-steps/s ({m / base:.3f}x {names[0]})")


if __name__ == "__main__":
    main()
