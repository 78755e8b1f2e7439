"""Non-stationary markets: where the law changes, that the true rule earns only where the edge
is, that the drift flips, and the parameter checks."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_trading_env import MarketData
from gpu_trading_env.data.features import WARMUP_BARS
from gpu_trading_env.data.shifting_markets import (
    appearing_edge,
    shifting_law_after,
    shifting_rule_exposure,
)
from gpu_trading_env.data.synthetic import planted_rule_expected_log_return


@pytest.mark.parametrize(
    ("kind", "at"), [("vanishing_edge", 0.40), ("appearing_edge", 0.36), ("flipping_drift", 0.40)]
)
def test_the_change_lies_at_its_fraction_of_the_kept_bars(kind: str, at: float) -> None:
    data = MarketData.synthetic(kind, 10_000, seed=3)
    after = shifting_law_after(data)
    assert int(np.argmax(after)) == int(at * 10_000) and after[int(at * 10_000) :].all()
    train, test = data.split(0.8)
    # The held-back bars are all of the law after; the training bars hold both laws.
    assert shifting_law_after(test).all() and 0 < shifting_law_after(train).mean() < 1


@pytest.mark.parametrize("kind", ["vanishing_edge", "appearing_edge"])
def test_the_true_rule_earns_the_planted_edge_only_where_it_is(kind: str) -> None:
    data = MarketData.synthetic(kind, 40_000, seed=1)
    x = shifting_rule_exposure(data)
    r = np.diff(np.log(np.asarray(data.close)))
    after = shifting_law_after(data)[1:]
    edge = after if kind == "appearing_edge" else ~after
    pnl = x[:-1] * r
    expected = planted_rule_expected_log_return(0.10, 0.005)
    assert pnl[edge].mean() == pytest.approx(expected, rel=0.25)
    assert (x[:-1][~edge] == 0).all()


def test_the_drift_flips_sign() -> None:
    data = MarketData.synthetic("flipping_drift", 40_000, seed=2)
    r = np.diff(np.log(np.asarray(data.close)))
    after = shifting_law_after(data)[1:]
    sd = 0.002 / np.sqrt(np.array([(~after).sum(), after.sum()]))
    assert r[~after].mean() > 1e-4 - 4 * sd[0] and r[~after].mean() > 0
    assert r[after].mean() < 0
    x = shifting_rule_exposure(data)
    assert (x[:-1][~after] == 1).all() and (x[:-1][after] == -1).all()


def test_seeded_and_the_change_is_in_the_metadata() -> None:
    a = MarketData.synthetic("appearing_edge", 2_000, seed=5)
    b = MarketData.synthetic("appearing_edge", 2_000, seed=5)
    assert np.array_equal(a.close, b.close)
    assert a.metadata["phi_before"] == 0.0 and a.metadata["phi_after"] == 0.10
    assert a.metadata["change_bar"] == WARMUP_BARS + int(0.36 * 2_000)


def test_bad_parameters_name_the_field() -> None:
    with pytest.raises(ValueError, match="change_at = 1.5 is invalid"):
        appearing_edge(1000, change_at=1.5)
    with pytest.raises(ValueError, match="phi_after = 1.0 is invalid"):
        appearing_edge(1000, phi=1.0)
    with pytest.raises(ValueError, match="no change_timestamp"):
        shifting_rule_exposure(MarketData.synthetic("gbm", 1_000))
