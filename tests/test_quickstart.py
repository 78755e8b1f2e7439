"""The README's first command on a machine without the optional extras."""

from __future__ import annotations

import html
import importlib.util
import json

import pytest

from agents import cli


@pytest.mark.slow
def test_train_writes_a_report_without_tensorboard(tmp_path, monkeypatch, capsys):
    real_find_spec = importlib.util.find_spec

    def no_tensorboard(name, *args, **kwargs):
        if name == "tensorboard" or name.startswith("tensorboard."):
            return None
        return real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", no_tensorboard)
    out = tmp_path / "run"
    code = cli.main(
        [
            "train",
            "--device",
            "cpu",
            "--timesteps",
            "2000",
            "--num-envs",
            "4",
            # Two snapshots, not ten: each is backtested over the 6,400 validation bars of the
            # built-in data, which is the test's time, not what it checks.
            "--eval-every",
            "1000",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["timesteps"] >= 2000
    assert (out / "model.zip").exists() and (out / "equity_curve.png").exists()
    assert not (out / "tensorboard").exists()
    printed = capsys.readouterr().out
    assert "tensorboard is not installed" in printed
    # The summary ends with the report folder, as README's "What you should see" says.
    assert printed.strip().splitlines()[-1].startswith(f"report: {out / 'index.html'}")
    # The page says what the saved model acts as, and metrics.json holds the evidence.
    page = html.unescape((out / "index.html").read_text())
    assert f"Verdict: {metrics['deployment']['headline']}" in page
    assert metrics["deployment"]["kept"] == metrics["kept_policy"]
    gate = metrics["fallback_test"]
    assert gate["kept"] == metrics["kept_policy"] and gate["baseline"] in (
        "flat",
        "hold long",
        "hold short",
    )


@pytest.mark.slow
def test_the_readme_command_reproduces_the_recorded_run(tmp_path):
    """README's quickstart command (on the CPU, as in CI) against docs/quickstart_cpu.json,
    whose figures README quotes (tests/test_readme.py). The market, the known rule and
    buy-and-hold are the same everywhere; the learning repeats bit for bit on one machine, but
    another CPU's float kernels can take training on another path, so the agent is held to
    the record's policy and a Sharpe within 0.5 of it."""
    from pathlib import Path

    from benchmarks.quickstart_record import learning_figures

    record = json.loads((Path(__file__).parent.parent / "docs/quickstart_cpu.json").read_text())
    out = tmp_path / "quickstart"
    assert cli.main(["train", "--device", "cpu", "--no-progress", "--out", str(out)]) == 0
    got = learning_figures(json.loads((out / "metrics.json").read_text()))
    assert got.keys() <= record.keys()
    for key in ("timesteps", "kept_policy"):
        assert got[key] == record[key], key
    for key in ("known_rule_return", "known_rule_sharpe", "buy_and_hold_return"):
        assert got[key] == pytest.approx(record[key], rel=1e-9), key
    assert abs(got["agent_sharpe"] - record["agent_sharpe"]) <= 0.5
