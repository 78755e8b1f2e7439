"""Seeded non-stationary markets whose best rule is known bar by bar.

Each generator draws ``n_bars`` hourly OHLCV bars (the DataFrame of ``gpu_trading_env.data.
synthetic``, seeded the same way) whose law changes once, at bar ``change`` of the drawn bars:

    change = warmup_bars + floor(change_at * (n_bars - warmup_bars))

``warmup_bars`` (default ``WARMUP_BARS``) are the rows ``MarketData.synthetic`` draws before
the bars it keeps and drops after computing the features, so ``change_at`` is a fraction of the
kept bars, the ones ``MarketData.split`` divides. With ``train``'s default ``--train-fraction
0.8`` the first 80% of the kept bars are the training bars, so a change at ``change_at = f``
lies at ``f / 0.8`` of the training bars.

| kind | law before | law after | ``change_at`` | the answer |
| --- | --- | --- | --- | --- |
| ``vanishing_edge`` | AR(1), phi 0.10 | no edge (phi 0) | 0.40: half of the training bars | flat |
| ``appearing_edge`` | no edge (phi 0) | AR(1), phi 0.10 | 0.36: 45% of the training bars | the sign rule |
| ``flipping_drift`` | GBM, drift +mu | GBM, drift -mu | 0.40: half of the training bars | flat |

The AR(1) markets follow ``r_{t+1} = phi_{t+1} r_t + sigma eps_{t+1}`` with ``phi_t`` the phi in
force at bar ``t`` (the first return is drawn from the law before's stationary spread). The
true rule at row ``t`` holds ``sign(phi_{t+1} r_t)`` from close ``t`` to close ``t+1``: the
planted sign rule where the edge is, flat where it is not (``shifting_rule_exposure``). For the
drift flip the true rule holds ``sign(mu_{t+1})``; no rule can know the flip's date from the
bars before it, so the zoo holds that market to flat.

``df.attrs["synthetic"]`` holds the parameters before and after, ``change_bar`` (row of the
drawn bars) and ``change_timestamp`` (the first bar of the law after, ISO text): the timestamp
survives ``split`` and ``slice_bars``, so the reference rule of any piece of the data is
computed from its timestamps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from gpu_trading_env.data.features import WARMUP_BARS
from gpu_trading_env.data.synthetic import Seed, _check_n_bars, _ohlcv_frame

if TYPE_CHECKING:
    from gpu_trading_env.data.market_data import MarketData

__all__ = [
    "SHIFTING_KINDS",
    "appearing_edge",
    "flipping_drift",
    "shifting_law_after",
    "shifting_rule_exposure",
    "vanishing_edge",
]


def _change_bar(n: int, change_at: float, warmup_bars: int) -> int:
    if not 0.0 < change_at < 1.0:
        raise ValueError(f"change_at = {change_at!r} is invalid: allowed is a fraction in (0, 1)")
    if int(warmup_bars) != warmup_bars or not 0 <= warmup_bars < n - 1:
        raise ValueError(
            f"warmup_bars = {warmup_bars!r} is invalid: allowed is an integer in [0, {n - 2}]"
        )
    return int(warmup_bars) + int(math.floor(change_at * (n - int(warmup_bars))))


def _shifting_ar1(
    n_bars: int,
    seed: Seed,
    kind: str,
    phi_before: float,
    phi_after: float,
    sigma: float,
    change_at: float,
    warmup_bars: int,
    start: str | pd.Timestamp,
    freq: str,
    start_price: float,
) -> pd.DataFrame:
    n = _check_n_bars(n_bars)
    for name, phi in (("phi_before", phi_before), ("phi_after", phi_after)):
        if not -1.0 < phi < 1.0:
            raise ValueError(f"{name} = {phi!r} is invalid: allowed is a number in (-1, 1)")
    if not sigma > 0:
        raise ValueError(f"sigma = {sigma!r} is invalid: allowed is a number > 0")
    c = _change_bar(n, change_at, warmup_bars)
    rng = np.random.default_rng(seed)
    phis = np.where(np.arange(n) < c, phi_before, phi_after)
    eps = rng.standard_normal(n)
    r = np.empty(n)
    r[0] = sigma / math.sqrt(1.0 - phi_before**2) * eps[0]
    for t in range(1, n):
        r[t] = phis[t] * r[t - 1] + sigma * eps[t]
    index = pd.date_range(start=start, periods=n, freq=freq)
    params = {
        "kind": kind,
        "phi_before": float(phi_before),
        "phi_after": float(phi_after),
        "sigma": float(sigma),
        "change_at": float(change_at),
        "warmup_bars": int(warmup_bars),
        "change_bar": c,
        "change_timestamp": index[c].isoformat(),
        "start_price": start_price,
    }
    return _ohlcv_frame(r, np.full(n, sigma), rng, start_price, start, freq, params)


def vanishing_edge(
    n_bars: int,
    seed: Seed = 0,
    *,
    phi: float = 0.10,
    sigma: float = 0.005,
    change_at: float = 0.40,
    warmup_bars: int = WARMUP_BARS,
    start_price: float = 100.0,
    start: str | pd.Timestamp = "2020-01-01",
    freq: str = "1h",
) -> pd.DataFrame:
    """AR(1) momentum ``phi`` up to ``change_at`` of the kept bars (half of ``train``'s default
    training bars), no edge after: the answer out of sample is flat (see the module doc)."""
    return _shifting_ar1(n_bars, seed, "vanishing_edge", phi, 0.0, sigma, change_at,
                         warmup_bars, start, freq, start_price)  # fmt: skip


def appearing_edge(
    n_bars: int,
    seed: Seed = 0,
    *,
    phi: float = 0.10,
    sigma: float = 0.005,
    change_at: float = 0.36,
    warmup_bars: int = WARMUP_BARS,
    start_price: float = 100.0,
    start: str | pd.Timestamp = "2020-01-01",
    freq: str = "1h",
) -> pd.DataFrame:
    """No edge up to ``change_at`` of the kept bars (45% of ``train``'s default training bars:
    the edge is in the last quarter of its fit bars and all of its validation bars), AR(1)
    momentum ``phi`` from there to the end: the answer is the sign rule (see the module doc)."""
    return _shifting_ar1(n_bars, seed, "appearing_edge", 0.0, phi, sigma, change_at,
                         warmup_bars, start, freq, start_price)  # fmt: skip


def flipping_drift(
    n_bars: int,
    seed: Seed = 0,
    *,
    mu: float = 1e-4,
    sigma: float = 0.002,
    change_at: float = 0.40,
    warmup_bars: int = WARMUP_BARS,
    start_price: float = 100.0,
    start: str | pd.Timestamp = "2020-01-01",
    freq: str = "1h",
) -> pd.DataFrame:
    """GBM with expected simple return ``+mu`` a bar up to ``change_at`` of the kept bars (half
    of ``train``'s default training bars) and ``-mu`` after, volatility ``sigma``: the answer is
    flat (see the module doc)."""
    n = _check_n_bars(n_bars)
    if not sigma > 0:
        raise ValueError(f"sigma = {sigma!r} is invalid: allowed is a number > 0")
    c = _change_bar(n, change_at, warmup_bars)
    rng = np.random.default_rng(seed)
    drift = np.where(np.arange(n) < c, mu, -mu)
    r = (drift - 0.5 * sigma**2) + sigma * rng.standard_normal(n)
    index = pd.date_range(start=start, periods=n, freq=freq)
    params = {
        "kind": "flipping_drift",
        "mu_before": float(mu),
        "mu_after": float(-mu),
        "sigma": float(sigma),
        "change_at": float(change_at),
        "warmup_bars": int(warmup_bars),
        "change_bar": c,
        "change_timestamp": index[c].isoformat(),
        "start_price": start_price,
    }
    return _ohlcv_frame(r, np.full(n, sigma), rng, start_price, start, freq, params)


SHIFTING_KINDS = {
    "vanishing_edge": vanishing_edge,
    "appearing_edge": appearing_edge,
    "flipping_drift": flipping_drift,
}


def shifting_law_after(data: MarketData) -> np.ndarray:
    """bool [n_bars]: row ``t``'s bar is drawn from the law after the change (its timestamp is
    at or after ``metadata["change_timestamp"]``).

    :raises ValueError: ``data`` is not a shifting market (no ``change_timestamp``).
    """
    ts = data.metadata.get("change_timestamp")
    if ts is None:
        raise ValueError(
            f"data.metadata has no change_timestamp (kind {data.metadata.get('kind')!r}): "
            f"allowed are the kinds {', '.join(SHIFTING_KINDS)}"
        )
    return np.asarray(data.timestamps) >= np.datetime64(pd.Timestamp(ts).to_datetime64())


def shifting_rule_exposure(data: MarketData) -> np.ndarray:
    """The true rule of a shifting market: float64 [n_bars] in {-1, 0, +1}, row ``t`` held from
    close ``t`` to close ``t+1`` (see the module doc).

    AR(1) kinds: ``sign(phi_{t+1} r_t)`` with ``r_t`` row ``t``'s close-to-close log return
    (0 on an instrument's first row); ``flipping_drift``: ``sign(mu_{t+1})``. The law of bar
    ``t+1`` is read from the timestamps; an instrument's last row takes the law of its own bar.
    """
    meta: dict[str, Any] = data.metadata
    after = shifting_law_after(data)
    nxt = np.zeros(data.n_bars, dtype=bool)
    for a, b, _ in data.instrument_log_returns():
        nxt[a : b - 1] = after[a + 1 : b]
        nxt[b - 1] = after[b - 1]
    out = np.zeros(data.n_bars, dtype=np.float64)
    if meta["kind"] == "flipping_drift":
        out[:] = np.sign(np.where(nxt, meta["mu_after"], meta["mu_before"]))
        return out
    phi = np.where(nxt, meta["phi_after"], meta["phi_before"])
    for a, b, r in data.instrument_log_returns():
        out[a:b] = np.sign(phi[a:b] * r)
        out[a] = 0.0
    return out
