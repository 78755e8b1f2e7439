"""WalkForwardFold.to_dict: a fold's entry of walkforward's metrics.json, with the keys (and
their order) that reports read."""

from __future__ import annotations

import pytest

from agents.pipelines.walkforward_result import WalkForwardFold

FOLD_KEYS = ["fold", "train", "test", "seeds", "buy_and_hold", "random", "rule"]


def test_a_folds_dict_form_has_metrics_jsons_keys_and_no_backtests() -> None:
    window = {"start": "2021-01-01 00:00:00", "end": "2021-06-30 00:00:00", "bars": 100}
    fold = WalkForwardFold(
        fold=1,
        train=window,
        test=window,
        seeds=[{"seed": 0, "kept": "flat"}],
        buy_and_hold={"total_return": 0.1},
        random={"total_return": -0.2},
        rule=None,
        results=[],
        random_result=object(),  # a backtest: not JSON, not in the dict
        rule_result=None,
    )
    d = fold.to_dict()
    assert list(d) == FOLD_KEYS
    assert d["fold"] == 1 and d["seeds"] == [{"seed": 0, "kept": "flat"}] and d["rule"] is None


@pytest.mark.slow
def test_walkforward_reports_each_folds_resolution_and_pbo_and_the_records(
    tmp_path, monkeypatch
) -> None:
    """Each fold's seed record carries its gate's detectable edge and PBO (metrics.json and the
    fold's line of the report), and the whole out-of-sample record its resolution."""
    import json

    import agents.cli as cli

    monkeypatch.chdir(tmp_path)
    argv = ["walkforward", "--device", "cpu", "--folds", "2", "--train-bars", "400"]
    argv += ["--test-bars", "100", "--timesteps", "64", "--num-envs", "4", "--eval-every", "32"]
    assert cli.main([*argv, "--seeds", "0", "--no-progress", "--out", "wf"]) == 0
    m = json.loads((tmp_path / "wf" / "metrics.json").read_text())
    page = (tmp_path / "wf" / "index.html").read_text()
    for f in m["folds"]:
        (s,) = f["seeds"]
        edge = s["detectable_edge"]
        assert edge["power"] == 0.80 and edge["sharpe"] > 0.0 and edge["bars"] > 0
        assert set(s["overfitting_probability"]) >= {"pbo", "candidates", "bars"}
        # The fold's line: train's gate passed (a network, kept or not confirmed) or not.
        passed = s["kept"] == "network" or s["deployment"]["outcome"] == "not_confirmed"
        said = "Detectable edge: Sharpe &gt;= " if passed else "No edge above Sharpe "
        assert f"{said}{edge['sharpe']:.2f} over flat" in page
        assert "Probability of backtest overfitting: " in page
    overall = m["detectable_edge"]
    # One return per bar after each test window's first.
    assert overall["bars"] == sum(f["test"]["bars"] - 1 for f in m["folds"])
    assert overall["level"] == pytest.approx(0.025)
    assert f"an edge of Sharpe {overall['sharpe']:.2f} over flat is detected 80%" in page
