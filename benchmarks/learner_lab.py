"""Learner experiments on the GPU, side by side in one run (issue: the learner).

1. ``steps``: variants of the captured train step at batch 4,096 on a full 2^21 buffer: the
   current step, the online forward split (no backward through the next-state half),
   torch.compile of the loss (forward and backward), bf16 autocast, and their combinations.
   Each row: ms per ``train(1)`` call and ms per graph replay alone, the loss after the run.
2. ``learn``: ``GpuDQN.learn`` env-steps/s on the fused path at 4,096 envs, one gradient step of
   4,096 per vector step, by train-step variant and by ``train_freq``/``gradient_steps`` (k, k).
3. ``sweep``: the quickstart (``gpu-trading-env train --device cuda``) over seeds and settings,
   whole-command wall time and the agent's return as a fraction of the known rule.

    python benchmarks/learner_lab.py steps learn sweep --out lab/
"""

from __future__ import annotations

import argparse
import contextlib
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
from torch.nn import functional as F

import agents.captured_step as captured_step
from agents.captured_step import CapturedTrainStep
from gpu_trading_env import MarketData, TradingVectorEnv


def _sync() -> None:
    th.cuda.synchronize()


class VariantStep(CapturedTrainStep):
    """The captured step with the loss computed by ``make_loss(variant)``."""

    variant: dict[str, Any] = {}

    def __init__(self, model: Any, **kw: Any) -> None:
        super().__init__(model, **kw)
        v = self.variant
        loss_fn = _make_loss(model, v.get("split", False), v.get("bf16", False))
        self._loss_fn = th.compile(loss_fn, dynamic=False) if v.get("compile") else loss_fn

    def _step(self) -> None:
        b = self.batch_size
        idx = self.idx
        self.tree.sample_into(
            b, self.calls.data_ptr(), self.beta.data_ptr(), idx.data_ptr(), self.weights.data_ptr()
        )
        self.calls.add_(1)
        timeouts = self._timeouts if self._timeouts is not None else self._dones
        loss, td = self._loss_fn(
            idx,
            self.weights,
            self._obs,
            self._next_obs,
            self._actions,
            self._rewards,
            self._dones,
            timeouts,
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        th.nn.utils.clip_grad_norm_(self.params, self.model.max_grad_norm)
        self.optimizer.step()
        buf = self.buffer
        self.tree.update(
            idx,
            td,
            alpha=buf.alpha,
            epsilon=buf.epsilon,
            n_valid=self.tree.capacity,
            name="td_errors",
            check=False,
        )
        th.maximum(self.error, self._status, out=self.error)
        self.sums[0].add_(loss.detach())
        self.sums[1].add_(td.mean())


def _make_loss(m: Any, split: bool, bf16: bool) -> Any:
    has_timeouts = m.replay_buffer.handle_timeout_termination
    gamma = float(m.gamma)
    double_q = m.double_q
    q_net, q_target = m.q_net, m.q_net_target

    def loss_fn(idx, weights, obs_store, next_store, act_store, rew_store, done_store, to_store):
        obs = obs_store.index_select(0, idx)
        nxt = next_store.index_select(0, idx)
        actions = act_store.index_select(0, idx).long()
        rewards = rew_store.index_select(0, idx).reshape(-1, 1)
        dones = done_store.index_select(0, idx)
        if has_timeouts:
            dones = dones * (1.0 - to_store.index_select(0, idx))
        dones = dones.reshape(-1, 1)
        ctx = th.autocast("cuda", dtype=th.bfloat16) if bf16 else contextlib.nullcontext()
        with ctx:
            if split:
                q_obs = q_net(obs)
                with th.no_grad():
                    q_next_online = q_net(nxt) if double_q else None
            else:
                q_all = q_net(th.cat([obs, nxt]))
                q_obs = q_all[: obs.shape[0]]
                q_next_online = q_all[obs.shape[0] :].detach()
            with th.no_grad():
                q_next_target = q_target(nxt)
        q = th.gather(q_obs.float(), 1, actions)
        with th.no_grad():
            if double_q:
                a_next = q_next_online.float().argmax(dim=1, keepdim=True)
                next_q = th.gather(q_next_target.float(), 1, a_next)
            else:
                next_q = q_next_target.float().max(dim=1, keepdim=True).values
            target = rewards + (1.0 - dones) * gamma * next_q
        elementwise = F.smooth_l1_loss(q, target, reduction="none")
        loss = (weights.reshape(-1, 1) * elementwise).mean()
        td = (q.detach() - target).abs().reshape(-1)
        return loss, td

    return loss_fn


VARIANTS = {
    "current": None,
    "split": {"split": True},
    "compile": {"compile": True},
    "split+compile": {"split": True, "compile": True},
    "split+bf16": {"split": True, "bf16": True},
    "split+compile+bf16": {"split": True, "compile": True, "bf16": True},
}


@contextlib.contextmanager
def variant_step(name: str):
    spec = VARIANTS[name]
    if spec is None:
        yield
        return
    cls = type(f"Step_{name}", (VariantStep,), {"variant": spec})
    saved = captured_step.CapturedTrainStep
    captured_step.CapturedTrainStep = cls
    try:
        yield
    finally:
        captured_step.CapturedTrainStep = saved


def _model(env: Any, **kw: Any) -> Any:
    from agents import GpuDQN

    params = dict(
        learning_rate=1e-4,
        buffer_size=2_000_000,
        learning_starts=0,
        batch_size=4096,
        train_freq=1,
        gradient_steps=1,
        target_update_interval=10_000,
        seed=0,
        device="cuda",
    )
    params.update(kw)
    return GpuDQN("DuelingPolicy", env, **params)


def bench_steps(data: MarketData, names: list[str], reps: int = 300) -> list[dict]:
    rows = []
    for name in names:
        try:
            with variant_step(name):
                env = TradingVectorEnv(num_envs=1024, device="cuda", data=data)
                env.reset(seed=0)
                model = _model(env)
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
                step = model._captured_step
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
                with variant_step(name):
                    env = TradingVectorEnv(num_envs=4096, device="cuda", data=data)
                    model = _model(env, train_freq=k, gradient_steps=k)
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
    from agents.gpu_dqn import GpuDQN

    class Patched(GpuDQN):
        def __init__(self, *a: Any, **kw: Any) -> None:
            kw.update(_GPU_DQN_OVERRIDES)
            super().__init__(*a, **kw)

    agents.GpuDQN = Patched
    return GpuDQN


def sweep(configs: list[dict], seeds: list[int], out: Path) -> list[dict]:
    from agents.cli import main as cli_main

    original = _patched_gpu_dqn()
    import agents.walkforward as wf

    timers = {"dump_logs": 0.0, "backtest": 0.0}

    def timed(fn: Any, key: str) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                timers[key] += time.perf_counter() - t

        return wrapper

    wf.backtest = timed(wf.backtest, "backtest")
    original.dump_logs = timed(original.dump_logs, "dump_logs")
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
    p.add_argument("parts", nargs="+", choices=["steps", "learn", "sweep"])
    p.add_argument("--out", type=Path, default=Path("lab"))
    p.add_argument("--variants", nargs="*", default=list(VARIANTS))
    p.add_argument("--learn-variants", nargs="*", default=["current"])
    p.add_argument("--freqs", type=int, nargs="*", default=[1, 4])
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--configs", nargs="*", default=None, help="names from SWEEP")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MPLBACKEND", "Agg")
    data = MarketData.default()
    result: dict[str, Any] = {"gpu": th.cuda.get_device_name(), "torch": th.__version__}
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
