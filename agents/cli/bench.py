"""``gpu-trading-env bench``: env throughput on this machine."""

from __future__ import annotations

import argparse

from gpu_runtime.device import cuda_available


def cmd_bench(args: argparse.Namespace) -> int:
    from gpu_trading_env.data.market_data import MarketData
    from gpu_trading_env.throughput import (
        BENCH_CONFIG_NAME,
        bench_cuda,
        bench_numpy,
        bench_sync,
        format_rows,
    )

    data = MarketData.default()
    rows = [bench_sync(data, 16, max(20, args.steps // 4))]
    rows += [bench_numpy(data, n, args.steps) for n in (256, 4096)]
    gpu = cuda_available()
    if gpu:
        rows += [bench_cuda(data, n, args.steps) for n in (2**16, 2**20)]
    found = "found" if gpu else "not found"
    print(f"# env throughput on this machine (CUDA {found}), env {BENCH_CONFIG_NAME}")
    for line in format_rows(rows):
        print(line)
    print("# the full sweep: python3 -m benchmarks.env_throughput (in a source checkout)")
    return 0
