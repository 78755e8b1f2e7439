"""Where one iteration of ``GpuDQN.learn`` on the fused path spends its time.

4,096 CUDA envs, batch 4,096, one gradient step per vector step (``train_throughput``'s
settings). Three views:

- ``--view device``: a torch-profiler timeline of ``--iterations`` iterations of ``learn``, then
  of the rollout step alone and of the train step alone: wall time per iteration, GPU kernel
  time per iteration, the share of the wall time the GPU is busy, and the kernels by total time.
  A busy share near 100% means the GPU's work sets the pace; well below, the host does.
- ``--view host``: the unprofiled time per iteration, then cProfile by own and cumulative time.
- ``--view loop``: unprofiled wall time per iteration of the rollout step alone, the train
  step alone, the two alternating without the rest of ``learn``, and ``learn``: what the host
  loop around the two graphs adds.
- ``--view both`` (default): device and host.

    python3 -m benchmarks.learn_profile --iterations 1500 [--precision tf32] [--trace t.json]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch as th
from torch.profiler import ProfilerActivity, profile

from benchmarks.train_throughput import _model
from gpu_runtime.precision import PRECISIONS
from gpu_trading_env import MarketData, TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties), that of docs/PERFORMANCE.md.
SOURCE = EnvConfig.source_design()

NUM_ENVS = 4096


def _kernel_intervals(prof: Any) -> list[tuple[str, float, float]]:
    """(name, start us, end us) of every GPU kernel and memcpy/memset the profiler saw."""
    out = []
    for evt in prof.events():
        if evt.device_type == th.autograd.DeviceType.CUDA:
            out.append((evt.name, evt.time_range.start, evt.time_range.end))
    return out


def _busy(intervals: list[tuple[str, float, float]]) -> float:
    """Microseconds covered by the union of the intervals."""
    total, end = 0.0, float("-inf")
    for _, s, e in sorted(intervals, key=lambda x: x[1]):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def timeline(label: str, fn: Callable[[], None], n: int, rows: int, trace: str | None) -> None:
    """Run ``fn`` (which does ``n`` iterations) under the torch profiler and print its view."""
    th.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        fn()
        th.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1e6
    kernels = _kernel_intervals(prof)
    if not kernels:
        print(f"\n== {label}: the profiler saw no GPU activity")
        return
    span = max(e for _, _, e in kernels) - min(s for _, s, _ in kernels)
    busy = _busy(kernels)
    total = sum(e - s for _, s, e in kernels)
    print(f"\n== {label}: {n} iterations")
    print(
        f"wall {wall / n:.1f} us/iter (profiled); GPU span {span / n:.1f} us/iter; "
        f"kernel time {total / n:.1f} us/iter; busy {busy / n:.1f} us/iter "
        f"({100 * busy / span:.0f}% of the span); {len(kernels) / n:.1f} kernels/iter"
    )
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for name, s, e in kernels:
        by_name[name][0] += e - s
        by_name[name][1] += 1
    print(f"{'us/iter':>8} {'n/iter':>7} {'us each':>8}  kernel")
    for name, (t, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:rows]:
        print(f"{t / n:8.2f} {c / n:7.2f} {t / c:8.2f}  {name[:110]}")
    api: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for evt in prof.events():
        if evt.device_type == th.autograd.DeviceType.CPU and evt.name.startswith(("cuda", "cu")):
            api[evt.name][0] += evt.time_range.end - evt.time_range.start
            api[evt.name][1] += 1
    print("host side, CUDA API calls (a synchronize here stalls the host):")
    for name, (t, c) in sorted(api.items(), key=lambda kv: -kv[1][0])[:12]:
        print(f"{t / n:8.2f} {c / n:7.2f} {t / c:8.2f}  {name}")
    if trace:
        prof.export_chrome_trace(trace.replace(".json", f"_{label.split()[0]}.json"))


def _loops(model: Any) -> dict[str, Callable[[int], None]]:
    """``k`` iterations of each way of stepping: the rollout step alone, the train step alone,
    both in a bare loop, and ``learn`` (epsilon as the model has it now)."""
    rollout = model.rollout
    eps = float(model.exploration_rate)
    step = model._captured_train_step()
    b = model.batch_size

    def rollout_only(k: int) -> None:
        for _ in range(k):
            rollout.step(eps)

    def train_only(k: int) -> None:
        for _ in range(k):
            step.train(1, b)

    def both(k: int) -> None:
        for _ in range(k):
            rollout.step(eps)
            step.train(1, b)

    def learn(k: int) -> None:
        model.learn(total_timesteps=NUM_ENVS * k, reset_num_timesteps=False)

    return {"rollout": rollout_only, "train": train_only, "both": both, "learn": learn}


def device_view(model: Any, n: int, rows: int, trace: str | None) -> None:
    timeline(
        "learn (rollout + train + host loop)",
        lambda: _loops(model)["learn"](n),
        n,
        rows,
        trace,
    )
    loops = _loops(model)
    rollout_only, train_only = loops["rollout"], loops["train"]
    timeline("rollout step alone (act + env step + store)", lambda: rollout_only(n), n, rows, trace)
    timeline("train step alone (captured)", lambda: train_only(n), n, rows, trace)


def _per_iter(fn: Callable[[int], None], n: int) -> tuple[float, float]:
    """Unprofiled microseconds per iteration of ``fn(n)``, and host microseconds per iteration
    to issue 32 iterations without waiting (below the first: the GPU sets the pace)."""
    th.cuda.synchronize()
    t0 = time.perf_counter()
    fn(n)
    th.cuda.synchronize()
    wall = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    fn(32)
    host = (time.perf_counter() - t0) / 32 * 1e6
    th.cuda.synchronize()
    return wall, host


def loop_view(model: Any, n: int) -> None:
    loops = _loops(model)
    rows = [
        ("rollout step alone", loops["rollout"]),
        ("train step alone", loops["train"]),
        ("rollout + train, bare loop", loops["both"]),
        ("learn", loops["learn"]),
    ]
    print("unprofiled, us per iteration (wall; host time to issue one, not waiting):")
    for label, fn in rows:
        wall, host = _per_iter(fn, n)
        print(f"  {label:28s} {wall:8.1f} {host:8.1f}  ({NUM_ENVS / wall * 1e6:.3e} env-steps/s)")


def host_view(model: Any, n: int, rows: int) -> None:
    prof = cProfile.Profile()
    prof.enable()
    model.learn(total_timesteps=NUM_ENVS * n, reset_num_timesteps=False)
    th.cuda.synchronize()
    prof.disable()
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(rows)
        print(out.getvalue())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=1500)
    p.add_argument("--precision", choices=list(PRECISIONS), default="bf16")
    p.add_argument(
        "--act-precision",
        choices=list(PRECISIONS),
        default=None,
        help="the fused rollout's acting forward (default: the rollout's own default)",
    )
    p.add_argument("--view", choices=["device", "host", "loop", "both"], default="both")
    p.add_argument("--rows", type=int, default=45, help="functions or kernels listed per table")
    p.add_argument("--trace", default=None, help="write Chrome traces (path ending in .json)")
    args = p.parse_args()
    env = TradingVectorEnv(
        num_envs=NUM_ENVS, device="cuda", data=MarketData.default(), config=SOURCE
    )
    model = _model(env, "cuda", 2_000_000, train_precision=args.precision)
    if args.act_precision is not None:
        from agents.rollouts.fused import FusedRollout

        model.rollout = FusedRollout(model, seed=0, act_precision=args.act_precision)
    model.learn(total_timesteps=NUM_ENVS * 200)  # compile, capture, allocate
    th.cuda.synchronize()
    n = args.iterations
    t0 = time.perf_counter()
    model.learn(total_timesteps=NUM_ENVS * n, reset_num_timesteps=False)
    th.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"unprofiled: {dt / n * 1e6:.1f} us per iteration, {NUM_ENVS * n / dt:.3e} env-steps/s")
    if args.view == "loop":
        loop_view(model, n)
    if args.view in ("device", "both"):
        device_view(model, min(n, 300), args.rows, args.trace)
    if args.view in ("host", "both"):
        host_view(model, n, args.rows)


if __name__ == "__main__":
    main()
