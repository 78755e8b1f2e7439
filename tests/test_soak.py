"""The soak script (benchmarks/soak.py) on the NumPy backend at tiny sizes: every check runs,
and a broken tree is caught."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "soak.py"
TINY = [
    "--device", "cpu", "--num-envs", "32", "--env-steps", "6000", "--episode-length", "20",
    "--bars", "300", "--check-every", "10", "--tree-capacity", "700", "--tree-updates", "6000",
    "--tree-batch", "128", "--tree-check-every", "10",
]  # fmt: skip


@pytest.fixture(scope="module")
def soak():
    spec = importlib.util.spec_from_file_location("soak", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_soak_smoke_on_numpy(soak, tmp_path) -> None:
    out = tmp_path / "soak.json"
    assert soak.main([*TINY, "--out", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["passed"]
    assert [f["mode"] for f in figures["env"]] == ["same_step", "next_step", "disabled"]
    assert all(f["episodes"] > 0 and f["env_steps"] == 62 * 32 for f in figures["env"])
    assert figures["tree"]["updates"] == 46 * 128


def test_soak_catches_a_tree_whose_root_is_wrong(soak) -> None:
    from agents.replay.segment_tree import NumpySumMinTree

    tree = NumpySumMinTree(100)
    tree.update(np.arange(10), np.linspace(0.1, 1.0, 10))
    soak.check_tree(tree, 1)
    tree.sum_tree[1] = np.nextafter(tree.sum_tree[1], np.inf)  # one ulp off
    with pytest.raises(soak.SoakFailure, match="pairwise leaf sum"):
        soak.check_tree(tree, 2)


@pytest.mark.parametrize("field", ["obs", "reward", "reward_components"])
def test_soak_catches_a_non_finite_output(soak, monkeypatch, field) -> None:
    """One NaN in one env's output of one step fails the soak (the sum-based check sees it)."""
    from gpu_trading_env import TradingVectorEnv

    real_step = TradingVectorEnv.step
    calls = {"n": 0}

    def poisoned(self, actions):
        obs, reward, term, trunc, info = real_step(self, actions)
        calls["n"] += 1
        if calls["n"] == 7:
            obs, reward, info = obs.copy(), reward.copy(), dict(info)
            target = {"obs": obs, "reward": reward}.get(field)
            if target is None:
                target = info["reward_components"] = info["reward_components"].copy()
            target.reshape(-1)[5] = np.nan
        return obs, reward, term, trunc, info

    monkeypatch.setattr(TradingVectorEnv, "step", poisoned)
    assert soak.main(TINY) == 1
