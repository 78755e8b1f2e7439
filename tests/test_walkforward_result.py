"""WalkForwardFold.to_dict: a fold's entry of walkforward's metrics.json, with the keys (and
their order) that reports read."""

from __future__ import annotations

import pytest

from agents.pipelines.walkforward_result import WalkForwardFold

FOLD_KEYS = ["fold", "train", "test", "seeds", "buy_and_hold", "random", "rule"]


def test_a_folds_dict_form_has_metrics_jsons_keys_and_no_backtests() -> None:
    window = {"start": "2021-01-01 00:00:00", "end": "2021-06-30 00:00:00", "bars": 100}
    fold = WalkForwardFold(
        fold=0,
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
    # Numbered from 1 in metrics.json, as in the report's text and plots.
    assert d["fold"] == 1 and d["seeds"] == [{"seed": 0, "kept": "flat"}] and d["rule"] is None


def test_no_learning_curve_of_a_network_never_trained_and_folds_numbered_from_1(tmp_path) -> None:
    from types import SimpleNamespace

    from agents.cli.walkforward import _plot_folds

    def seed(s: int, trained: bool) -> dict:
        return {
            "seed": s,
            "strategy": {"total_return": 0.0},
            "selected_step": 200 if trained else None,
            "learning_curve": [(100, 0.1), (200, 0.2)] if trained else [],
            "evaluations": {"timesteps": [200], "validation": [0.5], "test": [0.4]}
            if trained
            else {"timesteps": [], "validation": [], "test": []},
        }

    bench = {"total_return": 0.01}
    folds = [
        SimpleNamespace(fold=k, seeds=[seed(0, False), seed(1, k == 1)], buy_and_hold=bench,
                        random=bench, rule=None)
        for k in range(3)
    ]  # fmt: skip
    images = _plot_folds(SimpleNamespace(folds=folds), tmp_path, synthetic=True)
    # Only fold 2 (index 1) trained a network, seed 1's: one learning curve, named fold 2.
    curves = sorted(p.name for p in tmp_path.glob("learning_curve*"))
    assert curves == ["learning_curve_fold2.png"]
    assert [n for n, _ in images] == ["folds.png", "learning_curve_fold2.png"]
    assert images[1][1].startswith("Fold 2:")


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
