"""Env-step throughput of the CUDA backend, the NumPy backend and gymnasium's SyncVectorEnv.

Used by ``gpu-trading-env bench`` and by ``benchmarks/env_throughput.py``. Each function steps
one env with random actions cycling through 16 rows and returns a row of figures:
``env_steps_per_s`` (num_envs * steps / wall time, GPU work included) and ``host_us_per_step``
(Python + launch time per ``env.step``). Every env is :data:`BENCH_CONFIG`, the source design's
(``EnvConfig.source_design()``: 45 actions, the triple barrier and both penalties, so every part
of the step runs), the env docs/PERFORMANCE.md's figures were measured in.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np

from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.env import TradingEnv
from gpu_trading_env.vector_env import TradingVectorEnv

__all__ = [
    "BENCH_CONFIG",
    "bench_cuda",
    "bench_numpy",
    "bench_output_modes",
    "bench_sync",
    "format_rows",
]

# The env every benchmark steps (named in the reports as BENCH_CONFIG_NAME).
BENCH_CONFIG = EnvConfig.source_design()
BENCH_CONFIG_NAME = "EnvConfig.source_design()"

OUTPUT_MODES = ("owned", "zero-copy", "step_into")


def bench_cuda(data: MarketData, num_envs: int, steps: int) -> dict:
    import torch

    env = TradingVectorEnv(num_envs=num_envs, device="cuda", data=data, config=BENCH_CONFIG)
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
    env = TradingVectorEnv(num_envs=num_envs, device="cpu", data=data, config=BENCH_CONFIG)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, env.single_action_space.n, (16, num_envs))
    for k in range(5):
        env.step(actions[k % 16])
    return _timed_steps("numpy", env, actions, num_envs, steps)


def bench_sync(data: MarketData, num_envs: int, steps: int) -> dict:
    env = gym.vector.SyncVectorEnv(
        [lambda: TradingEnv(data=data, config=BENCH_CONFIG) for _ in range(num_envs)]
    )
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, BENCH_CONFIG.n_actions, (16, num_envs))
    return _timed_steps("gymnasium.SyncVectorEnv(TradingEnv)", env, actions, num_envs, steps)


def bench_outputs(
    data: MarketData, device: str, num_envs: int, steps: int, copy_outputs: bool
) -> dict:
    """Full ``env.step`` through the Gymnasium API, returning arrays the caller owns (the
    default: written into one block allocated per step) or the zero-copy double buffer
    (``copy_outputs=False``)."""
    env = TradingVectorEnv(
        num_envs, device, data=data, config=BENCH_CONFIG, copy_outputs=copy_outputs
    )
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


def bench_output_modes(
    data: MarketData,
    device: str,
    num_envs: int,
    steps: int,
    blocks: int = 5,
    modes: tuple[str, ...] = OUTPUT_MODES,
    autoreset_mode: str | None = None,
) -> list[dict]:
    """Host time per step of the full step API in each output mode, side by side.

    ``owned``: the default ``env.step`` (outputs the caller owns); ``zero-copy``:
    ``copy_outputs=False``; ``step_into``: ``env.step_into`` into ``make_outputs()`` arrays (the
    step a CUDA graph captures). The modes take turns in ``blocks`` blocks of ``steps`` steps
    each, so a slow phase of the machine hits them alike. Per mode: the median block's host
    time per step (``host_us_per_step``: the Python loop alone; on CUDA, without waiting for the
    GPU) and its env-steps/s (on CUDA, until the GPU is done with the block).
    """
    kw: dict = {"config": BENCH_CONFIG}
    if autoreset_mode is not None:
        kw["autoreset_mode"] = autoreset_mode
    envs = {
        m: TradingVectorEnv(num_envs, device, data=data, copy_outputs=(m != "zero-copy"), **kw)
        for m in modes
    }
    cuda = device != "cpu"
    if cuda:
        import torch

        actions = torch.randint(0, BENCH_CONFIG.n_actions, (16, num_envs), device=device)
        sync = torch.cuda.synchronize
    else:
        actions = np.random.default_rng(0).integers(0, BENCH_CONFIG.n_actions, (16, num_envs))

        def sync() -> None:
            return None

    # The rows are split once: slicing a torch tensor per step costs microseconds of host time
    # that belong to the caller's loop, not to the step being timed.
    rows = list(actions)
    outputs = {}
    for m, env in envs.items():
        env.reset(seed=0)
        outputs[m] = env.make_outputs() if m == "step_into" else None
    host: dict[str, list[float]] = {m: [] for m in modes}
    wall: dict[str, list[float]] = {m: [] for m in modes}
    for b in range(blocks + 1):  # block 0 warms up
        for m, env in envs.items():
            step = env.step if m != "step_into" else env.step_into
            extra = () if m != "step_into" else (outputs[m],)
            sync()
            t0 = time.perf_counter()
            for k in range(steps):
                step(rows[k % 16], *extra)
            t1 = time.perf_counter()
            sync()
            t2 = time.perf_counter()
            if b:
                host[m].append((t1 - t0) / steps * 1e6)
                wall[m].append(num_envs * steps / (t2 - t0))
    rows = []
    for m, env in envs.items():
        env.close()
        rows.append(
            {
                "backend": f"{'cuda' if cuda else 'numpy'} step, {m}",
                "num_envs": num_envs,
                "steps": steps * blocks,
                "autoreset_mode": str(env.autoreset_mode.name).lower(),
                "env_steps_per_s": float(np.median(wall[m])),
                "host_us_per_step": float(np.median(host[m])),
            }
        )
    return rows


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


def format_rows(rows: list[dict]) -> list[str]:
    """Table lines; adds ``ratio_to_sync`` (to the SyncVectorEnv row, NaN without one) to rows."""
    baseline = next(
        (r["env_steps_per_s"] for r in rows if r["backend"].startswith("gymnasium")), None
    )
    lines = [
        f"{'backend':40s} {'num_envs':>9s} {'env-steps/s':>12s} {'host us/step':>13s} {'x sync':>9s}"
    ]
    for r in rows:
        ratio = r["env_steps_per_s"] / baseline if baseline else float("nan")
        r["ratio_to_sync"] = ratio
        lines.append(
            f"{r['backend']:40s} {r['num_envs']:9d} {r['env_steps_per_s']:12.3e} {r['host_us_per_step']:13.1f} {ratio:9.1f}"
        )
    return lines
