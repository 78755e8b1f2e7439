"""Env-step throughput: the CUDA backend, the NumPy backend, and gymnasium's SyncVectorEnv.

Everything is measured in one run, side by side, with the same data and random actions, in the
source design's env (``EnvConfig.source_design()``: 45 actions, barriers, both penalties; the env
docs/PERFORMANCE.md's figures were measured in):

    python3 -m benchmarks.env_throughput                 # all backends this machine has
    python3 -m benchmarks.env_throughput --backends numpy sync --out results.json
    python3 -m benchmarks.env_throughput --backends modes --out modes.json   # < 60 s on a GPU

``modes``: host time per ``env.step`` with owned outputs (the default), zero-copy outputs
(``copy_outputs=False``) and ``step_into`` (what a CUDA graph captures), taking turns in blocks:
on CUDA at 1,024 / 4,096 / 65,536 envs plus env-steps/s at 2^20, on the CPU (NumPy) at 4,096.

Reported per row: env-steps/s (num_envs * steps / wall time, GPU work included) and the host
time per step (Python + launch, measured without waiting for the GPU). Ratios are to
gymnasium's SyncVectorEnv over the single TradingEnv.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import gpu_trading_env  # noqa: F401
from benchmarks.run_info import commit
from gpu_runtime.device import cuda_available
from gpu_trading_env import MarketData
from gpu_trading_env.throughput import (
    BENCH_CONFIG,
    BENCH_CONFIG_NAME,
    bench_cuda,
    bench_numpy,
    bench_output_modes,
    bench_outputs,
    bench_sync,
    format_rows,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["cuda", "numpy", "sync", "outputs"],
        help="'outputs': the full step API with owned outputs beside the zero-copy double buffer",
    )
    parser.add_argument(
        "--cuda-envs", nargs="+", type=int, default=[2**k for k in range(10, 23, 2)]
    )
    parser.add_argument("--numpy-envs", nargs="+", type=int, default=[256, 1024, 4096, 16384])
    parser.add_argument("--sync-envs", nargs="+", type=int, default=[16])
    parser.add_argument(
        "--outputs-envs",
        nargs="+",
        type=int,
        default=None,
        help="env counts of the 'outputs' rows (owned vs zero-copy outputs); default "
        "1024 and 65536 on the CPU, 1024 and 2**20 on CUDA",
    )
    parser.add_argument(
        "--modes-cuda-envs", nargs="+", type=int, default=[1024, 4096, 65536], help="'modes' rows"
    )
    parser.add_argument("--modes-numpy-envs", nargs="+", type=int, default=[4096])
    parser.add_argument("--modes-steps", type=int, default=200, help="steps per block, 'modes'")
    parser.add_argument("--modes-blocks", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    data = MarketData.default()
    rows = []
    if "sync" in args.backends:
        for n in args.sync_envs:
            rows.append(bench_sync(data, n, max(50, args.steps // 2)))
    if "numpy" in args.backends:
        for n in args.numpy_envs:
            rows.append(bench_numpy(data, n, args.steps))
    if "cuda" in args.backends and cuda_available():
        for n in args.cuda_envs:
            rows.append(bench_cuda(data, n, args.steps))
    if "modes" in args.backends:
        if cuda_available():
            for n in args.modes_cuda_envs:
                rows += bench_output_modes(data, "cuda", n, args.modes_steps, args.modes_blocks)
            rows.append(bench_cuda(data, 2**20, 100))
        for n in args.modes_numpy_envs:
            numpy_steps = max(20, args.modes_steps // 10)
            rows += bench_output_modes(
                data, "cpu", n, numpy_steps, args.modes_blocks, ("owned", "zero-copy")
            )
    if "outputs" in args.backends:
        devices = ["cpu"] + (["cuda"] if cuda_available() else [])
        for device in devices:
            counts = args.outputs_envs or ([1024, 65536] if device == "cpu" else [1024, 2**20])
            for n in counts:
                for copy_outputs in (True, False):
                    rows.append(bench_outputs(data, device, n, args.steps, copy_outputs))
    gpu = None
    if "cuda" in args.backends and cuda_available():
        import torch

        gpu = torch.cuda.get_device_name()
    meta = {
        "commit": commit(),
        "gpu": gpu,
        "cpu": platform.processor() or platform.machine(),
        "data": repr(data),
        "env": BENCH_CONFIG_NAME,
        "env_config": BENCH_CONFIG.to_dict(),
        "cpu_count": os.cpu_count(),
    }
    print(
        f"# env throughput  commit={meta['commit']}  gpu={gpu}  cpus={meta['cpu_count']}  "
        f"env={BENCH_CONFIG_NAME}"
    )
    for line in format_rows(rows):
        print(line)
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
