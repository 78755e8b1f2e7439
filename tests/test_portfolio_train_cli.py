"""``train``, ``eval``, ``backtest`` and ``walkforward`` of several instruments, chosen by the
number of ``--data`` files (eval: by the model's run) with or without ``--portfolio``: their
files and reports on a tiny budget, and each bad input refused as one line naming it (CPU)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from random_bars import write_daily_bar_csv

from agents import cli
from agents.files.side_files import MAX_SIDE_FILE_BYTES
from gpu_trading_env.data.features import WARMUP_BARS

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = ["--device", "cpu", "--timesteps", "1500", "--num-envs", "4", "--batch-size", "32"]
TINY += ["--net-width", "8", "--episode-length", "50", "--no-progress"]


@pytest.fixture
def three_files(tmp_path):
    n = WARMUP_BARS + 300
    return [str(write_daily_bar_csv(tmp_path / f"{s}.csv", n, seed=i)) for i, s in enumerate("ABC")]


def test_train_portfolio_writes_model_metrics_and_report(tmp_path, three_files, capsys) -> None:
    out = tmp_path / "run"
    argv = [
        "train",
        "--data",
        *three_files,
        "--all-inputs",
        "--out",
        str(out),
        *TINY,
    ]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.index("verdict: ") < printed.index("out-of-sample")
    for name in ("model.zip", "metrics.json", "index.html", "positions.png", "costs.png"):
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    # The report opens with one sentence: the policy deployed, its test figures beside flat's
    # and equal-weight buy-and-hold's.
    deployed = "a network" if metrics["kept"] == "network" else "flat (no validated edge)"
    (lead,) = [line for line in printed.splitlines() if line.startswith("Deployed ")]
    assert lead.startswith(f"Deployed {deployed}: out of sample ") and len(lead.split()) <= 30
    assert "equal-weight buy-and-hold " in lead and printed.index(lead) < printed.index("verdict")
    assert '<p class="lead">' in (out / "index.html").read_text()
    assert metrics["kind"] == "portfolio" and metrics["instruments"] == ["A", "B", "C"]
    assert metrics["reason"] and metrics["kept"] in ("network", "flat")
    assert set(metrics["test"]["kept"]["costs_by_instrument"]) == {"A", "B", "C"}
    assert metrics["config"]["env"]["episode_length"] == 50
    assert metrics["config"]["branch_rewards"] and metrics["config"]["instrument_encoder"]
    assert metrics["config"]["flat_unpredicted"]
    # metrics.json documents itself: every top-level key in words, every figure's unit.
    keys, units = metrics["schema"]["keys"], metrics["schema"]["units"]
    assert set(keys) == set(metrics) and "undocumented" not in keys.values(), keys
    for block in (metrics["test"]["kept"], *metrics["figures"].values()):
        assert set(block) <= set(units), set(block) - set(units)
    page = (out / "index.html").read_text()
    assert page.index("Verdict: ") < page.index("<table>")
    assert "equal-weight buy and hold" in page


def test_the_learners_switches_reach_the_run_and_the_saved_model(tmp_path, three_files) -> None:
    from agents import GpuDQN
    from agents.algorithm.policies import BranchingDuelingQNetwork, InstrumentEncoderQNetwork

    out = tmp_path / "run"
    argv = ["train", "--data", *three_files, "--all-inputs", "--out", str(out)]
    argv += [*TINY, "--no-branch-rewards", "--no-instrument-encoder", "--no-flat-unpredicted"]
    assert cli.main(argv) == 0
    config = json.loads((out / "metrics.json").read_text())["config"]
    assert config["branch_rewards"] is False and config["instrument_encoder"] is False
    assert config["flat_unpredicted"] is False
    model = GpuDQN.load(out / "model.zip", device="cpu")
    assert type(model.q_net) is BranchingDuelingQNetwork
    assert not isinstance(model.q_net, InstrumentEncoderQNetwork)
    assert not model.branch_rewards


def _error(argv: list[str], capsys) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    return err


def test_no_data_is_refused(capsys) -> None:
    err = _error(["train", "--portfolio", *TINY], capsys)
    assert "--portfolio needs two or more instruments, no --data" in err


def test_misaligned_files_name_the_instrument_and_timestamp(tmp_path, capsys) -> None:
    n = WARMUP_BARS + 300
    a = write_daily_bar_csv(tmp_path / "A.csv", n)
    b = write_daily_bar_csv(tmp_path / "B.csv", n + 1, seed=1)
    err = _error(["train", "--data", str(a), str(b), *TINY], capsys)
    assert "instrument 'B' disagrees with instrument 'A' at timestamp" in err
    assert "align='ffill'" in err


def test_align_ffill_puts_misaligned_files_on_one_grid(tmp_path, capsys) -> None:
    n = WARMUP_BARS + 300
    a = write_daily_bar_csv(tmp_path / "A.csv", n)
    b = write_daily_bar_csv(tmp_path / "B.csv", n + 1, seed=1)
    out = tmp_path / "run"
    argv = ["train", "--data", str(a), str(b), "--align", "ffill"]
    assert cli.main([*argv, "--out", str(out), *TINY]) == 0
    assert json.loads((out / "metrics.json").read_text())["splits"]["test"][1] == n + 1 - (
        WARMUP_BARS
    )


def test_align_ffill_refuses_files_whose_dates_barely_overlap(tmp_path, capsys) -> None:
    n = WARMUP_BARS + 300
    a = write_daily_bar_csv(tmp_path / "A.csv", n)
    b = write_daily_bar_csv(tmp_path / "B.csv", n + 100, seed=1)  # 100 bars on after A's last
    argv = ["train", "--data", str(a), str(b), "--portfolio", "--align", "ffill", *TINY]
    err = _error(argv, capsys)
    assert "align='ffill' fills 25.0% of the 400 bars of instrument 'A'" in err
    assert "allowed is at most 10.0% (max_filled, --max-filled)" in err
    err = _error([*argv, "--max-filled", "0.2"], capsys)
    assert "fills 25.0% " in err and "at most 20.0%" in err
    err = _error([*argv, "--max-filled", "2"], capsys)
    assert "--max-filled 2.0 is invalid: allowed is a share in [0, 1]" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--instrument", "A", "--align", "ffill"], "--align ffill is invalid with one instrument"),
        (["--max-filled", "0.5"], "--max-filled is invalid without --align ffill"),
        (["--cross-fit"], "--cross-fit is invalid with several instruments (--portfolio)"),
        (["--portfolio", "--instrument", "A"], "--instrument is invalid with several instruments"),
        (["--env", "cost_bps=-1"], "PortfolioConfig.cost_bps = -1.0 is invalid"),
        (["--env", "order_cost_bps=(1,)"], "--env 'order_cost_bps=(1,)' is invalid"),
        (["--portfolio", "--env", "cost_bps=(1, 2)"], "PortfolioConfig.cost_bps = (1.0, 2.0)"),
        (["--episode-length", "400"], "episode_length = 400 is invalid for the"),
        (["--gamma", "2"], "--gamma 2.0 is invalid: allowed is a number in (0, 1]"),
        (["--instrument", "A", "--no-branch-rewards"], "--no-branch-rewards is invalid with one"),
        (["--instrument", "B", "--no-instrument-encoder"], "--no-instrument-encoder is invalid"),
        (["--instrument", "C", "--no-flat-unpredicted"], "--no-flat-unpredicted is invalid with"),
    ],
)
def test_bad_options_are_one_line_each(three_files, extra, message, capsys) -> None:
    argv = ["train", "--data", *three_files, *TINY, *extra]
    assert message in _error(argv, capsys)


def test_portfolio_is_refused_where_it_contradicts_the_files(three_files, capsys) -> None:
    """--portfolio with one instrument (one file, or --instrument) is one line naming it."""
    err = _error(["train", "--data", three_files[0], "--portfolio", *TINY], capsys)
    assert "--portfolio needs two or more instruments, --data " in err and "one (A)" in err
    err = _error(["backtest", "--data", three_files[0], "--portfolio"], capsys)
    assert "--portfolio needs two or more instruments" in err


def test_eval_portfolio_repeats_the_runs_test_backtest(tmp_path, three_files, capsys) -> None:
    run = tmp_path / "run"
    argv = ["train", "--data", *three_files, "--all-inputs", "--out", str(run)]
    assert cli.main([*argv, *TINY]) == 0
    trained = json.loads((run / "metrics.json").read_text())
    # The model's own kind, without --portfolio (given, it is the same).
    for i, base in enumerate((["eval"], ["eval", "--portfolio"])):
        base = [*base, "--model", str(run / "model.zip")]
        argv = [*base, "--data", *three_files]
        assert cli.main([*argv, "--out", str(tmp_path / f"eval{i}")]) == 0
        assert "verdict: the saved model" in capsys.readouterr().out
        evaluated = json.loads((tmp_path / f"eval{i}" / "metrics.json").read_text())
        # eval's default --train-fraction skips the bars train trained on: the same test window.
        assert evaluated["window"] == trained["splits"]["test"]
        assert "undocumented" not in evaluated["schema"]["keys"].values()
        kept = trained["test"]["kept"]["total_return"]
        assert evaluated["model_backtest"]["total_return"] == kept
    assert (tmp_path / "eval0" / "index.html").is_file()
    err = _error([*base, "--data", *three_files[::-1]], capsys)
    assert (
        "the data holds the instruments ['C', 'B', 'A']; this model trades ['A', 'B', 'C']" in err
    )
    err = _error(["eval", "--model", str(run), "--data", three_files[0]], capsys)
    assert f"--model {run / 'model.zip'} (trained on A, B, C) needs two or more instruments" in err
    err = _error([*argv, "--env", "cost_bps=2"], capsys)
    assert "--env is invalid with eval --portfolio (a model of several instruments)" in err
    # The model builds its own env from the files in one call, the kept columns applied.
    from agents import GpuDQN

    model = GpuDQN.load(run / "model.zip", device="cpu")
    env = model.make_env(three_files, num_envs=2)
    assert env.config.episode_length == 50
    assert model.predict(env.reset(seed=0)[0], deterministic=True)[0].shape == (2, 3)


def test_eval_portfolio_refuses_a_model_without_a_portfolio_run(tmp_path, three_files, capsys):
    (tmp_path / "model.zip").write_bytes(b"")
    argv = ["eval", "--portfolio", "--model", str(tmp_path / "model.zip"), "--data", *three_files]
    assert "metrics.json, which is missing" in _error(argv, capsys)
    (tmp_path / "metrics.json").write_text(json.dumps({"kind": None}))
    assert "is not the run of a train of several instruments" in _error(argv, capsys)
    with open(tmp_path / "metrics.json", "r+b") as fh:  # a sparse file past the cap: not read
        fh.truncate(MAX_SIDE_FILE_BYTES + 1)
    assert f"has more than {MAX_SIDE_FILE_BYTES} bytes" in _error(argv, capsys)
    (tmp_path / "metrics.json").unlink()
    (tmp_path / "metrics.json").symlink_to("/dev/zero")  # read whole, it never ends
    assert "metrics.json' is not a regular file" in _error(argv, capsys)


def test_backtest_portfolio_holds_the_rule_in_every_instrument(tmp_path, three_files, capsys):
    """``backtest --portfolio``: the rule at exposure 1 in every instrument is equal weight under
    the gross cap (max_leverage 1), rebalanced each bar; its figures are the portfolio env's,
    beside flat and equal-weight buy-and-hold, in metrics.json and the report."""
    from types import SimpleNamespace

    import numpy as np

    from agents.cli.options import portfolio_env
    from agents.pipelines.portfolio_backtest import backtest_portfolio
    from gpu_trading_env.data.loaders import load_bars
    from gpu_trading_env.data.portfolio_data import PortfolioData

    out = tmp_path / "bt"
    argv = ["backtest", "--data", *three_files, "--out", str(out)]
    assert cli.main(argv) == 0
    assert "rule buy_and_hold" in capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["kind"] == "portfolio" and metrics["rule"] == "buy_and_hold"
    assert "undocumented" not in metrics["schema"]["keys"].values()
    pdata = PortfolioData.from_market_data(load_bars(three_files))
    start, stop = metrics["window"]
    assert start == int(0.8 * pdata.n_bars) and stop == pdata.n_bars
    env = portfolio_env(SimpleNamespace(episode_length=None, env=[]))
    long = env.exposure_levels.index(1.0)
    by_hand = backtest_portfolio(np.full((pdata.n_bars, 3), long), pdata, env, start, stop)
    assert metrics["rule_backtest"] == by_hand.to_dict()
    np.testing.assert_allclose(by_hand.weights, 1.0 / 3.0, atol=0.01)  # whole units: cash left
    assert metrics["flat"]["total_return"] == 0.0
    page = (out / "index.html").read_text()
    assert "equal-weight buy and hold" in page and (out / "positions.png").is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--exposure", "0.5"], "--exposure 0.5 is invalid with --portfolio (several instrum"),
        (["--rule", "planted"], "--rule planted is invalid with --portfolio (several instrum"),
        (["--instrument", "A"], "--instrument is invalid with backtest --portfolio"),
    ],
)
def test_backtest_portfolio_refuses_single_instrument_options(
    three_files, extra, message, capsys
) -> None:
    argv = ["backtest", "--data", *three_files, "--portfolio", *extra]
    assert message in _error(argv, capsys)


@pytest.mark.parametrize(
    ("n", "folds", "train_bars", "test_bars", "rolling"),
    [(1000, 6, None, None, False), (1000, 4, 300, None, True), (777, 3, 200, 150, False)],
)
def test_portfolio_folds_are_the_single_walkforwards_windows(
    n, folds, train_bars, test_bars, rolling
) -> None:
    from agents.pipelines.portfolio_walkforward import portfolio_folds
    from gpu_trading_env.data.market_data import MarketData
    from gpu_trading_env.data.splits import walk_forward_ranges

    one = MarketData.synthetic("gbm", n_bars=n, seed=0)
    if test_bars is None and train_bars is None:
        from agents.cli.walkforward import default_test_bars

        expected_test = default_test_bars(one.n_bars, folds)
    else:
        expected_test = test_bars
    single = walk_forward_ranges(one, folds, train_bars, expected_test, expanding=not rolling)
    ours = portfolio_folds(one.n_bars, folds, train_bars, test_bars, rolling)
    assert [(f.train_start, f.test_start, f.test_stop) for f in ours] == [
        (train[0][1], test[0][1], test[0][2]) for train, test in single
    ]


def test_stitched_path_chains_the_folds_with_a_flat_step_between() -> None:
    import numpy as np

    from agents.pipelines.portfolio_backtest import PortfolioBacktest
    from agents.pipelines.portfolio_walkforward import stitch_backtests

    def piece(start, stop, growth):
        t = stop - start - 1
        stamps = np.arange(start, stop).astype("datetime64[D]").astype("datetime64[ns]")
        return PortfolioBacktest(
            equity=growth ** np.arange(t + 1),
            levels=np.full((t, 2), 2),
            positions=np.ones((t, 2)),
            weights=np.full((t, 2), 0.5),
            costs=np.full((t, 2), 0.1),
            timestamps=stamps,
            instruments=("A", "B"),
            start=start,
            stop=stop,
            per_year=252.0,
        )

    a, b = piece(10, 15, 1.01), piece(15, 19, 0.99)
    st = stitch_backtests([a, b], level=1, per_year=252.0)
    assert (st.start, st.stop, st.n_bars) == (10, 19, 8)
    np.testing.assert_allclose(
        st.equity, np.r_[1.01 ** np.arange(5), 1.01**4 * 0.99 ** np.arange(4)]
    )
    assert st.returns[4] == 0.0  # the step between the two test windows is flat
    np.testing.assert_array_equal(st.levels[4], [1, 1])
    assert st.costs[4].sum() == 0.0 and st.costs.sum() == pytest.approx(0.1 * 2 * 7)
    assert st.timestamps.size == st.equity.size == 9
    with pytest.raises(ValueError, match="not consecutive"):
        stitch_backtests([a, piece(16, 19, 1.0)], level=1, per_year=252.0)


def test_walkforward_portfolio_reports_each_folds_kept_policy(tmp_path, capsys) -> None:
    n = WARMUP_BARS + 600
    files = [str(write_daily_bar_csv(tmp_path / f"{s}.csv", n, seed=i)) for i, s in enumerate("AB")]
    out = tmp_path / "wf"
    argv = ["walkforward", "--data", *files, "--all-inputs", "--folds", "2"]
    argv += ["--seeds", "0", "1", "--out", str(out), *TINY]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    kept = sum(
        r["kept"] == "network"
        for f in json.loads((out / "metrics.json").read_text())["folds"]
        for r in f["runs"]
    )
    verdict = (
        "verdict: no edge found: flat in all 4" if kept == 0 else f"network kept in {kept} of 4"
    )
    assert printed.count("fold ") >= 4 and verdict in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["kind"] == "portfolio_walkforward" and metrics["seeds"] == [0, 1]
    assert "undocumented" not in metrics["schema"]["keys"].values()
    folds = metrics["folds"]
    assert len(folds) == 2 and folds[0]["test"][1] == folds[1]["test"][0]
    for fold in folds:
        assert [r["seed"] for r in fold["runs"]] == [0, 1]
        for run in fold["runs"]:
            assert run["kept"] in ("network", "flat") and run["reason"].startswith(run["kept"])
    for seed in ("0", "1"):
        chained = np.prod([1 + f["runs"][int(seed)]["test"]["total_return"] for f in folds])
        assert metrics["stitched"][seed]["total_return"] == pytest.approx(chained - 1, rel=1e-9)
    page = (out / "index.html").read_text()
    assert page.index("Verdict: ") < page.index("Fold 1 (test ")
    assert "equal-weight buy and hold" in page


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--warm-start"], "--warm-start is invalid with walkforward --portfolio"),
        (["--no-confirm"], "--no-confirm is invalid with walkforward --portfolio"),
        (["--folds", "400"], "too few for 400 folds"),
    ],
)
def test_walkforward_portfolio_refuses_bad_options(three_files, extra, message, capsys) -> None:
    argv = ["walkforward", "--data", *three_files, *extra]
    assert message in _error(argv, capsys)


def test_eval_takes_the_kind_from_the_model_file_without_its_run_folder(tmp_path, three_files):
    """A model of three instruments saved by the library (no metrics.json beside it) is
    evaluated on its three files by eval without --portfolio, in the env its file records."""
    import gymnasium as gym

    from agents import GpuDQN
    from gpu_trading_env.core.portfolio_config import PortfolioConfig
    from gpu_trading_env.data.portfolio_data import PortfolioData

    data = PortfolioData.from_files(three_files)
    env = gym.make_vec(
        "GpuPortfolio-v0", num_envs=2, data=data, config=PortfolioConfig(episode_length=30)
    )
    model = GpuDQN("DuelingPolicy", env, learning_starts=10, buffer_size=100, batch_size=8)
    model.learn(30)
    model.save(tmp_path / "m.zip")
    out = tmp_path / "eval"
    argv = ["eval", "--model", str(tmp_path / "m.zip"), "--data", *three_files]
    assert cli.main([*argv, "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["kind"] == "portfolio" and metrics["instruments"] == ["A", "B", "C"]


def test_one_long_format_file_of_several_symbols_takes_the_path_of_several(tmp_path, capsys):
    """One file holding three symbols is three instruments: backtest takes the path of several
    without --portfolio; --instrument picks one."""
    import pandas as pd
    from random_bars import random_ohlcv

    n = WARMUP_BARS + 200
    frames = []
    for k, sym in enumerate("XYZ"):
        f = random_ohlcv(n, seed=k, capitalised=True)
        f.insert(0, "Symbol", sym)
        f.insert(0, "Date", pd.bdate_range("2020-01-01", periods=n).strftime("%Y-%m-%d"))
        frames.append(f)
    path = tmp_path / "long.csv"
    pd.concat(frames).to_csv(path, index=False)
    assert cli.main(["backtest", "--data", str(path), "--out", str(tmp_path / "all")]) == 0
    metrics = json.loads((tmp_path / "all" / "metrics.json").read_text())
    assert metrics["kind"] == "portfolio" and metrics["instruments"] == ["X", "Y", "Z"]
    argv = ["backtest", "--data", str(path), "--instrument", "Y", "--out", str(tmp_path / "y")]
    assert cli.main(argv) == 0
    assert json.loads((tmp_path / "y" / "metrics.json").read_text())["instrument"] == "Y"
