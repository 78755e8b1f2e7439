"""The Gaussian HMM of ``gpu_trading_env.data.regime_filter``: the blocked scans against the
textbook recursions, the fit against the generator's parameters, causality and bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpu_trading_env.data.regime_filter import (
    SCAN_BLOCK,
    GaussianHMM,
    _forward_backward,
    fit_gaussian_hmm,
    predicted_regimes,
)
from gpu_trading_env.data.synthetic import regime_switching

MUS = np.array([-4e-4, 0.0, 3e-4])
SIGMAS = np.array([0.012, 0.004, 0.006])


def _trans(stay: float = 0.995) -> np.ndarray:
    t = np.full((3, 3), (1.0 - stay) / 2)
    np.fill_diagonal(t, stay)
    return t


def _returns(n: int, seed: int = 0) -> np.ndarray:
    return np.diff(np.log(regime_switching(n + 1, seed=seed)["close"].to_numpy()))


def _sequential(r, mus, sigmas, trans, initial, per_bar_max=False):
    """The scaled forward-backward of a textbook, one bar at a time (``per_bar_max``: each
    bar's likelihoods divided by their largest, which the posteriors do not see)."""
    lik = np.exp(-0.5 * ((r[:, None] - mus) / sigmas) ** 2) / sigmas / np.sqrt(2 * np.pi)
    if per_bar_max:
        loglik = -0.5 * ((r[:, None] - mus) / sigmas) ** 2 - np.log(sigmas)
        lik = np.exp(loglik - loglik.max(axis=1, keepdims=True))
    n, k = lik.shape
    alpha, scale = np.empty((n, k)), np.empty(n)
    a = initial * lik[0]
    for t in range(n):
        if t:
            a = (alpha[t - 1] @ trans) * lik[t]
        scale[t] = a.sum()
        alpha[t] = a / scale[t]
    beta = np.empty((n, k))
    beta[-1] = 1.0
    for t in range(n - 2, -1, -1):
        beta[t] = trans @ (lik[t + 1] * beta[t + 1]) / scale[t + 1]
    gamma = alpha * beta
    gamma /= gamma.sum(axis=1, keepdims=True)
    xi = alpha[:-1, :, None] * trans[None] * (lik[1:] * beta[1:])[:, None, :]
    xi /= scale[1:, None, None]
    return gamma, xi.sum(axis=0), np.log(scale).sum()


@pytest.mark.parametrize("n", [1, 2, SCAN_BLOCK, SCAN_BLOCK + 1, 3 * SCAN_BLOCK + 17, 5000])
def test_blocked_forward_backward_is_the_textbook_recursion(n):
    r = _returns(max(n, 2))[:n]
    initial = np.array([0.2, 0.5, 0.3])
    gamma, counts, loglik = _forward_backward(r, MUS, SIGMAS, _trans(), initial)
    g, c, ll = _sequential(r, MUS, SIGMAS, _trans(), initial)
    np.testing.assert_allclose(gamma, g, atol=1e-10)
    np.testing.assert_allclose(counts, c, rtol=1e-8, atol=1e-10)
    assert loglik == pytest.approx(ll, rel=1e-10)


def test_an_outlier_does_not_underflow_the_scan():
    r = _returns(3000)
    r[1500] = 0.5  # 40 sigmas of the widest regime
    gamma, counts, loglik = _forward_backward(r, MUS, SIGMAS, _trans(), np.full(3, 1 / 3))
    assert np.isfinite(gamma).all() and np.isfinite(counts).all() and np.isfinite(loglik)
    # The textbook recursion underflows there (every regime's density is 0.0 in float64);
    # with each bar's likelihoods rescaled it does not, and agrees.
    g, c, _ = _sequential(r, MUS, SIGMAS, _trans(), np.full(3, 1 / 3), per_bar_max=True)
    np.testing.assert_allclose(gamma, g, atol=1e-9)
    np.testing.assert_allclose(counts, c, rtol=1e-8, atol=1e-9)


def test_the_fit_recovers_the_generators_parameters():
    model = fit_gaussian_hmm(_returns(16_000))
    np.testing.assert_allclose(model.sigmas, np.sort(SIGMAS)[[2, 0, 1]], rtol=0.05)
    assert np.all(np.diff(model.mus) > 0)  # ordered by mean: bear, sideways, bull
    np.testing.assert_allclose(model.mus, MUS, atol=1e-4)
    assert np.all(np.diag(model.transition) > 0.98)
    np.testing.assert_allclose(model.transition.sum(axis=1), 1.0)
    assert 1 <= model.iterations <= 60


def test_several_series_share_one_fit():
    a, b = _returns(6000, seed=1), _returns(6000, seed=2)
    both = fit_gaussian_hmm([a, b])
    assert np.isfinite(both.log_likelihood)
    # Each chain starts afresh: the joined series' fit differs from the two chains' fit.
    joined = fit_gaussian_hmm(np.r_[a, b])
    assert both.log_likelihood != joined.log_likelihood


def test_the_filter_reads_no_later_bar():
    r = np.r_[0.0, _returns(4000)]
    model = fit_gaussian_hmm(r[1:])
    probs = predicted_regimes(r, model)
    changed = r.copy()
    changed[2500:] = np.random.default_rng(5).normal(0.0, 0.02, len(r) - 2500)
    again = predicted_regimes(changed, model)
    np.testing.assert_array_equal(probs[:2500], again[:2500])
    assert not np.allclose(probs[2500:], again[2500:])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    # Row 0 has seen no return: the initial probabilities pushed one bar.
    np.testing.assert_allclose(probs[0], model.initial @ model.transition)


def test_the_filter_finds_the_regime_it_was_fitted_for():
    df = regime_switching(12_001, seed=3)
    r = np.r_[0.0, np.diff(np.log(df["close"].to_numpy()))]
    model = fit_gaussian_hmm(r[1:])
    truth = dataclasses.replace(
        model, mus=np.asarray(MUS), sigmas=np.asarray(SIGMAS), transition=_trans()
    )
    regime = df["regime"].to_numpy()[1:]  # the generator's 0, 1, 2: bull, bear, sideways
    by_mean = np.array([1, 2, 0])  # the fitted model's regimes (ascending mean) in those terms
    hits = (by_mean[predicted_regimes(r, model)[:-1].argmax(axis=1)] == regime).mean()
    assert hits > 0.8
    # With the true parameters (regimes in the generator's order) as often.
    order = np.argsort(MUS)
    truth = dataclasses.replace(truth, mus=MUS[order], sigmas=SIGMAS[order], transition=_trans())
    assert (by_mean[predicted_regimes(r, truth)[:-1].argmax(axis=1)] == regime).mean() > 0.8


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"returns": np.zeros(100)}, "constant"),
        ({"returns": np.r_[np.ones(50), np.nan]}, "non-finite"),
        ({"returns": np.ones(20)}, "at least 30"),
        ({"returns": np.arange(100.0), "n_regimes": 1}, "n_regimes"),
        ({"returns": np.arange(100.0), "max_iterations": 0}, "max_iterations"),
    ],
)
def test_bad_input_is_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fit_gaussian_hmm(**kwargs)


