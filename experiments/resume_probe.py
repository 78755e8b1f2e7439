"""Where a CUDA run resumed from a checkpoint first leaves the run that went through (a probe).

The run of ``tests/test_resume.py`` (4 envs, curiosity on, 400 env steps, a checkpoint at 200)
goes through once; then it is resumed from the checkpoint in fresh objects. In both, the fused
rollout's first vector steps from the checkpoint on are traced: before each step the exploration
generator's state, the random actions and coins that step will draw (a twin generator from the
same state), the observation and its greedy actions; after it the buffer rows it wrote and the
env state. At the resume point also: ``env.observe()`` against the rollout's observation,
``exploration_rate``, the counters, the env's curiosity weights and flag, the process's
generators. Every capture of the rollout's step graph is listed with the curiosity flag it
recorded. The report names the first step and parts that differ, then compares the whole runs
(``test_resume._compare``). Always exits 0: a probe, not a test.

    python3 -m experiments.resume_probe                      # the test's settings
    python3 -m experiments.resume_probe --kw curiosity=False --steps 4
    python3 -m experiments.resume_probe --sweep              # also: which settings resume equal
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import pathlib
import random
import sys
import tempfile
import time
import traceback
from typing import Any

import numpy as np
import torch as th
from gpu_trading_env.gpu.device import to_numpy

from agents import CheckpointEvery, GpuDQN
from agents.rollouts.fused import FusedRollout
from gpu_trading_env.core.state import STATE_FIELDS
from tests import test_resume as tr  # the test's run settings and its _compare

TOTAL, EVERY = 400, 200
ROWS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


class Tracer:
    """Records the traced steps and the graph captures of the run named in ``run``."""

    def __init__(self, start: int, steps: int) -> None:
        self.start, self.steps = start, steps
        self.run: str | None = None
        self.records: dict[str, dict[int, dict[str, Any]]] = {}
        self.captures: dict[str, list[tuple[int, str]]] = {}

    def wanted(self, ro: FusedRollout) -> bool:
        t = int(ro.model.num_timesteps)
        return self.run is not None and self.start <= t < self.start + self.steps * ro.num_envs


def _digest(x: Any) -> str:
    if isinstance(x, th.Tensor):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:12]
    return hashlib.sha256(repr(x).encode()).hexdigest()[:12]


def _curiosity_flag(ro: FusedRollout) -> str:
    return "on" if ro.env.backend.curiosity is not None else "off"


def _sync(ro: FusedRollout) -> None:
    if ro.device.type == "cuda":
        th.cuda.synchronize(ro.device)


def _resume_point(ro: FusedRollout) -> dict[str, Any]:
    """What the first traced step starts from."""
    m, backend = ro.model, ro.env.backend
    out: dict[str, Any] = {
        "rollout obs": ro.obs.detach().clone(),
        "env.observe()": ro.env.observe().detach().clone(),
        "exploration_rate": float(m.exploration_rate),
        "counters (num_timesteps, _n_calls, _n_updates, _train_calls, _episode_num)": (
            int(m.num_timesteps),
            int(m._n_calls),
            int(m._n_updates),
            int(m._train_calls),
            int(m._episode_num),
        ),
        "buffer (pos, full, tree.sample_calls)": (
            int(m.replay_buffer.pos),
            bool(m.replay_buffer.full),
            int(m.replay_buffer.tree.sample_calls),
        ),
        "rollout generator": _digest(ro.generator.get_state()),
        "env curiosity flag": _curiosity_flag(ro),
        "q_net parameters": _digest(th.cat([p.detach().reshape(-1) for p in m.q_net.parameters()])),
        "numpy global generator": _digest(np.random.get_state()[1]),  # noqa: NPY002
        "python random": _digest(random.getstate()),
        "torch cpu generator": _digest(th.get_rng_state()),
        "torch cuda generator": _digest(th.cuda.get_rng_state(ro.device))
        if ro.device.type == "cuda"
        else None,
    }
    cur = getattr(backend, "_cur", None) or backend.curiosity
    if cur is not None:
        out["env curiosity weights"] = _digest(
            np.concatenate([np.ravel(to_numpy(getattr(cur, k))) for k in ("w1", "b1", "w2", "b2")])
        )
    if m.curiosity_model is not None:
        out["model curiosity weights"] = _digest(
            np.concatenate([np.ravel(to_numpy(w)) for w in m.curiosity_model.export_weights()])
        )
    return out


def install(tracer: Tracer) -> None:
    """Wrap FusedRollout.step and its graph capture (in this process only)."""
    step, record = FusedRollout.step, FusedRollout._record_on_device

    def traced_capture(self: FusedRollout) -> th.cuda.CUDAGraph:
        graph = record(self)
        if tracer.run is not None:
            tracer.captures.setdefault(tracer.run, []).append(
                (int(self.model.num_timesteps), _curiosity_flag(self))
            )
        return graph

    def traced_step(self: FusedRollout, epsilon: float, random_only: bool = False) -> Any:
        if not tracer.wanted(self):
            return step(self, epsilon, random_only)
        t = int(self.model.num_timesteps)
        rec: dict[str, Any] = {"epsilon": float(epsilon), "random_only": bool(random_only)}
        if t == tracer.start:
            rec["resume point"] = _resume_point(self)
        rec["generator before"] = _digest(self.generator.get_state())
        real, twin = self.generator, th.Generator(device=self.device)
        twin.set_state(real.get_state())
        self.generator = twin  # the same draws as the step's, from a copy of its state
        try:
            rand, coins = self._draw(self.num_envs)
        finally:
            self.generator = real
        rec["random actions"], rec["coins"] = rand.clone(), coins.clone()
        rec["obs"] = self.obs.detach().clone()
        rec["greedy"] = self._greedy(self.obs).clone()
        buffer = self.model.replay_buffer
        pos = int(buffer.pos)
        graph_before = self.captured
        result = step(self, epsilon, random_only)
        _sync(self)
        rec["path"] = "graph" if result is None else "eager"
        rec["captured now"] = not graph_before and self.captured
        rec["generator after"] = _digest(self.generator.get_state())
        rec["env curiosity flag"] = _curiosity_flag(self)
        rec["rows"] = {name: getattr(buffer, name)[pos].detach().clone() for name in ROWS}
        rec["env"] = {
            f: np.array(to_numpy(getattr(self.env.backend.state, f))) for f in STATE_FIELDS
        }
        tracer.records.setdefault(tracer.run, {})[t] = rec
        return result

    FusedRollout.step = traced_step  # type: ignore[method-assign]
    FusedRollout._record_on_device = traced_capture  # type: ignore[method-assign]


def _diff(a: Any, b: Any) -> str | None:
    """None when equal, else a few words on how they differ."""
    if isinstance(a, th.Tensor) or isinstance(a, np.ndarray):
        x, y = np.asarray(to_numpy(a)), np.asarray(to_numpy(b))
        if x.shape != y.shape:
            return f"shapes {x.shape} vs {y.shape}"
        if np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            return None
        bad = int((x != y).sum())
        if x.dtype.kind in "fiub" and x.dtype != np.bool_:
            gap = np.abs(x.astype(np.float64) - y.astype(np.float64)).max()
            return f"{bad}/{x.size} differ, max|d| {gap:.3g}"
        return f"{bad}/{x.size} differ"
    return None if a == b else f"{a} vs {b}"


def _short(x: Any) -> str:
    if isinstance(x, th.Tensor):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        flat = x.reshape(-1)
        if x.dtype.kind == "f":
            return "[" + " ".join(f"{v:.3f}" for v in flat[:8]) + (" ..]" if flat.size > 8 else "]")
        return str(flat[:8].tolist())
    return str(x)


def report(tracer: Tracer) -> None:
    ref, res = tracer.records.get("reference", {}), tracer.records.get("resumed", {})
    print(
        f"graph captures (env step, curiosity flag recorded): reference {tracer.captures.get('reference')}"
    )
    print(
        f"                                                    resumed   {tracer.captures.get('resumed')}"
    )
    a0, b0 = ref.get(tracer.start, {}), res.get(tracer.start, {})
    pa, pb = a0.get("resume point"), b0.get("resume point")
    if pa is None or pb is None:
        print(f"no trace at step {tracer.start}: reference {sorted(ref)}, resumed {sorted(res)}")
        return
    print(f"-- resume point (num_timesteps {tracer.start}): reference | resumed")
    for key in pa:
        d = _diff(pa[key], pb.get(key))
        shown = "" if isinstance(pa[key], th.Tensor) else f"{pa[key]} | {pb.get(key)}"
        print(f"  {'=' if d is None else 'X'} {key}: {shown}{'' if d is None else '  <- ' + d}")
    d = _diff(pa["rollout obs"], pa["env.observe()"])
    print(f"  reference: its rollout obs vs its env.observe(): {d or 'equal'}")
    first = None
    for t in sorted(set(ref) & set(res)):
        a, b = ref[t], res[t]
        parts = []
        for key in ("epsilon", "generator before", "random actions", "coins", "obs", "greedy",
                    "generator after", "env curiosity flag"):  # fmt: skip
            d = _diff(a[key], b[key])
            if d is not None:
                parts.append(f"{key} ({d})")
        for name in ROWS:
            d = _diff(a["rows"][name], b["rows"][name])
            if d is not None:
                parts.append(f"row {name} ({d})")
        env = [f"{f} ({_diff(a['env'][f], b['env'][f])})" for f in STATE_FIELDS
               if _diff(a["env"][f], b["env"][f]) is not None]  # fmt: skip
        if env:
            parts.append("env " + ", ".join(env))
        path = f"{a['path']}{'*' if a['captured now'] else ''}/{b['path']}{'*' if b['captured now'] else ''}"
        print(f"-- step {t} [{path}, eps {a['epsilon']:.4f}/{b['epsilon']:.4f}, curiosity "
              f"{a['env curiosity flag']}/{b['env curiosity flag']}]: "
              f"{'EQUAL' if not parts else 'DIFFERS'}")  # fmt: skip
        for p in parts:
            print(f"     X {p}")
        if parts:
            for key in ("random actions", "coins", "greedy"):
                print(f"       {key}: ref {_short(a[key])} res {_short(b[key])}")
            for name in ("actions", "rewards"):
                print(
                    f"       row {name}: ref {_short(a['rows'][name])} res {_short(b['rows'][name])}"
                )
        if parts and first is None:
            first = (t, parts)
    if first is None:
        print(f"FIRST DIVERGENCE: none in the {len(set(ref) & set(res))} traced steps")
    else:
        print(f"FIRST DIVERGENCE: step {first[0]}: {'; '.join(first[1][:4])}")
    print("(path: graph = replay of the captured step, eager = stepped op by op, * = captured at "
          "this step; 'generator' = the exploration generator's state digest)")  # fmt: skip


def run_pair(device: str, kw: dict[str, Any], tracer: Tracer | None) -> tuple[GpuDQN, GpuDQN, str]:
    tmp = pathlib.Path(tempfile.mkdtemp())
    if tracer is not None:
        tracer.run = "reference"
    reference = tr.make_model(tr.make_env(device), device, **kw)
    reference.learn(TOTAL, callback=CheckpointEvery(EVERY, tmp / "ck", keep=1))
    gen_a = tr.process_generators()
    tr._scramble_process_generators()
    if tracer is not None:
        tracer.run = "resumed"
    resumed = GpuDQN.load_checkpoint(tmp / "ck", env=tr.make_env(device), device=device)
    resumed.learn(resumed.remaining_timesteps, reset_num_timesteps=False)
    gen_b = tr.process_generators()
    if tracer is not None:
        tracer.run = None
    names = ("python random", "numpy global", "torch cpu")
    gens = [n for n, x, y in zip(names, gen_a, gen_b, strict=True) if x != y]
    try:
        tr._compare(reference, resumed, exact=False)
        verdict = "EQUAL (to tolerance)"
    except AssertionError as exc:
        lines = str(exc).splitlines()
        verdict = lines[0].rstrip(":") + (": " + " | ".join(lines[1:9]) if len(lines) > 1 else "")
    verdict += "; process generators after the runs: " + (
        "equal" if not gens else "differ in " + ", ".join(gens)
    )
    return reference, resumed, verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=8, help="vector steps traced after 200")
    parser.add_argument("--kw", nargs="*", default=[], help="make_model keywords: key=value")
    parser.add_argument("--sweep", action="store_true", help="also try other settings")
    args = parser.parse_args()
    kw = {k: ast.literal_eval(v) for k, v in (item.split("=", 1) for item in args.kw)}
    if args.device.startswith("cuda") and not th.cuda.is_available():
        print("resume_probe: no CUDA device; nothing probed")
        return 0
    began = time.perf_counter()
    if th.cuda.is_available():
        graph = th.cuda.CUDAGraph()
        print(f"{th.cuda.get_device_name()} torch {th.__version__}; "
              f"register_generator_state: {hasattr(graph, 'register_generator_state')}")  # fmt: skip
    tracer = Tracer(EVERY, args.steps)
    install(tracer)
    print(f"settings: {kw or 'the test defaults'}")
    try:
        reference, resumed, verdict = run_pair(args.device, kw, tracer)
        ro = reference._fused_rollout
        if isinstance(ro, FusedRollout):
            kind = ro._actor.kind if ro._actor is not None else None
            print(f"rollout: act_precision {ro.act_precision}, actor {kind}, cuda_graph "
                  f"{ro.cuda_graph}, draws in graph {(ro._static or {}).get('draws_inside')}")  # fmt: skip
        report(tracer)
        print(f"WHOLE RUN: {verdict}")
    except Exception:
        print("ERROR\n" + traceback.format_exc()[-2000:])
    if args.sweep:
        tracer.run = None
        for extra in ({"curiosity": False}, {"fused_rollout": False},
                      {"rollout_kernel": "monolithic"}, {"captured_train": False}):  # fmt: skip
            try:
                print(f"sweep {extra}: {run_pair(args.device, {**kw, **extra}, None)[2]}")
            except Exception:
                print(f"sweep {extra}: ERROR {traceback.format_exc()[-600:]}")
    print(f"({time.perf_counter() - began:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
