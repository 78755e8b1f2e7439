"""The command line on bad input: one line on stderr, a non-zero exit code, nothing written."""

from __future__ import annotations

import argparse
import json
import os
import re

import numpy as np
import pandas as pd
import pytest

from agents import cli
from gpu_trading_env.data.features import WARMUP_BARS


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _csv(path, n=WARMUP_BARS + 40, drop=(), time_format="%Y-%m-%d", hourly=False, seed=0):
    """OHLCV bars: business days, or ``hourly`` bars of a 24/7 market (8,766 a year)."""
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    open_ = np.r_[close[0], close[:-1]]
    if hourly:
        times = pd.date_range("2015-01-01", periods=n, freq="h")
        time_format = "%Y-%m-%d %H:%M:%S"
    else:
        times = pd.bdate_range("2015-01-01", periods=n)
    df = pd.DataFrame(
        {
            "Date": times.strftime(time_format),
            "Open": open_,
            "High": np.maximum(open_, close) * 1.001,
            "Low": np.minimum(open_, close) * 0.999,
            "Close": close,
            "Volume": 1000.0,
        }
    ).drop(columns=list(drop))
    df.to_csv(path, index=False)
    return path


def _fails(capsys, argv, *needles, code=2):
    """Run the command; assert exit code, exactly one stderr line holding every needle."""
    before = set(os.listdir("."))
    try:
        got = cli.main(argv)
    except SystemExit as exc:  # argparse's own errors
        got = exc.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert got == code, (got, err)
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in err
    assert set(os.listdir(".")) == before, "the command left files behind"
    return lines[0]


