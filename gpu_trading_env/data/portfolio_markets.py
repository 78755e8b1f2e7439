"""Seeded portfolio markets of K instruments on one grid, each with its known best rule.

Each generator returns a :class:`PortfolioData` of ``n_instruments`` instruments whose bars
share one hourly grid (``n_bars`` rows after the feature warm-up, the features the env computes:
each instrument's 51 built-in features of its own bars). ``r_{t,k} = log(close_{t,k} /
close_{t-1,k})`` is the process each market defines; open, high, low and volume are drawn around
it as ``synthetic``'s generators draw them and carry no extra edge. The same seed gives the same
bars on every platform.

| kind | law of the returns | rule (exposure held from close t to close t+1) |
| --- | --- | --- |
| ``ar1`` | K independent AR(1)s, ``r_{t+1,k} = phi r_{t,k} + sigma eps`` (phi 0.10, sigma 0.005) | ``sign(phi r_{t,k})`` on each instrument |
| ``lead_lag`` | K/2 pairs (A_j, B_j) at columns (2j, 2j+1): A i.i.d. N(0, sigma^2), ``r^B_{t+1} = rho r^A_t + sigma sqrt(1 - rho^2) eps`` (rho 0.10, sigma 0.005) | ``sign(rho r^A_t)`` on each B, A flat |
| ``common_factor`` | ``r_{t,k} = beta_k f_t + idio_sigma eps_{t,k} - var_k / 2``, the factor's increments ``f_t ~ N(0, factor_sigma^2)`` i.i.d. (a driftless random walk), ``beta_k ~ U[0.5, 1.5]`` | flat |

Why these rules are the best: on ``ar1`` the expected next return given the past is
``phi r_{t,k}``, so its sign is the side that earns; per unit of exposure the sign earns
``phi s sqrt(2/pi)`` a bar (``s = sigma / sqrt(1 - phi^2)``: about 4.0 bps with the defaults)
and flips in ``1/2 - asin(phi)/pi`` of the bars (0.47), two units traded at 1 bp each, about
0.94 bps a bar: a clear edge after costs, three quarters of it kept. ``lead_lag``'s B earns
``rho sigma sqrt(2/pi)`` (4.0 bps) and flips in half of the bars (1.0 bp of costs); A and B's
own past carry nothing about their next returns, so trading A (or B on B) only pays costs. On
``common_factor`` every instrument's expected next simple return is 0 whatever the past (the
increments are independent of it and ``- var_k / 2`` cancels the lognormal drift): any exposure
adds variance and costs and no expected return, and holding earns 0 in expectation with the
factor's variance, so flat is best (return 0, Sharpe 0).

Each rule's exposures are float64 ``[T, K]`` in {-1, 0, +1}, row ``t`` from the closes of bars
<= t only (row 0 is 0: no previous close in the data); the env's gross cap (``max_leverage``)
scales them to equal weights. :func:`exposure_levels` turns them into the env's level indices.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gpu_trading_env.data.features import WARMUP_BARS
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.data.portfolio_data import PortfolioData
from gpu_trading_env.data.synthetic import _check_n_bars, _ohlcv_frame, planted_signal

__all__ = [
    "PORTFOLIO_MARKETS",
    "PortfolioMarketKind",
    "ar1_portfolio",
    "ar1_rule",
    "common_factor_portfolio",
    "exposure_levels",
    "flat_rule",
    "lead_lag_portfolio",
    "lead_lag_rule",
    "portfolio_market",
    "rule_exposures",
]

_START = "2020-01-01"
_FREQ = "1h"
_START_PRICE = 100.0


def _check_instruments(n_instruments: int, even: bool = False) -> int:
    if isinstance(n_instruments, bool) or int(n_instruments) != n_instruments:
        raise ValueError(f"n_instruments = {n_instruments!r} is invalid: allowed is an integer")
    k = int(n_instruments)
    if even and (k < 2 or k % 2):
        raise ValueError(
            f"n_instruments = {n_instruments!r} is invalid: allowed is an even integer >= 2 "
            "(pairs of a leader and a follower)"
        )
    if k < 1:
        raise ValueError(f"n_instruments = {n_instruments!r} is invalid: allowed is >= 1")
    return k


def _check_correlation(name: str, value: float) -> float:
    if not -1.0 < value < 1.0:
        raise ValueError(f"{name} = {value!r} is invalid: allowed is a number in (-1, 1)")
    return float(value)


def _check_positive(name: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} = {value!r} is invalid: allowed is a finite number > 0")
    return float(value)


def _portfolio(frames: Sequence[pd.DataFrame], names: Sequence[str]) -> PortfolioData:
    """The instruments' bars (the warm-up rows included) with the built-in features, on one
    grid."""
    parts = []
    for frame, name in zip(frames, names, strict=True):
        frame = frame[["open", "high", "low", "close", "volume"]].copy()
        frame.insert(0, "instrument", name)
        parts.append(frame)
    md = MarketData.from_dataframe(pd.concat(parts), instrument_column="instrument")
    return PortfolioData.from_market_data(md)


def ar1_portfolio(
    n_bars: int, n_instruments: int = 8, seed: int = 0, *, phi: float = 0.10, sigma: float = 0.005
) -> PortfolioData:
    """K independent AR(1) instruments (``synthetic.planted_signal`` each, instrument k drawn
    with ``default_rng((seed, k))``), named ``ar1_k``; ``n_bars`` rows after the warm-up."""
    n = _check_n_bars(n_bars)
    k = _check_instruments(n_instruments)
    _check_correlation("phi", phi)
    _check_positive("sigma", sigma)
    frames = [
        planted_signal(n + WARMUP_BARS, (int(seed), j), phi=phi, sigma=sigma) for j in range(k)
    ]
    return _portfolio(frames, [f"ar1_{j}" for j in range(k)])


def lead_lag_portfolio(
    n_bars: int, n_instruments: int = 8, seed: int = 0, *, rho: float = 0.10, sigma: float = 0.005
) -> PortfolioData:
    """K/2 pairs: leader ``lead_j`` (column 2j) with i.i.d. N(0, sigma^2) log returns, follower
    ``lag_j`` (column 2j+1) with ``r^B_{t+1} = rho r^A_t + sigma sqrt(1 - rho^2) eps``, so both
    have variance sigma^2 and ``corr(r^B_{t+1}, r^A_t) = rho``. Pair j is drawn with
    ``default_rng((seed, j))``."""
    n = _check_n_bars(n_bars) + WARMUP_BARS
    k = _check_instruments(n_instruments, even=True)
    _check_correlation("rho", rho)
    _check_positive("sigma", sigma)
    frames, names = [], []
    for j in range(k // 2):
        rng = np.random.default_rng((int(seed), j))
        r_lead = sigma * rng.standard_normal(n)
        r_lag = np.empty(n)
        r_lag[0] = sigma * rng.standard_normal()
        r_lag[1:] = rho * r_lead[:-1] + sigma * math.sqrt(1.0 - rho * rho) * rng.standard_normal(
            n - 1
        )
        params = {"kind": "lead_lag", "rho": rho, "sigma": sigma, "pair": j}
        for r, name in ((r_lead, f"lead_{j}"), (r_lag, f"lag_{j}")):
            frames.append(
                _ohlcv_frame(r, np.full(n, sigma), rng, _START_PRICE, _START, _FREQ, params)
            )
            names.append(name)
    return _portfolio(frames, names)


def common_factor_portfolio(
    n_bars: int,
    n_instruments: int = 8,
    seed: int = 0,
    *,
    factor_sigma: float = 0.004,
    idio_sigma: float = 0.003,
) -> PortfolioData:
    """K instruments ``factor_k`` on one driftless random-walk factor: ``r_{t,k} = beta_k f_t +
    idio_sigma eps_{t,k} - var_k / 2`` with ``var_k = beta_k^2 factor_sigma^2 + idio_sigma^2``
    (each bar's expected simple return 0), ``f_t ~ N(0, factor_sigma^2)``, ``beta_k ~
    U[0.5, 1.5]``, all drawn with ``default_rng((seed, K))``; no instrument has an edge."""
    n = _check_n_bars(n_bars) + WARMUP_BARS
    k = _check_instruments(n_instruments)
    _check_positive("factor_sigma", factor_sigma)
    _check_positive("idio_sigma", idio_sigma)
    rng = np.random.default_rng((int(seed), k))
    beta = rng.uniform(0.5, 1.5, size=k)
    f = factor_sigma * rng.standard_normal(n)
    frames = []
    for j in range(k):
        var = beta[j] ** 2 * factor_sigma**2 + idio_sigma**2
        r = beta[j] * f + idio_sigma * rng.standard_normal(n) - 0.5 * var
        params = {"kind": "common_factor", "beta": float(beta[j]), "factor_sigma": factor_sigma}
        frames.append(
            _ohlcv_frame(r, np.full(n, math.sqrt(var)), rng, _START_PRICE, _START, _FREQ, params)
        )
    return _portfolio(frames, [f"factor_{j}" for j in range(k)])


def _last_return_sign(close: np.ndarray) -> np.ndarray:
    """``sign(close_t - close_{t-1})`` per column: float64 [T, K], row 0 zero."""
    out = np.zeros(close.shape, dtype=np.float64)
    out[1:] = np.sign(close[1:] - close[:-1])
    return out


def ar1_rule(data: PortfolioData, phi: float = 0.10) -> np.ndarray:
    """``sign(phi r_{t,k})`` per instrument: float64 [T, K] in {-1, 0, 1}, from bars <= t."""
    return math.copysign(1.0, phi) * _last_return_sign(np.asarray(data.close, dtype=np.float64))


def lead_lag_rule(data: PortfolioData, rho: float = 0.10) -> np.ndarray:
    """Each follower (odd column) at ``sign(rho r^A_t)`` of its leader (the column before),
    each leader flat: float64 [T, K] in {-1, 0, 1}, from bars <= t.

    :raises ValueError: an odd number of instruments (no pair layout).
    """
    k = data.n_instruments
    if k % 2:
        raise ValueError(
            f"data has {k} instruments: allowed is an even number (leader, follower pairs)"
        )
    close = np.asarray(data.close, dtype=np.float64)
    out = np.zeros(close.shape, dtype=np.float64)
    out[:, 1::2] = math.copysign(1.0, rho) * _last_return_sign(close[:, 0::2])
    return out


def flat_rule(data: PortfolioData) -> np.ndarray:
    """Zero exposure everywhere: float64 [T, K]."""
    return np.zeros(data.close.shape, dtype=np.float64)


@dataclass(frozen=True)
class PortfolioMarketKind:
    """One kind of portfolio market.

    :param name: the kind's key in :data:`PORTFOLIO_MARKETS`.
    :param title: what the market is, in words.
    :param generate: ``(n_bars, n_instruments, seed, **params) -> PortfolioData``.
    :param rule: ``(data, **params) -> float64 [T, K]``, the best rule's exposures; it takes
        the generator's parameters that decide its sign (``phi``, ``rho``), none else.
    :param rule_name: the rule, in words.
    :param rule_params: the names of the generator's parameters the rule takes.
    """

    name: str
    title: str
    generate: Callable[..., PortfolioData]
    rule: Callable[..., np.ndarray]
    rule_name: str
    rule_params: tuple[str, ...] = ()


PORTFOLIO_MARKETS: dict[str, PortfolioMarketKind] = {
    m.name: m
    for m in (
        PortfolioMarketKind("ar1", "independent AR(1)s, phi 0.10", ar1_portfolio, ar1_rule,
                            "each instrument's sign", ("phi",)),
        PortfolioMarketKind("lead_lag", "lead-lag pairs, rho 0.10", lead_lag_portfolio,
                            lead_lag_rule, "each follower on its leader's sign, leaders flat",
                            ("rho",)),
        PortfolioMarketKind("common_factor", "common random-walk factor, no edge",
                            common_factor_portfolio, flat_rule, "flat"),
    )
}  # fmt: skip


def _kind(kind: str) -> PortfolioMarketKind:
    if kind not in PORTFOLIO_MARKETS:
        raise ValueError(
            f"kind = {kind!r} is invalid: allowed is one of {', '.join(PORTFOLIO_MARKETS)}"
        )
    return PORTFOLIO_MARKETS[kind]


def portfolio_market(
    kind: str, n_bars: int, n_instruments: int, seed: int = 0, **params: Any
) -> PortfolioData:
    """The ``kind`` market (a key of :data:`PORTFOLIO_MARKETS`) of ``n_instruments``
    instruments, ``n_bars`` bars after the warm-up, drawn with ``seed``; ``params`` override the
    generator's defaults."""
    return _kind(kind).generate(n_bars, n_instruments, seed, **params)


def rule_exposures(kind: str, data: PortfolioData, **params: Any) -> np.ndarray:
    """The best rule of the ``kind`` market on ``data``: float64 [T, K] in {-1, 0, 1}, row t
    from bars <= t; ``params`` are the generator's parameters it was drawn with (those the rule
    does not take are ignored)."""
    market = _kind(kind)
    return market.rule(data, **{p: params[p] for p in market.rule_params if p in params})


def exposure_levels(exposures: np.ndarray, levels: Sequence[float]) -> np.ndarray:
    """The level index of each exposure: int64 of ``exposures``' shape, ``levels[i] ==
    exposure``.

    :param levels: the env's ``exposure_levels``.
    :raises ValueError: naming the first exposure that is none of ``levels``.
    """
    x = np.asarray(exposures, dtype=np.float64)
    lv = np.asarray(levels, dtype=np.float64)
    match = x[..., None] == lv
    found = match.any(axis=-1)
    if not found.all():
        where = tuple(int(i) for i in np.argwhere(~found)[0])
        raise ValueError(
            f"exposures{list(where)} = {float(x[where])!r} is invalid: allowed are the exposure levels "
            f"{tuple(float(v) for v in lv)}"
        )
    return match.argmax(axis=-1).astype(np.int64)
