"""Env-step throughput: the CUDA backend, the NumPy backend, and gymnasium's SyncVectorEnv.

Everything is measured in one run, side by side, with the same data and random actions:

    python benchmarks/env_throughput.py                 # all backends this machine has
    python benchmarks/env_throughput.py --backends numpy sync --out results.json

Reported per row: env-steps/s (num_envs * steps / wall time, GPU work included) and the host
time per step (Python + launch, measured without waiting for the GPU). Ratios are to
gymnasium's SyncVectorEnv over the single TradingEnv.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
from run_info import commit

import gpu_trading_env  # noqa: F401
from gpu_trading_env import MarketData, TradingEnv, TradingVectorEnv
from gpu_trading_env.gpu.device import cuda_available


def bench_cuda(data: MarketData, num_envs: int, steps: int) -> dict:
    import torch

    env = TradingVectorEnv(num_envs=num_envs, device="cuda", data=data)
    env.reset(seed=0)
    actions = torch.randint(0, env.single_action_space.n, (16, num_envs), device="cuda")
    acts = [env.backend.prepare_actions(a) for a in actions]
    backend = env.backend
    for k in range(20):
        backend.step(acts[k % 16])
    torch.cuda.synchronize()
    # Host cost per step through the full Gymnasium API (torch tensors in and out).
    t0 = time.perf_counter()
    for k in range(steps):
        env.step(actions[k % 16])
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    # Device throughput: back-to-back kernel launches, timed with CUDA events.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for k in range(steps):
        backend.step(acts[k % 16])
    end.record()
    torch.cuda.synchronize()
    device_s = start.elapsed_time(end) / 1e3
    env.close()
    return {
        "backend": "cuda",
        "num_envs": num_envs,
        "steps": steps,
        "env_steps_per_s": num_envs * steps / device_s,
        "api_env_steps_per_s": num_envs * steps / (t2 - t0),
        "host_us_per_step": (t1 - t0) / steps * 1e6,
    }


def bench_numpy(data: MarketData, num_envs: int, steps: int) -> dict:
    env = TradingVectorEnv(num_envs=num_envs, device="cpu", data=data)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, env.single_action_space.n, (16, num_envs))
    for k in range(5):
        env.step(actions[k % 16])
    return _timed_steps("numpy", env, actions, num_envs, steps)


def bench_sync(data: MarketData, num_envs: int, steps: int) -> dict:
    env = gym.vector.SyncVectorEnv([lambda: TradingEnv(data=data) for _ in range(num_envs)])
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 45, (16, num_envs))
    return _timed_steps("gymnasium.SyncVectorEnv(TradingEnv)", env, actions, num_envs, steps)


def bench_outputs(
    data: MarketData, device: str, num_envs: int, steps: int, copy_outputs: bool
) -> dict:
    """Full ``env.step`` through the Gymnasium API, returning arrays the caller owns (the
    default: one block copy per step) or the zero-copy double buffer (``copy_outputs=False``)."""
    env = TradingVectorEnv(num_envs, device, data=data, copy_outputs=copy_outputs)
    env.reset(seed=0)
    label = f"{device.split(':')[0]} step, {'owned' if copy_outputs else 'zero-copy'} outputs"
    if device == "cpu":
        rng = np.random.default_rng(0)
        actions = rng.integers(0, env.single_action_space.n, (16, num_envs))
        for k in range(5):
            env.step(actions[k % 16])
        return _timed_steps(label, env, actions, num_envs, steps)
    import torch

    actions = torch.randint(0, env.single_action_space.n, (16, num_envs), device=device)
    for k in range(20):
        env.step(actions[k % 16])
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for k in range(steps):
        env.step(actions[k % 16])
    end.record()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    env.close()
    return {
        "backend": label,
        "num_envs": num_envs,
        "steps": steps,
        "env_steps_per_s": num_envs * steps / max(start.elapsed_time(end) / 1e3, t2 - t0),
        "host_us_per_step": (t1 - t0) / steps * 1e6,
    }


def _timed_steps(backend: str, env, actions: np.ndarray, num_envs: int, steps: int) -> dict:
    """Wall time of ``steps`` host-side ``env.step`` calls cycling through 16 action rows."""
    t0 = time.perf_counter()
    for k in range(steps):
        env.step(actions[k % 16])
    dt = time.perf_counter() - t0
    return {
        "backend": backend,
        "num_envs": num_envs,
        "steps": steps,
        "env_steps_per_s": num_envs * steps / dt,
        "host_us_per_step": dt / steps * 1e6,
    }


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
    if "outputs" in args.backends:
        devices = ["cpu"] + (["cuda"] if cuda_available() else [])
        for device in devices:
            counts = args.outputs_envs or ([1024, 65536] if device == "cpu" else [1024, 2**20])
            for n in counts:
                for copy_outputs in (True, False):
                    rows.append(bench_outputs(data, device, n, args.steps, copy_outputs))
    baseline = next(
        (r["env_steps_per_s"] for r in rows if r["backend"].startswith("gymnasium")), None
    )
    gpu = None
    if "cuda" in args.backends and cuda_available():
        import torch

        gpu = torch.cuda.get_device_name()
    meta = {
        "commit": commit(),
        "gpu": gpu,
        "cpu": platform.processor() or platform.machine(),
        "data": repr(data),
        "cpu_count": os.cpu_count(),
    }
    print(f"# env throughput  commit={meta['commit']}  gpu={gpu}  cpus={meta['cpu_count']}")
    print(
        f"{'backend':40s} {'num_envs':>9s} {'env-steps/s':>12s} {'host us/step':>13s} {'x sync':>9s}"
    )
    for r in rows:
        ratio = r["env_steps_per_s"] / baseline if baseline else float("nan")
        r["ratio_to_sync"] = ratio
        print(
            f"{r['backend']:40s} {r['num_envs']:9d} {r['env_steps_per_s']:12.3e} {r['host_us_per_step']:13.1f} {ratio:9.1f}"
        )
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
