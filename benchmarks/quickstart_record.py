"""The README quickstart's first command, timed, and its figures recorded in docs/.

    python3 -m benchmarks.quickstart_record                 # CPU: docs/quickstart_cpu.json
    python3 -m benchmarks.quickstart_record --device cuda   # GPU: docs/quickstart_cuda.json

Runs ``gpu-trading-env train`` with the defaults in a fresh process (imports, training, model
selection and the report all count) and writes its wall time and the out-of-sample returns of
the agent, the known rule and buy-and-hold. README's quoted figures are tested against this file
(tests/test_readme.py), so a README figure is always the one of a recorded run. Run it on a
quiet machine: the wall time is only the machine's when nothing else competes for its cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.run_info import commit, machine

ROOT = Path(__file__).resolve().parent.parent


def learning_figures(m: dict) -> dict:
    """The record's figures that a train run's learning decides (its time is the machine's),
    from its metrics.json ``m`` (the keys its ``schema`` documents); tests/test_quickstart.py
    compares a new run of the command with them."""
    return {
        "timesteps": m["timesteps"],
        "agent_return": m["strategy"]["total_return"],
        "known_rule_return": m["known_rule"]["strategy"]["total_return"],
        "buy_and_hold_return": m["buy_and_hold"]["total_return"],
        "agent_return_vs_known_rule": m["agent_return_vs_known_rule"],
        "agent_sharpe": m["strategy"]["sharpe"],
        "known_rule_sharpe": m["known_rule"]["strategy"]["sharpe"],
        "agent_sharpe_vs_known_rule": m["agent_sharpe_vs_known_rule"],
        "kept_policy": m["kept_policy"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--out", type=Path, default=None, help="the JSON (default: docs/)")
    args = parser.parse_args()
    out = args.out or ROOT / "docs" / f"quickstart_{args.device}.json"
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "quickstart"
        cmd = [sys.executable, "-m", "agents.cli", "train", "--device", args.device]
        cmd += ["--out", str(run)]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, env=dict(os.environ))
        wall = time.perf_counter() - start
        m = json.loads((run / "metrics.json").read_text())
    record = {
        "command": "gpu-trading-env train --out runs/quickstart"
        + ("" if args.device == "cpu" else " (on a GPU)"),
        "commit": commit(),
        "machine": machine(),
        "load_average_after": os.getloadavg()[0],
        "wall_seconds": round(wall, 1),
        "train_seconds": round(m["train_seconds"], 1),
        "env_steps_per_second": round(m["env_steps_per_second"]),
        **learning_figures(m),
    }
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
