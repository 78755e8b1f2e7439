"""Seeded regime markets of other families than the zoo's 3-state Gaussian one, with their exact
filters.

``synthetic.regime_switching`` draws the kind of model the input selection fits (a 3-state
Gaussian HMM). These generators draw regime markets that are not that model, so that a regime
input is judged on more than its own family:

- :func:`student_t_regimes`: 2 regimes (bull, bear) whose errors are Student-t (fat tails);
- :func:`four_state_regimes`: 4 Gaussian regimes;
- :func:`semi_markov_regimes`: 3 Gaussian regimes whose durations are negative binomial (a
  regime lasts ``phases`` geometric phases), so the chance of leaving depends on how long the
  regime has lasted. Its exact filter is an HMM on the expanded (regime, phase) state.

Each returns an OHLCV DataFrame as ``synthetic``'s generators do (hourly bars, the hidden
``regime`` column, the true parameters in ``df.attrs["synthetic"]``), seeded the same way
(``MarketData.synthetic`` passes ``(seed, instrument)``). :func:`true_filter_expected_return`
is each market's reference: the forward filter's forecast of the next bar's log return from
bars ``<= t`` with the generator's true parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from gpu_trading_env.data.regime_filter import GaussianHMM, expected_next_returns
from gpu_trading_env.data.synthetic import Seed, _check_n_bars, _ohlcv_frame

if TYPE_CHECKING:
    from gpu_trading_env.data.market_data import MarketData

__all__ = [
    "KINDS",
    "four_state_regimes",
    "semi_markov_regimes",
    "student_t_regimes",
    "true_filter_expected_return",
    "true_model",
]


def _uniform_jumps(k: int, persistence: float) -> np.ndarray:
    """Stay with ``persistence``, else jump uniformly to another regime: float64 [k, k]."""
    trans = np.full((k, k), (1.0 - persistence) / (k - 1))
    np.fill_diagonal(trans, persistence)
    return trans


def _check_regimes(mus: Sequence[float], sigmas: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    mu = np.asarray(mus, dtype=np.float64)
    sg = np.asarray(sigmas, dtype=np.float64)
    if mu.ndim != 1 or len(mu) < 2 or sg.shape != mu.shape:
        raise ValueError(
            f"mus = {tuple(mus)!r}, sigmas = {tuple(sigmas)!r} are invalid: allowed is one "
            "entry per regime in each, at least 2 regimes"
        )
    if not (np.isfinite(mu).all() and np.isfinite(sg).all() and (sg > 0).all()):
        raise ValueError(f"sigmas = {tuple(sigmas)!r} is invalid: allowed are finite numbers > 0")
    return mu, sg


def _check_persistence(name: str, value: float) -> float:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} = {value!r} is invalid: allowed is a number in [0, 1)")
    return float(value)


def _chain(trans: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """A Markov chain's states: int64 [n], the first uniform over the states."""
    k = len(trans)
    cum = np.cumsum(trans, axis=1)
    cum[:, -1] = 1.0
    u = rng.random(n)
    state = np.empty(n, dtype=np.int64)
    s = int(rng.integers(0, k))
    for t in range(n):
        if t > 0:
            s = int(np.searchsorted(cum[s], u[t], side="right"))
        state[t] = s
    return state


def _frame(
    regime: np.ndarray,
    r: np.ndarray,
    bar_sigma: np.ndarray,
    rng: np.random.Generator,
    start_price: float,
    start: str | pd.Timestamp,
    freq: str,
    params: dict[str, Any],
) -> pd.DataFrame:
    df = _ohlcv_frame(r, bar_sigma, rng, start_price, start, freq, params)
    df["regime"] = regime.astype(np.int8)
    return df


