"""Sweeps: many ``gpu-trading-env train`` runs across the devices of one host, and their report.

A sweep is a grid of settings (values of ``train`` options, e.g. ``learning-rate`` in {1e-4,
3e-4}) times a list of seeds. Each run is its own ``train`` process, with its own folder and
report, so a run that fails or is killed takes nothing else with it. Runs go to the devices
given, ``runs_per_device`` at a time on each; a run on ``cuda:N`` sees that GPU alone
(``CUDA_VISIBLE_DEVICES=N``, ``--device cuda``), as a ``torchrun`` worker would.

Settings are ranked on the validation window, the window each run chose its model on (the last
``--val-fraction`` of its training bars): by the mean over seeds of the kept model's validation
Sharpe. The out-of-sample (test) return is shown beside it and never used to rank: picking the
setting with the best test return would select on the test data and overstate what the chosen
setting earns on new data. Every figure is net of costs and beside buy-and-hold with the same
costs, on the data the runs describe in their ``metrics.json``.

The launcher is the standard library (``subprocess`` and a thread per device slot): the runs are
independent, so nothing needs ``torchrun``'s rendezvous, and Ray Tune would add a cluster
runtime and its own pins to an install that is otherwise Gymnasium, SB3 and torch
(docs/SCALING.md, "Sweeps").
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.files.side_files import read_side_json
from agents.pipelines.sweep_result import (
    SETTING_FIGURES,
    SeedSpread,
    SettingSummary,
    SweepRunRow,
    SweepSummary,
)
from gpu_trading_env.atomic_file import atomic_write, atomic_write_text
from gpu_trading_env.reports.report import save_figure

__all__ = [
    "RunResult",
    "SweepRun",
    "aggregate",
    "grid_settings",
    "plan_runs",
    "run_sweep",
    "setting_label",
    "train_command",
    "write_report",
]


@dataclass(frozen=True)
class SweepRun:
    """One ``train`` run of a sweep.

    :param setting: ``train`` option name (without ``--``) -> value as typed on the command line.
    :param seed: the run's ``--seed``.
    :param out: the run's report folder (``--out``).
    """

    setting: tuple[tuple[str, str], ...]
    seed: int
    out: Path

    @property
    def log(self) -> Path:
        """The run's stdout and stderr, beside its report folder."""
        return self.out.with_name(self.out.name + ".log")


@dataclass
class RunResult:
    """What one run gave: exit code, device, wall seconds, and its ``metrics.json`` (or None)."""

    run: SweepRun
    returncode: int
    device: str
    wall_seconds: float
    metrics: dict[str, Any] | None = field(default=None)


def grid_settings(grid: Sequence[tuple[str, Sequence[str]]]) -> list[tuple[tuple[str, str], ...]]:
    """Every combination of the grid's values, the first option varying slowest.

    :param grid: ``[(option, [value, ...]), ...]``; an empty grid is one setting with no option.
    """
    names = [name for name, _ in grid]
    return [
        tuple(zip(names, values, strict=True))
        for values in itertools.product(*(vals for _, vals in grid))
    ]


def setting_label(setting: Sequence[tuple[str, str]]) -> str:
    """``learning-rate=1e-4 gamma=0.5``, or ``defaults`` for the empty setting."""
    return " ".join(f"{k}={v}" for k, v in setting) or "defaults"


def _folder_name(setting: Sequence[tuple[str, str]]) -> str:
    text = "__".join(f"{k}_{v}" for k, v in setting) or "defaults"
    return "".join(c if c.isalnum() or c in "-_.+" else "_" for c in text)


def plan_runs(
    grid: Sequence[tuple[str, Sequence[str]]], seeds: Sequence[int], out: Path
) -> list[SweepRun]:
    """The sweep's runs, setting by setting, seed by seed: ``out/<setting>/seed<k>``."""
    runs = []
    used: set[str] = set()
    for setting in grid_settings(grid):
        name = base = _folder_name(setting)
        k = 1
        while name in used:  # values that differ only in characters a folder name cannot hold
            k += 1
            name = f"{base}-{k}"
        used.add(name)
        runs.extend(SweepRun(setting, int(s), out / name / f"seed{s}") for s in seeds)
    return runs


