"""The zoo's real suite: the command's small CPU run, the return-difference interval, the
targets of the real series and the shifting markets, and the refusals."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys

import numpy as np
import pytest

from agents.pipelines.deployment import Deployment
from agents.pipelines.train_result import SnapshotEvaluations
from agents.pipelines.zoo import (
    MARKETS_BY_NAME,
    REAL_MARKETS,
    SMALL_REAL_MARKETS,
    regime_family_markets,
    return_difference_interval,
)
from agents.pipelines.zoo_report import summarize
from agents.pipelines.zoo_result import ZooRun
from gpu_trading_env.reports.metrics import Metrics


@pytest.mark.slow
def test_real_small_suite_writes_the_report(tmp_path, capsys) -> None:
    from agents.cli import main

    markets = [m for m in SMALL_REAL_MARKETS if MARKETS_BY_NAME[m].kind != "real"]
    if importlib.util.find_spec("gym_anytrading") is not None:
        markets = list(SMALL_REAL_MARKETS)
    out = tmp_path / "zoo"
    code = main(
        ["zoo", "--real", "--small", "--device", "cpu", "--seeds", "0", "--no-progress",
         "--out", str(out), "--markets", *markets]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err[-2000:]
    doc = json.loads((out / "zoo.json").read_text())
    assert doc["suite"] == "real" and [s["market"] for s in doc["summary"]] == markets
    for row in doc["runs"]:
        assert row["suite"] == "real"
        assert row["chosen_baseline"]["name"] == row["baseline"] == row["gate"]["baseline"]
        ret = row["return_vs_baseline"]
        assert ret["low"] <= ret["high"]
        assert ret["difference"] == pytest.approx(
            row["agent"]["total_return"] - row["chosen_baseline"]["total_return"], abs=1e-9
        )
        assert "baseline" in row["curves"]
    for s in doc["summary"]:
        assert s["passed"] in (True, False) and (out / f"{s['market']}.png").stat().st_size > 1000
    rows = list(csv.DictReader((out / "zoo.csv").open()))
    assert {r["chosen_baseline"] for r in rows} <= {"flat", "hold long", "hold short"}


def test_return_difference_interval_covers_the_difference() -> None:
    rng = np.random.default_rng(0)
    a = 0.001 + 0.01 * rng.standard_normal(2000)
    got = return_difference_interval(a, np.zeros(2000))
    assert got["difference"] == pytest.approx(np.prod(1 + a) - 1.0)
    assert got["low"] < got["difference"] < got["high"] and got["low"] > 0
    same = return_difference_interval(a, a)
    assert same["low"] == same["high"] == 0.0
    with pytest.raises(ValueError, match="one length >= 4"):
        return_difference_interval(a, a[:-1])
    with pytest.raises(ValueError, match="> -1"):
        return_difference_interval(np.full(10, -1.0), np.zeros(10))


def _metrics(total_return: float, sharpe: float) -> Metrics:
    return Metrics(
        total_return=total_return, annual_return=total_return, annual_volatility=0.2,
        sharpe=sharpe, sortino=sharpe, max_drawdown=-0.1, n_bars=300, bars_per_year=252.0,
        costs_included=True, turnover=2.0, costs_paid=0.004,
    )  # fmt: skip


def _interval(difference: float, p_value: float) -> dict[str, float]:
    return {"difference": difference, "low": difference - 1.0, "high": difference + 1.0,
            "level": 0.95, "p_value": p_value}  # fmt: skip


def _row(market: str, seed: int, agent: float, baseline: float) -> ZooRun:
    """A zoo run of fixed figures: the agent's and the chosen baseline's total returns given."""
    gate = {
        "kept": "network", "baseline": "hold long", "level": 0.1,
        "network_minus_flat_validation_sharpe": {**_interval(0.8, 0.04), "adjusted": 0.6},
        "network_minus_baseline_validation_sharpe": _interval(0.3, 0.2),
        "features_predict_next_return": {"statistic": 2.0, "df": 52.0, "p_value": 0.01},
        "beat_flat_by": "significant",
    }  # fmt: skip
    return ZooRun(
        market=market, suite="real", seed=seed, device="cpu", kept="network",
        agent=_metrics(agent, 0.5), network=_metrics(agent, 0.5), reference_name="flat",
        reference=_metrics(0.0, 1.0), references={"flat": _metrics(0.0, 1.0)},
        buy_and_hold=_metrics(agent, 0.5), sharpe_ratio=0.5, network_sharpe_ratio=0.5,
        deployment=Deployment("network", "held", "a network: it beat hold long", (), True),
        baseline="hold long", chosen_baseline=_metrics(baseline, 0.4), flat=_metrics(0.0, 0.0),
        vs_baseline=_interval(0.1, 0.3), return_vs_baseline=_interval(agent - baseline, 0.5),
        vs_flat=_interval(0.5, 0.2), vs_buy_and_hold=_interval(0.0, 0.9),
        edge_over_flat_claimed=False, gate=gate, selected_step=2000,
        inputs={"kept": ["ret_1", "regime_expected_return"], "regime_p_value": 0.003,
                "p_value": 0.01},
        evaluations=SnapshotEvaluations([1000, 2000], [0.2, 0.9], [0.1, 0.5]),
        learning_curve=[(1000, -0.5), (2000, 0.25)], train_seconds=0.75, timesteps=2000,
        seconds=1.0, train_bars=1200, test_bars=300,
        curves={"agent": [1.0, 1.1], "reference": [1.0, 1.0], "buy_and_hold": [1.0, 0.9],
                "baseline": [1.0, 0.95]},
    )  # fmt: skip


def test_real_target_needs_the_mean_and_every_run_near_the_baseline() -> None:
    series = next(m.name for m in REAL_MARKETS if m.kind == "real")
    near = [_row(series, s, 0.19, 0.20) for s in range(3)]
    assert summarize(near)[0].passed is True
    # The mean is within 2% of the baseline's, but one run is 12% below it.
    one_far = [_row(series, 0, 0.26, 0.20), _row(series, 1, 0.08, 0.20), _row(series, 2, 0.22, 0.2)]
    assert summarize(one_far)[0].passed is False
    low_mean = [_row(series, s, 0.17, 0.20) for s in range(3)]
    assert summarize(low_mean)[0].passed is False


def test_shifting_targets() -> None:
    assert summarize([_row("vanishing_edge", 0, -0.02, 0.0)])[0].passed is True
    assert summarize([_row("flipping_drift", 0, -0.04, 0.0)])[0].passed is False
    # appearing: the agent's Sharpe over the true rule's, mean over seeds, at least 0.5.
    assert summarize([_row("appearing_edge", 0, 0.1, 0.0)])[0].passed is True


def test_regime_family_hook_is_empty_without_its_module(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "gpu_trading_env.data.regime_markets", None)
    assert regime_family_markets() == ()


def test_real_command_refuses_zoo_markets_and_missing_packages(monkeypatch, capsys) -> None:
    from agents.cli import main

    assert main(["zoo", "--real", "--device", "cpu", "--markets", "builtin"]) == 2
    assert "--markets builtin is invalid for --real" in capsys.readouterr().err
    assert main(["zoo", "--device", "cpu", "--markets", "vanishing_edge"]) == 2
    assert "invalid for the zoo (without --real)" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "arch.data.sp500", None)
    assert main(["zoo", "--real", "--device", "cpu", "--markets", "sp500"]) == 2
    err = capsys.readouterr().err
    assert "the real series sp500 need packages" in err and ".[real]" in err


def _run_small(tmp_path, capsys, device: str, markets: list[str], *extra: str) -> dict:
    from agents.cli import main

    out = tmp_path / "zoo"
    code = main(
        ["zoo", "--real", "--small", "--device", device, "--seeds", "0", "1", "--no-progress",
         "--out", str(out), "--markets", *markets, *extra]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err[-2000:]
    return json.loads((out / "zoo.json").read_text())


@pytest.mark.slow
def test_real_suite_in_worker_processes_keeps_the_row_order(tmp_path, capsys) -> None:
    # Two CPU workers: the spawned-process path that --device cuda takes, one run per worker.
    markets = ["flipping_drift", "vanishing_edge"]
    doc = _run_small(tmp_path, capsys, "cpu", markets, "--runs-per-device", "2")
    got = [(r["market"], r["seed"]) for r in doc["runs"]]
    assert got == [(m, s) for m in markets for s in (0, 1)]
    assert all("error" not in r for r in doc["runs"])


@pytest.mark.gpu
def test_real_small_suite_on_cuda(tmp_path, capsys) -> None:
    doc = _run_small(tmp_path, capsys, "cuda", ["appearing_edge", "flipping_drift"])
    assert all("error" not in r and r["device"] == "cuda" for r in doc["runs"])


ZOO_CSV = [
    "market,seed,kept,agent_sharpe,reference,reference_sharpe,sharpe_ratio,network_sharpe_ratio,"
    "agent_return,reference_return,buy_and_hold_return,agent_turnover,agent_costs,suite,"
    "chosen_baseline,baseline_return,baseline_sharpe,return_vs_baseline,return_vs_baseline_low,"
    "return_vs_baseline_high,vs_baseline_p,vs_flat_p,vs_flat_low,vs_buy_and_hold_p,"
    "validation_p_vs_flat,validation_p_vs_baseline,validation_adjusted_sharpe,features_predict_p,"
    "beat_flat_by,inputs_kept,regime_filter_p,verdict,seconds,error",
    "googl,0,network,0.5,flat,1.0,0.5,0.5,0.19,0.0,0.19,2.0,0.004,real,hold long,0.2,0.4,"
    "-0.010000000000000009,-1.01,0.99,0.3,0.2,-0.5,0.9,0.04,0.2,0.6,0.01,significant,"
    "ret_1 regime_expected_return,0.003,a network: it beat hold long,1.0,",
    "builtin,3,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,ValueError: x",
]


def test_report_files_keep_their_columns_and_values(tmp_path) -> None:
    """zoo.csv and zoo.json of fixed runs, as the report has always written them."""
    from agents.pipelines.zoo_report import write_report
    from agents.pipelines.zoo_result import FailedZooRun

    run = _row("googl", 0, 0.19, 0.20)
    failed = FailedZooRun("builtin", 3, "cpu", "ValueError: x", "Traceback ...")
    paths = write_report([run, failed], tmp_path, "gpu-trading-env zoo", {"suite": "real"})
    assert paths["csv"].read_text().splitlines() == ZOO_CSV
    doc = json.loads(paths["json"].read_text())
    assert list(doc) == ["command", "suite", "summary", "runs"]
    entry = doc["runs"][0]
    assert list(entry) == [
        "market", "suite", "seed", "device", "kept", "agent", "network", "reference_name",
        "reference", "references", "buy_and_hold", "sharpe_ratio", "network_sharpe_ratio",
        "deployment", "baseline", "chosen_baseline", "flat", "vs_baseline", "return_vs_baseline",
        "vs_flat", "vs_buy_and_hold", "edge_over_flat_claimed", "gate", "selected_step",
        "inputs", "evaluations", "learning_curve", "train_seconds", "timesteps", "seconds",
        "bars", "curves",
    ]  # fmt: skip
    assert entry["chosen_baseline"] == {"name": "hold long", **run.chosen_baseline.to_dict()}
    assert entry["bars"] == {"train": 1200, "test": 300}
    assert entry["learning_curve"] == [[1000, -0.5], [2000, 0.25]]
    assert entry["deployment"]["headline"] == "a network: it beat hold long"
    assert doc["runs"][1] == {
        "market": "builtin", "seed": 3, "device": "cpu", "error": "ValueError: x",
        "traceback": "Traceback ...",
    }  # fmt: skip
    failures = {m["market"]: m["failed_runs"] for m in doc["summary"]}
    assert failures == {"builtin": 1, "googl": 0}
    googl = doc["summary"][1]
    assert list(googl) == [
        "market", "title", "target", "seeds", "failed_runs", "agent_sharpe", "reference_sharpe",
        "buy_and_hold_sharpe", "sharpe_ratio", "network_sharpe_ratio", "agent_return",
        "reference_return", "buy_and_hold_return", "baseline_return", "baseline_sharpe",
        "return_minus_baseline", "baselines_chosen", "agent_turnover", "agent_costs",
        "edge_over_flat_claims", "kept_network", "seconds", "passed",
    ]  # fmt: skip
    assert googl["target"] == {"measure": "baseline_return", "threshold": -0.02}
    assert googl["agent_return"] == {"mean": 0.19, "std": 0.0, "min": 0.19, "max": 0.19, "n": 1}
    assert googl["baselines_chosen"] == {"hold long": 1} and googl["passed"] is True
    assert doc["summary"][0]["passed"] is None and doc["summary"][0]["seeds"] == 0
