"""Learner experiments on the GPU, side by side in one run (issue: the learner).

1. ``steps``: variants of the captured train step at batch 4,096 on a full 2^21 buffer
   (``VARIANTS``: the compiled loss or the eager one, TF32 or FP32 products). Each row: ms per
   ``train(1)`` call and ms per graph replay alone, the loss after the run.
2. ``learn``: ``GpuDQN.learn`` env-steps/s on the fused path at 4,096 envs, one gradient step of
   4,096 per vector step, by train-step variant and by ``train_freq``/``gradient_steps`` (k, k).
3. ``profile``: torch profiler tables of the eager and the captured step (default variant).
4. ``sweep``: the quickstart (``gpu-trading-env train --device cuda``) over seeds and settings,
   whole-command wall time and the agent's return as a fraction of the known rule.

    python3 -m experiments.learner_lab steps learn sweep --out lab/
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch as th

from benchmarks.train_throughput import _model, profile_train_step
from gpu_trading_env import MarketData, TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties).
SOURCE = EnvConfig.source_design()


def _sync() -> None:
    th.cuda.synchronize()


# Train-step variants: GpuDQN keyword arguments; "compile_update" sets
# agents.algorithm.captured_step.COMPILE_UPDATE (clip and Adam compiled with the loss; default True).
VARIANTS: dict[str, dict[str, Any]] = {
    "compiled, bf16 (default)": {},
    "compiled, tf32": {"train_precision": "tf32"},
    "compiled, fp32": {"train_precision": "fp32"},
    "eager loss, bf16": {"compile_train": False},
    "eager loss, fp32": {"compile_train": False, "train_precision": "fp32"},
    "compiled, eager update, bf16": {"compile_update": False},
    "compiled, eager update, tf32": {"compile_update": False, "train_precision": "tf32"},
}


def _variant(name: str) -> dict[str, Any]:
    """GpuDQN keyword arguments of a variant (after setting what is not one)."""
    import agents.algorithm.captured_step

    kw = dict(VARIANTS[name])
    agents.algorithm.captured_step.COMPILE_UPDATE = bool(kw.pop("compile_update", True))
    return kw


def bench_steps(data: MarketData, names: list[str], reps: int = 300) -> list[dict]:
    rows = []
    for name in names:
        try:
            env = TradingVectorEnv(num_envs=1024, device="cuda", data=data, config=SOURCE)
            env.reset(seed=0)
            model = _model(env, "cuda", 2_000_000, **_variant(name))
            model._setup_learn(total_timesteps=1)
            buf = model.replay_buffer
            dim = buf.obs_shape[0]
            gen = th.Generator(device="cuda")
            gen.manual_seed(0)
            cap = buf.buffer_size * buf.n_envs
            n = buf.n_envs
            while buf.size() * n < cap:
                o = th.randn(n, dim, device="cuda", generator=gen)
                z = th.zeros(n, dtype=th.bool, device="cuda")
                a = th.randint(0, 45, (n,), device="cuda", generator=gen)
                r = th.randn(n, device="cuda", generator=gen)
                buf.add_tensors(o, o.roll(1, 0), a, r, z, z)
            t_compile = time.perf_counter()
            for _ in range(5):
                model.train(gradient_steps=1, batch_size=4096)
            _sync()
            t_compile = time.perf_counter() - t_compile
            t0 = time.perf_counter()
            for _ in range(reps):
                model.train(gradient_steps=1, batch_size=4096)
            _sync()
            ms_train = (time.perf_counter() - t0) / reps * 1e3
            step = model.captured_train_step
            ms_replay = None
            if step is not None and step.graph is not None:
                times = []
                for _ in range(5):
                    t1 = time.perf_counter()
                    for _ in range(reps):
                        step.graph.replay()
                    _sync()
                    times.append((time.perf_counter() - t1) / reps * 1e3)
                ms_replay = statistics.median(times)
            step.read_stats()
            row = {
                "variant": name,
                "ms_per_train_call": ms_train,
                "ms_per_graph_replay": ms_replay,
                "graph": step.graph is not None,
                "warmup_s": t_compile,
                "loss": step.last_loss,
                "td": step.last_td,
            }
        except Exception as err:  # report and go on with the next variant
            traceback.print_exc()
            row = {"variant": name, "error": f"{type(err).__name__}: {err}"}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def bench_learn(data: MarketData, names: list[str], freqs: list[int]) -> list[dict]:
    rows = []
    for name in names:
        for k in freqs:
            try:
                env = TradingVectorEnv(num_envs=4096, device="cuda", data=data, config=SOURCE)
                model = _model(
                    env, "cuda", 2_000_000, train_freq=k, gradient_steps=k, **_variant(name)
                )
                model.learn(total_timesteps=4096 * 200)
                _sync()
                t0 = time.perf_counter()
                s0, g0 = model.num_timesteps, model._n_updates
                model.learn(total_timesteps=4096 * 3000, reset_num_timesteps=False)
                _sync()
                dt = time.perf_counter() - t0
                row = {
                    "variant": name,
                    "train_freq": k,
                    "env_steps_per_s": (model.num_timesteps - s0) / dt,
                    "grad_steps_per_s": (model._n_updates - g0) / dt,
                }
            except Exception as err:
                traceback.print_exc()
                row = {"variant": name, "train_freq": k, "error": f"{type(err).__name__}: {err}"}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


# Settings the quickstart's train command does not expose: through the model's constructor.
_GPU_DQN_OVERRIDES: dict[str, Any] = {}


def _patched_gpu_dqn() -> Any:
    import agents
    from agents.algorithm.gpu_dqn import GpuDQN

    class Patched(GpuDQN):
        def __init__(self, *a: Any, **kw: Any) -> None:
            kw.update(_GPU_DQN_OVERRIDES)
            super().__init__(*a, **kw)

    agents.GpuDQN = Patched
    return GpuDQN


def sweep(configs: list[dict], seeds: list[int], out: Path) -> list[dict]:
    from agents.cli import main as cli_main

    original = _patched_gpu_dqn()
    # The snapshots' backtests run in the module that imported backtest_batch by name.
    import agents.pipelines.snapshot_training as snapshot_training

    timers = {"dump_logs": 0.0, "backtest": 0.0}

    def timed(fn: Any, key: str) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                timers[key] += time.perf_counter() - t

        return wrapper

    backtest_batch, dump_logs = snapshot_training.backtest_batch, original.dump_logs
    snapshot_training.backtest_batch = timed(backtest_batch, "backtest")
    original.dump_logs = timed(dump_logs, "dump_logs")
    rows = []
    for cfg in configs:
        _GPU_DQN_OVERRIDES.clear()
        _GPU_DQN_OVERRIDES.update(cfg.get("model", {}))
        for seed in seeds:
            run_dir = Path(tempfile.mkdtemp(prefix="qs-", dir=out)) / "run"
            argv = ["train", "--device", "cuda", "--seed", str(seed), "--no-progress"]
            argv += ["--out", str(run_dir), *cfg.get("cli", [])]
            t0 = time.perf_counter()
            for key in timers:
                timers[key] = 0.0
            try:
                rc = cli_main(argv)
                m = json.loads((run_dir / "metrics.json").read_text())
                row = {
                    "config": cfg["name"],
                    "seed": seed,
                    "rc": rc,
                    "wall_s": time.perf_counter() - t0,
                    "train_s": m.get("train_seconds"),
                    "vs_rule": m.get("agent_return_vs_known_rule"),
                    "agent_return": m.get("strategy", {}).get("total_return"),
                    "selected": m.get("model_selection"),
                    **{f"{k}_s": v for k, v in timers.items()},
                }
            except Exception as err:
                traceback.print_exc()
                row = {"config": cfg["name"], "seed": seed, "error": str(err)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    import agents

    agents.GpuDQN = original
    snapshot_training.backtest_batch, original.dump_logs = backtest_batch, dump_logs
    return rows


SWEEP = [
    {"name": "default"},
    {"name": "gamma0.5", "cli": ["--gamma", "0.5"]},
    {"name": "lr1e-3", "cli": ["--learning-rate", "1e-3"]},
    {
        "name": "60M-fixed",
        "cli": ["--timesteps", "60000000", "--eval-every", "3000000"],
        "model": {"target_update_interval": 400_000, "exploration_fraction": 0.1},
    },
    {
        "name": "60M-fixed-gamma0.5",
        "cli": ["--timesteps", "60000000", "--eval-every", "3000000", "--gamma", "0.5"],
        "model": {"target_update_interval": 400_000, "exploration_fraction": 0.1},
    },
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("parts", nargs="+", choices=["steps", "learn", "sweep", "profile"])
    p.add_argument("--out", type=Path, default=Path("lab"))
    p.add_argument("--variants", nargs="*", default=list(VARIANTS))
    p.add_argument("--learn-variants", nargs="*", default=["compiled, bf16 (default)"])
    p.add_argument("--freqs", type=int, nargs="*", default=[1, 4])
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--configs", nargs="*", default=None, help="names from SWEEP")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MPLBACKEND", "Agg")
    data = MarketData.default()
    result: dict[str, Any] = {"gpu": th.cuda.get_device_name(), "torch": th.__version__}
    if "profile" in args.parts:  # torch profiler tables, eager and captured (default variant)
        profile_train_step(data, 2**21, 4096, args.out)
    if "steps" in args.parts:
        result["steps"] = bench_steps(data, args.variants)
    if "learn" in args.parts:
        result["learn"] = bench_learn(data, args.learn_variants, args.freqs)
    if "sweep" in args.parts:
        configs = [c for c in SWEEP if args.configs is None or c["name"] in args.configs]
        result["sweep"] = sweep(configs, args.seeds, args.out)
        by: dict[str, list[float]] = {}
        for r in result["sweep"]:
            if r.get("vs_rule") is not None:
                by.setdefault(r["config"], []).append(r["vs_rule"])
        for name, v in by.items():
            print(f"sweep {name:22s} vs rule mean {statistics.mean(v):.2f}  seeds {v}")
    (args.out / "lab.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