def test_the_filter_refuses_non_finite_returns():
    model = GaussianHMM(MUS, SIGMAS, _trans(), np.full(3, 1 / 3), 0.0, 1)
    with pytest.raises(ValueError, match="non-finite"):
        predicted_regimes(np.array([0.0, np.inf, 0.1]), model)
    assert predicted_regimes(np.array([]), model).shape == (0, 3)


def test_the_student_t_fit_finds_the_tails_and_the_number_of_regimes():
    from gpu_trading_env.data.regime_filter import fit_regime_model
    from gpu_trading_env.data.regime_markets import four_state_regimes, student_t_regimes

    t_market = np.diff(
        np.log(
            student_t_regimes(8_001, seed=1, dof=4.0, mus=(5e-4, -5e-4), sigmas=(0.004, 0.008))[
                "close"
            ].to_numpy()
        )
    )
    model = fit_regime_model(t_market)
    assert len(model.mus) == 2 and 3.0 <= model.dof <= 5.0
    np.testing.assert_allclose(model.sigmas, [0.008, 0.004], rtol=0.1)  # bear, bull
    np.testing.assert_allclose(model.mus, [-5e-4, 5e-4], atol=2.5e-4)
    # A 3-state Gaussian market: thin tails (a large dof) and 3 regimes.
    gauss = fit_regime_model(_returns(8_000))
    assert len(gauss.mus) == 3 and gauss.dof >= 20.0
    four = np.diff(np.log(four_state_regimes(16_001, seed=2)["close"].to_numpy()))
    assert len(fit_regime_model(four).mus) == 4


def test_a_student_t_model_survives_its_dict_and_an_old_dict_is_gaussian():
    import json
    import math

    model = fit_gaussian_hmm(_returns(3_000), 2, dof="fit")
    assert math.isfinite(model.dof)
    back = GaussianHMM.from_dict(json.loads(json.dumps(model.to_dict())))
    r = np.r_[0.0, _returns(500, seed=4)]
    np.testing.assert_array_equal(predicted_regimes(r, back), predicted_regimes(r, model))
    assert back.dof == model.dof
    old = model.to_dict()
    del old["dof"]  # as files written before Student-t errors
    assert GaussianHMM.from_dict(old).dof == math.inf
    gaussian = fit_gaussian_hmm(_returns(3_000))
    assert gaussian.to_dict()["dof"] is None
    assert GaussianHMM.from_dict(gaussian.to_dict()).dof == math.inf
    with pytest.raises(ValueError, match="dof"):
        GaussianHMM.from_dict({**old, "dof": -1.0})


def test_a_warm_start_and_bad_dof_or_start_are_refused_by_name():
    r = _returns(3_000)
    two = fit_gaussian_hmm(r, 2, dof="fit")
    again = fit_gaussian_hmm(r, 2, dof="fit", start=two)
    assert again.log_likelihood >= two.log_likelihood - 1e-6 * len(r)
    with pytest.raises(ValueError, match="start has 2 regimes"):
        fit_gaussian_hmm(r, 3, start=two)
    for bad in ("auto", 0.0, -3.0):
        with pytest.raises(ValueError, match="dof"):
            fit_gaussian_hmm(r, 2, dof=bad)


def test_regimes_that_differ_in_their_mean_only_are_found():
    """EM from regimes of different volatility alone ends at a split of the t's tails here
    (two regimes that last 10 bars); the start from the bars' trend finds the generator's."""
    from gpu_trading_env.data.market_data import MarketData
    from gpu_trading_env.data.regime_filter import fit_regime_model

    data = MarketData.synthetic("regime_t", 8_000, seed=1)
    r = next(iter(data.instrument_log_returns()))[2][1:]
    model = fit_regime_model(r, max_iterations=30)
    assert len(model.mus) == 2 and np.all(np.diag(model.transition) > 0.99)
    np.testing.assert_allclose(model.mus, [-7e-4, 7e-4], atol=3e-4)
    np.testing.assert_allclose(model.sigmas, [0.004, 0.004], rtol=0.1)
