"""WalkForwardFold.to_dict: a fold's entry of walkforward's metrics.json, with the keys (and
their order) that reports read."""

from __future__ import annotations

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
