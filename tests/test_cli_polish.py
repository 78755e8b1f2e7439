"""Command-line polish: a mistyped option or subcommand names the nearest one; the report's
plots stay readable (positions, learning-curve legend) and the kept-features count reads the
same in the terminal and on the page."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from agents import cli
from gpu_trading_env.reports.report import (
    POSITION_PERIODS,
    RAW_POSITION_BARS,
    exposure_periods,
    plot_learning_curve,
    plot_position,
)


def _usage_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["train", "--timestep", "5"], "(did you mean --timesteps?)"),
        (["train", "--timestep=5"], "(did you mean --timesteps?)"),
        (["backtest", "--exposre", "1"], "(did you mean --exposure?)"),
        (
            ["train", "--seeed", "3", "--devce", "cpu"],
            "(did you mean --seed for --seeed, --device for --devce?)",
        ),
    ],
)
def test_a_mistyped_option_names_the_nearest_option_of_its_subcommand(argv, hint, capsys):
    line = _usage_error(argv, capsys)
    assert line.startswith(f"gpu-trading-env {argv[0]}: error: unrecognized arguments: ")
    assert hint in line


def test_an_option_far_from_any_gets_no_guess(capsys):
    line = _usage_error(["train", "--zzzz"], capsys)
    assert "unrecognized arguments: --zzzz" in line and "did you mean" not in line


def test_a_mistyped_subcommand_names_the_nearest(capsys):
    assert "(did you mean 'train'?)" in _usage_error(["trian"], capsys)


# ------------------------------------------------------------------------------- report plots


@pytest.fixture
def figures(monkeypatch):
    """The figures the report functions save, drawn and kept open for inspection."""
    from matplotlib.figure import Figure

    saved = []
    original = Figure.savefig

    def keep(self, *args, **kwargs):
        saved.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def _flips(t: int) -> np.ndarray:
    # A policy that changes side every bar or two: bar by bar, a solid band.
    return np.random.default_rng(0).choice([-1.0, 0.0, 1.0], size=t, p=[0.3, 0.2, 0.5])


def _hours(t: int) -> np.ndarray:
    return pd.date_range("2021-01-04", periods=t, freq="1h").to_numpy()


def test_exposure_periods_are_shares_and_means_of_consecutive_bars():
    x = np.r_[np.ones(5), -np.ones(3), np.zeros(2), np.array([0.5, -0.5])]
    g = exposure_periods(x, periods=4)
    assert g.start.tolist() == [0, 3, 6, 9]
    np.testing.assert_allclose(g.long + g.flat + g.short, 1.0)
    np.testing.assert_allclose(g.mean, [1.0, 1 / 3, -2 / 3, 0.0])
    np.testing.assert_allclose(g.short, [0.0, 1 / 3, 2 / 3, 1 / 3])
    assert exposure_periods(x[:2], periods=100).start.tolist() == [0, 1]
    with pytest.raises(ValueError, match="periods = 0 is invalid"):
        exposure_periods(x, periods=0)
    with pytest.raises(ValueError, match="exposure must be 1-D"):
        exposure_periods(np.zeros(0))


def test_a_long_position_series_is_drawn_per_period_with_its_shares(tmp_path, figures):
    t = 5000
    plot_position(_hours(t), _flips(t), tmp_path / "p.png")
    (fig,) = figures
    assert len(fig.axes) == 2  # exposure per period, and the share of bars long / flat / short
    points = [len(line.get_xdata()) for ax in fig.axes for line in ax.get_lines()]
    assert max(points) <= POSITION_PERIODS + 1  # not one vertex per bar
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["long", "flat", "short"]


def test_a_short_position_series_keeps_every_bar(tmp_path, figures):
    plot_position(_hours(RAW_POSITION_BARS), _flips(RAW_POSITION_BARS), tmp_path / "p.png")
    (fig,) = figures
    assert len(fig.axes) == 1
    assert max(len(line.get_xdata()) for line in fig.axes[0].get_lines()) == RAW_POSITION_BARS


def test_the_learning_curve_legend_leaves_the_marks_uncovered(tmp_path, figures):
    steps = np.arange(0, 100_000, 1_000)
    evals = {
        "timesteps": steps[::10],
        "validation": np.cos(steps[::10] / 1e4),
        "test": np.sin(steps[::10] / 1e4),
    }
    plot_learning_curve(
        steps, np.sin(steps / 1e4), tmp_path / "l.png", 0.5, evals=evals, selected=50_000
    )
    (fig,) = figures
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # the saved figure is closed: a canvas to measure it on
    canvas.draw()
    renderer = canvas.get_renderer()
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert len(legends) == 1
    box = legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent(renderer))
    assert len(legends[0].get_texts()) == 5


# ------------------------------------------------------- the kept-inputs count, said one way


def test_the_terminal_and_the_page_count_the_kept_inputs_the_same_way():
    from agents.cli.train import describe_inputs
    from agents.pipelines.deployment import describe_deployment
    from agents.pipelines.input_selection import REGIME_INPUT, kept_inputs_count

    names = [f"f{j}" for j in range(51)]
    kept = [*names[:30], REGIME_INPUT]
    count = kept_inputs_count(kept, len(names))
    assert count.startswith("30 of 51 features (f0, f1, f2, f3, ...)")
    assert count.endswith(" and the fitted regime filter's forecast")
    terminal = describe_inputs(kept, len(names), REGIME_INPUT)
    half = {"difference": 0.8, "low": 0.2, "high": 1.4, "level": 0.9, "p_value": 0.5}
    page = describe_deployment(
        "flat",
        {"name": "flat", "hold_vs_flat": half, "parts": [half, half, half]},
        gate=None,
        selection={"kept": kept, "feature_names": names, "p_value": 0.01},
    ).details[0]
    assert terminal.startswith(count) and count in page
    assert "31" not in page and "52" not in page


# ------------------------------------------------------------- GpuDQN's log rate (verbose=1)


def _learn_and_count_tables(capsys, **learn_kwargs) -> int:
    import gymnasium as gym

    import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
    from agents import GpuDQN
    from gpu_trading_env import EnvConfig

    # The source design's barriers end episodes within a few bars: many episodes a run.
    envs = gym.make_vec(
        "GpuTrading-v0", num_envs=16, device="cpu", config=EnvConfig.source_design()
    )
    model = GpuDQN(
        "DuelingPolicy", envs, batch_size=32, buffer_size=20_000, learning_starts=16_000,
        train_freq=1, verbose=1,
    )  # fmt: skip
    capsys.readouterr()
    model.learn(total_timesteps=16_000, **learn_kwargs)
    return capsys.readouterr().out.count("| time/")


def test_learn_dumps_at_most_one_table_per_percent_of_the_run(capsys, monkeypatch):
    import types

    from agents.algorithm import gpu_dqn

    clock = iter(range(0, 10**9, 100))  # 100 s between looks: only the 1% rule holds it back
    monkeypatch.setattr(gpu_dqn, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    tables = _learn_and_count_tables(capsys)
    assert 50 <= tables <= 101  # 1,000 rollouts of 16 steps, a table every 160, one at the end


def test_learn_dumps_at_most_one_table_per_second(capsys):
    import time

    t0 = time.monotonic()
    tables = _learn_and_count_tables(capsys)
    assert 1 <= tables <= time.monotonic() - t0 + 2  # one a second, and one at the end


def test_an_explicit_log_interval_keeps_sb3s_rule(capsys):
    # Short episodes on 16 envs: SB3's every-4-episodes rule dumps hundreds of tables.
    assert _learn_and_count_tables(capsys, log_interval=4) > 200


# ------------------------------------------------- the Gymnasium ray[rllib] may install over ours


def test_the_gymnasium_floor_is_pyprojects():
    import re
    from pathlib import Path

    import tomllib

    from gpu_trading_env.gymnasium_version import MIN_GYMNASIUM

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    (dep,) = [d for d in project["project"]["dependencies"] if d.startswith("gymnasium")]
    assert re.fullmatch(r"gymnasium>=(\d+)\.(\d+)", dep).groups() == tuple(map(str, MIN_GYMNASIUM))


@pytest.mark.parametrize(
    ("version", "old"),
    [("1.0.0", True), ("0.29.1", True), ("1.1.0rc1", False), ("1.2.2", False), ("1.4.0", False)],
)
def test_gymnasium_versions_are_compared_as_numbers(version, old):
    from gpu_trading_env.gymnasium_version import check_gymnasium, gymnasium_too_old

    assert gymnasium_too_old(version) is old
    if old:
        with pytest.raises(ImportError, match=rf"gymnasium {re.escape(version)} is installed"):
            check_gymnasium(version)
    else:
        check_gymnasium(version)


def test_an_old_gymnasium_gives_one_message_naming_rays_pin(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    fake = tmp_path / "gymnasium"  # what an old ray's pin leaves: a Gymnasium before 1.1
    fake.mkdir()
    (fake / "__init__.py").write_text('__version__ = "1.0.0"\n')
    root = Path(__file__).parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    run = subprocess.run(
        [sys.executable, "-c", "import gpu_trading_env.integrations.rllib_env"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: gpu_trading_env needs gymnasium>=1.1, but gymnasium 1.0.0")
    assert "ray[rllib]" in last and "gymnasium==1.2.2" in last
