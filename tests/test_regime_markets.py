"""``gpu_trading_env.data.regime_markets``: the generators' laws, their exact filters against a
textbook recursion, and the kinds ``MarketData.synthetic`` draws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.data.regime_markets import (
    KINDS,
    four_state_regimes,
    semi_markov_regimes,
    student_t_regimes,
    true_filter_expected_return,
    true_model,
)
from gpu_trading_env.data.synthetic import regime_filter_expected_return


def _log_returns(df) -> np.ndarray:
    return np.diff(np.log(df["close"].to_numpy()))


def _textbook_forecast(r: np.ndarray, model) -> np.ndarray:
    """E[r_{t+1} | r_1..r_t] one bar at a time with densities from scipy's laws."""
    from scipy import stats

    law = (
        stats.norm(model.mus, model.sigmas)
        if math.isinf(model.dof)
        else stats.t(model.dof, model.mus, model.sigmas)
    )
    p = model.initial @ model.transition  # row 0: no return seen
    out = [p @ model.mus]
    for x in r[1:]:
        f = p * law.pdf(x)
        p = (f / f.sum()) @ model.transition
        out.append(p @ model.mus)
    return np.array(out)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_true_filter_is_the_textbook_forward_recursion(kind):
    data = MarketData.synthetic(kind, 600, seed=3)
    got = true_filter_expected_return(data)
    r = np.r_[0.0, np.diff(np.log(np.asarray(data.close)))]
    np.testing.assert_allclose(got, _textbook_forecast(r, true_model(data.metadata)), atol=1e-12)


def test_the_zoo_regime_market_gets_synthetics_filter():
    data = MarketData.synthetic("regime", 600, seed=4)
    m = data.metadata
    want = regime_filter_expected_return(data, m["mus"], m["sigmas"], m["persistence"])
    np.testing.assert_array_equal(true_filter_expected_return(data), want)


def test_student_t_errors_have_the_tails_asked_for():
    df = student_t_regimes(60_000, seed=1, dof=3.0, mus=(0.0, 0.0), sigmas=(0.01, 0.01))
    r = _log_returns(df)
    # A t with 3 degrees of freedom: P(|e| > 5) = 0.0154; a Gaussian's is 6e-7.
    assert np.mean(np.abs(r) > 0.05) == pytest.approx(0.0154, abs=0.003)
    assert df.attrs["synthetic"]["dof"] == 3.0


def test_four_states_each_hold_their_mean_and_volatility():
    df = four_state_regimes(80_000, seed=2)
    r = _log_returns(df)
    regime = df["regime"].to_numpy()[1:]
    params = df.attrs["synthetic"]
    assert sorted(set(regime)) == [0, 1, 2, 3]
    for k in range(4):
        x = r[regime == k]
        assert x.std() == pytest.approx(params["sigmas"][k], rel=0.05)
        assert abs(x.mean() - params["mus"][k]) < 4 * params["sigmas"][k] / math.sqrt(len(x))


def test_semi_markov_durations_are_negative_binomial():
    df = semi_markov_regimes(200_000, seed=5, phases=4, mean_duration=200.0)
    regime = df["regime"].to_numpy()
    cuts = np.flatnonzero(np.diff(regime)) + 1
    lengths = np.diff(cuts)  # whole regimes only
    assert lengths.mean() == pytest.approx(200.0, rel=0.1)
    # A sum of 4 geometric phases: the variance is about a quarter of a geometric law's.
    assert lengths.std() == pytest.approx(200.0 / 2.0, rel=0.15)
    assert (regime[cuts] != regime[cuts - 1]).all()


def test_the_same_seed_gives_the_same_bars_and_the_kinds_are_registered():
    for kind, gen in KINDS.items():
        a, b = gen(500, seed=(9, 0)), gen(500, seed=(9, 0))
        np.testing.assert_array_equal(a["close"].to_numpy(), b["close"].to_numpy())
        assert a.attrs["synthetic"]["kind"] == kind
        data = MarketData.synthetic(kind, 400, seed=9)
        assert data.metadata["kind"] == kind and data.n_bars == 400


@pytest.mark.parametrize(
    ("gen", "kwargs", "match"),
    [
        (student_t_regimes, {"dof": 2.0}, "dof"),
        (student_t_regimes, {"mus": (0.0,), "sigmas": (0.01,)}, "mus"),
        (four_state_regimes, {"sigmas": (0.01, 0.0, 0.01, 0.01)}, "sigmas"),
        (four_state_regimes, {"persistence": 1.0}, "persistence"),
        (semi_markov_regimes, {"phases": 0}, "phases"),
        (semi_markov_regimes, {"mean_duration": 3.0}, "mean_duration"),
    ],
)
def test_bad_parameters_are_refused_by_name(gen, kwargs, match):
    with pytest.raises(ValueError, match=match):
        gen(100, seed=0, **kwargs)


def test_a_market_of_no_regime_kind_has_no_true_filter():
    with pytest.raises(ValueError, match="kind"):
        true_filter_expected_return(MarketData.synthetic("gbm", 300, seed=0))


def test_the_selection_keeps_the_forecast_of_a_fat_tailed_two_regime_market():
    """A 3-state Gaussian fit spends its regimes on the tails here (p = 0.19 on these bars);
    the Student-t fit with the number of regimes chosen by BIC finds the means."""
    import json

    from agents.pipelines.input_selection import (
        REGIME_INPUT,
        InputSelection,
        apply_inputs,
        select_inputs,
    )

    data = MarketData.synthetic("regime_t", 16_000, seed=0)
    sel = select_inputs(data)
    assert REGIME_INPUT in sel.kept and sel.regime_p_value < 1e-6
    assert math.isfinite(sel.regime.dof) and sel.regime.dof <= 6.0
    again = InputSelection.from_dict(json.loads(json.dumps(sel.to_dict())))
    np.testing.assert_array_equal(
        apply_inputs(data, again).features[:, -1], apply_inputs(data, sel).features[:, -1]
    )
