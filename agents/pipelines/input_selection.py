"""The network's inputs, chosen on the training bars: the features that predict the next return,
and a fitted regime filter's forecast.

A Q-network fed every feature fits the noise of those that carry nothing, and on a market whose
edge sits in a slowly moving hidden state it fits nothing else (experiments/README.md, "The
regime market"). So ``train`` gives the network only what the training bars show to predict:

1. **A regime filter's forecast.** An HMM with Student-t errors is fitted by EM to the training
   bars' log returns, its number of regimes (2, 3 or 4) and degrees of freedom chosen by BIC
   (:func:`~gpu_trading_env.data.regime_filter.fit_regime_model`: markets of 2 or 4 regimes, or
   of fat tails, are not the 3 Gaussian regimes of the zoo's market); its filtered forecast of
   the next return, ``regime_expected_return``, z-scored on the training bars, is appended to
   the features. It is kept where it predicts the next return **out of the sample it was fitted
   on**: fitted on each half of the training bars and tested on the other (the slope of the
   next return on the forecast, HC3-robust; the two halves' t-statistics summed, one-sided), as
   on the bars it was fitted on EM finds a random walk's runs and calls them regimes.
2. **The features** (the built-in ones and the data's own columns, ``extra_features``, alike):
   each feature's slope on the next return, HC3-robust, two-sided, with
   Holm's step-down correction over the features; a feature so kept must also predict in the
   most recent :data:`RECENT_FRACTION` of the training bars, with the same sign, at the
   one-sided :data:`~agents.pipelines.baseline_policies.STABILITY_LEVEL`: an edge the early
   training bars show and the late ones no longer do is gone before the bars it would trade.

The two families split :data:`SELECTION_LEVEL` between them (half each), so where nothing
predicts the returns the network sees any input at all in at most 1% of markets. The columns not
kept stay in the observation as zeros, so the observation's shape does not depend on the data.
The selection's family-wise p-value is the fallback's predictability test (step 4 of
:mod:`agents.pipelines.deployment`).

The selection is saved with the model (``model.input_selection``), and
:func:`apply_inputs` gives new bars the same inputs (``GpuDQN.make_env`` and
``gpu-trading-env eval`` do); :class:`InputSelection`, :func:`apply_inputs` and
:data:`REGIME_INPUT` live in :mod:`agents.files.saved_inputs` (the algorithm applies them) and
are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from agents.files.saved_inputs import REGIME_INPUT, InputSelection, apply_inputs
from agents.pipelines.baseline_policies import STABILITY_LEVEL
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.data.regime_filter import (
    COMPARE_TOLERANCE,
    GaussianHMM,
    expected_next_returns,
    fit_gaussian_hmm,
    fit_regime_model,
    predicted_regimes,
)
from gpu_trading_env.reports.significance import regression_slopes_test

__all__ = [
    "MIN_REGIME_BARS",
    "MIN_TEST_BARS",
    "RECENT_FRACTION",
    "REGIME_INPUT",
    "SELECTION_LEVEL",
    "InputSelection",
    "apply_inputs",
    "select_inputs",
]

# Family-wise level of the selection: where no input predicts the next return, the probability
# that any is kept.
SELECTION_LEVEL = 0.01
# Bars each half of the training window needs for the regime filter to be fitted and tested
# (regimes last hundreds of bars; fewer bars than this hold too few of them to fit three).
MIN_REGIME_BARS = 2_000
# The most recent part of the training bars in which a kept feature must still predict.
RECENT_FRACTION = 1.0 / 3.0
# Bars with a next return the features' tests need (each is a regression on one feature). A
# window this short keeps a feature only where its slope is far beyond chance.
MIN_TEST_BARS = 10


def kept_inputs_count(kept: Sequence[str], n_features: int) -> str:
    """How many inputs the selection kept, in the one wording the terminal and the report share:
    ``"5 of 51 features (a, b, c, d, ...) and the fitted regime filter's forecast"`` (the names
    of up to four features; the forecast only where it is kept).

    :param kept: :attr:`InputSelection.kept` (feature names, then :data:`REGIME_INPUT`).
    :param n_features: the features the selection chose from (the forecast not counted).
    """
    features = [k for k in kept if k != REGIME_INPUT]
    text = f"{len(features)} of {n_features} features"
    if features:
        text += " (" + ", ".join(features[:4]) + (", ...)" if len(features) > 4 else ")")
    if REGIME_INPUT in kept:
        text += " and the fitted regime filter's forecast"
    return text


def _slope_z(x: np.ndarray, y: np.ndarray) -> float:
    """Signed HC3-robust z-statistic of the slope of ``y`` on ``x`` (0 where ``x`` or ``y`` is
    constant)."""
    if np.ptp(y) == 0.0:  # nothing predicts a constant; its robust covariance is singular
        return 0.0
    test = regression_slopes_test(x[:, None], y)
    if test["df"] == 0:
        return 0.0
    cx = x - x.mean()
    return math.copysign(math.sqrt(test["statistic"]), float(cx @ (y - y.mean())))


def _regime_fit(pieces: list[np.ndarray]) -> tuple[float | None, GaussianHMM | None]:
    """The forecast's cross-fitted one-sided p-value (module doc, step 1) and the model fitted
    on every training bar; ``(None, None)`` where a half of the training bars is shorter than
    MIN_REGIME_BARS.

    Each half's model is :func:`fit_regime_model`'s (the number of regimes and the tails chosen
    by BIC on that half alone, so the other half still tests it out of sample). The model of
    every bar has the number of regimes chosen on the later half, and is started from that
    half's fit.
    """
    halves = [(r[: len(r) // 2], r[len(r) // 2 :]) for r in pieces]
    if min(len(h) for pair in halves for h in pair) < MIN_REGIME_BARS:
        return None, None
    z = 0.0
    fits = []
    for fit_side in (0, 1):
        model = fit_regime_model([pair[fit_side] for pair in halves], max_iterations=30)
        fits.append(model)
        xs, ys = [], []
        for pair in halves:
            r = pair[1 - fit_side]
            forecast = predicted_regimes(np.r_[0.0, r], model) @ model.mus
            xs.append(forecast[:-1])  # made before bar t's return, compared with it
            ys.append(r)
        z += _slope_z(np.concatenate(xs), np.concatenate(ys))
    full = fit_gaussian_hmm(
        pieces,
        len(fits[1].mus),
        dof="fit",
        start=fits[1],
        tolerance=COMPARE_TOLERANCE,
        max_iterations=30,
    )
    return 0.5 * math.erfc(z / math.sqrt(2.0) / math.sqrt(2.0)), full


def _recent_p_values(
    train: MarketData, x: np.ndarray, y: np.ndarray, names: list[str]
) -> dict[str, float]:
    """For each feature in ``names``: the one-sided p-value, over the last RECENT_FRACTION of
    each instrument's rows of ``(x, y)`` (``features_and_next_returns``), of its slope having
    the sign of its slope over all of them (1.0 where the recent rows are too few or the
    feature is constant there)."""
    if not names:
        return {}
    lengths = [max(int(n) - 1, 0) for n in train.bars_per_instrument]
    rows, start = [], 0
    for n in lengths:
        rows.append(np.arange(start + n - max(int(round(RECENT_FRACTION * n)), 0), start + n))
        start += n
    recent = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    out = {}
    for name in names:
        j = list(train.feature_names).index(name)
        if len(recent) < MIN_TEST_BARS:
            out[name] = 1.0
            continue
        z_all = _slope_z(x[:, j], y)
        z = math.copysign(1.0, z_all) * _slope_z(x[recent, j], y[recent])
        out[name] = 0.5 * math.erfc(z / math.sqrt(2.0))
    return out


def _nothing_kept(train: MarketData, bars: int) -> InputSelection:
    """The selection that keeps no input, every p-value 1 (the next returns are constant)."""
    names = tuple(train.feature_names)
    return InputSelection(
        feature_names=names,
        kept=(),
        regime=None,
        regime_mean=0.0,
        regime_std=1.0,
        regime_p_value=None,
        feature_p_values=dict.fromkeys(names, 1.0),
        recent_p_values={},
        p_value=1.0,
        bars=bars,
    )


def select_inputs(train: MarketData, level: float = SELECTION_LEVEL) -> InputSelection:
    """Choose the network's inputs on the training bars ``train`` (module doc).

    :param level: family-wise level in (0, 1), split evenly between the forecast and the
        features.
    :raises ValueError: on a bad ``level`` (named), or training bars too few for the tests.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level = {level!r} is invalid: allowed is a number in (0, 1)")
    # Row t's inputs against the return from t to t + 1, within each instrument.
    x, y = train.features_and_next_returns()
    pieces = [r[1:] for _, _, r in train.instrument_log_returns()]
    k = train.n_features
    if len(y) < MIN_TEST_BARS:
        raise ValueError(
            f"train has {len(y)} bars with a next return: allowed is at least {MIN_TEST_BARS} "
            "to test what predicts it (--all-inputs skips the selection)"
        )
    if np.ptp(y) == 0.0:
        # Constant prices: no input predicts a constant next return, and every slope's robust
        # covariance is zero, so the selection keeps nothing and the run proceeds flat.
        return _nothing_kept(train, len(y))
    p_features = {}
    for j, name in enumerate(train.feature_names):
        test = regression_slopes_test(x[:, j : j + 1], y)
        p_features[name] = float(test["p_value"]) if test["df"] > 0 else 1.0
    # Holm's step-down over the features, at half the level.
    ordered = sorted(p_features, key=p_features.__getitem__)
    holm = []
    for i, name in enumerate(ordered):
        if p_features[name] * (k - i) >= level / 2.0:
            break
        holm.append(name)
    recent = _recent_p_values(train, x, y, holm)
    kept_features = [n for n in holm if recent[n] < STABILITY_LEVEL]
    p_regime, model = _regime_fit(pieces)
    mean, std = 0.0, 1.0
    if model is not None:
        forecast = expected_next_returns(train, model)
        mean, std = float(forecast.mean()), float(forecast.std())
        std = std if std > 0.0 else 1.0
    keep_regime = p_regime is not None and p_regime < level / 2.0
    smallest = min((p_features[n] for n in kept_features), default=1.0) * k
    family = min(1.0, 2.0 * smallest, 2.0 * (1.0 if p_regime is None else p_regime))
    kept = tuple(n for n in train.feature_names if n in kept_features)
    return InputSelection(
        feature_names=tuple(train.feature_names),
        kept=(*kept, REGIME_INPUT) if keep_regime else kept,
        regime=model,
        regime_mean=mean,
        regime_std=std,
        regime_p_value=p_regime,
        feature_p_values=p_features,
        recent_p_values=recent,
        p_value=family,
        bars=len(y),
    )
