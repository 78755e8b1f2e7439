"""Where the host spends one iteration of ``GpuDQN.learn`` on the fused path.

4,096 CUDA envs, batch 4,096, one gradient step per vector step (``train_throughput``'s
settings): the unprofiled time per iteration, then cProfile over ``--iterations`` iterations,
by own time and by cumulative time::

    python benchmarks/learn_profile.py --iterations 1500 [--precision bf16]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch as th
from train_throughput import _model

from gpu_trading_env import MarketData, TradingVectorEnv


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=1500)
    p.add_argument("--precision", choices=["tf32", "fp32", "bf16"], default="tf32")
    p.add_argument("--rows", type=int, default=45, help="functions listed per table")
    args = p.parse_args()
    env = TradingVectorEnv(num_envs=4096, device="cuda", data=MarketData.default())
    model = _model(env, "cuda", 2_000_000, train_precision=args.precision)
    model.learn(total_timesteps=4096 * 200)  # compile, capture, allocate
    th.cuda.synchronize()
    n = args.iterations
    t0 = time.perf_counter()
    model.learn(total_timesteps=4096 * n, reset_num_timesteps=False)
    th.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"unprofiled: {dt / n * 1e6:.1f} us per iteration, {4096 * n / dt:.3e} env-steps/s")
    prof = cProfile.Profile()
    prof.enable()
    model.learn(total_timesteps=4096 * n, reset_num_timesteps=False)
    th.cuda.synchronize()
    prof.disable()
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(args.rows)
        print(out.getvalue())


if __name__ == "__main__":
    main()
