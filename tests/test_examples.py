"""The examples run (briefly) on the CPU, so they cannot silently rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize(
    "script, args",
    [
        ("vector_env_basics.py", []),
        ("cleanrl_style_dqn.py", ["--total-steps", "4000", "--batch-size", "64"]),
    ],
)
def test_example_runs(script: str, args: list[str], tmp_path: Path):
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
