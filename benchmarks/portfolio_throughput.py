"""Portfolio env throughput on the GPU: env-steps/s and instrument-steps/s over K instruments.

    python3 -m benchmarks.portfolio_throughput --out portfolio.json
    python3 -m benchmarks.portfolio_throughput --ks 8 --envs 1048576 --steps 200

Per K (default 1, 4, 8, 32, 64) at 2^20 envs, or the largest power-of-two N whose arrays fit
in the GPU's free memory (the table says which N ran): the CUDA backend steps into static
outputs (``step_bound``, what a CUDA graph captures) with random actions drawn on the device
beforehand, SAME_STEP autoreset (the fused rollout's mode), ``fill="close"``. The episodes are
first spread over every phase (one env in ``episode_length`` reset at each of as many steps),
so that as many end per step as in a long run; after a warm-up, CUDA events time ``--steps``
back-to-back steps: env-steps/s = N x steps / time, and instrument-steps/s = K x that.

Memory traffic: :func:`bytes_per_env_step` counts each array element a step reads or writes
once (state, actions, prices, the K*F feature floats of the env's bar, every output), the
final observation of an ended episode at 1 / episode_length of a row. It is the traffic of a
kernel with perfect caching of nothing but what it touches: the feature rows that envs at the
same bar share may come from L2 instead, so the figure is an upper bound of DRAM traffic and
GB/s = bytes x env-steps/s compares it with the GPU's peak bandwidth (from its memory clock
and bus width, or ``--peak-gbps``) and a measured device-to-device copy.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.run_info import machine

DEFAULT_KS = (1, 4, 8, 32, 64)
TARGET_INSTRUMENT_STEPS = 1e9  # at 2^20 envs x K = 8 (docs/PERFORMANCE.md)
# Bytes of the per-env state a step reads and writes: bar int64, step_in_episode int32, cash
# and episode_return float64, done_flag uint8 (read); the same but done_flag written.
_STATE_READ = 8 + 4 + 8 + 8 + 1
_STATE_WRITE = 8 + 4 + 8 + 8
# Per-env outputs but the observations and [N, K] arrays: reward f32, terminated, truncated,
# done (bool), components 2 x f32, portfolio_value f64, episode_return f32, episode_length i32.
_OUTPUT_SCALARS = 4 + 3 + 8 + 8 + 4 + 4


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", nargs="+", type=int, default=list(DEFAULT_KS), help="K values")
    parser.add_argument("--envs", type=int, default=2**20, help="envs N (halved until it fits)")
    parser.add_argument("--steps", type=int, default=100, help="timed steps per K")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    parser.add_argument("--bars", type=int, default=4000, help="bars of the synthetic grid")
    parser.add_argument(
        "--features", type=int, default=None, help="features per instrument kept (default: all)"
    )
    parser.add_argument("--episode-length", type=int, default=500)
    parser.add_argument("--action-sets", type=int, default=4, help="action tensors cycled")
    parser.add_argument("--peak-gbps", type=float, default=None, help="the GPU's peak GB/s")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    for name in ("envs", "steps", "bars", "episode_length", "action_sets"):
        if getattr(args, name) < 1:
            parser.error(
                f"--{name.replace('_', '-')} = {getattr(args, name)} is invalid: allowed is >= 1"
            )
    if args.warmup < 0:
        parser.error(f"--warmup = {args.warmup} is invalid: allowed is >= 0")
    if any(k < 1 for k in args.ks):
        parser.error(f"--ks = {args.ks} is invalid: allowed are integers >= 1")
    if args.features is not None and args.features < 1:
        parser.error(f"--features = {args.features} is invalid: allowed is >= 1")
    return args


def obs_dim(k: int, f: int) -> int:
    """D = K*F + 1 + K."""
    return k * f + 1 + k


def bytes_per_env_step(k: int, f: int, episode_length: int, next_open: bool = False) -> float:
    """Bytes one env's step reads and writes (each element once; see the module docstring).

    State: the [N] scalars, position and costs [K, N] float64 read and written; actions int64
    [N, K]; close_t and close_{t+1} (and open_{t+1} with ``next_open``) float64 [K]; the bar's
    K*F float32 features; outputs: obs D float32, positions and costs [N, K] float64, the
    scalars, and a final observation (D float32) once per episode.
    """
    d = obs_dim(k, f)
    state = _STATE_READ + _STATE_WRITE + 4 * 8 * k
    market = (3 if next_open else 2) * 8 * k + 4 * k * f
    outputs = 4 * d + 2 * 8 * k + _OUTPUT_SCALARS + 4 * d / episode_length
    return float(state + 8 * k + market + outputs)


def resident_bytes_per_env(k: int, f: int, action_sets: int) -> int:
    """Device bytes the benchmark holds per env: state, static outputs (obs and final_obs),
    the action tensors, and the observation a reset returns."""
    d = obs_dim(k, f)
    state = 8 + 4 + 8 + 8 + 8 + 8 + 1 + 2 * 8 * k
    outputs = 2 * 4 * d + 2 * 8 * k + _OUTPUT_SCALARS
    return state + outputs + 8 * k * action_sets + 4 * d


def fitting_envs(requested: int, per_env: int, free_bytes: int, fraction: float = 0.8) -> int:
    """``requested`` halved until ``per_env`` bytes each fit in ``fraction`` of ``free_bytes``
    (at least 1)."""
    n = requested
    while n > 1 and n * per_env > fraction * free_bytes:
        n //= 2
    return n


def format_rows(rows: list[dict]) -> list[str]:
    lines = [
        f"{'K':>3} {'N':>8} {'D':>5} {'ms/step':>8} {'env-steps/s':>12} {'instr-steps/s':>13} "
        f"{'B/env-step':>10} {'GB/s':>7} {'%peak':>6} {'%copy':>6}"
    ]
    for r in rows:
        lines.append(
            f"{r['k']:>3} {r['num_envs']:>8} {r['obs_dim']:>5} {r['ms_per_step']:>8.3f} "
            f"{r['env_steps_per_s']:>12.3e} {r['instrument_steps_per_s']:>13.3e} "
            f"{r['bytes_per_env_step']:>10.0f} {r['gb_per_s']:>7.0f} "
            f"{_pct(r.get('fraction_of_peak')):>6} {_pct(r.get('fraction_of_copy')):>6}"
        )
    return lines


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}"


def peak_bandwidth_gbps(override: float | None) -> float | None:
    """The GPU's peak DRAM bandwidth in GB/s: ``override``, else 2 x memory clock x bus width
    from the device attributes (None where the driver does not report them)."""
    if override is not None:
        return override
    import cupy as cp

    try:
        attrs = cp.cuda.Device().attributes
        clock_khz, bus_bits = attrs["MemoryClockRate"], attrs["GlobalMemoryBusWidth"]
    except Exception:  # attributes a driver may not report
        return None
    if not clock_khz or not bus_bits:
        return None
    return 2.0 * clock_khz * 1e3 * bus_bits / 8 / 1e9


def copy_bandwidth_gbps(n_bytes: int = 2**31, repeats: int = 10) -> float:
    """Measured device-to-device copy bandwidth (read + write bytes per second), GB/s."""
    import torch

    src = torch.empty(n_bytes // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n_bytes * repeats / seconds / 1e9


def market(k: int, n_bars: int, features: int | None):
    """K synthetic GBM instruments on one grid (``features``: the first F of each kept)."""
    import dataclasses

    from gpu_trading_env.data.market_data import MarketData
    from gpu_trading_env.data.portfolio_data import PortfolioData

    data = PortfolioData.from_market_data(
        MarketData.synthetic("gbm", n_bars=n_bars, n_instruments=k, seed=0)
    )
    if features is not None and features < data.n_features:
        data = dataclasses.replace(
            data,
            features=data.features[:, :, :features].copy(),
            feature_names=data.feature_names[:features],
        )
    return data


def bench_k(k: int, args: argparse.Namespace, peak: float | None, copy_gbps: float) -> dict:
    """One row: the CUDA backend of K instruments stepped ``args.steps`` times."""
    import numpy as np
    import torch

    from gpu_trading_env.backends.portfolio_cuda import PortfolioCudaBackend
    from gpu_trading_env.core.portfolio_config import PortfolioConfig

    data = market(k, args.bars, args.features)
    f = data.n_features
    free, _ = torch.cuda.mem_get_info()
    n = fitting_envs(args.envs, resident_bytes_per_env(k, f, args.action_sets), free)
    config = PortfolioConfig(
        episode_length=args.episode_length, autoreset_mode="same_step", max_leverage=float(k)
    )
    backend = PortfolioCudaBackend(data, config, n)
    every = np.ones(n, dtype=bool)
    backend.seed(np.arange(n, dtype=np.uint64), every)
    backend.reset(every, np.full(n, -1, dtype=np.int64))  # its observation is dropped at once
    gen = torch.Generator(device="cuda").manual_seed(0)
    levels = config.n_levels
    actions = [
        torch.randint(0, levels, (n, k), device="cuda", generator=gen)
        for _ in range(args.action_sets)
    ]
    outputs = backend.make_outputs()
    bound = backend.bind_outputs(outputs)
    stream = backend.stream_handle()
    # Episodes spread over every phase first, so that about N / episode_length end per step
    # as in a long run (envs reset together would all end on the same step).
    phase = np.arange(n) % args.episode_length
    start_draw = np.full(n, -1, dtype=np.int64)
    for s in range(args.episode_length):
        backend.reset(phase == s, start_draw)
        backend.step_bound(actions[s % len(actions)], bound, check=False, stream=stream)
    for s in range(args.warmup):
        backend.step_bound(actions[s % len(actions)], bound, check=False, stream=stream)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for s in range(args.steps):
        backend.step_bound(actions[s % len(actions)], bound, check=False, stream=stream)
    end.record()
    torch.cuda.synchronize()
    backend.check_errors()
    seconds = start.elapsed_time(end) / 1e3
    env_steps = n * args.steps / seconds
    per_env = bytes_per_env_step(k, f, args.episode_length)
    gbps = per_env * env_steps / 1e9
    row = {
        "k": k,
        "num_envs": n,
        "requested_envs": args.envs,
        "n_features": f,
        "obs_dim": obs_dim(k, f),
        "steps": args.steps,
        "ms_per_step": seconds / args.steps * 1e3,
        "env_steps_per_s": env_steps,
        "instrument_steps_per_s": env_steps * k,
        "bytes_per_env_step": per_env,
        "bytes_per_step": per_env * n,
        "gb_per_s": gbps,
        "fraction_of_peak": None if peak is None else gbps / peak,
        "fraction_of_copy": gbps / copy_gbps,
    }
    del backend, outputs, actions, bound
    torch.cuda.empty_cache()
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()  # the state, for the next K's free memory
    return row


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from gpu_runtime.device import cuda_available

    if not cuda_available():
        print("portfolio_throughput needs a CUDA GPU and CuPy; none was found", file=sys.stderr)
        return 2
    peak = peak_bandwidth_gbps(args.peak_gbps)
    copy_gbps = copy_bandwidth_gbps()
    rows = [bench_k(k, args, peak, copy_gbps) for k in args.ks]
    meta = machine() | {
        "peak_gb_per_s": peak,
        "copy_gb_per_s": copy_gbps,
        "autoreset_mode": "same_step",
        "fill": "close",
        "episode_length": args.episode_length,
        "bars": args.bars,
    }
    print(
        f"# portfolio env throughput  commit={meta['commit']}  gpu={meta['gpu']}  "
        f"peak={_gb(peak)} GB/s  copy={copy_gbps:.0f} GB/s"
    )
    for line in format_rows(rows):
        print(line)
    target = [r for r in rows if r["k"] == 8 and r["num_envs"] == 2**20]
    if target:
        ok = target[0]["instrument_steps_per_s"] >= TARGET_INSTRUMENT_STEPS
        print(
            f"# 2^20 envs x K = 8: {target[0]['instrument_steps_per_s']:.3e} instrument-steps/s "
            f"({'meets' if ok else 'below'} the 1e9 target)"
        )
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    return 0


def _gb(x: float | None) -> str:
    return "?" if x is None else f"{x:.0f}"


if __name__ == "__main__":
    raise SystemExit(main())