TRAIN = ["train", "--device", "cpu", "--out", "out"]


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (TRAIN + ["--timesteps", "-5"], ["--timesteps -5 is invalid", "1 to 10,000,000,000"]),
        (TRAIN + ["--timesteps", "0"], ["--timesteps 0 is invalid"]),
        (TRAIN + ["--timesteps", "abc"], ["'abc' is not an integer"]),
        (TRAIN + ["--num-envs", "0"], ["--num-envs 0 is invalid"]),
        (TRAIN + ["--batch-size", "0"], ["--batch-size 0 is invalid"]),
        (TRAIN + ["--gradient-steps", "0"], ["--gradient-steps 0 is invalid", "1 to 1,024"]),
        (TRAIN + ["--train-fraction", "1.0"], ["--train-fraction 1.0 is invalid", "(0, 1)"]),
        (TRAIN + ["--train-fraction", "0"], ["--train-fraction 0.0 is invalid"]),
        (TRAIN + ["--episode-length", "1"], ["--episode-length 1 is invalid"]),
        (TRAIN + ["--learning-rate", "-1"], ["--learning-rate -1.0 is invalid"]),
        (TRAIN + ["--gamma", "0"], ["--gamma 0.0 is invalid"]),
        (TRAIN + ["--gamma", "1.5"], ["--gamma 1.5 is invalid"]),
        (TRAIN + ["--val-fraction", "0.9"], ["--val-fraction 0.9 is invalid"]),
        (
            TRAIN + ["--predictability-level", "1"],
            ["--predictability-level 1.0 is invalid", "[0, 1)"],
        ),
        (TRAIN + ["--predictability-level", "nan"], ["--predictability-level nan is invalid"]),
        (TRAIN + ["--weight-decay", "1.5"], ["--weight-decay 1.5 is invalid", "[0, 1)"]),
        (TRAIN + ["--eval-every", "0"], ["--eval-every 0 is invalid"]),
        (TRAIN + ["--seed", "-1"], ["--seed -1 is invalid"]),
        (TRAIN + ["--torch-threads", "0"], ["--torch-threads 0 is invalid"]),
        (TRAIN + ["--bars-per-year", "0"], ["--bars-per-year 0.0 is invalid"]),
        (["train", "--device", "tpu", "--out", "out"], ["--device 'tpu' is invalid"]),
        (TRAIN + ["--env", "nonsense=1"], ["--env 'nonsense=1' is invalid", "FIELD=VALUE"]),
        (TRAIN + ["--env", "spread=-1"], ["spread"]),
        (
            TRAIN + ["--episode-length", "30", "--env", "episode_length=40"],
            ["--episode-length 30 and --env episode_length=40 both set", "pass one of them"],
        ),
        (TRAIN + ["--env", "episode_length=1"], ["--env episode_length = 1 is invalid", "2 to"]),
        (TRAIN + ["--data", "absent.csv"], ["--data absent.csv: no such file"]),
        (TRAIN + ["--column", "close"], ["--column 'close' is invalid", "FIELD=NAME"]),
        (TRAIN + ["--date-format", "%Y"], ["apply to --data files"]),
        (TRAIN + ["--no-such-option"], ["unrecognized arguments: --no-such-option"]),
        (["eval", "--model", "nowhere/model.zip"], ["--model nowhere/model.zip: no such file"]),
        (["backtest", "--exposure", "2"], ["--exposure 2.0 is invalid", "[-1, 1]"]),
        (["backtest", "--train-fraction", "1"], ["--train-fraction 1.0 is invalid"]),
        (["backtest", "--instrument", "XYZ"], ["--instrument 'XYZ'", "planted_0"]),
        (["walkforward", "--folds", "0"], ["--folds 0 is invalid"]),
        (["walkforward", "--seeds", "-1"], ["--seeds -1 is invalid"]),
        (["walkforward", "--test-bars", "1"], ["--test-bars 1 is invalid"]),
        (["walkforward", "--folds", "30", "--test-bars", "1000"], ["too few", "--folds"]),
        (["bench", "--steps", "0"], ["--steps 0 is invalid"]),
        (["frobnicate"], ["invalid choice: 'frobnicate'"]),
        # No prefix matching: a typo is an error, not another option.
        (TRAIN + ["--timestep", "1000"], ["unrecognized arguments: --timestep 1000"]),
        (["backtest", "--rul", "buy_and_hold"], ["unrecognized arguments: --rul"]),
        # Upper bounds, with the range and the defaults in the message.
        (
            TRAIN + ["--timesteps", "10000000000000"],
            ["--timesteps 10000000000000 is invalid", "1 to 10,000,000,000", "200,000 on the CPU"],
        ),
        (TRAIN + ["--num-envs", "100000000"], ["--num-envs 100000000 is invalid", "16,777,216"]),
        (TRAIN + ["--torch-threads", "5000"], ["--torch-threads 5000 is invalid", "1 to 1,024"]),
        (TRAIN + ["--seed", str(2**32)], ["--seed 4294967296 is invalid"]),
        (["walkforward", "--folds", "5000"], ["--folds 5000 is invalid", "1 to 1,000"]),
        (["bench", "--steps", "100000000"], ["--steps 100000000 is invalid", "1 to 1,000,000"]),
        (TRAIN + ["--data", "."], ["--data .: is a folder"]),
    ],
)
def test_bad_options(in_tmp, capsys, argv, needles):
    line = _fails(capsys, argv, *needles)
    assert "model.zip.zip" not in line


@pytest.mark.parametrize("command", ["train", "backtest", "walkforward"])
def test_the_episode_length_comes_from_either_option(command):
    from agents.cli import build_parser, validate

    for argv, length in (
        ([], 200),
        (["--episode-length", "30"], 30),
        (["--env", "episode_length=40"], 40),
    ):
        args = build_parser().parse_args([command, *argv])
        validate(args)
        assert args.config.episode_length == length, argv


def test_missing_column_names_the_cli_option(in_tmp, capsys):
    _csv(in_tmp / "novol.csv", drop=["Volume"])
    _fails(capsys, TRAIN + ["--data", "novol.csv"], "novol.csv", "--column volume=NAME")
    _fails(
        capsys,
        ["backtest", "--data", "novol.csv", "--column", "volume=Vol"],
        "no column 'Vol' for volume",
    )


