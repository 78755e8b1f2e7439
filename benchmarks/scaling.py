"""Data-parallel scaling of ``GpuDQN.learn``: 1 GPU against N GPUs of one host, same per-GPU settings.

Each configuration runs in fresh processes (``torch.multiprocessing.spawn``, one per GPU; the
N-GPU one with ``GpuDQN(..., distributed=True)`` over NCCL), on the CLI's quickstart data
(``MarketData.default()``, the first 80% of the bars to train on, episode length 200, the
train command's env defaults) with the train command's hyperparameters, per GPU: ``--num-envs``
envs (4,096), batch ``--batch-size`` (4,096), one gradient step per vector step. Per
configuration:

1. probe: ``learn`` for ``--probe-steps`` vector steps past ``learning_starts``; the
   steady-state env-steps/s (all GPUs together) over those steps;
2. equal wall time: a fresh model, ``learn`` with ``total_timesteps`` = probe rate x
   ``--seconds`` (so its exploration, beta and target schedules run to their end in about that
   time), then the greedy policy backtested on the remaining 20% of the bars (costs in): total
   return and Sharpe; the run's own env-steps/s;
3. (N GPUs) the all-reduce alone: ``--allreduce-iters`` all-reduces of a buffer the size of the
   flat gradient (the default dueling network), eager and replayed from a CUDA graph, per call.

On a host with 2 GPUs (or N)::

    python3 -m benchmarks.scaling --nproc 2 --out scaling.json

A quick CPU run of the same code (gloo, tiny sizes; the SB3 loop instead of the fused one)::

    python3 -m benchmarks.scaling --device cpu --backend gloo --nproc 2 --num-envs 16 \\
        --batch-size 64 --probe-steps 100 --seconds 5 --out scaling_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch as th
import torch.distributed as dist
import torch.multiprocessing as mp

from benchmarks.run_info import machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        th.cuda.synchronize()


class _Clock:
    """Times ``learn`` from the first vector step at or past ``start`` env-steps to its end."""

    def __init__(self, device: str, start: int) -> None:
        from stable_baselines3.common.callbacks import BaseCallback

        clock = self

        class Callback(BaseCallback):
            def _on_step(self) -> bool:
                if clock.t0 is None and self.model.num_timesteps >= clock.start:
                    _sync(clock.device)
                    clock.t0 = time.perf_counter()
                    clock.steps0 = int(self.model.num_timesteps)
                return True

        self.device = device
        self.start = start
        self.t0: float | None = None
        self.steps0 = 0
        self.callback = Callback()

    def rate(self, model: Any) -> float:
        _sync(self.device)
        assert self.t0 is not None, "learn ended before the timed part began"
        return (model.num_timesteps - self.steps0) / (time.perf_counter() - self.t0)


def _settings(args: argparse.Namespace, world: int, total: int) -> dict[str, Any]:
    """The train command's hyperparameters (agents.pipelines.model_selection.train_selected), per GPU."""
    n = args.num_envs
    return dict(
        learning_rate=3e-4,
        buffer_size=args.buffer_size,
        learning_starts=max(10 * n * world, 1000),  # 10 vector steps, in env-steps of all ranks
        batch_size=args.batch_size,
        gamma=0.9,
        train_freq=1,
        gradient_steps=1,
        target_update_interval=max(total // 50, n * world),
        exploration_fraction=0.3,
        exploration_final_eps=0.02,
    )


def _model(args: argparse.Namespace, data: Any, config: Any, device: str, world: int, total: int):
    import gymnasium as gym

    import gpu_trading_env  # noqa: F401
    from agents import GpuDQN

    env = gym.make_vec(
        "GpuTrading-v0", num_envs=args.num_envs, device=device, data=data, config=config
    )
    model = GpuDQN(
        "DuelingPolicy",
        env,
        seed=args.seed,
        device=device,
        distributed=world > 1,
        **_settings(args, world, total),
    )
    return model, env


def _allreduce_times(args: argparse.Namespace, numel: int, device: str, world: int) -> dict:
    """Per-call time of all-reducing ``numel`` float32 values: eager, and from a CUDA graph."""
    buf = th.ones(numel, dtype=th.float32, device=device)
    for _ in range(10):
        dist.all_reduce(buf)
    _sync(device)
    n = args.allreduce_iters
    t0 = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(buf)
    _sync(device)
    eager = (time.perf_counter() - t0) / n
    out: dict[str, Any] = {"iterations": n, "eager_ms": eager * 1e3, "graph_ms": None}
    if device.startswith("cuda"):
        try:
            side = th.cuda.Stream()
            side.wait_stream(th.cuda.current_stream())
            with th.cuda.stream(side):
                dist.all_reduce(buf)
            th.cuda.current_stream().wait_stream(side)
            graph = th.cuda.CUDAGraph()
            with th.cuda.graph(graph):
                for _ in range(10):
                    dist.all_reduce(buf)
            graph.replay()
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(n // 10):
                graph.replay()
            _sync(device)
            out["graph_ms"] = (time.perf_counter() - t0) / (10 * (n // 10)) * 1e3
            del graph  # before the group's destroy (pytorch/pytorch#115388)
        except RuntimeError as err:  # recorded, not fatal: the eager figure stands
            out["graph_error"] = str(err)[:300]
    bytes_ = numel * 4
    per_call = out["graph_ms"] or out["eager_ms"]
    out["bus_bandwidth_GB_per_s"] = 2 * (world - 1) / world * bytes_ / (per_call * 1e-3) / 1e9
    return out


def _worker(rank: int, world: int, port: int, args: argparse.Namespace, out_dir: str) -> None:
    from agents.pipelines.backtest_policies import greedy_policy, known_rule
    from gpu_trading_env import MarketData
    from gpu_trading_env.core.config import EnvConfig
    from gpu_trading_env.reports.backtest import backtest
    from gpu_trading_env.reports.metrics import bars_per_year

    cuda = args.device == "cuda"
    if cuda:
        th.cuda.set_device(rank)
        device = f"cuda:{rank}"
    else:
        th.set_num_threads(args.threads)
        device = "cpu"
    if world > 1:
        dist.init_process_group(
            args.backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=600),
        )
    data = MarketData.default()
    train, test = data.split(0.8)
    # The source design's 45 actions and barriers: docs/SCALING.md's gradient size is theirs.
    config = EnvConfig.source_design(
        episode_length=200, diversity_penalty=0.0, risk_penalty_scale=0.0
    )
    per_year = bars_per_year(data.instrument(0).timestamps)
    step = args.num_envs * world  # env-steps of one vector step, all ranks

    # 1. probe: steady-state throughput (and the kernels compiled, the graphs captured).
    starts = _settings(args, world, 0)["learning_starts"]
    total = starts + args.probe_steps * step
    model, env = _model(args, train, config, device, world, total)
    clock = _Clock(device, starts + step * max(args.probe_steps // 5, 1))
    model.learn(total, callback=clock.callback)
    probe_rate = clock.rate(model)
    if world > 1:  # rank 0's rate sizes the run on every rank (their budgets must agree)
        shared = th.tensor([probe_rate], dtype=th.float64, device=device)
        dist.broadcast(shared, src=0)
        probe_rate = float(shared.item())
    model.release_cuda_graphs()  # a graph holding an all-reduce would hang the group's destroy
    env.close()
    del model, env

    # 2. equal wall time: a budget sized from the probe rate, schedules run to their end.
    total = max(int(probe_rate * args.seconds) // step, 1) * step
    total = max(total, starts + step)
    model, env = _model(args, train, config, device, world, total)
    clock = _Clock(device, 0)
    _sync(device)
    t0 = time.perf_counter()
    model.learn(total, callback=clock.callback)
    _sync(device)
    wall = time.perf_counter() - t0
    result: dict[str, Any] = {
        "world_size": world,
        "probe_env_steps_per_s": probe_rate,
        "probe_env_steps_per_s_per_gpu": probe_rate / world,
        "run_total_timesteps": int(model.num_timesteps),
        "run_wall_s": wall,
        "run_env_steps_per_s": model.num_timesteps / wall,
        "run_gradient_steps": int(model._n_updates),
    }
    dp = model.data_parallel
    numel = sum(p.numel() for p in model.q_net.parameters())
    result["gradient_values"] = numel
    if dp is not None:
        result["parameter_spread_after_run"] = dp.parameter_spread(model)
    if rank == 0:
        test_part = test.instrument(0)
        bt = backtest(greedy_policy(model), test_part, config, per_year=per_year)
        result["out_of_sample"] = {
            "bars": int(bt.strategy.n_bars),
            "total_return": bt.strategy.total_return,
            "sharpe": bt.strategy.sharpe,
        }
        rule = known_rule(test_part, config)
        if rule is not None:
            result["out_of_sample"]["known_rule_total_return"] = rule.strategy.total_return
    model.release_cuda_graphs()
    env.close()

    # 3. the all-reduce alone.
    if world > 1:
        times = _allreduce_times(args, numel, device, world)
        if rank == 0:
            result["allreduce"] = times
    if rank == 0:
        (Path(out_dir) / f"world{world}.json").write_text(json.dumps(result))
    if world > 1:
        dist.destroy_process_group()


def _run(world: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        mp.spawn(_worker, args=(world, _free_port(), args, tmp), nprocs=world, join=True)
        result = json.loads((Path(tmp) / f"world{world}.json").read_text())
    result["process_wall_s"] = time.perf_counter() - t0
    return result


def main() -> None:
    cuda = th.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nproc", type=int, default=max(th.cuda.device_count(), 2) if cuda else 2)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if cuda else "cpu")
    p.add_argument("--backend", choices=["nccl", "gloo"], default=None, help="nccl on cuda")
    p.add_argument("--num-envs", type=int, default=4096, help="envs per GPU")
    p.add_argument("--batch-size", type=int, default=4096, help="batch per GPU")
    p.add_argument("--buffer-size", type=int, default=2_000_000, help="replay per GPU")
    p.add_argument("--probe-steps", type=int, default=500, help="timed vector steps")
    p.add_argument("--seconds", type=float, default=10.0, help="wall budget of the equal-time run")
    p.add_argument("--allreduce-iters", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args()
    args.backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    if args.device == "cuda" and th.cuda.device_count() < args.nproc:
        p.error(f"--nproc {args.nproc} needs {args.nproc} GPUs; {th.cuda.device_count()} found")
    if args.device == "cuda" and args.backend != "nccl":
        p.error("--backend gloo is invalid with --device cuda: allowed is nccl")
    if args.device == "cpu" and args.backend != "gloo":
        p.error("--backend nccl is invalid with --device cpu: allowed is gloo")

    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    one = _run(1, args)
    many = _run(args.nproc, args)
    ratio = many["run_env_steps_per_s"] / one["run_env_steps_per_s"]
    report = {
        "what": "GpuDQN.learn, 1 against N processes (one GPU each), same per-GPU settings",
        "machine": machine(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "gradient_values": one["gradient_values"],
        "gradient_bytes": 4 * one["gradient_values"],
        "runs": {"1": one, str(args.nproc): many},
        "env_steps_per_s_ratio": ratio,
        "probe_env_steps_per_s_ratio": many["probe_env_steps_per_s"] / one["probe_env_steps_per_s"],
        "scaling_efficiency": ratio / args.nproc,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"1 process:  {one['run_env_steps_per_s']:.3g} env-steps/s")
    print(f"{args.nproc} processes: {many['run_env_steps_per_s']:.3g} env-steps/s (x{ratio:.2f})")
    if "allreduce" in many:
        ar = many["allreduce"]
        print(
            f"all-reduce of {report['gradient_bytes']:,} bytes: {ar['eager_ms']:.3f} ms eager, "
            f"graph {ar['graph_ms']} ms"
        )
    for world, run in (("1", one), (str(args.nproc), many)):
        oos = run["out_of_sample"]
        print(
            f"{world} process(es), {run['run_wall_s']:.1f} s: out-of-sample return "
            f"{oos['total_return']:+.2%}, Sharpe {oos['sharpe']:.2f}"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
