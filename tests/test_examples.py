"""The examples run (briefly) on the CPU, so they cannot silently rot.

Examples of optional libraries (TorchRL, skrl, RLlib) run where the library is installed.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def needs(module: str):
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None, reason=f"{module} is not installed"
    )


@pytest.mark.parametrize(
    "script, args",
    [
        ("vector_env_basics.py", []),
        ("cleanrl_style_dqn.py", ["--total-steps", "4000", "--batch-size", "64"]),
        ("cleanrl_style_ppo.py", ["--total-steps", "2048", "--num-steps", "64"]),
        ("gymnasium_wrappers.py", ["--steps", "200"]),
        ("sb3_dqn.py", ["--total-steps", "1500"]),
        ("sb3_ppo.py", ["--total-steps", "2048", "--num-envs", "8"]),
        ("train_multi_gpu.py", ["--device", "cpu", "--total-steps", "2000", "--num-envs", "8"]),
        pytest.param("torchrl_dqn.py", ["--total-steps", "800"], marks=needs("torchrl")),
        pytest.param("skrl_ppo.py", ["--timesteps", "100"], marks=needs("skrl")),
        pytest.param("rllib_ppo.py", ["--iterations", "1"], marks=needs("ray")),
    ],
)
def test_example_runs(script: str, args: list[str], tmp_path: Path):
    # The examples import the package from this tree; the RLlib runner imports it by id.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",  # small networks: more threads only contend on a 2-core runner
    }
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
