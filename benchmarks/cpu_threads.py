"""Training throughput of the CPU quickstart's settings at 1 and 2 torch threads.

    python3 -m benchmarks.cpu_threads                 # as the machine is
    python3 -m benchmarks.cpu_threads --busy 1        # with one other CPU-bound process

``GpuDQN`` with the CLI's CPU defaults (``CPU_DEFAULTS``' envs, batch and buffer; the 256-256
dueling network) learns
``--steps`` env steps after its warm-up at each thread count, in turn, ``--repeats`` times; the
best rate of each is printed (the least disturbed by other work). ``--busy N`` runs N
processes spinning a core meanwhile, as another job on the machine would.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time

from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties), that of docs/PERFORMANCE.md.
SOURCE = EnvConfig.source_design()


def _spin() -> None:
    while True:
        pass


def measure(threads: int, steps: int) -> float:
    """Env steps a second of ``learn`` after its warm-up, on ``threads`` torch threads."""
    import gymnasium as gym
    import torch

    import gpu_trading_env  # noqa: F401
    from agents import GpuDQN
    from agents.cli.train import CPU_DEFAULTS

    torch.set_num_threads(threads)
    n = CPU_DEFAULTS["num_envs"]
    env = gym.make_vec("GpuTrading-v0", num_envs=n, device="cpu", config=SOURCE)
    model = GpuDQN(
        "DuelingPolicy",
        env,
        batch_size=CPU_DEFAULTS["batch_size"],
        buffer_size=CPU_DEFAULTS["buffer_size"],
        learning_starts=10 * n,
        train_freq=1,
        gradient_steps=1,
        seed=0,
        device="cpu",
    )
    model.learn(total_timesteps=20 * n)  # warm-up: buffer past learning_starts, first steps
    start = time.perf_counter()
    model.learn(total_timesteps=steps, reset_num_timesteps=False)
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--steps", type=int, default=8000, help="env steps per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes meanwhile")
    args = parser.parse_args()
    spinners = [mp.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in spinners:
        p.start()
    try:
        rates: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(args.repeats):
            for threads in rates:
                rates[threads].append(measure(threads, args.steps))
    finally:
        for p in spinners:
            p.terminate()
    out = {
        "steps": args.steps,
        "busy_processes": args.busy,
        "load_average": os.getloadavg()[0],
        "cpu_count": os.cpu_count(),
        "env_steps_per_second": {str(k): [round(r) for r in v] for k, v in rates.items()},
        "best": {str(k): round(max(v)) for k, v in rates.items()},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
