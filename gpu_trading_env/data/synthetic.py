"""Seeded synthetic markets: OHLCV DataFrames for tests, examples and the embedded default data.

Every generator returns a DataFrame with a ``DatetimeIndex`` named ``timestamp`` (hourly bars from
2020-01-01 unless told otherwise) and float64 columns ``open``, ``high``, ``low``, ``close``,
``volume`` that satisfy ``0 < low <= min(open, close) <= max(open, close) <= high`` and
``volume > 0``. The generator's parameters are in ``df.attrs["synthetic"]``. The same ``seed``
(anything ``numpy.random.default_rng`` accepts) gives the same bars on every platform.

The close-to-close log return ``r_t = log(close_t / close_{t-1})`` is the process that each
generator defines; open, high, low and volume are drawn around it and carry no extra edge.

Planted signal
--------------
``planted_signal`` makes the close-to-close log returns a zero-mean Gaussian AR(1),

    r_{t+1} = phi * r_t + sigma * eps_{t+1},   eps ~ N(0, 1) i.i.d.,

started in its stationary law ``r_0 ~ N(0, s^2)`` with ``s = sigma / sqrt(1 - phi^2)``. The known
rule holds exposure ``sign(r_t)`` (long after an up-close, short after a down-close) from close
``t`` to close ``t+1`` - exactly what the env's ``fill="close"`` does. Its per-bar simple return
``sign(r_t) * (close_{t+1} / close_t - 1)`` has the exact expectation

    E = exp((sigma^2 + phi^2 s^2) / 2) * (2 * Phi(phi * s) - 1)  ~=  phi * s * sqrt(2 / pi),

(``Phi`` the standard normal CDF; ``planted_rule_expected_return``). With the defaults
``phi = 0.3``, ``sigma = 0.005`` that is about 1.25e-3 per bar (12.5 basis points), well above the
env's default cost of about 1 basis point per unit traded.

Exogenous signal
----------------
``exogenous_signal`` is a market whose only edge is a column beside the bars, known at each
close: ``signal_t ~ N(0, 1)`` i.i.d. and ``r_{t+1} = drift * signal_t + sigma * eps_{t+1}``. The
prices alone carry nothing (their past is independent of the next return); the rule
``sign(signal_t)`` held from close ``t`` to close ``t+1`` earns
``exp((sigma^2 + drift^2) / 2) * (2 * Phi(drift) - 1)  ~=  drift * sqrt(2 / pi)`` a bar.
Read it with ``extra_features=["signal"]`` (``MarketData.synthetic("exogenous")`` does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from gpu_trading_env.data.regime_filter import GaussianHMM, expected_next_returns

if TYPE_CHECKING:
    from gpu_trading_env.data.market_data import MarketData

__all__ = [
    "exogenous_rule_exposure",
    "exogenous_signal",
    "gbm",
    "planted_rule_expected_log_return",
    "planted_rule_expected_return",
    "planted_conviction_exposure",
    "planted_rule_exposure",
    "planted_signal",
    "regime_filter_expected_return",
    "regime_switching",
]

Seed = int | Sequence[int] | np.random.SeedSequence | None

PLANTED_RULE = (
    "exposure_t = sign(log(close_t / close_{t-1})) held from close_t to close_{t+1}; "
    "0 on an instrument's first row"
)


def _ohlcv_frame(
    log_returns: np.ndarray,
    bar_sigma: np.ndarray,
    rng: np.random.Generator,
    start_price: float,
    start: str | pd.Timestamp,
    freq: str,
    params: dict[str, Any],
) -> pd.DataFrame:
    """Bars around the close path ``start_price * exp(cumsum(log_returns))``.

    ``bar_sigma`` (float [T], per-bar return scale) sizes the intrabar noise. The open sits a small
    gap away from the previous close; high and low extend beyond the body by half-normal amounts,
    so the OHLC ordering holds by construction.
    """
    n = len(log_returns)
    if start_price <= 0:
        raise ValueError(f"start_price must be positive, got {start_price}")
    close = start_price * np.exp(np.cumsum(log_returns))
    prev_close = np.concatenate(([start_price], close[:-1]))
    open_ = prev_close * np.exp(0.1 * bar_sigma * rng.standard_normal(n))
    body_hi = np.maximum(open_, close)
    body_lo = np.minimum(open_, close)
    high = body_hi * np.exp(0.5 * bar_sigma * np.abs(rng.standard_normal(n)))
    low = body_lo * np.exp(-0.5 * bar_sigma * np.abs(rng.standard_normal(n)))
    # Busier bars trade more, as in real markets; lognormal noise keeps volume strictly positive.
    volume = 1000.0 * np.exp(0.3 * rng.standard_normal(n)) * (1.0 + np.abs(log_returns) / bar_sigma)
    index = pd.date_range(start=start, periods=n, freq=freq, name="timestamp")
    df = pd.DataFrame(
        {"open": open_, "high": high, "low": low, "close": close, "volume": volume}, index=index
    )
    df.attrs["synthetic"] = params
    return df


def _check_n_bars(n_bars: int) -> int:
    if int(n_bars) != n_bars or n_bars < 2:
        raise ValueError(f"n_bars must be an integer >= 2, got {n_bars!r}")
    return int(n_bars)


def gbm(
    n_bars: int,
    seed: Seed = 0,
    mu: float = 0.0,
    sigma: float = 0.01,
    start_price: float = 100.0,
    *,
    start: str | pd.Timestamp = "2020-01-01",
    freq: str = "1h",
) -> pd.DataFrame:
    """Geometric Brownian motion: ``r_t = (mu - sigma^2 / 2) + sigma * eps_t`` per bar.

    ``mu`` is the expected simple return per bar and ``sigma`` the per-bar volatility of log
    returns; there is no predictable edge. Returns an OHLCV DataFrame of ``n_bars`` rows.
    """
    n = _check_n_bars(n_bars)
    if sigma <= 0:
        raise ValueError(f"sigma must be positive, got {sigma}")
    rng = np.random.default_rng(seed)
    r = (mu - 0.5 * sigma**2) + sigma * rng.standard_normal(n)
    params = {"kind": "gbm", "mu": mu, "sigma": sigma, "start_price": start_price}
    return _ohlcv_frame(r, np.full(n, sigma), rng, start_price, start, freq, params)


def regime_switching(
    n_bars: int,
    seed: Seed = 0,
    *,
    mus: Sequence[float] = (3e-4, -4e-4, 0.0),
    sigmas: Sequence[float] = (0.006, 0.012, 0.004),
    persistence: float = 0.995,
    start_price: float = 100.0,
    start: str | pd.Timestamp = "2020-01-01",
    freq: str = "1h",
) -> pd.DataFrame:
    """Markov regime switching between bull, bear and sideways markets (by default).

    Regime ``k`` has per-bar log-return drift ``mus[k]`` and volatility ``sigmas[k]``. Each bar the
    regime stays with probability ``persistence`` and otherwise jumps to one of the other regimes
    uniformly (mean regime length ``1 / (1 - persistence)`` bars). The first regime is drawn
    uniformly. The DataFrame has an extra int8 column ``regime`` (the hidden state, for analysis;
    ``MarketData`` ignores it).
    """
    n = _check_n_bars(n_bars)
    mus_a = np.asarray(mus, dtype=np.float64)
    sig_a = np.asarray(sigmas, dtype=np.float64)
    k = len(mus_a)
    if k < 2 or len(sig_a) != k:
        raise ValueError("mus and sigmas must have one entry per regime (at least 2 regimes)")
    if (sig_a <= 0).any():
        raise ValueError(f"sigmas must be positive, got {tuple(sigmas)}")
    if not 0.0 <= persistence < 1.0:
        raise ValueError(f"persistence must be in [0, 1), got {persistence}")
    rng = np.random.default_rng(seed)
    stay = rng.random(n) < persistence
    jumps = rng.integers(1, k, size=n)
    regime = np.empty(n, dtype=np.int64)
    state = int(rng.integers(0, k))
    for t in range(n):
        if t > 0 and not stay[t]:
            state = (state + int(jumps[t])) % k
        regime[t] = state
    bar_sigma = sig_a[regime]
    r = mus_a[regime] + bar_sigma * rng.standard_normal(n)
    params = {
        "kind": "regime",
        "mus": tuple(float(x) for x in mus_a),
        "sigmas": tuple(float(x) for x in sig_a),
        "persistence": persistence,
        "start_price": start_price,
    }
    df = _ohlcv_frame(r, bar_sigma, rng, start_price, start, freq, params)
    df["regime"] = regime.astype(np.int8)
    return df


def planted_rule_expected_return(phi: float, sigma: float) -> float:
    """Exact expected per-bar simple return of the planted rule (see the module docstring).

    ``E[sign(r_t) * (exp(r_{t+1}) - 1)] = exp((sigma^2 + phi^2 s^2) / 2) * (2 Phi(phi s) - 1)``
    with ``s = sigma / sqrt(1 - phi^2)``; a fraction of the position's value per bar.
    """
    s = sigma / math.sqrt(1.0 - phi * phi)
    two_phi_minus_one = math.erf(phi * s / math.sqrt(2.0))  # 2 * Phi(x) - 1 = erf(x / sqrt 2)
    return math.exp(0.5 * (sigma**2 + (phi * s) ** 2)) * two_phi_minus_one


def planted_rule_expected_log_return(phi: float, sigma: float) -> float:
    """``E[sign(r_t) * r_{t+1}] = phi * E|r_t| = phi * s * sqrt(2 / pi)``, per bar."""
    s = sigma / math.sqrt(1.0 - phi * phi)
    return phi * s * math.sqrt(2.0 / math.pi)


def planted_signal(
    n_bars: int,
    seed: Seed = 0,
    *,
    phi: float = 0.3,
    sigma: float = 0.005,
    start_price: float = 100.0,
    start: str | pd.Timestamp = "2020-01-01",
    freq: str = "1h",
) -> pd.DataFrame:
    """A market with a known edge: close-to-close log returns follow a zero-mean AR(1).

    ``r_{t+1} = phi * r_t + sigma * eps_{t+1}`` (see the module docstring), so the rule "long after
    an up-close, short after a down-close" earns ``planted_rule_expected_return(phi, sigma)`` per
    bar on close-to-close returns. ``df.attrs["synthetic"]`` records the rule, ``phi``, ``sigma``,
    ``rule_expected_return`` and ``rule_expected_log_return``.
    """
    n = _check_n_bars(n_bars)
    if not -1.0 < phi < 1.0:
        raise ValueError(f"phi must be in (-1, 1) for a stationary AR(1), got {phi}")
    if sigma <= 0:
        raise ValueError(f"sigma must be positive, got {sigma}")
    rng = np.random.default_rng(seed)
    s = sigma / math.sqrt(1.0 - phi * phi)
    eps = rng.standard_normal(n)
    r = np.empty(n)
    r[0] = s * eps[0]
    for t in range(1, n):
        r[t] = phi * r[t - 1] + sigma * eps[t]
    params = {
        "kind": "planted",
        "phi": phi,
        "sigma": sigma,
        "start_price": start_price,
        "rule": PLANTED_RULE,
        "rule_expected_return": planted_rule_expected_return(phi, sigma),
        "rule_expected_log_return": planted_rule_expected_log_return(phi, sigma),
    }
    return _ohlcv_frame(r, np.full(n, sigma), rng, start_price, start, freq, params)


def planted_rule_exposure(data: MarketData) -> np.ndarray:
    """The planted rule's exposure per row of ``data``: float64 [n_bars] in {-1.0, 0.0, +1.0}.

    Row ``t`` is ``sign(close_t - close_{t-1})`` within its instrument, so it uses bars <= t only;
    an instrument's first row has no previous close in ``data`` and gets 0. Hold the exposure from
    close ``t`` to close ``t+1`` to earn the planted edge. Works on any ``MarketData``; on data not
    made by ``planted_signal`` the rule has no particular edge.
    """
    close = np.asarray(data.close, dtype=np.float64)
    exposure = np.zeros(len(close), dtype=np.float64)
    offsets = np.asarray(data.instrument_offsets)
    for k in range(len(offsets) - 1):
        a, b = int(offsets[k]), int(offsets[k + 1])
        if b - a >= 2:
            exposure[a + 1 : b] = np.sign(close[a + 1 : b] - close[a : b - 1])
    return exposure


def planted_conviction_exposure(data: MarketData, phi: float, sigma: float) -> np.ndarray:
    """The planted market's conviction-sized rule: float64 [n_bars] in [-1, 1].

    The AR(1)'s forecast of the next log return is ``phi * r_t``; the rule holds it in units of
    its own spread, ``clip(phi * r_t / (|phi| * s), -1, 1)`` with ``s = sigma / sqrt(1 - phi^2)``
    the stationary standard deviation of ``r_t``: full exposure beyond one standard deviation,
    proportionally less on small moves, whose forecast edge may not pay the cost of trading.
    Row ``t`` uses bars <= t only; an instrument's first row gets 0.
    """
    if not -1.0 < phi < 1.0 or phi == 0.0:
        raise ValueError(f"phi = {phi!r} is invalid: allowed is a number in (-1, 0) or (0, 1)")
    s = sigma / math.sqrt(1.0 - phi * phi)
    exposure = np.zeros(data.n_bars, dtype=np.float64)
    for a, b, r in data.instrument_log_returns():
        exposure[a:b] = np.clip(phi * r / (abs(phi) * s), -1.0, 1.0)
        exposure[a] = 0.0
    return exposure


def regime_filter_expected_return(
    data: MarketData,
    mus: Sequence[float],
    sigmas: Sequence[float],
    persistence: float,
) -> np.ndarray:
    """Bayes-filtered expected next log return of a ``regime_switching`` market: float64 [n_bars].

    The forward algorithm with the generator's true parameters: after row ``t``'s return the
    filter holds ``P(regime_t | r_1..r_t)``; one step of the Markov chain (stay with probability
    ``persistence``, else jump uniformly to another regime) gives ``P(regime_{t+1} | r_1..r_t)``,
    and row ``t`` is ``sum_k P(regime_{t+1} = k | ...) * mus[k]``, the best forecast of
    ``r_{t+1}`` from bars <= t. Each instrument starts from the uniform prior (the generator's
    first regime is uniform; the warm-up bars before ``data`` are unseen).
    """
    mu = np.asarray(mus, dtype=np.float64)
    sg = np.asarray(sigmas, dtype=np.float64)
    k = len(mu)
    if k < 2 or len(sg) != k or (sg <= 0).any():
        raise ValueError("mus and sigmas must have one entry per regime, sigmas > 0")
    if not 0.0 <= persistence < 1.0:
        raise ValueError(f"persistence = {persistence!r} is invalid: allowed is [0, 1)")
    trans = np.full((k, k), (1.0 - persistence) / (k - 1))
    np.fill_diagonal(trans, persistence)
    # The library's forward filter (the one the input selection runs with fitted parameters),
    # here with the generator's true ones.
    truth = GaussianHMM(mu, sg, trans, np.full(k, 1.0 / k), log_likelihood=0.0, iterations=0)
    return expected_next_returns(data, truth)


EXOGENOUS_RULE = (
    "exposure_t = sign(signal_t) held from close_t to close_{t+1} (signal: the extra feature "
    "column, z-scored causally)"
)


def exogenous_signal(
    n_bars: int,
    seed: Seed = 0,
    drift: float = 0.0015,
    sigma: float = 0.005,
    start_price: float = 100.0,
    *,
    start: str | pd.Timestamp = "2020-01-01",
    freq: str = "1h",
) -> pd.DataFrame:
    """A market whose only edge is the column ``signal`` (the module doc, "Exogenous signal").

    ``signal`` (float64, N(0, 1) i.i.d.) on row ``t`` is known at close ``t`` and moves the
    return from close ``t`` to close ``t+1`` by ``drift * signal_t`` (a log return per bar);
    ``sigma`` is the per-bar volatility of the rest. Returns the OHLCV DataFrame of ``n_bars``
    rows plus ``signal``; ``df.attrs["synthetic"]`` records the rule and its expected simple
    return per bar (``rule_expected_return``) and ``extra_features = ["signal"]``.
    """
    n = _check_n_bars(n_bars)
    if sigma <= 0:
        raise ValueError(f"sigma = {sigma!r} is invalid: allowed is a number > 0")
    rng = np.random.default_rng(seed)
    signal = rng.standard_normal(n)
    r = np.empty(n)
    r[0] = sigma * rng.standard_normal()
    r[1:] = drift * signal[:-1] + sigma * rng.standard_normal(n - 1)
    expected = math.exp((sigma**2 + drift**2) / 2.0) * math.erf(abs(drift) / math.sqrt(2.0))
    params = {
        "kind": "exogenous",
        "drift": drift,
        "sigma": sigma,
        "start_price": start_price,
        "rule": EXOGENOUS_RULE,
        "rule_expected_return": expected,
        "extra_features": ["signal"],
    }
    df = _ohlcv_frame(r, np.full(n, sigma), rng, start_price, start, freq, params)
    df["signal"] = signal
    return df


def exogenous_rule_exposure(data: MarketData, column: str = "signal") -> np.ndarray:
    """The exogenous market's rule per row of ``data``: float64 [n_bars] in {-1.0, 0.0, +1.0},
    ``sign`` of the extra feature ``column`` on that row (known at its close; hold it to the
    next close). Any ``MarketData`` with that feature works."""
    if column not in data.feature_names:
        raise ValueError(
            f"data has no feature {column!r}: read the column with extra_features=[{column!r}]"
        )
    j = list(data.feature_names).index(column)
    return np.sign(np.asarray(data.features[:, j], dtype=np.float64))
