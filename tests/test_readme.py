"""README's figures and `--help`'s defaults against the code and a recorded run, so that
neither can drift from what a user sees."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agents import cli
from agents.cli.train import CPU_DEFAULTS, CPU_TORCH_THREADS, GPU_DEFAULTS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end >= 0 else None]


def _pct(x: float) -> str:
    """README's way of writing a return: +1,137%, +2.5% (one decimal under 10%)."""
    return f"{100 * x:+,.1f}%" if abs(x) < 0.1 else f"{100 * x:+,.0f}%"


def test_quickstart_is_two_commands_and_ci_runs_the_second():
    block = re.search(r"```bash\n(.*?)```", _section("Quickstart"), re.S).group(1)
    commands = block.strip().splitlines()
    assert len(commands) == 2, commands
    train, tests = commands
    # A fresh Debian/Ubuntu machine: a venv, the CPU build of torch before anything pulls
    # torch, the package from the clone (it is not on a package index).
    assert train.startswith("python3 -m venv .venv && . .venv/bin/activate && ")
    assert train.index("--index-url https://download.pytorch.org/whl/cpu") < train.index(
        "pip install -e ."
    )
    assert train.endswith("gpu-trading-env train --out runs/quickstart")
    assert tests in (ROOT / ".ci" / "run").read_text()
    assert "pip install gpu-trading-env" not in README


def test_readme_quotes_the_code_defaults():
    quick = " ".join(_section("Quickstart").split())
    cpu, gpu = CPU_DEFAULTS, GPU_DEFAULTS
    assert f"{cpu['timesteps']:,} env steps in {cpu['num_envs']:,} envs" in quick
    assert f"{gpu['timesteps']:,} env steps in {gpu['num_envs']:,} envs" in quick
    words = {1: "one torch thread"}.get(CPU_TORCH_THREADS, f"{CPU_TORCH_THREADS} torch threads")
    assert f"on {words}" in quick


def test_readme_returns_are_the_recorded_runs():
    """The quickstart's returns in README are those of docs/quickstart_cpu.json, written by
    benchmarks/quickstart_record.py from a run of the command."""
    rec = json.loads((ROOT / "docs" / "quickstart_cpu.json").read_text())
    quick = " ".join(_section("Quickstart").split())
    expected = (
        f"the agent made {_pct(rec['agent_return'])} out of sample (Sharpe "
        f"{rec['agent_sharpe']:.1f}) where the known rule makes {_pct(rec['known_rule_return'])} "
        f"(Sharpe {rec['known_rule_sharpe']:.1f}) and buy-and-hold "
        f"{_pct(rec['buy_and_hold_return'])}"
    )
    assert expected in quick


def test_help_shows_the_code_defaults(capsys):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    text = " ".join(sub.choices["train"].format_help().split())
    for name, option in (("timesteps", "env steps"), ("num_envs", "parallel envs")):
        cpu, gpu = CPU_DEFAULTS[name], GPU_DEFAULTS[name]
        assert f"{option} (default: {cpu:,} on the CPU, {gpu:,} on a GPU)" in text
    every = " ".join(sub.choices["train"].format_help(every_option=True).split())
    assert f"(default: {CPU_TORCH_THREADS} with --device cpu" in every  # an advanced option


def test_readme_quotes_the_recorded_time_and_the_test_suites():
    """The CPU quickstart's time is the record's wall time, said with its conditions (a quiet
    2-core machine), and the test command's duration is given."""
    rec = json.loads((ROOT / "docs" / "quickstart_cpu.json").read_text())
    quick = " ".join(_section("Quickstart").split())
    assert rec["machine"]["cpu_count"] == 2 and rec["load_average_after"] < 2.0
    assert f"{rec['wall_seconds']:.0f} s on a quiet 2-core machine in the recorded run" in quick
    assert re.search(r"runs the tests, about \d+ minutes on 2 cores \(\d+ s in CI\)", quick)