def student_t_regimes(
    n_bars: int,
    seed: Seed = 0,
    *,
    mus: Sequence[float] = (7e-4, -7e-4),
    sigmas: Sequence[float] = (0.004, 0.004),
    dof: float = 3.0,
    persistence: float = 0.995,
    start_price: float = 100.0,
    start: str | pd.Timestamp = "2020-01-01",
    freq: str = "1h",
) -> pd.DataFrame:
    """Markov switching between regimes whose errors are Student-t: ``r_t = mus[k] +
    sigmas[k] * e_t``, ``e_t`` standard t with ``dof`` degrees of freedom (``dof > 2``: a
    finite variance ``sigmas[k]^2 dof / (dof - 2)``). Each bar the regime stays with
    ``persistence``, else jumps uniformly to another; the first regime is uniform. By default
    the regimes differ in their mean only, so a Gaussian model's extra regimes go to the tails
    instead of the means."""
    n = _check_n_bars(n_bars)
    mu, sg = _check_regimes(mus, sigmas)
    if not (math.isfinite(dof) and dof > 2.0):
        raise ValueError(f"dof = {dof!r} is invalid: allowed is a finite number > 2")
    persistence = _check_persistence("persistence", persistence)
    rng = np.random.default_rng(seed)
    regime = _chain(_uniform_jumps(len(mu), persistence), n, rng)
    r = mu[regime] + sg[regime] * rng.standard_t(dof, size=n)
    params = {
        "kind": "regime_t",
        "mus": tuple(float(x) for x in mu),
        "sigmas": tuple(float(x) for x in sg),
        "dof": float(dof),
        "persistence": persistence,
        "start_price": start_price,
    }
    bar_sigma = sg[regime] * math.sqrt(dof / (dof - 2.0))
    return _frame(regime, r, bar_sigma, rng, start_price, start, freq, params)


def four_state_regimes(
    n_bars: int,
    seed: Seed = 0,
    *,
    mus: Sequence[float] = (6e-4, -6e-4, 2e-4, -2e-4),
    sigmas: Sequence[float] = (0.005, 0.011, 0.003, 0.008),
    persistence: float = 0.995,
    start_price: float = 100.0,
    start: str | pd.Timestamp = "2020-01-01",
    freq: str = "1h",
) -> pd.DataFrame:
    """Markov switching between 4 Gaussian regimes (strong and mild bull and bear markets by
    default): ``r_t = mus[k] + sigmas[k] * eps_t``; jumps as :func:`student_t_regimes`'."""
    n = _check_n_bars(n_bars)
    mu, sg = _check_regimes(mus, sigmas)
    persistence = _check_persistence("persistence", persistence)
    rng = np.random.default_rng(seed)
    regime = _chain(_uniform_jumps(len(mu), persistence), n, rng)
    r = mu[regime] + sg[regime] * rng.standard_normal(n)
    params = {
        "kind": "regime_4",
        "mus": tuple(float(x) for x in mu),
        "sigmas": tuple(float(x) for x in sg),
        "persistence": persistence,
        "start_price": start_price,
    }
    return _frame(regime, r, sg[regime], rng, start_price, start, freq, params)


def _semi_markov_transition(k: int, phases: int, phase_persistence: float) -> np.ndarray:
    """The expanded chain on (regime, phase), state ``regime * phases + phase``: a phase stays
    with ``phase_persistence``, else moves to the next phase; the last phase's exit jumps to
    the first phase of another regime, uniformly. float64 [k * phases, k * phases]."""
    m = k * phases
    trans = np.zeros((m, m))
    leave = 1.0 - phase_persistence
    for g in range(k):
        for p in range(phases):
            i = g * phases + p
            trans[i, i] = phase_persistence
            if p + 1 < phases:
                trans[i, i + 1] = leave
            else:
                for h in range(k):
                    if h != g:
                        trans[i, h * phases] = leave / (k - 1)
    return trans


