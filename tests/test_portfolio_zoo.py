"""The portfolio zoo (agents/pipelines/portfolio_zoo.py, ``zoo --portfolio``): its targets, its
rows and report, the rule's backtest on the agent's bars, and the small CPU run."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys

import numpy as np
import pytest

from agents.pipelines.portfolio_backtest import backtest_portfolio, buy_and_hold_portfolio
from agents.pipelines.portfolio_zoo import (
    PORTFOLIO_REAL_MARKETS,
    PORTFOLIO_ZOO_BY_NAME,
    RUN_SECONDS_TARGET,
    SMALL_PORTFOLIO,
    FailedPortfolioZooRun,
    PortfolioZooRun,
    baseline_lines,
    check_targets,
    markdown_table,
    portfolio_zoo_lead,
    rule_and_flat_levels,
    run_portfolio_one,
    write_portfolio_report,
)
from gpu_trading_env.core.portfolio_config import PortfolioConfig
from gpu_trading_env.data.portfolio_markets import portfolio_market
from gpu_trading_env.reports.report import LEAD_WORDS

_REAL_CI_PACKAGES = all(importlib.util.find_spec(m) for m in ("arch", "gym_anytrading"))
needs_real = pytest.mark.skipif(
    not _REAL_CI_PACKAGES, reason='needs arch and gym-anytrading: pip install -e ".[real]"'
)


def _run(market: str, seed: int, **figures: float | str | None) -> PortfolioZooRun:
    m = PORTFOLIO_ZOO_BY_NAME[market]
    values: dict = {
        "market": market, "kind": m.kind, "n_instruments": m.n_instruments, "seed": seed,
        "device": "cpu", "kept": "network", "reason": "", "agent_sharpe": 8.0,
        "agent_return": 0.1, "network_sharpe": 8.0, "network_return": 0.1, "rule_sharpe": 10.0,
        "rule_return": 0.12, "flat_sharpe": 0.0, "flat_return": 0.0, "hold_sharpe": 0.5,
        "hold_return": 0.01, "sharpe_ratio": 0.8,
        "test_start": 16_000, "test_stop": 20_000, "seconds": 30.0, "train_seconds": 25.0,
    }  # fmt: skip
    values.update(figures)
    return PortfolioZooRun(**values)


def test_targets_met_and_missed() -> None:
    rows = [
        _run("ar1_k8", 0, sharpe_ratio=0.9),
        _run("ar1_k8", 1, sharpe_ratio=0.7),  # mean 0.8: met
        _run("ar1_k32", 0, sharpe_ratio=0.59),  # below 0.6: missed
        _run("lead_lag_k8", 0, sharpe_ratio=1.0, seconds=RUN_SECONDS_TARGET + 1),
        _run("common_factor_k8", 0, agent_return=-0.031, sharpe_ratio=None, rule_sharpe=0.0),
        _run("common_factor_k32", 0, agent_return=-0.029, sharpe_ratio=None, rule_sharpe=0.0),
    ]
    checks = {c.market: c for c in check_targets(rows)}
    assert list(checks) == ["ar1_k8", "ar1_k32", "lead_lag_k8", "common_factor_k8",
                            "common_factor_k32"]  # fmt: skip
    assert checks["ar1_k8"].value == pytest.approx(0.8) and checks["ar1_k8"].met
    assert checks["ar1_k32"].met is False
    assert checks["lead_lag_k8"].met and checks["lead_lag_k8"].seconds_met is False
    assert checks["common_factor_k8"].met is False
    assert checks["common_factor_k32"].met and checks["common_factor_k32"].sharpe_ratio is None


def test_a_failed_run_leaves_its_market_unjudged() -> None:
    rows = [
        _run("ar1_k8", 0, sharpe_ratio=2.0),
        FailedPortfolioZooRun("ar1_k8", 1, "cpu", "ValueError: boom", "Traceback ..."),
    ]
    (check,) = check_targets(rows)
    assert check.seeds == 1 and check.failed_runs == 1
    assert check.met is None and check.seconds_met is None
    assert "| 1 (1 failed) |" in markdown_table([check])


def test_markdown_table_names_each_target_met_or_missed() -> None:
    table = markdown_table(check_targets([_run("ar1_k8", 0), _run("ar1_k32", 0, sharpe_ratio=0.1)]))
    lines = table.splitlines()
    assert len(lines) == 4 and all(line.count("|") == 14 for line in lines)
    assert "independent AR(1)s, phi 0.10, K = 8" in lines[2] and "| met |" in lines[2]
    assert "agent / rule Sharpe >= 0.6 | missed |" in lines[3]


def test_report_files(tmp_path) -> None:
    rows = [
        _run("ar1_k8", 0),
        FailedPortfolioZooRun("ar1_k8", 1, "cpu", "ValueError: boom", "Traceback ..."),
    ]
    files = write_portfolio_report(rows, tmp_path, "gpu-trading-env zoo --portfolio", {"x": 1})
    csv_lines = files.csv.read_text().splitlines()
    assert csv_lines[0].startswith("market,kind,n_instruments,seed,device,kept")
    assert csv_lines[0].endswith(",error") and csv_lines[2].endswith("ValueError: boom")
    doc = json.loads(files.json.read_text())
    assert doc["meta"] == {"x": 1} and len(doc["runs"]) == 2
    assert doc["targets"][0]["market"] == "ar1_k8" and doc["targets"][0]["met"] is None
    assert "```bash\ngpu-trading-env zoo --portfolio\n```" in files.markdown.read_text()


def test_rule_levels_are_the_rule_in_the_envs_levels() -> None:
    data = portfolio_market("lead_lag", 400, 8, seed=0)
    rule, flat = rule_and_flat_levels(PORTFOLIO_ZOO_BY_NAME["lead_lag_k8"], data, (-1.0, 0.0, 1.0))
    assert rule.shape == flat.shape == (400, 8) and rule.dtype == np.int64
    assert (flat == 1).all() and (rule[:, 0::2] == 1).all()
    assert set(np.unique(rule[1:, 1::2])) == {0, 2}
    with pytest.raises(ValueError, match="allowed are the exposure levels"):
        rule_and_flat_levels(PORTFOLIO_ZOO_BY_NAME["ar1_k8"], data, (0.0, 0.5, 1.0))


def test_small_run_is_reproducible_and_scores_the_rule_on_the_agents_bars() -> None:
    a = run_portfolio_one("ar1_k8", 0, "cpu", SMALL_PORTFOLIO)
    b = run_portfolio_one("ar1_k8", 0, "cpu", SMALL_PORTFOLIO)
    timing = {"seconds": 0.0, "train_seconds": 0.0}
    assert dataclasses.replace(a, **timing) == dataclasses.replace(b, **timing)
    assert (a.test_start, a.test_stop) == (1200, 1500)
    data = portfolio_market("ar1", SMALL_PORTFOLIO.bars, 8, seed=0)
    env = SMALL_PORTFOLIO.config().env
    rule, _ = rule_and_flat_levels(PORTFOLIO_ZOO_BY_NAME["ar1_k8"], data, env.exposure_levels)
    alone = backtest_portfolio(rule, data, env, a.test_start, a.test_stop)
    assert a.rule_sharpe == alone.sharpe > 5.0 and a.rule_return == alone.total_return
    assert a.flat_return == 0.0 and a.kept in ("network", "flat")
    hold = buy_and_hold_portfolio(data, env, a.test_start, a.test_stop)
    assert (a.hold_sharpe, a.hold_return) == (hold.sharpe, hold.total_return)
    if a.kept == "flat":
        assert a.agent_return == 0.0 and a.sharpe_ratio == 0.0


def test_small_budget_is_a_valid_config() -> None:
    config = SMALL_PORTFOLIO.config()
    assert config.timesteps == 2_000 and config.env.episode_length == 100
    assert isinstance(config.env, PortfolioConfig)


def test_report_opens_with_the_lead_sentence(tmp_path) -> None:
    rows = [
        _run("ar1_k8", 0, agent_return=0.1, agent_sharpe=8.0),
        _run("lead_lag_k32", 0, kept="flat", agent_return=0.0, agent_sharpe=float("nan")),
        FailedPortfolioZooRun("ar1_k8", 1, "cpu", "ValueError: boom", "Traceback ..."),
    ]
    lead = portfolio_zoo_lead(rows)
    assert len(lead.split()) <= LEAD_WORDS, lead
    assert lead == (
        "Deployed a network in 1 of 2 runs, 2 markets: mean out of sample +5.0% (Sharpe 8.00) "
        "vs flat +0.0%, buy-and-hold +1.0% (Sharpe 0.50), known rule +12.0% (Sharpe 10.00)."
    )
    files = write_portfolio_report(rows, tmp_path, "gpu-trading-env zoo --portfolio", {})
    assert files.markdown.read_text().splitlines()[2] == lead  # first, below the title
    # A real market's reference is its baseline; no finished run is said so.
    real = _run("ar1_k8", 0, baseline="sp500 hold long", rule_return=0.02, rule_sharpe=0.3)
    assert "baseline +2.0% (Sharpe 0.30)." in portfolio_zoo_lead([real])
    assert "known rule" not in portfolio_zoo_lead([real])
    assert portfolio_zoo_lead(rows[2:]) == "No run finished: all 1 failed (see portfolio_zoo.csv)."


def test_zoo_portfolio_command_writes_the_report(tmp_path, capsys) -> None:
    from agents.cli import main

    out = tmp_path / "pzoo"
    code = main(
        ["zoo", "--portfolio", "--small", "--device", "cpu", "--markets", "common_factor_k8",
         "--seeds", "0", "--no-progress", "--out", str(out)]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    assert "common_factor_k8 seed 0: agent Sharpe" in captured.out
    assert captured.out.startswith("portfolio zoo, smoke test: --small checks the pipeline")
    assert "| common random-walk factor, no edge, K = 8 | 1 |" in captured.out
    lead = captured.out.split("\n| market |")[0].splitlines()[-1]  # the line above the table
    assert lead.startswith("Deployed ") and "known rule" in lead, captured.out
    doc = json.loads((out / "portfolio_zoo.json").read_text())
    assert doc["meta"]["small"] is True and doc["runs"][0]["market"] == "common_factor_k8"
    assert doc["targets"][0]["met"] is (doc["runs"][0]["agent_return"] >= -0.03)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--markets", "ar1_k8", "nope"], "--markets nope is invalid with --portfolio"),
        (["--markets", "ar1_k8", "ar1_k8"], "allowed are distinct names"),
        (["--real", "--markets", "ar1_k8"], "--markets ar1_k8 is invalid with --portfolio --real"),
        (["--markets", "us_daily_k3"], "--markets us_daily_k3 is invalid with --portfolio:"),
        (["--real", "--bars", "3000"], "--bars 3000 is invalid with --real"),
        (["--train-args", "--gamma 0.9"], "is invalid with --portfolio"),
        (["--seeds", "1", "1"], "--seeds [1, 1] is invalid"),
        (["--bars", "300"], "--bars 300 is invalid: allowed are bars whose fit window"),
    ],
)
def test_zoo_portfolio_command_refuses(argv: list[str], needle: str, capsys) -> None:
    from agents.cli import main

    assert main(["zoo", "--portfolio", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err, err


def test_zoo_bars_needs_portfolio(capsys) -> None:
    from agents.cli import main

    assert main(["zoo", "--device", "cpu", "--bars", "3000"]) == 2
    assert "--bars 3000 is invalid without --portfolio" in capsys.readouterr().err


def test_zoo_portfolio_bars_sizes_the_markets(tmp_path, capsys) -> None:
    from agents.cli import main

    out = tmp_path / "pzoo"
    code = main(
        ["zoo", "--portfolio", "--small", "--bars", "1000", "--device", "cpu", "--markets",
         "common_factor_k8", "--seeds", "0", "--no-progress", "--out", str(out)]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err[-2000:]
    run = json.loads((out / "portfolio_zoo.json").read_text())["runs"][0]
    assert (run["test_start"], run["test_stop"]) == (800, 1000)


@pytest.mark.gpu
@pytest.mark.parametrize("market", ["ar1_k32", "lead_lag_k8"])
def test_small_run_on_the_gpu(market: str) -> None:
    """The small budget trains on the CUDA env, and the rule and flat score as on the CPU (the
    same bars, the NumPy env's backtest)."""
    gpu = run_portfolio_one(market, 0, "cuda", SMALL_PORTFOLIO)
    cpu = run_portfolio_one(market, 0, "cpu", SMALL_PORTFOLIO)
    # A baseline is chosen from the bars alone: where both runs keep one, it is the same.
    assert gpu.device == "cuda"
    assert gpu.kept in ("network", "flat", "hold long", "hold short", "baseline")
    assert "network" in (gpu.kept, cpu.kept) or gpu.kept == cpu.kept
    assert (gpu.test_start, gpu.test_stop) == (cpu.test_start, cpu.test_stop) == (1200, 1500)
    assert (gpu.rule_sharpe, gpu.rule_return) == (cpu.rule_sharpe, cpu.rule_return)
    assert gpu.rule_sharpe > 0.0 and gpu.flat_return == 0.0


# ---------------------------------------------------------------- the real suite


def test_real_target_needs_the_mean_and_every_run_near_the_baseline() -> None:
    def real(seed: int, agent: float, baseline: float) -> PortfolioZooRun:
        return _run("us_daily_k3", seed, agent_return=agent, rule_return=baseline,
                    baseline="sp500 hold long, nasdaq flat, googl flat")  # fmt: skip

    met = check_targets([real(0, 0.10, 0.11), real(1, 0.12, 0.12)])[0]
    assert met.met and met.value == pytest.approx(-0.005)
    assert met.worst_vs_baseline == pytest.approx(-0.01)
    assert "baseline's -2%, no run below it by more than 10%" in met.target
    assert check_targets([real(0, 0.06, 0.11), real(1, 0.12, 0.12)])[0].met is False  # mean
    # the mean is within 2%, but one run is 11% below its baseline
    one_far = check_targets([real(0, 0.0, 0.11), real(1, 0.22, 0.12), real(2, 0.12, 0.12)])[0]
    assert one_far.value == pytest.approx(-0.01 / 3) and one_far.met is False
    assert "S&P 500, NASDAQ Composite and GOOGL" in markdown_table([one_far])
    assert "us_daily_k3 seed 0: network deployed, return +0.0% vs baseline +11.0%" in (
        baseline_lines([real(0, 0.0, 0.11)])
    )
    assert baseline_lines([_run("ar1_k8", 0)]) == ""


def test_real_portfolio_is_its_series_on_their_common_dates() -> None:
    from gpu_trading_env.data.real_series import load_real_portfolio, load_real_series

    data = load_real_portfolio("us_daily_k3")
    assert data.instruments == ("sp500", "nasdaq", "googl") and not data.filled.any()
    googl = load_real_series("googl")
    # one exchange calendar: every GOOGL date (after the warm-up) is a bar of the grid
    np.testing.assert_array_equal(data.timestamps, googl.timestamps)
    np.testing.assert_array_equal(data.close[:, 2], googl.close)
    sp500 = load_real_series("sp500")
    at = np.searchsorted(sp500.timestamps, data.timestamps)
    np.testing.assert_array_equal(data.features[:, 0], np.asarray(sp500.features)[at])
    assert [m.name for m in PORTFOLIO_REAL_MARKETS] == ["us_daily_k3", "us_index_oil_k3"]
    assert all(m.n_instruments == 3 for m in PORTFOLIO_REAL_MARKETS)


@needs_real
@pytest.mark.slow
def test_zoo_portfolio_real_small_judges_the_deployed_policy_against_the_baseline(
    tmp_path, capsys
) -> None:
    from agents.cli import main
    from gpu_trading_env.data.real_series import load_real_portfolio

    out = tmp_path / "rzoo"
    code = main(["zoo", "--portfolio", "--real", "--small", "--device", "cpu", "--seeds", "0",
                 "--no-progress", "--out", str(out)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    assert "us_daily_k3 seed 0: agent Sharpe" in captured.out and "vs baseline" in captured.out
    doc = json.loads((out / "portfolio_zoo.json").read_text())
    (run,), (target,) = doc["runs"], doc["targets"]
    assert doc["meta"]["suite"] == "real" and run["market"] == "us_daily_k3"
    names = dict(part.split(" ", 1) for part in run["baseline"].split(", "))
    assert list(names) == ["sp500", "nasdaq", "googl"]
    assert set(names.values()) <= {"flat", "hold long", "hold short"}
    # each instrument's evidence, as the run's report words it
    for name in ("sp500", "nasdaq", "googl"):
        assert f"{name}: Baseline " in run["baseline_reason"]
    assert run["baseline_reason"].count("minus flat over the training bars") == 3
    # the baseline's figures are its levels backtested on the agent's test bars
    data, env = load_real_portfolio("us_daily_k3"), SMALL_PORTFOLIO.config().env
    level = {"hold short": 0, "flat": 1, "hold long": 2}  # of env.exposure_levels (-1, 0, 1)
    levels = np.tile([level[v] for v in names.values()], (data.n_bars, 1))
    alone = backtest_portfolio(levels, data, env, run["test_start"], run["test_stop"])
    assert run["rule_return"] == alone.total_return and run["rule_sharpe"] == alone.sharpe
    assert run["return_vs_baseline"] == pytest.approx(run["agent_return"] - run["rule_return"])
    assert run["return_vs_baseline_low"] <= run["return_vs_baseline_high"]
    assert target["met"] is (run["agent_return"] >= run["rule_return"] - 0.02)
    hold = buy_and_hold_portfolio(data, env, run["test_start"], run["test_stop"])
    assert run["hold_return"] == hold.total_return and run["flat_return"] == 0.0
    text = (out / "portfolio_zoo.md").read_text()
    assert "us_daily_k3 seed 0:" in text and "equal-weight buy-and-hold" in text


def test_zoo_portfolio_real_names_the_missing_package(monkeypatch, capsys) -> None:
    from agents.cli import main

    monkeypatch.setitem(sys.modules, "gym_anytrading.datasets", None)
    assert main(["zoo", "--portfolio", "--real", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "the real markets us_daily_k3 need packages" in err and ".[real]" in err
