"""WalkForwardFold.to_dict: a fold's entry of walkforward's metrics.json, with the keys (and
their order) that reports read."""

from __future__ import annotations

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