def semi_markov_regimes(
    n_bars: int,
    seed: Seed = 0,
    *,
    mus: Sequence[float] = (4e-4, -5e-4, 0.0),
    sigmas: Sequence[float] = (0.006, 0.012, 0.004),
    phases: int = 4,
    mean_duration: float = 200.0,
    start_price: float = 100.0,
    start: str | pd.Timestamp = "2020-01-01",
    freq: str = "1h",
) -> pd.DataFrame:
    """Semi-Markov switching between Gaussian regimes: a regime lasts ``phases`` phases, each
    geometric with mean ``mean_duration / phases`` bars, so its duration is negative binomial
    (mean ``mean_duration``, far less spread than the geometric law of a Markov chain's: a
    regime just begun rarely ends, an old one soon does); then it jumps uniformly to another.
    The first (regime, phase) is uniform."""
    n = _check_n_bars(n_bars)
    mu, sg = _check_regimes(mus, sigmas)
    if int(phases) != phases or phases < 1:
        raise ValueError(f"phases = {phases!r} is invalid: allowed is an int >= 1")
    if not (math.isfinite(mean_duration) and mean_duration > phases):
        raise ValueError(
            f"mean_duration = {mean_duration!r} is invalid: allowed is a number > phases ({phases})"
        )
    phases = int(phases)
    q = 1.0 - phases / float(mean_duration)
    rng = np.random.default_rng(seed)
    state = _chain(_semi_markov_transition(len(mu), phases, q), n, rng)
    regime = state // phases
    r = mu[regime] + sg[regime] * rng.standard_normal(n)
    params = {
        "kind": "regime_semi_markov",
        "mus": tuple(float(x) for x in mu),
        "sigmas": tuple(float(x) for x in sg),
        "phases": phases,
        "mean_duration": float(mean_duration),
        "start_price": start_price,
    }
    return _frame(regime, r, sg[regime], rng, start_price, start, freq, params)


KINDS = {
    "regime_t": student_t_regimes,
    "regime_4": four_state_regimes,
    "regime_semi_markov": semi_markov_regimes,
}


def true_model(metadata: dict[str, Any]) -> GaussianHMM:
    """The HMM whose forward filter is exact for the market of ``metadata`` (a ``MarketData``'s
    metadata or ``df.attrs["synthetic"]``): the generator's own chain, on the expanded
    (regime, phase) state for the semi-Markov market, uniform initial probabilities.

    :raises ValueError: where ``metadata["kind"]`` is none of :data:`KINDS` (nor ``regime``).
    """
    kind = metadata.get("kind")
    mu = np.asarray(metadata.get("mus", ()), dtype=np.float64)
    sg = np.asarray(metadata.get("sigmas", ()), dtype=np.float64)
    k = len(mu)
    dof = math.inf
    if kind in ("regime", "regime_4", "regime_t"):
        trans = _uniform_jumps(k, float(metadata["persistence"]))
        if kind == "regime_t":
            dof = float(metadata["dof"])
    elif kind == "regime_semi_markov":
        phases = int(metadata["phases"])
        q = 1.0 - phases / float(metadata["mean_duration"])
        trans = _semi_markov_transition(k, phases, q)
        mu, sg = np.repeat(mu, phases), np.repeat(sg, phases)
    else:
        raise ValueError(
            f"metadata kind = {kind!r} is invalid: allowed is regime or one of {sorted(KINDS)}"
        )
    m = len(mu)
    return GaussianHMM(
        mu, sg, trans, np.full(m, 1.0 / m), log_likelihood=0.0, iterations=0, dof=dof
    )


def true_filter_expected_return(data: MarketData) -> np.ndarray:
    """The exact filter's expected next log return of a regime market: float64 [n_bars].

    Row ``t`` is ``E[r_{t+1} | r_1..r_t]`` under the generator's true parameters (from
    ``data.metadata``), from bars ``<= t`` of its instrument; each instrument starts from the
    uniform prior (the warm-up bars before ``data`` are unseen). Works for the kinds of
    :data:`KINDS` and for ``synthetic.regime_switching``'s ``regime``.

    :raises ValueError: where ``data`` is not such a market.
    """
    return expected_next_returns(data, true_model(dict(data.metadata)))