def train_command(run: SweepRun, common: Sequence[str], device: str) -> list[str]:
    """The run's command line on ``device`` (``cuda:N`` is run as ``--device cuda`` with
    ``CUDA_VISIBLE_DEVICES=N``: see :func:`run_sweep`)."""
    run_device = "cuda" if device.startswith("cuda") else device
    cmd = [sys.executable, "-m", "agents.cli", "train", *common]
    for name, value in run.setting:
        cmd += [f"--{name}", value]
    cmd += ["--seed", str(run.seed), "--device", run_device, "--out", str(run.out), "--no-progress"]
    return cmd


def _new_file(path: Path) -> Any:
    """``path`` opened for writing as a new file: what was there (a symbolic link included) is
    removed first, and ``O_EXCL`` creates the file itself, never the target of a link."""
    path.unlink(missing_ok=True)
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "w")


def _run_one(run: SweepRun, common: Sequence[str], device: str) -> RunResult:
    cmd = train_command(run, common, device)
    env = dict(os.environ)
    if device.startswith("cuda:"):
        env["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
    run.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with _new_file(run.log) as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    wall = time.perf_counter() - start
    metrics = None
    path = run.out / "metrics.json"
    if rc == 0 and path.is_file():
        metrics = run_figures(read_side_json(path))
    return RunResult(run, rc, device, wall, metrics)


def run_figures(metrics: Any) -> Any:
    """A train run's metrics.json, where the run was of several instruments (``"kind":
    "portfolio"``) with the figures under the names of one instrument's run: the kept policy's
    test and validation figures as ``strategy``, equal-weight buy-and-hold's as
    ``buy_and_hold``; so the sweep reads every run alike."""
    if not isinstance(metrics, dict) or metrics.get("kind") != "portfolio":
        return metrics
    test, val = metrics["test"], metrics["validation"]
    return {
        **metrics,
        "strategy": test["kept"],
        "buy_and_hold": test["buy_and_hold"],
        "validation": {**val, "strategy": val["kept"]},
    }


def run_sweep(
    runs: Sequence[SweepRun],
    common: Sequence[str],
    devices: Sequence[str],
    runs_per_device: int = 1,
    on_done: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """Run every run, ``runs_per_device`` at a time on each device; results in ``runs``' order.

    :param common: ``train`` options given to every run (e.g. ``["--timesteps", "1000000"]``).
    :param devices: ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` each.
    :param on_done: called (from a worker thread, one call at a time) as each run ends.
    """
    if runs_per_device < 1:
        raise ValueError(f"runs_per_device = {runs_per_device!r} is invalid: allowed is >= 1")
    if not devices:
        raise ValueError("devices is empty: allowed is one or more of cpu, cuda, cuda:N")
    todo: queue.Queue[int] = queue.Queue()
    for k in range(len(runs)):
        todo.put(k)
    results: list[RunResult | None] = [None] * len(runs)
    lock = threading.Lock()

    def worker(device: str) -> None:
        while True:
            try:
                k = todo.get_nowait()
            except queue.Empty:
                return
            result = _run_one(runs[k], common, device)
            results[k] = result
            if on_done is not None:
                with lock:
                    on_done(result)

    slots = [d for d in devices for _ in range(runs_per_device)]
    threads = [threading.Thread(target=worker, args=(d,), daemon=True) for d in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in results if r is not None]


def _run_row(r: RunResult) -> SweepRunRow:
    """One run in the report: where and how it ran, and its metrics (None where it failed or
    where the data has no known rule)."""
    m = r.metrics or {}

    def number(value: Any) -> float | None:
        return None if value is None else float(value)

    val = m.get("validation", {})
    return SweepRunRow(
        seed=r.run.seed,
        returncode=r.returncode,
        device=r.device,
        wall_seconds=r.wall_seconds,
        out=str(r.run.out),
        log=str(r.run.log),
        validation_sharpe=number(val.get("strategy", {}).get("sharpe")),
        validation_return=number(val.get("strategy", {}).get("total_return")),
        validation_buy_and_hold=number(val.get("buy_and_hold", {}).get("total_return")),
        total_return=number(m.get("strategy", {}).get("total_return")),
        test_buy_and_hold=number(m.get("buy_and_hold", {}).get("total_return")),
        test_costs_paid=number(m.get("strategy", {}).get("costs_paid")),
        vs_known_rule=number(m.get("agent_return_vs_known_rule")),
        train_seconds=number(m.get("train_seconds")),
    )


def aggregate(results: Sequence[RunResult]) -> SweepSummary:
    """Per setting: the runs, and over the seeds that finished, the mean, sample standard
    deviation, min and max of the kept model's validation Sharpe and return, of the
    out-of-sample (test) total return (fractions: 0.5 is +50%), of buy-and-hold's returns on
    both windows, of the costs paid, of the return as a multiple of the known rule's (where the
    data has one) and of training seconds. Settings are ranked (``rank`` 1 first) by mean
    validation Sharpe; settings with no finished run come last.
    """
    by_setting: dict[tuple[tuple[str, str], ...], list[RunResult]] = {}
    for r in results:
        by_setting.setdefault(r.run.setting, []).append(r)
    unranked = []
    for setting, rs in by_setting.items():
        rows = [_run_row(r) for r in rs]
        spreads = {
            key: SeedSpread.of([v for row in rows if (v := getattr(row, key)) is not None])
            for key in SETTING_FIGURES
        }
        unranked.append((setting, rs, rows, spreads))

    def rank_key(entry: tuple[Any, Any, Any, dict[str, SeedSpread]]) -> float:
        mean = entry[3]["validation_sharpe"].mean
        return -math.inf if mean is None or math.isnan(mean) else mean

    unranked.sort(key=rank_key, reverse=True)  # stable: equal settings keep the grid's order
    settings = []
    for k, (setting, rs, rows, spreads) in enumerate(unranked):
        finished = sum(r.metrics is not None for r in rs)
        settings.append(
            SettingSummary(
                setting=dict(setting),
                label=setting_label(setting),
                runs=rows,
                finished=finished,
                failed=len(rs) - finished,
                **spreads,
                rank=k + 1,
            )
        )
    first = next((r.metrics for r in results if r.metrics), {}) or {}
    return SweepSummary(
        settings=settings,
        runs=len(results),
        failed=sum(s.failed for s in settings),
        data=first.get("data"),
        order_cost_bps=first.get("order_cost_bps"),
    )


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+,.1f}%"


def _mean_sd(stats: SeedSpread, pct: bool) -> str:
    if stats.mean is None:
        return "-"
    if pct:
        return f"{_pct(stats.mean)} (sd {100 * stats.std:.1f} pts)"
    return f"{stats.mean:.2f} (sd {stats.std:.2f})"


def summary_table(summary: SweepSummary) -> str:
    """The per-setting table as plain text (what the command prints): ranked on validation,
    the test window beside, buy-and-hold on both, all net of costs."""
    rows = [
        (
            "rank",
            "setting",
            "seeds",
            "VALIDATION Sharpe",
            "val. return",
            "val. buy&hold",
            "test return",
            "test buy&hold",
            "costs paid",
            "x rule",
        )
    ]
    for s in summary.settings:
        v = s.vs_known_rule
        rows.append(
            (
                str(s.rank),
                s.label,
                f"{s.finished}/{s.finished + s.failed}",
                _mean_sd(s.validation_sharpe, pct=False),
                _pct(s.validation_return.mean),
                _pct(s.validation_buy_and_hold.mean),
                _mean_sd(s.total_return, pct=True),
                _pct(s.test_buy_and_hold.mean),
                _pct(s.test_costs_paid.mean).lstrip("+"),
                "-" if v.mean is None else f"{v.mean:.2f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    table = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    costs = summary.order_cost_bps
    notes = [
        f"Ranked by {summary.ranked_by}.",
        "Means over seeds; every figure is net of costs"
        + (f" ({', '.join(f'{c:g}' for c in costs)} bps per order type)" if costs else "")
        + "; buy-and-hold pays the same costs.",
    ]
    if summary.data:
        data = summary.data
        notes.insert(0, str(data["description"] if isinstance(data, dict) else data))
    return "\n".join(notes + table)


def write_report(
    summary: SweepSummary, out: Path, schema: dict[str, Any] | None = None
) -> dict[str, Path]:
    """``sweep.json`` (everything, and ``schema`` where given: its keys in words, the command's
    ``agents.cli.metrics_schema``), ``sweep.csv`` (one row per setting), ``sweep.png`` (mean
    out-of-sample return per setting, each seed a dot, the bar's whisker one standard
    deviation) and ``index.html`` linking them and every run's own report."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / f"sweep.{k}" for k in ("json", "csv", "png")}
    paths["html"] = out / "index.html"
    doc = summary.to_dict()
    if schema is not None:
        doc["schema"] = schema
    atomic_write_text(paths["json"], json.dumps(doc, indent=2))
    with atomic_write(paths["csv"], "w") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["rank", "setting", "finished", "failed", "validation_sharpe_mean",
             "validation_sharpe_std", "validation_return_mean", "validation_buy_and_hold_mean",
             "return_mean", "return_std", "return_min", "return_max", "test_buy_and_hold_mean",
             "test_costs_paid_mean", "vs_rule_mean", "vs_rule_std", "train_seconds_mean"]
        )  # fmt: skip
        for s in summary.settings:
            r, v, t, vs = s.total_return, s.vs_known_rule, s.train_seconds, s.validation_sharpe
            w.writerow(
                [s.rank, s.label, s.finished, s.failed, vs.mean, vs.std,
                 s.validation_return.mean, s.validation_buy_and_hold.mean,
                 r.mean, r.std, r.min, r.max, s.test_buy_and_hold.mean,
                 s.test_costs_paid.mean, v.mean, v.std, t.mean]
            )  # fmt: skip
    _plot(summary, paths["png"])
    _html(summary, paths["html"], out)
    return paths


def _plot(summary: SweepSummary, path: Path) -> None:
    """Left: validation Sharpe per setting, the ranking (bar: mean over seeds; whisker: 1 sd;
    dots: seeds). Right: the out-of-sample return of the same runs, beside, with buy-and-hold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = summary.settings
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 1.4 + 0.5 * len(settings)), sharey=True)
    panels = (
        (left, "validation_sharpe", 1.0, "VALIDATION Sharpe, costs in (ranks the settings)"),
        (right, "total_return", 100.0, "test return, costs in, % (shown, not used to rank)"),
    )
    for ax, key, scale, label in panels:
        for y, s in enumerate(settings):
            st = getattr(s, key)
            if st.mean is not None:
                ax.barh(y, scale * st.mean, xerr=scale * st.std, color="#8fb4d8", capsize=4)
            pts = [v for run in s.runs if (v := getattr(run, key)) is not None]
            ax.plot([scale * p for p in pts], [y] * len(pts), "o", color="#1f4e79", ms=4)
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_xlabel(label, fontsize=9)
    for y, s in enumerate(settings):
        bh = s.test_buy_and_hold.mean
        if bh is not None:
            right.plot([100 * bh], [y], "|", color="#b03030", ms=14, mew=2)
    right.plot([], [], "|", color="#b03030", ms=10, mew=2, label="buy-and-hold, costs in")
    right.legend(loc="lower right", fontsize=8)
    left.set_yticks(range(len(settings)), [f"{s.rank}. {s.label}" for s in settings])
    left.invert_yaxis()
    fig.suptitle(
        "Sweep: settings ranked on the validation window (bar: mean; whisker: 1 sd; dots: seeds)",
        fontsize=10,
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def _html(summary: SweepSummary, path: Path, out: Path) -> None:
    import html

    lines = [
        "<!doctype html><meta charset='utf-8'><title>Sweep</title>",
        "<h1>Sweep</h1><p><img src='sweep.png' alt='validation Sharpe and test return per "
        "setting'></p>",
        f"<pre>{html.escape(summary_table(summary))}</pre>",
        "<p>Data: <a href='sweep.json'>sweep.json</a>, <a href='sweep.csv'>sweep.csv</a>.</p>",
        "<h2>Runs</h2><ul>",
    ]
    for s in summary.settings:
        for run in s.runs:
            rel_out = os.path.relpath(run.out, out)
            rel_log = os.path.relpath(run.log, out)
            state = _pct(run.total_return) if run.returncode == 0 else f"failed ({run.returncode})"
            lines.append(
                f"<li>{html.escape(s.label)}, seed {run.seed}: {html.escape(state)} "
                f"(<a href='{html.escape(rel_out)}/index.html'>report</a>, "
                f"<a href='{html.escape(rel_log)}'>log</a>)</li>"
            )
    lines.append("</ul>")
    atomic_write_text(path, "\n".join(lines) + "\n")
