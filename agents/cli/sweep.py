"""``gpu-trading-env sweep``: a grid of ``train`` settings times seeds across this host's devices.

    gpu-trading-env sweep --grid learning-rate=1e-4,3e-4 --seeds 0 1 2 -- --timesteps 8000000

Every run's command line is parsed and checked as ``train`` would check it before the first run
starts, so a bad value fails at once with the setting named. See :mod:`agents.pipelines.sweep`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import time
from typing import Any

from agents.cli.metrics_schema import SWEEP_KEYS, metrics_schema
from agents.cli.options import UsageError
from agents.cli.run_folder import claim_out
from agents.cli.run_progress import RunProgress
from gpu_runtime.device import cupy_or_none

# Options the sweep sets for each run itself.
SWEEP_OWNED = {
    "seed": "--seeds",
    "out": "--out",
    "overwrite": "--overwrite",
    "device": "--devices",
    "no-progress": None,
}


def parse_grid(pairs: list[str] | None) -> list[tuple[str, list[str]]]:
    """``["learning-rate=1e-4,3e-4", ...]`` into ``[("learning-rate", ["1e-4", "3e-4"]), ...]``."""
    grid: list[tuple[str, list[str]]] = []
    for pair in pairs or []:
        name, sep, raw = pair.partition("=")
        name = name.strip().removeprefix("--")
        values = [v.strip() for v in raw.split(",")]
        if not sep or not name or not all(values):
            raise UsageError(
                f"--grid {pair!r} is invalid: pass OPTION=V1,V2,... with OPTION a train option "
                "without its dashes, e.g. --grid learning-rate=1e-4,3e-4"
            )
        if name in SWEEP_OWNED:
            instead = SWEEP_OWNED[name]
            hint = f"; use the sweep's {instead}" if instead else ""
            raise UsageError(f"--grid {pair!r} is invalid: the sweep sets --{name} itself{hint}")
        if name in (n for n, _ in grid):
            raise UsageError(f"--grid {pair!r} is invalid: option {name!r} is given twice")
        if len(set(values)) != len(values):
            raise UsageError(f"--grid {pair!r} is invalid: a value is repeated")
        grid.append((name, values))
    return grid


def resolve_devices(names: list[str]) -> list[str]:
    """``auto`` -> every visible GPU (``cuda:0`` ...), else ``cpu``; otherwise checked names."""
    count = _gpu_count()
    if names == ["auto"]:
        return [f"cuda:{k}" for k in range(count)] if count else ["cpu"]
    out = []
    for name in names:
        if name == "cuda":
            name = "cuda:0"
        ok = name == "cpu" or (name.startswith("cuda:") and name[5:].isdigit())
        if not ok:
            raise UsageError(
                f"--devices {name!r} is invalid: allowed is auto, or any of cpu, cuda, cuda:N"
            )
        if name.startswith("cuda:") and int(name[5:]) >= count:
            have = f"cuda:0 to cuda:{count - 1}" if count else "no CUDA device with CuPy"
            raise UsageError(f"--devices {name}: this machine has {have}")
        if name in out:
            raise UsageError(f"--devices {name} is given twice (use --runs-per-device)")
        out.append(name)
    return out


def _gpu_count() -> int:
    cp = cupy_or_none()
    return 0 if cp is None else int(cp.cuda.runtime.getDeviceCount())


def check_runs(runs: list[Any], common: list[str], devices: list[str]) -> None:
    """Parse and validate each run's ``train`` command line as ``train`` does; raise UsageError
    naming the run's setting on the first that fails."""
    from agents.cli.options import validate
    from agents.cli.parser import build_parser
    from agents.pipelines.sweep import setting_label, train_command

    parser = build_parser()
    for run in runs:
        cmd = train_command(run, common, devices[0])
        argv = cmd[cmd.index("train") :]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = parser.parse_args(argv)
            validate(args)
        except SystemExit:
            message = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else ""
            raise UsageError(
                f"the run {setting_label(run.setting)!r}, seed {run.seed}: {message}"
            ) from None
        except UsageError as exc:
            raise UsageError(
                f"the run {setting_label(run.setting)!r}, seed {run.seed}: {exc}"
            ) from None


def cmd_sweep(args: argparse.Namespace) -> int:
    from agents.pipelines.sweep import aggregate, plan_runs, run_sweep, summary_table, write_report
    from agents.pipelines.sweep_result import SweepLaunch

    grid = parse_grid(args.grid)
    devices = resolve_devices(args.devices)
    common = list(args.train_args or [])
    grid_names = {name for name, _ in grid}
    for opt in common:
        name = opt.removeprefix("--").split("=", 1)[0]
        if opt.startswith("--") and name in SWEEP_OWNED:
            raise UsageError(
                f"train option {opt!r} is invalid here: the sweep sets --{name} for each run"
            )
        if opt.startswith("--") and name in grid_names:
            # argparse keeps the last of the two, so one would be dropped without a word.
            raise UsageError(
                f"train option {opt!r} is invalid here: --grid sets --{name} too; give it in "
                "one place"
            )
    out = claim_out(args, "sweep")
    runs = plan_runs(grid, args.seeds, out)
    check_runs(runs, common, devices)

    print(
        f"sweep: {len(runs)} runs ({len(runs) // len(args.seeds)} settings x "
        f"{len(args.seeds)} seeds) on {', '.join(devices)}, {args.runs_per_device} at a time "
        f"per device; reports in {out}/"
    )
    progress = RunProgress(len(runs), "sweep", bar=not args.no_progress)

    def on_done(result: Any) -> None:
        from agents.pipelines.sweep import setting_label

        label = f"{setting_label(result.run.setting)}, seed {result.run.seed}"
        if result.metrics is not None:
            ret = 100 * float(result.metrics["strategy"]["total_return"])
            val = result.metrics.get("validation", {}).get("strategy", {}).get("sharpe")
            chosen_on = "" if val is None else f"validation Sharpe {float(val):.2f}, "
            line = (
                f"done   {label}: {chosen_on}{ret:+,.1f}% out of sample "
                f"({result.wall_seconds:.0f} s)"
            )
        else:
            line = f"FAILED {label}: exit {result.returncode}, log {result.run.log}"
        progress.done(line)

    start = time.perf_counter()
    results = run_sweep(runs, common, devices, args.runs_per_device, on_done)
    progress.close()
    launch = SweepLaunch(
        devices=devices,
        runs_per_device=args.runs_per_device,
        seeds=list(args.seeds),
        train_options=common,
        wall_seconds=time.perf_counter() - start,
    )
    summary = dataclasses.replace(aggregate(results), launch=launch)
    paths = write_report(summary, out, metrics_schema(summary.to_dict(), SWEEP_KEYS))
    print(summary_table(summary))
    print(f"report: {paths['html']}  (data: {paths['json']}, {paths['csv']})")
    if summary.failed:
        print(f"{summary.failed} of {len(runs)} runs failed; their logs are listed above")
        return 1
    return 0
