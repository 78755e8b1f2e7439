"""Where the host time of one CUDA ``env.step`` goes: its parts timed alone, side by side.

    python3 -m benchmarks.step_host_profile --envs 4096 --out profile.json

Each part runs ``--calls`` times in a block, the parts take turns over ``--blocks`` blocks, and
the median block's microseconds per call are reported (host time only: nothing waits for the
GPU except between blocks). Keep ``--calls`` well below the driver's queue of pending launches
(about a thousand): a step of 4,096 envs takes about 18 µs of GPU time, so a longer block fills
the queue, each launch then waits for a free slot, and the host time measured is the GPU's (an
H200 run with 2,000 calls a block read 16 µs for every launching part). Parts: the full step with owned and zero-copy outputs, the backend's
step alone, the launch alone (``KernelLauncher.launch_rest``), the actions' preparation,
reading torch's current stream, and slicing a row of a torch tensor (what a loop over a stored
action table pays besides the step).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.run_info import commit
from gpu_runtime.device import current_stream
from gpu_trading_env import MarketData
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.vector_env import TradingVectorEnv

# The source design's env (45 actions, barriers, penalties), that of docs/PERFORMANCE.md.
SOURCE = EnvConfig.source_design()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=4096)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=21)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    data = MarketData.default()
    n = args.envs
    owned = TradingVectorEnv(n, "cuda", data=data, config=SOURCE)
    zero = TradingVectorEnv(n, "cuda", data=data, copy_outputs=False, config=SOURCE)
    table = torch.randint(0, 45, (16, n), device="cuda")
    rows = list(table)
    for env in (owned, zero):
        env.reset(seed=0)
    backend = zero.backend
    idx = backend.device_index
    prepared = backend.prepare_actions(rows[0])
    bound = backend._out_addresses[0]  # noqa: SLF001 - the launch's own arguments, timed alone
    launcher = backend._launcher  # noqa: SLF001
    grid, block = backend._grid[0], backend._block[0]  # noqa: SLF001
    stream = current_stream(idx)[1]

    def launch_only() -> None:
        launcher.launch_rest(grid, block, stream, prepared.data_ptr(), *bound)

    parts = {
        "env.step, owned": lambda k: owned.step(rows[k % 16]),
        "env.step, zero-copy": lambda k: zero.step(rows[k % 16]),
        "backend.step": lambda k: backend.step(rows[k % 16]),
        "launch_rest alone": lambda k: launch_only(),
        "prepare_actions": lambda k: backend.prepare_actions(rows[k % 16]),
        "current_stream": lambda k: current_stream(idx),
        "torch row slice": lambda k: table[k % 16],
        "empty lambda": lambda k: None,
    }
    times: dict[str, list[float]] = {p: [] for p in parts}
    for b in range(args.blocks + 1):
        for name, fn in parts.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for k in range(args.calls):
                fn(k)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            if b:
                times[name].append((t1 - t0) / args.calls * 1e6)
    result = {
        "commit": commit(),
        "gpu": torch.cuda.get_device_name(0),
        "num_envs": n,
        "calls": args.calls,
        "blocks": args.blocks,
        "us_per_call": {p: float(np.median(v)) for p, v in times.items()},
    }
    for p, v in result["us_per_call"].items():
        print(f"{p:24s} {v:8.2f} us")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