def test_data_errors_name_file_line_and_column(in_tmp, capsys):
    path = _csv(in_tmp / "bad.csv")
    df = pd.read_csv(path).astype({"High": object})
    df.loc[40, "High"] = "#N/A"
    df.to_csv(path, index=False)
    _fails(capsys, ["backtest", "--data", "bad.csv"], "bad.csv, line 42, column 'High'")


def test_ambiguous_dates_name_the_date_format(in_tmp, capsys):
    _csv(in_tmp / "dm.csv", time_format="%d.%m.%Y")
    df = pd.read_csv("dm.csv")
    # Keep only days 1..12 so that day and month cannot be told apart.
    df[pd.to_datetime(df["Date"], format="%d.%m.%Y").dt.day <= 12].to_csv("dm.csv", index=False)
    _fails(
        capsys,
        ["backtest", "--data", "dm.csv"],
        "dm.csv, column 'Date'",
        "--date-format '%d.%m.%Y' or --date-format '%m.%d.%Y'",
    )


def test_debug_shows_the_traceback(in_tmp):
    with pytest.raises(cli.UsageError):
        cli.main(["--debug", "train", "--timesteps", "-5"])
    with pytest.raises(cli.UsageError):
        cli.main(["train", "--debug", "--timesteps", "-5"])


def test_default_out_folders_do_not_collide(in_tmp):
    args = cli.build_parser().parse_args(["train"])
    a = cli.claim_out(args, "train")
    b = cli.claim_out(args, "train")
    assert a != b and a.is_dir() and b.is_dir()
    assert cli.claim_out(args, "backtest").name.startswith("backtest-")


def test_every_option_has_help_and_a_default_shown(capsys):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, p in sub.choices.items():
        for action in p._actions:
            if action.dest in ("help",) or action.help == "==SUPPRESS==":
                continue
            assert action.help, f"{name} {action.option_strings} has no help"
        text = p.format_help()
        assert "(default:" in text, name


def test_backtest_writes_the_report(in_tmp, capsys):
    path = _csv(in_tmp / "GOOGL.csv", n=WARMUP_BARS + 300)
    assert cli.main(["backtest", "--data", str(path), "--rule", "buy_and_hold", "--out", "r"]) == 0
    out = capsys.readouterr().out
    assert "report: r/index.html" in out
    m = json.loads((in_tmp / "r" / "metrics.json").read_text())
    assert m["synthetic_data"] is False
    assert m["strategy"]["costs_included"] and m["buy_and_hold"]["costs_included"]
    assert not m["buy_and_hold_frictionless"]["costs_included"]
    assert 250 < m["bars_per_year"] < 262  # weekdays, not calendar days
    for f in ("equity_curve.png", "equity_curve_log.png", "position.png", "index.html"):
        assert (in_tmp / "r" / f).exists()
    page = (in_tmp / "r" / "index.html").read_text()
    assert 'href="metrics.json"' in page and 'src="equity_curve.png"' in page
    # The console and the page open with the one-sentence verdict (real data: no known rule).
    lead = out.splitlines()[0]
    assert lead.startswith("Deployed the rule buy_and_hold at exposure 1: on the last 20% of")
    assert "vs flat +0.0%, buy-and-hold " in lead and "known rule" not in lead
    assert len(lead.split()) <= 30
    assert page.split("</h1>", 1)[1].lstrip().startswith(f'<p class="lead"><strong>{lead}<')


def test_backtest_of_synthetic_data_says_so(in_tmp, capsys):
    assert cli.main(["backtest", "--train-fraction", "0.95", "--out", "s"]) == 0
    assert "(synthetic data)" in capsys.readouterr().out
    assert "SYNTHETIC" in (in_tmp / "s" / "index.html").read_text()


