"""TrainResult: train_selected's typed result, and its dict form, which train's metrics.json is
written from (the keys and their order are those reports and sweeps read)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import agents.cli as cli
import agents.pipelines.model_selection as model_selection
from agents.pipelines.train_result import TrainResult
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.report import write_json

TINY = ["train", "--device", "cpu", "--timesteps", "400", "--num-envs", "4"]
TINY += ["--eval-every", "200", "--episode-length", "50", "--no-progress"]

# TrainResult.to_dict's keys, in metrics.json's order ("inputs" only where inputs were selected):
# its timing, then its model selection's.
RUN_TIMING = ["timesteps", "train_seconds", "env_steps_per_second"]
RUN_SELECTION = [
    "cross_fit",
    "kept_policy",
    "deployment",
    "baseline",
    "deflated_sharpe",
    "fallback_test",
    "detectable_edge",
    "overfitting_probability",
    "network_strategy",
    "last_model_strategy",
    "validation",
]
RUN_KEYS = [*RUN_TIMING, *RUN_SELECTION, "inputs"]
# train's metrics.json on the built-in (planted) market, in its order.
METRICS_KEYS = [
    "instrument",
    "episodes",
    "ruined_at_bar",
    "ruin_value",
    "max_position",
    "strategy",
    "buy_and_hold",
    "buy_and_hold_frictionless",
    "synthetic_data",
    "bars_per_year",
    "data",
    "device",
    "num_envs",
    *RUN_TIMING,
    "seed",
    "instruments",
    "model_selection",
    *RUN_SELECTION,
    "order_cost_bps",
    "inputs",
    "agent_return_vs_known_rule",
    "agent_sharpe_vs_known_rule",
    "known_rule",
    "learning_curve",
    "schema",
]


def _train_capturing(argv: list[str], tmp_path, monkeypatch) -> tuple[TrainResult, dict]:
    """Run ``train`` with ``argv``; the TrainResult train_selected returned, and metrics.json."""
    runs: list[TrainResult] = []
    real = model_selection.train_selected

    def capture(*args, **kwargs):
        runs.append(real(*args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(model_selection, "train_selected", capture)
    monkeypatch.chdir(tmp_path)
    assert cli.main([*argv, "--out", "r"]) == 0
    return runs[0], json.loads((tmp_path / "r" / "metrics.json").read_text())


def _as_json(obj: object, tmp_path) -> object:
    write_json(obj, tmp_path / "x.json")
    return json.loads((tmp_path / "x.json").read_text())


def test_train_metrics_json_is_the_results_dict_form(tmp_path, monkeypatch) -> None:
    run, metrics = _train_capturing(TINY, tmp_path, monkeypatch)
    assert isinstance(run, TrainResult)
    assert list(metrics) == METRICS_KEYS
    assert list(run.to_dict()) == RUN_KEYS
    assert list(metrics["validation"])[-3:] == ["bars", "start", "end"]
    for key, value in _as_json(run.to_dict(), tmp_path).items():
        assert metrics[key] == value, key
    assert metrics["learning_curve"]["evaluations"] == _as_json(run.evals.to_dict(), tmp_path)
    assert run.selected_step is not None
    assert metrics["learning_curve"]["selected_step"] == run.selected_step
    assert run.validation.strategy.n_bars == metrics["validation"]["bars"]
    _check_layout(metrics)
    # One block per policy: a snapshot deployed, or selected and last, is written once.
    for kept, network, last, expected in (
        ("network", run.test, run.test, (None, None)),
        ("flat", run.validation, run.validation, ("network", None)),
        ("flat", run.validation, run.test, ("network", "last")),
    ):
        d = replace(run, kept=kept, network_test=network, last_test=last).to_dict()
        written = (d["network_strategy"] is not None, d["last_model_strategy"] is not None)
        assert written == (expected[0] is not None, expected[1] is not None), kept


def _check_layout(metrics: dict) -> None:
    """No figures block repeated; the data as fields; every key and unit in the file's schema."""
    blocks = [metrics[k] for k in ("strategy", "network_strategy", "last_model_strategy")]
    blocks = [json.dumps(b, sort_keys=True) for b in blocks if b is not None]
    assert len(set(blocks)) == len(blocks)
    data = metrics["data"]
    assert data["source"] == "synthetic" and data["synthetic_kind"] == "planted"
    (one,) = data["instruments"]
    assert one["name"] == metrics["instrument"] and one["bars"] > 0
    assert one["start"] < one["end"] and data["warmup_bars"] > 0
    schema = metrics["schema"]
    assert set(schema["keys"]) == set(metrics)
    assert "undocumented" not in schema["keys"].values()
    assert set(metrics["strategy"]) <= set(schema["units"])
    assert "fraction of the starting value" in schema["units"]["total_return"]


def test_a_run_that_trains_no_network_has_the_same_keys(tmp_path, monkeypatch) -> None:
    """No input kept on a random walk: the baseline is deployed untrained, with None where a
    network's figures would be."""
    bars = MarketData.synthetic("gbm", 1_500, seed=3, mu=0.0).to_dataframe()
    bars.to_csv(tmp_path / "g.csv")
    run, metrics = _train_capturing([*TINY, "--data", "g.csv"], tmp_path, monkeypatch)
    assert run.network_test is None and run.last_test is None and run.selected_step is None
    assert list(run.to_dict()) == RUN_KEYS
    assert metrics["network_strategy"] is None and metrics["timesteps"] == 0
    assert metrics["data"]["source"] == "file" and metrics["data"]["files"][0].endswith("g.csv")
    assert metrics["kept_policy"] == run.kept == run.baseline.name
    assert metrics["baseline"] == _as_json(run.baseline.to_dict(), tmp_path)
    assert metrics["env_steps_per_second"] is None


@pytest.mark.parametrize("cross", [False, True])
def test_the_evaluations_dict_has_the_cross_fitted_lists_only_with_cross_fit(cross) -> None:
    from agents.pipelines.train_result import SnapshotEvaluations

    extra = {"cross_fit_validation": [0.5], "pooled_validation": [0.25]} if cross else {}
    evals = SnapshotEvaluations([100], [1.0], [2.0], **extra)
    assert evals.to_dict() == {"timesteps": [100], "validation": [1.0], "test": [2.0], **extra}


def test_train_reports_the_gates_resolution_and_overfitting_probability(
    tmp_path, monkeypatch
) -> None:
    """metrics.json and index.html carry the smallest edge the gate detects in the validation
    bars the gate read, and the PBO of the choice among the snapshots and flat."""
    run, metrics = _train_capturing(TINY, tmp_path, monkeypatch)
    edge, pbo = metrics["detectable_edge"], metrics["overfitting_probability"]
    assert edge == _as_json(run.detectable_edge.to_dict(), tmp_path)
    assert edge["bars"] == run.gate["network_minus_flat_validation_sharpe"]["bars"]
    assert (
        edge["power"] == 0.80
        and edge["sharpe"] > 0.0
        and edge["halves"] == (run.baseline.name == "flat")
    )
    assert pbo["candidates"] == len(run.evals.validation) + 1 + (run.baseline.name != "flat")
    assert (pbo["pbo"] is None) == ("reason" in pbo)
    page = (tmp_path / "r" / "index.html").read_text()
    sentence = "Detectable edge: Sharpe " if run.kept == "network" else "No edge above Sharpe "
    assert sentence in page and f"{edge['sharpe']:.2f} over flat" in page
    assert f"in {edge['bars']} validation bars" in page
    assert "Probability of backtest overfitting: " in page
