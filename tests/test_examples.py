"""The examples run (briefly) on the CPU, so they cannot silently rot.

Examples of optional libraries (TorchRL, skrl, RLlib) run where the library is installed. All of
them run one after another in one child process, each as its own ``__main__`` in its own folder:
a process of its own for each would spend most of each test importing torch and its libraries
again.
"""

from __future__ import annotations

import importlib.util
import json
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


CASES = [
    ("vector_env_basics.py", [], None),
    ("cleanrl_style_dqn.py", ["--total-steps", "4000", "--batch-size", "64"], None),
    ("cleanrl_style_ppo.py", ["--total-steps", "2048", "--num-steps", "64"], None),
    ("gymnasium_wrappers.py", ["--steps", "200"], None),
    ("sb3_dqn.py", ["--total-steps", "1500"], None),
    ("sb3_ppo.py", ["--total-steps", "2048", "--num-envs", "8"], None),
    ("train_multi_gpu.py", ["--device", "cpu", "--total-steps", "2000", "--num-envs", "8"], None),
    ("torchrl_dqn.py", ["--total-steps", "800"], "torchrl"),
    ("skrl_ppo.py", ["--timesteps", "100"], "skrl"),
    ("rllib_ppo.py", ["--iterations", "1"], "ray"),
    ("own_columns.py", ["--timesteps", "2000"], "arch"),
]

# Runs each example as `python examples/NAME.py ARGS` would (sys.argv, __main__, its own working
# folder, its stderr in that folder's stderr.txt), catching its failure so that the next one
# still runs; writes {script: null, or what failed} to the file named by the last argument.
RUNNER = """
import contextlib, json, os, runpy, sys, traceback
cases, folder, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
results = {}
for script, args in cases:
    name = os.path.basename(script)
    os.makedirs(os.path.join(folder, name), exist_ok=True)
    os.chdir(os.path.join(folder, name))
    sys.argv = [script, *args]
    with open("stderr.txt", "w") as err, contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
            results[name] = None
        except SystemExit as exc:
            results[name] = None if exc.code in (0, None) else f"exit status {exc.code}"
        except BaseException:
            results[name] = traceback.format_exc()
    sys.stdout.flush()
with open(out, "w") as f:
    json.dump(results, f)
"""


@pytest.fixture(scope="module")
def example_runs(tmp_path_factory) -> dict[str, str | None]:
    """{script: None if it ran to the end, else what failed and its stderr} for every runnable
    example."""
    folder = tmp_path_factory.mktemp("examples")
    cases = [
        (str(EXAMPLES / script), args)
        for script, args, module in CASES
        if module is None or importlib.util.find_spec(module) is not None
    ]
    env = {
        **os.environ,
        # The examples import the package from this tree; the RLlib runner imports it by id.
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",  # small networks: more threads only contend on a 2-core runner
    }
    out = folder / "results.json"
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(cases), str(folder), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.is_file(), f"the examples' runner failed:\n{proc.stderr[-3000:]}"
    results = json.loads(out.read_text())
    assert sorted(results) == sorted(Path(script).name for script, _ in cases)
    return {
        name: None if error is None else f"{error}\n{(folder / name / 'stderr.txt').read_text()}"
        for name, error in results.items()
    }


@pytest.mark.parametrize(
    "script, args",
    [
        pytest.param(script, args, marks=needs(module)) if module else (script, args)
        for script, args, module in CASES
    ],
)
def test_example_runs(script: str, args: list[str], example_runs) -> None:
    error = example_runs[script]
    assert error is None, f"{script} {' '.join(args)}:\n{error[-3000:]}"


# Examples that need a CUDA GPU: each in its own process, run where CUDA and CuPy are.
GPU_CASES = [("cuda_graph_step.py", [])]


@pytest.mark.gpu
@pytest.mark.parametrize("script, args", GPU_CASES)
def test_gpu_example_runs(script: str, args: list[str], tmp_path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, f"{script} {' '.join(args)}:\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip(), f"{script} printed nothing"