def test_bench_runs_from_the_package(in_tmp, capsys):
    assert cli.main(["bench", "--steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "numpy" in out and "SyncVectorEnv" in out
    # The env measured is named: the source design's, that of docs/PERFORMANCE.md's figures.
    assert "env EnvConfig.source_design()" in out


def test_walkforward_default_windows_train_on_half_the_bars():
    from agents.cli.walkforward import default_test_bars

    n, folds = 2015, 6
    test = default_test_bars(n, folds)
    assert test == (n - n // 2) // folds
    assert n - folds * test >= n // 2  # the first fold's training window


@pytest.mark.slow
def test_walkforward_end_to_end_tiny(in_tmp, capsys):
    argv = [
        "walkforward",
        "--device",
        "cpu",
        "--folds",
        "2",
        "--train-bars",
        "400",
        "--test-bars",
        "100",
        "--timesteps",
        "64",
        "--num-envs",
        "4",
        "--eval-every",
        "32",
        "--seeds",
        "0",
        "1",
        "--no-progress",
        "--out",
        "wf",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "report: wf/index.html" in out and "known rule" in out
    (lead,) = [line for line in out.splitlines() if line.startswith("Deployed ")]
    assert " of 4 fold runs" in lead or " all 4 fold runs" in lead
    assert "known rule " in lead and len(lead.split()) <= 30
    m = json.loads((in_tmp / "wf" / "metrics.json").read_text())
    assert len(m["folds"]) == 2 and len(m["folds"][0]["seeds"]) == 2
    assert set(m["schema"]["keys"]) == set(m) and "undocumented" not in m["schema"]["keys"].values()
    assert set(m["aggregate"]["ensemble"]) <= set(m["schema"]["units"])
    # Each fold and seed says what was deployed, why, and its baseline's return beside it.
    for f in m["folds"]:
        for s in f["seeds"]:
            assert s["kept"] in ("network", "flat", "hold long", "hold short")
            assert s["verdict"] == s["deployment"]["headline"] and s["verdict"]
            assert "total_return" in s["baseline_strategy"]
    assert out.count("Fold 1 (") == 2 and out.count("Fold 2 (") == 2
    assert m["settings"]["expanding"] is True
    # Nothing was tested out of sample before the first fold: no network is deployed there.
    assert m["settings"]["confirm_out_of_sample"] is True
    assert all(s["kept"] != "network" for s in m["folds"][0]["seeds"])
    assert set(m["aggregate"]) >= {"ensemble", "buy_and_hold", "random", "rule", "seeds"}
    assert m["sharpe_vs_buy_and_hold"]["low"] <= m["sharpe_vs_buy_and_hold"]["high"]
    for k, f in enumerate(m["folds"], start=1):
        assert f["fold"] == k  # numbered from 1, as the text's "Fold 1"
        trained = any(s["selected_step"] is not None for s in f["seeds"])
        assert (in_tmp / "wf" / f"learning_curve_fold{k}.png").exists() == trained
    assert (in_tmp / "wf" / "folds.png").exists()


def test_greedy_policy_matches_predict() -> None:
    """The backtests' CPU copy of the Q-network picks the actions ``model.predict`` picks, and
    leaves torch's thread setting as it found it."""
    import gymnasium as gym
    import torch as th

    import gpu_trading_env  # noqa: F401
    from agents import GpuDQN
    from agents.pipelines.backtest_policies import greedy_policy
    from gpu_trading_env import MarketData

    env = gym.make_vec("GpuTrading-v0", num_envs=2, device="cpu", data=MarketData.default())
    model = GpuDQN("DuelingPolicy", env, buffer_size=100, seed=3, device="cpu")
    policy = greedy_policy(model)
    threads = th.get_num_threads()
    rng = np.random.default_rng(0)
    dim = env.single_observation_space.shape[0]
    for _ in range(50):
        obs = rng.normal(0.0, 2.0, (1, dim)).astype(np.float32)
        expected, _ = model.predict(obs, deterministic=True)
        assert policy(obs, 0).tolist() == np.asarray(expected).reshape(1).tolist()
    assert th.get_num_threads() == threads


def test_file_system_failures_are_one_line_with_exit_2(in_tmp, capsys, monkeypatch):
    """A --data file that cannot be read (permissions, an I/O error) or a --model that is not
    a saved model: one line naming the path, exit code 2, not a traceback's last line."""
    _csv(in_tmp / "locked.csv")

    def denied(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    with monkeypatch.context() as m:
        m.setattr(pd, "read_csv", denied)
        _fails(
            capsys,
            ["backtest", "--data", "locked.csv", "--out", "r"],
            "--data locked.csv: Permission denied",
        )
    (in_tmp / "model.zip").write_text("not a zip archive")
    _fails(
        capsys,
        ["eval", "--model", "model.zip", "--out", "r"],
        "--model: 'model.zip' is not a gpu-trading-env model file",
    )


def test_annualisation_follows_the_evaluated_instrument(in_tmp, capsys):
    """Daily business-day bars first, hourly 24/7 bars second: backtest --instrument of the
    second annualises with its own calendar (8,766 bars a year), not the first's (~261)."""
    _csv(in_tmp / "DAILY.csv", n=WARMUP_BARS + 300)
    _csv(in_tmp / "HOURLY.csv", n=WARMUP_BARS + 600, hourly=True, seed=1)
    argv = ["backtest", "--data", "DAILY.csv", "HOURLY.csv", "--train-fraction", "0"]
    assert cli.main(argv + ["--instrument", "HOURLY", "--out", "h"]) == 0
    assert cli.main(argv + ["--instrument", "DAILY", "--out", "d"]) == 0
    hourly = json.loads((in_tmp / "h" / "metrics.json").read_text())
    daily = json.loads((in_tmp / "d" / "metrics.json").read_text())
    assert hourly["bars_per_year"] == pytest.approx(8766, rel=0.01)
    assert 250 < daily["bars_per_year"] < 262
    assert hourly["instrument"] == "HOURLY" and daily["instrument"] == "DAILY"


def test_backtest_of_real_data_holds_the_instrument_by_default(in_tmp, capsys):
    """The planted rule exists only on the built-in market: on --data files the default rule
    is buy-and-hold, and asking for the planted rule is an error that says why."""
    _csv(in_tmp / "GOOGL.csv", n=WARMUP_BARS + 300)
    assert cli.main(["backtest", "--data", "GOOGL.csv", "--out", "r"]) == 0
    out = capsys.readouterr().out
    m = json.loads((in_tmp / "r" / "metrics.json").read_text())
    assert m["rule"] == "buy_and_hold"
    assert "planted" not in out
    _fails(
        capsys,
        ["backtest", "--data", "GOOGL.csv", "--rule", "planted", "--out", "p"],
        "--rule planted: this data has no planted rule",
        "--rule buy_and_hold",
    )
    assert cli.main(["backtest", "--train-fraction", "0.95", "--out", "s"]) == 0
    assert json.loads((in_tmp / "s" / "metrics.json").read_text())["rule"] == "planted"


TINY_TRAIN = ["train", "--device", "cpu", "--timesteps", "600", "--num-envs", "4"]
TINY_TRAIN += ["--eval-every", "300", "--episode-length", "50", "--no-progress"]


@pytest.mark.slow
def test_two_files_train_one_policy_over_both_and_instrument_picks_one(in_tmp, capsys):
    """Two files are two instruments: train takes the path of several (one policy over both,
    whose timestamps must agree or --align ffill put them on one grid); --instrument trains and
    evaluates the one named."""
    _csv(in_tmp / "AAA.csv", n=WARMUP_BARS + 300)
    _csv(in_tmp / "BBB.csv", n=WARMUP_BARS + 300, hourly=True, seed=1)
    data = ["--data", "AAA.csv", "BBB.csv"]
    _fails(capsys, TINY_TRAIN + data, "instrument 'BBB' disagrees with instrument 'AAA'", "ffill")
    assert cli.main(TINY_TRAIN + data + ["--instrument", "BBB", "--out", "one"]) == 0
    m = json.loads((in_tmp / "one" / "metrics.json").read_text())
    assert m["instruments"] == {"trained": ["BBB"], "evaluated": "BBB"}
    assert m["bars_per_year"] == pytest.approx(8766, rel=0.01)


def test_progress_lines_for_output_that_is_not_a_terminal():
    """Piped output gets a plain line every interval: steps, rate and time left; and a last
    line at the end."""
    import io

    from agents.pipelines.progress import ProgressLines

    now = [0.0]
    stream = io.StringIO()
    cb = ProgressLines(200_000, every_seconds=10.0, stream=stream, clock=lambda: now[0])
    cb._on_training_start()
    for steps, t in ((16_000, 5.0), (20_000, 10.0), (30_000, 15.0), (40_000, 20.0)):
        cb.num_timesteps, now[0] = steps, t
        cb._on_step()
    cb._on_training_end()
    lines = stream.getvalue().splitlines()
    assert lines == [
        "train: 20,000/200,000 env steps (10%), 2,000 steps/s, about 1 min 30 s left",
        "train: 40,000/200,000 env steps (20%), 2,000 steps/s, about 1 min 20 s left",
        "train: 40,000 env steps in 20 s",
    ]
    with pytest.raises(ValueError, match="total = 0 is invalid"):
        ProgressLines(0)


def test_cpu_training_defaults_to_one_torch_thread(monkeypatch, capsys):
    """The CPU defaults' small batches run on one torch thread unless --torch-threads says
    otherwise; a budget far above the defaults warns with the expected wall time."""
    import torch

    from agents.cli.train import CPU_TORCH_THREADS, train_settings

    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    parser = cli.build_parser()
    train_settings(parser.parse_args(["train", "--device", "cpu"]), "cpu", 200_000)
    train_settings(parser.parse_args(["train", "--torch-threads", "2"]), "cpu", 200_000)
    assert calls == [CPU_TORCH_THREADS, 2] and CPU_TORCH_THREADS == 1
    assert capsys.readouterr().err == ""
    train_settings(parser.parse_args(["train", "--timesteps", "100_000_000"]), "cpu", 1)
    assert "warning: --timesteps 100,000,000 on cpu: expect about 18 h" in capsys.readouterr().err


def test_missing_volume_names_the_fill_option_and_the_option_fills_it(in_tmp, capsys):
    path = _csv(in_tmp / "FX.csv", n=WARMUP_BARS + 300)
    df = pd.read_csv(path)
    df.loc[[10, 200], "Volume"] = np.nan
    df.to_csv(path, index=False)
    _fails(
        capsys,
        ["backtest", "--data", "FX.csv", "--out", "r"],
        "FX.csv, line 12, column 'Volume': no value",
        "--fill-volume 0",
    )
    _fails(capsys, ["backtest", "--data", "FX.csv", "--fill-volume", "-1"], "--fill-volume -1.0")
    assert cli.main(["backtest", "--data", "FX.csv", "--fill-volume", "0", "--out", "r"]) == 0
    # An export with no volume column at all (FX, an index) takes the same option.
    df.drop(columns="Volume").to_csv(path, index=False)
    _fails(capsys, ["backtest", "--data", "FX.csv"], "no 'volume' column", "--fill-volume 0")
    assert cli.main(["backtest", "--data", "FX.csv", "--fill-volume", "0", "--out", "v"]) == 0
    assert "FX.csv: no volume column: every volume is 0" in capsys.readouterr().err


def test_report_states_data_warmup_and_annualisation_in_words(in_tmp, capsys):
    """The report's notes: file name, instrument, bars and dates (no repr, no absolute path),
    the warm-up bars, the calendar; no column that every row leaves n/a."""
    from agents.cli.report import results_table

    _csv(in_tmp / "GOOGL.csv", n=WARMUP_BARS + 300)
    assert cli.main(["backtest", "--data", str(in_tmp / "GOOGL.csv"), "--out", "r"]) == 0
    page = (in_tmp / "r" / "index.html").read_text()
    assert "Data: GOOGL.csv; instrument GOOGL: 300 bars, 2016-" in page
    assert (
        f"The first {WARMUP_BARS:,} bars of each instrument were used for feature warm-up" in page
    )
    assert "MarketData(" not in page and str(in_tmp) not in page
    assert "inferred from the evaluated instrument" in page
    m = {"costs_included": True, "total_return": 0.1, "annual_return": 0.05, "sharpe": 1.0}
    m |= {"sortino": 1.2, "max_drawdown": 0.1}
    head = results_table([("a", m), ("b", {**m, "turnover": 3.0})])[0]
    assert "turnover / yr" in head and "hit rate" not in head and "exposure" not in head


def test_report_says_which_close_a_yahoo_export_used(in_tmp, capsys):
    """A file with both Close and Adj Close: the page's data sentence names the close used."""
    df = pd.read_csv(_csv(in_tmp / "Y.csv", n=WARMUP_BARS + 300))
    df.insert(5, "Adj Close", df["Close"] * 0.5)
    df.to_csv(in_tmp / "Y.csv", index=False)
    assert cli.main(["backtest", "--data", "Y.csv", "--out", "a"]) == 0
    assert (
        "Prices adjusted: close is &#x27;Adj Close&#x27;" in (in_tmp / "a/index.html").read_text()
    )
    assert cli.main(["backtest", "--data", "Y.csv", "--prices", "raw", "--out", "r"]) == 0
    assert "&#x27;Adj Close&#x27; unused: --prices raw)" in (in_tmp / "r/index.html").read_text()
    _csv(in_tmp / "C.csv", n=WARMUP_BARS + 300)
    assert cli.main(["backtest", "--data", "C.csv", "--out", "c"]) == 0
    assert "Prices " not in (in_tmp / "c/index.html").read_text()


def test_an_argument_error_does_not_import_torch():
    """The command's module and its parser load without torch and SB3 (seconds on a busy
    2-core machine), so a mistyped option answers at once."""
    import subprocess
    import sys

    code = (
        "import sys; from agents import cli; cli.build_parser(); "
        "print(sorted(m for m in ('torch', 'stable_baselines3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_eval_runs_a_model_in_its_saved_action_layout(in_tmp, capsys):
    """A model trained with the source design's 45 actions is evaluated in them without --env
    (its file carries its EnvConfig); an --env that changes the layout is one line naming both
    counts, not an action error mid-run."""
    _csv(in_tmp / "t.csv", n=WARMUP_BARS + 300)
    layout = [
        "--env",
        "exposure_levels=(-1.0,-0.5,0.0,0.5,1.0)",
        "order_cost_bps=(1.0,0.5,1.5)",
        "sub_actions=3",
    ]
    assert cli.main([*TINY_TRAIN, "--data", "t.csv", *layout, "--out", "m"]) == 0
    assert cli.main(["eval", "--model", "m/model.zip", "--data", "t.csv", "--out", "e"]) == 0
    capsys.readouterr()
    _fails(
        capsys,
        [
            "eval",
            "--model",
            "m/model.zip",
            "--data",
            "t.csv",
            "--out",
            "e2",
            "--env",
            "sub_actions=1",
        ],
        "the env configuration gives 15 actions",
        "this model acts on 45",
        "['sub_actions']",
    )


def test_every_subcommand_of_the_parser_has_its_function() -> None:
    from agents.cli import COMMANDS
    from agents.cli.parser import build_parser

    parser = build_parser()
    assert set(parser.subcommands) == set(COMMANDS)


def _subcommands() -> dict:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices


def test_top_level_help_names_every_command_without_markup():
    text = cli.build_parser().format_help()
    description = text.split("positional arguments:")[0]
    for name in cli.COMMANDS:
        assert re.search(rf"\b{name}\b", description), name
    assert "`" not in text
    for name, p in _subcommands().items():
        assert "``" not in p.format_help() and "`" not in (p.description or ""), name


def test_help_fits_two_screens_and_help_all_explains_every_option(capsys):
    for name, p in _subcommands().items():
        short = p.format_help()
        # eval's required --model read "(default: None)"; None says nothing to a reader.
        assert "default: None" not in p.format_help(every_option=True), name
        assert len(short.splitlines()) <= 100, (name, len(short.splitlines()))
        full = p.format_help(every_option=True)
        for action in p._actions:
            if action.help == argparse.SUPPRESS:  # hidden on purpose (an option refused)
                continue
            for option in action.option_strings:
                # --help names every option, --help-all explains each (its help text too).
                assert option in short, (name, option)
                if action.help:
                    assert " ".join(action.help.split()[:3]) in " ".join(full.split()), option
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--help-all"])
    assert exit_.value.code == 0
    printed = capsys.readouterr().out
    assert "--reward-scale REWARD_SCALE" in printed and "advanced options" not in printed


def _tiny_walkforward(*extra):
    return ["walkforward", "--device", "cpu", "--folds", "1", "--train-bars", "400",
            "--test-bars", "100", "--timesteps", "64", "--num-envs", "4", "--eval-every", "32",
            "--no-progress", *extra]  # fmt: skip


def test_repeated_seeds_are_refused_before_any_training(in_tmp, capsys, monkeypatch):
    """``walkforward --seeds 1 1`` trained every fold, then failed and removed its folder."""
    import agents.pipelines.walkforward

    def no_training(*args, **kwargs):
        raise AssertionError("trained before the seeds were checked")

    monkeypatch.setattr(agents.pipelines.walkforward, "walk_forward", no_training)
    _fails(
        capsys,
        _tiny_walkforward("--seeds", "1", "2", "1", "--out", "wf"),
        "--seeds [1, 2, 1] is invalid: a seed is repeated (1)",
        "distinct seeds",
    )


def test_a_walkforward_report_that_fails_keeps_the_trained_results(in_tmp, capsys, monkeypatch):
    """A failure after training removed the run folder, and every fold's results with it."""
    import gpu_trading_env.reports.report

    def broken_plot(*args, **kwargs):
        raise RuntimeError("a plot that fails")

    monkeypatch.setattr(gpu_trading_env.reports.report, "plot_curves", broken_plot)
    assert cli.main(_tiny_walkforward("--out", "wf")) == 1
    assert "a plot that fails" in capsys.readouterr().err
    m = json.loads((in_tmp / "wf" / "metrics.json").read_text())
    assert len(m["folds"]) == 1 and "ensemble" in m["aggregate"]
    from agents.cli.run_folder import CLAIM

    claim = json.loads((in_tmp / "wf" / CLAIM).read_text())
    assert claim["state"] == "failed"


def test_instrument_names_from_files_are_checked_before_any_report(in_tmp, capsys):
    """A name with a line break went into index.html as a line of its own (a ``.pth`` line
    that Python runs, where the page was written through a link) and into the terminal."""
    bad = "x\nimport os;os.system('touch PWNED')\x1b[2J"
    _csv(in_tmp / f"{bad}.csv")
    line = _fails(capsys, ["backtest", "--data", f"{bad}.csv", "--out", "bt"])
    assert 'instrument name "x\\nimport os' in line and "\\x1b[2J" in line, line
    assert "allowed are printable characters" in line
    assert not (in_tmp / "PWNED").exists()
