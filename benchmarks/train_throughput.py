"""Agent throughput: the fused rollout, the monolithic kernel, and GpuDQN.learn end to end.

One run, side by side, same network (the dueling 256-256 / 128 heads policy) throughout:

1. rollout alone (acting + stepping + storing) in env-steps/s: the fused rollout (fp32 and
   bf16 acting) against the source design's monolithic kernel (one thread per env, L steps);
2. ``GpuDQN.learn``: the fused path, the same model through ``SB3VecEnv`` (host round trips),
   and SB3's own ``DQN`` on the NumPy env on the CPU; env-steps/s and gradient-steps/s;
3. time of one train step (sample + forward/backward + priority update) at 1% and 100% fill,
   eager and captured (one CUDA graph replay, ``agents.algorithm.captured_step``);
4. with ``--profile DIR``: torch profiler tables (per-kernel GPU time and launch counts) of
   the eager and the captured train step;
5. with ``--portfolio K``: ``GpuDQN.learn`` on the portfolio env (K instruments, the branching
   head, :class:`~agents.rollouts.portfolio_fused.PortfolioRollout`) at 4,096 envs, beside the
   single env's learn row of the same settings, and nothing else (target: 5e6 env-steps/s).

    python3 -m benchmarks.train_throughput --out train.json
    python3 -m benchmarks.train_throughput --learner-only --profile prof/   # rows 2-4
    python3 -m benchmarks.train_throughput --quick            # CPU-only smoke run
    python3 -m benchmarks.train_throughput --portfolio 8 --out train_portfolio.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch as th

import gpu_trading_env  # noqa: F401
from agents import GpuDQN
from agents.algorithm.policies import DuelingDQNPolicy
from benchmarks.run_info import commit
from gpu_runtime.device import cuda_available
from gpu_trading_env import MarketData, TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties), that of docs/PERFORMANCE.md.
SOURCE = EnvConfig.source_design()


def _sync() -> None:
    if th.cuda.is_available():
        th.cuda.synchronize()


def _model(env: Any, device: str, buffer_size: int, **kw: Any) -> GpuDQN:
    params = dict(
        learning_rate=1e-4,
        buffer_size=buffer_size,
        learning_starts=0,
        batch_size=kw.pop("batch_size", 4096),
        train_freq=1,
        gradient_steps=1,
        target_update_interval=10_000,
        seed=0,
        device=device,
    )
    params.update(kw)
    return GpuDQN("DuelingPolicy", env, **params)


def bench_rollout(
    data: MarketData, num_envs: int, steps: int, precision: str, graph: bool = True
) -> dict:
    from agents.rollouts.fused import FusedRollout

    env = TradingVectorEnv(num_envs=num_envs, device="cuda", data=data, config=SOURCE)
    env.reset(seed=0)
    model = _model(env, "cuda", buffer_size=num_envs * (steps + 8))
    ro = FusedRollout(model, seed=0, act_precision=precision, cuda_graph=graph)
    for _ in range(5):
        ro.step(0.1)
    _sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        ro.step(0.1)
    _sync()
    dt = time.perf_counter() - t0
    name = f"fused rollout ({precision}, {'CUDA graph' if graph else 'eager'})"
    return {
        "what": name,
        "num_envs": num_envs,
        "steps": steps,
        "env_steps_per_s": num_envs * steps / dt,
    }


def bench_rollout_parts(data: MarketData, num_envs: int, reps: int = 50) -> list[dict]:
    """Wall time per call of each part of one fused step (synchronised), to show where it goes."""
    from agents.rollouts.fused import FusedRollout

    env = TradingVectorEnv(num_envs=num_envs, device="cuda", data=data, config=SOURCE)
    env.reset(seed=0)
    model = _model(env, "cuda", buffer_size=num_envs * (3 * reps + 16))
    ro = FusedRollout(model, seed=0, cuda_graph=False)
    obs = ro.obs
    action = ro.act(obs, 0.1)
    o, r, te, tr, info = env.step(action)
    buf = model.replay_buffer
    parts = {
        "act (Q forward, tf32)": lambda: ro.act(obs, 0.1),
        "env.step": lambda: env.step(action),
        "buffer.add_tensors": lambda: buf.add_tensors(obs, o, action, r, te, tr),
        "episode ring": lambda: ro.ring.append(
            info["_episode_return"], info["episode_return"], info["episode_length"]
        ),
        "whole fused step (eager)": lambda: ro.step(0.1),
    }
    rows = []
    for name, fn in parts.items():
        for _ in range(3):
            fn()
        _sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        t1 = time.perf_counter()
        _sync()
        t2 = time.perf_counter()
        rows.append(
            {
                "what": f"part: {name}",
                "num_envs": num_envs,
                "host_us": (t1 - t0) / reps * 1e6,
                "total_us": (t2 - t0) / reps * 1e6,
            }
        )
    return rows


def bench_monolithic(data: MarketData, num_envs: int, steps: int) -> dict:
    from agents.rollouts.monolithic import MonolithicRollout

    env = TradingVectorEnv(num_envs=num_envs, device="cuda", data=data, config=SOURCE)
    env.reset(seed=0)
    model = _model(env, "cuda", buffer_size=1024)
    mono = MonolithicRollout(model, seed=0)
    mono.launch(2, 0.1)
    _sync()
    t0 = time.perf_counter()
    mono.launch(steps, 0.1)
    _sync()
    dt = time.perf_counter() - t0
    return {
        "what": "monolithic kernel (seed design)",
        "num_envs": num_envs,
        "steps": steps,
        "env_steps_per_s": num_envs * steps / dt,
    }


def bench_learn(
    data: MarketData, label: str, env: Any, device: str, timesteps: int, **kw: Any
) -> dict:
    model = _model(env, device, **kw)
    model.learn(total_timesteps=min(timesteps // 10, 50_000))  # warm-up: compile, allocate
    _sync()
    t0 = time.perf_counter()
    grad0 = model._n_updates
    steps0 = model.num_timesteps
    model.learn(total_timesteps=timesteps, reset_num_timesteps=False)
    _sync()
    dt = time.perf_counter() - t0
    return {
        "what": label,
        "num_envs": model.n_envs,
        "env_steps_per_s": (model.num_timesteps - steps0) / dt,
        "grad_steps_per_s": (model._n_updates - grad0) / dt,
        "batch_size": model.batch_size,
        "replay_ratio": model.batch_size
        * model.gradient_steps
        / (model.n_envs * model.train_freq.frequency),
    }


PORTFOLIO_TARGET_ENV_STEPS_PER_S = 5e6  # issue 39: 4,096 envs, K = 8, on an H200


def bench_portfolio_learn(
    n_instruments: int, num_envs: int, timesteps: int, device: str = "cuda", **kw: Any
) -> dict:
    """``GpuDQN.learn`` env-steps/s on the portfolio env (``n_instruments`` independent AR(1)
    instruments, the default 3 exposure levels): on CUDA through the fused portfolio rollout.
    The row adds ``n_instruments`` and ``instrument_steps_per_s`` (env-steps/s x K)."""
    from gpu_trading_env.data.portfolio_markets import ar1_portfolio
    from gpu_trading_env.portfolio_env import PortfolioVectorEnv

    data = ar1_portfolio(5_000, n_instruments, seed=0)
    env = PortfolioVectorEnv(num_envs=num_envs, device=device, data=data)
    where = "fused rollout, captured (bf16, default)" if device == "cuda" else "CPU"
    row = bench_learn(
        data, f"GpuDQN.learn, portfolio K={n_instruments}, {where}", env, device, timesteps, **kw
    )
    row["n_instruments"] = n_instruments
    row["instrument_steps_per_s"] = row["env_steps_per_s"] * n_instruments
    if device == "cuda":
        row["target_env_steps_per_s"] = PORTFOLIO_TARGET_ENV_STEPS_PER_S
        row["meets_target"] = row["env_steps_per_s"] >= PORTFOLIO_TARGET_ENV_STEPS_PER_S
    return row


def bench_sb3_cpu(data: MarketData, timesteps: int, num_envs: int, batch_size: int) -> dict:
    from stable_baselines3 import DQN

    from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv

    th.set_num_threads(2)  # the reference is a 2-core machine
    env = SB3VecEnv(TradingVectorEnv(num_envs=num_envs, device="cpu", data=data, config=SOURCE))
    model = DQN(
        DuelingDQNPolicy,
        env,
        learning_starts=0,
        batch_size=batch_size,
        train_freq=1,
        buffer_size=100_000,
        device="cpu",
        seed=0,
    )
    model.learn(total_timesteps=1000)
    t0 = time.perf_counter()
    n0, s0 = model._n_updates, model.num_timesteps
    model.learn(total_timesteps=timesteps, reset_num_timesteps=False)
    dt = time.perf_counter() - t0
    return {
        "what": "SB3 DQN, NumPy env, CPU (2 threads)",
        "num_envs": num_envs,
        "env_steps_per_s": (model.num_timesteps - s0) / dt,
        "grad_steps_per_s": (model._n_updates - n0) / dt,
        "batch_size": batch_size,
        "replay_ratio": batch_size / num_envs,
    }


def _filled_model(
    data: MarketData,
    capacity: int,
    batch_size: int,
    device: str,
    captured: bool,
    precision: str = "tf32",
) -> GpuDQN:
    env = TradingVectorEnv(
        num_envs=1024, device=device if device == "cuda" else "cpu", data=data, config=SOURCE
    )
    env.reset(seed=0)
    model = _model(
        env,
        device,
        buffer_size=capacity,
        batch_size=batch_size,
        captured_train=captured,
        train_precision=precision,
    )
    model._setup_learn(total_timesteps=1)
    return model


def bench_train_step(
    data: MarketData,
    capacity: int,
    fills: list[float],
    batch_size: int,
    device: str,
    captured: bool = True,
    precision: str = "tf32",
) -> list[dict]:
    """Seconds per ``train(1)`` call (sample, loss, backward, priority update) by buffer fill."""
    rows = []
    model = _filled_model(data, capacity, batch_size, device, captured, precision)
    env = model.trading_env
    buf = model.replay_buffer
    obs_dim = env.single_observation_space.shape[0]
    dev = th.device(device)
    chunk = 1024
    for fill in fills:
        target = int(capacity * fill)
        while buf.size() * buf.n_envs < target:
            o = th.randn(chunk, obs_dim, device=dev)
            buf.add_tensors(
                o,
                o,
                th.randint(0, 45, (chunk,), device=dev),
                th.randn(chunk, device=dev),
                th.zeros(chunk, dtype=th.bool, device=dev),
                th.zeros(chunk, dtype=th.bool, device=dev),
            )
        for _ in range(5):
            model.train(gradient_steps=1, batch_size=batch_size)
        _sync()
        reps = 200 if device == "cuda" else 50
        t0 = time.perf_counter()
        for _ in range(reps):
            model.train(gradient_steps=1, batch_size=batch_size)
        _sync()
        t_end = time.perf_counter()
        path = f"captured, {precision}" if model.captured_train_step is not None else "eager, fp32"
        extra = {}
        if model.captured_train_step is not None and model.captured_train_step.graph is not None:
            graph = model.captured_train_step.graph  # replays alone: the step's GPU time
            t1 = time.perf_counter()
            for _ in range(reps):
                graph.replay()
            _sync()
            extra["ms_per_graph_replay"] = (time.perf_counter() - t1) / reps * 1e3
        rows.append(
            {
                "what": f"train step ({path})",
                "capacity": capacity,
                "fill": fill,
                "stored": int(buf.size() * buf.n_envs),
                "batch_size": batch_size,
                "ms_per_train_step": (t_end - t0) / reps * 1e3,
                **extra,
            }
        )
    return rows


def profile_train_step(
    data: MarketData, capacity: int, batch_size: int, out: Path, steps: int = 20
) -> None:
    """Torch profiler tables of ``steps`` eager and ``steps`` captured train steps (full buffer)."""
    from torch.profiler import ProfilerActivity, profile

    out.mkdir(parents=True, exist_ok=True)
    for captured in (False, True):
        model = _filled_model(data, capacity, batch_size, "cuda", captured, "tf32")
        buf = model.replay_buffer
        dim = buf.obs_shape[0]
        while buf.size() * buf.n_envs < capacity:
            o = th.randn(1024, dim, device="cuda")
            z = th.zeros(1024, dtype=th.bool, device="cuda")
            a = th.randint(0, 45, (1024,), device="cuda")
            buf.add_tensors(o, o, a, th.randn(1024, device="cuda"), z, z)
        for _ in range(5):
            model.train(gradient_steps=1, batch_size=batch_size)
        _sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                model.train(gradient_steps=1, batch_size=batch_size)
            _sync()
        name = "captured" if captured else "eager"
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=60)
        (out / f"profile_{name}.txt").write_text(
            f"# {steps} train steps, batch {batch_size}, capacity {capacity}, {name}\n{table}\n"
        )
        print(f"profile ({name}) written to {out}/profile_{name}.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small CPU-only run")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--learner-only", action="store_true", help="skip the rollout and monolithic rows"
    )
    parser.add_argument("--profile", type=Path, default=None, help="write profiler tables here")
    parser.add_argument(
        "--defaults-only",
        action="store_true",
        help="the learner rows of GpuDQN's defaults alone (the captured bf16 train step and the "
        "fused learn), beside SB3's DQN on the CPU: a release check that fits a short GPU call",
    )
    parser.add_argument(
        "--portfolio",
        type=int,
        default=None,
        metavar="K",
        help="GpuDQN.learn on the portfolio env of K instruments at 4,096 envs beside the single "
        "env's learn row, and no other row (with --quick: a small CPU run of both)",
    )
    args = parser.parse_args()
    if args.portfolio is not None and args.portfolio < 1:
        parser.error(f"--portfolio {args.portfolio} is invalid: allowed is K >= 1 instruments")
    data = MarketData.default()
    gpu = cuda_available() and th.cuda.is_available() and not args.quick
    rows = (
        portfolio_rows(data, args.portfolio, gpu)
        if args.portfolio
        else learner_rows(data, args, gpu)
    )
    report(rows, gpu, args.out)


def portfolio_rows(data: MarketData, n_instruments: int, gpu: bool) -> list[dict]:
    """``--portfolio K``: the single env's learn row and the portfolio env's, same settings."""
    if not gpu:  # a smoke run of both rows on the CPU
        env = TradingVectorEnv(num_envs=16, device="cpu", data=data, config=SOURCE)
        single = bench_learn(
            data, "GpuDQN.learn, CPU", env, "cpu", 2000, buffer_size=50_000, batch_size=256
        )
        return [
            single,
            bench_portfolio_learn(
                n_instruments, 16, 2000, device="cpu", buffer_size=50_000, batch_size=256
            ),
        ]
    env = TradingVectorEnv(num_envs=4096, device="cuda", data=data, config=SOURCE)
    single = bench_learn(
        data,
        "GpuDQN.learn, fused rollout, captured (bf16, default)",
        env,
        "cuda",
        4096 * 2000,
        buffer_size=2_000_000,
    )
    return [single, bench_portfolio_learn(n_instruments, 4096, 4096 * 2000, buffer_size=2_000_000)]


def learner_rows(data: MarketData, args: argparse.Namespace, gpu: bool) -> list[dict]:
    """The rows of the default run (``--learner-only``, ``--defaults-only``, ``--quick``)."""
    rows: list[dict] = []
    if gpu and args.profile is not None:
        profile_train_step(data, 2**21, 4096, args.profile)
    if gpu and not args.learner_only:
        for n in (8192, 65536):
            for precision, graph in (
                ("tf32", True),
                ("fp32", True),
                ("tf32", False),
                ("fp32", False),
            ):
                rows.append(bench_rollout(data, n, 200, precision, graph))
        rows.extend(bench_rollout_parts(data, 8192))
        rows.extend(bench_rollout_parts(data, 65536))
        rows.append(bench_monolithic(data, 128, 500))
        rows.append(bench_monolithic(data, 8192, 50))
        rows.append(bench_monolithic(data, 65536, 10))
    if gpu:
        variants = (
            (True, "bf16"),  # GpuDQN's default ("auto") from compute capability 8.0
            (True, "tf32"),
            (True, "fp32"),
            (False, "fp32"),
        )
        for captured, precision in variants[:1] if args.defaults_only else variants:
            rows.extend(
                bench_train_step(data, 2**21, [0.01, 1.0], 4096, "cuda", captured, precision)
            )
        fused_env = TradingVectorEnv(num_envs=4096, device="cuda", data=data, config=SOURCE)
        rows.append(
            bench_learn(
                data,
                "GpuDQN.learn, fused rollout, captured (bf16, default)",
                fused_env,
                "cuda",
                4096 * 2000,
                buffer_size=2_000_000,
            )
        )
    if gpu and not args.defaults_only:
        tf32_env = TradingVectorEnv(num_envs=4096, device="cuda", data=data, config=SOURCE)
        rows.append(
            bench_learn(
                data,
                "GpuDQN.learn, fused rollout, captured tf32",
                tf32_env,
                "cuda",
                4096 * 2000,
                buffer_size=2_000_000,
                train_precision="tf32",
            )
        )
        eager_env = TradingVectorEnv(num_envs=4096, device="cuda", data=data, config=SOURCE)
        rows.append(
            bench_learn(
                data,
                "GpuDQN.learn, fused rollout, eager",
                eager_env,
                "cuda",
                4096 * 400,
                buffer_size=2_000_000,
                captured_train=False,
            )
        )
        host_env = TradingVectorEnv(num_envs=4096, device="cuda", data=data, config=SOURCE)
        rows.append(
            bench_learn(
                data,
                "GpuDQN.learn through SB3VecEnv",
                host_env,
                "cuda",
                4096 * 60,
                buffer_size=2_000_000,
                fused_rollout=False,
            )
        )
    rows.append(bench_sb3_cpu(data, 2000 if args.quick else 20_000, 16, 256))
    if args.quick:
        env = TradingVectorEnv(num_envs=16, device="cpu", data=data, config=SOURCE)
        rows.append(
            bench_learn(
                data, "GpuDQN.learn, CPU", env, "cpu", 2000, buffer_size=50_000, batch_size=256
            )
        )
        rows.extend(bench_train_step(data, 2**14, [0.01, 1.0], 256, "cpu"))
    return rows


def report(rows: list[dict], gpu: bool, out: Path | None) -> None:
    """Print the rows (ratios to SB3's DQN on the CPU where that row ran) and write the JSON."""
    ref = next((r["env_steps_per_s"] for r in rows if r["what"].startswith("SB3 DQN")), None)
    meta = {"commit": commit(), "gpu": th.cuda.get_device_name() if gpu else None}
    print(f"# train throughput  commit={meta['commit']}  gpu={meta['gpu']}")
    for r in rows:
        if "host_us" in r:
            print(
                f"{r['what']:42s} N={r['num_envs']:6d}  host {r['host_us']:8.1f} us  total {r['total_us']:8.1f} us"
            )
        elif "env_steps_per_s" in r:
            extra = f"  grad-steps/s {r['grad_steps_per_s']:.1f}" if "grad_steps_per_s" in r else ""
            if "instrument_steps_per_s" in r:
                extra += f"  instrument-steps/s {r['instrument_steps_per_s']:10.3e}"
            if "target_env_steps_per_s" in r:
                verdict = "meets" if r["meets_target"] else "MISSES"
                extra += f"  ({verdict} the target {r['target_env_steps_per_s']:.0e})"
            ratio = ""
            if ref is not None:
                r["ratio_to_sb3_cpu"] = r["env_steps_per_s"] / ref
                ratio = f"  x SB3-CPU {r['ratio_to_sb3_cpu']:8.1f}"
            print(
                f"{r['what']:42s} N={r['num_envs']:6d}  env-steps/s {r['env_steps_per_s']:10.3e}{ratio}{extra}"
            )
        else:
            print(
                f"{r['what']:42s} fill={r['fill']:5.0%} stored={r['stored']:9d}  {r['ms_per_train_step']:.3f} ms"
                + (
                    f"  (graph replay alone {r['ms_per_graph_replay']:.3f} ms)"
                    if "ms_per_graph_replay" in r
                    else ""
                )
            )
    if out:
        out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
