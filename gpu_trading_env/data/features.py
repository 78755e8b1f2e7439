"""The built-in market feature set: 51 causal features computed from the OHLCV bars of one instrument.

Every feature of bar ``t`` is a function of bars ``0..t`` only. Raw indicators use trailing windows
(rolling sums, rolling extrema, forward recursions such as EMAs) and each raw indicator is then
standardised by a trailing rolling z-score over the last ``NORM_WINDOW`` bars (bar ``t`` included),
clipped to ``[-CLIP, CLIP]``. There are no centred windows, no full-sample statistics and no
backward fills, so changing bars after ``t`` leaves the features of bar ``t`` bit-identical (the
test suite checks this).

The first ``WARMUP_BARS`` rows need more history than they have and are NaN; ``MarketData`` drops
them. From row ``WARMUP_BARS`` on every value is finite.

Units: returns are natural-log returns per bar, volatilities are standard deviations of per-bar log
returns, price distances are log ratios; all of that is before the z-score, after which every
feature is dimensionless.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

__all__ = [
    "CLIP",
    "FEATURE_NAMES",
    "NORM_MIN_PERIODS",
    "NORM_WINDOW",
    "RAW_WARMUP_BARS",
    "WARMUP_BARS",
    "compute_features",
    "normalised",
]

FEATURE_NAMES: tuple[str, ...] = (
    # log returns over k bars: log(close_t / close_{t-k})
    "logret_1",
    "logret_2",
    "logret_3",
    "logret_5",
    "logret_10",
    "logret_20",
    "logret_60",
    # realised volatility: std of 1-bar log returns over the window
    "rvol_5",
    "rvol_10",
    "rvol_20",
    "rvol_60",
    # log(close / simple moving average of close)
    "close_sma_5",
    "close_sma_10",
    "close_sma_20",
    "close_sma_50",
    "close_sma_100",
    # log(close / exponential moving average of close), span in bars
    "close_ema_5",
    "close_ema_12",
    "close_ema_26",
    "close_ema_50",
    # Wilder RSI(14) as a fraction in [0, 1]
    "rsi_14",
    # MACD(12, 26, 9) divided by close
    "macd",
    "macd_signal",
    "macd_hist",
    # Bollinger(20, 2): %B and band width / middle band
    "bb_pctb_20",
    "bb_width_20",
    # Wilder ATR(14) / close
    "atr_14",
    # stochastic oscillator %K(14) and its 3-bar mean %D
    "stoch_k_14",
    "stoch_d_14",
    # bar shape: log(high/low), close location value, body and wicks as fractions of high - low
    "hl_range",
    "clv",
    "body",
    "upper_wick",
    "lower_wick",
    # log(open_t / close_{t-1})
    "gap",
    # z-score of log(1 + volume) within the window, and its 1-bar change
    "volume_z_20",
    "volume_z_60",
    "log_volume_change",
    # sample skewness and excess kurtosis of 1-bar log returns
    "skew_20",
    "kurt_20",
    "skew_60",
    "kurt_60",
    # log(close / rolling max high) <= 0 and log(close / rolling min low) >= 0
    "dist_high_20",
    "dist_low_20",
    "dist_high_60",
    "dist_low_60",
    # worst log drawdown from a trailing 60-bar peak seen within the last 60 bars (<= 0)
    "max_drawdown_60",
    # Parkinson high-low volatility estimator over 20 bars
    "parkinson_vol_20",
    # log(rvol_5 / rvol_60)
    "vol_ratio_5_60",
    # lag-1 autocorrelation of 1-bar log returns over 20 bars
    "autocorr_1_20",
    # commodity-channel-style index: (typical price - SMA20) / std20 of the typical price
    "cci_20",
)
assert len(FEATURE_NAMES) == 51

# The longest raw window chain is max_drawdown_60 (a 60-bar rolling min of a 60-bar rolling max:
# first defined at row 118); rows from here on have every raw indicator defined.
RAW_WARMUP_BARS = 120
# Trailing z-score: statistics over the last NORM_WINDOW raw values (the current one included),
# defined once NORM_MIN_PERIODS of them exist, so early rows are not scaled by a handful of points.
NORM_WINDOW = 1000
NORM_MIN_PERIODS = 200
CLIP = 10.0
WARMUP_BARS = RAW_WARMUP_BARS + NORM_MIN_PERIODS
"""Rows ``0..WARMUP_BARS-1`` of ``compute_features`` are NaN; ``MarketData`` drops them."""


def _ratio(num: np.ndarray, den: np.ndarray, fill: float) -> np.ndarray:
    # Degenerate bars (high == low, flat windows) have no defined ratio; a neutral constant keeps
    # them finite without looking at any other bar.
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = num / den
    return np.where(den == 0.0, fill, out)


def _lagged(x: np.ndarray, lag: int) -> np.ndarray:
    out = np.full_like(x, np.nan)
    if lag < len(x):
        out[lag:] = x[: len(x) - lag]
    return out


def _window_moments(x: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Sample skewness and excess kurtosis of ``x`` over trailing windows, float64 [T] each.

    Written as a fixed-order loop over window offsets instead of pandas' ``rolling().skew()``,
    which shifts the whole series by its global mean first: that leaks a (tiny) dependence on
    future values, and we promise bit-identical features under changes to the future.
    """
    n = len(x) - window + 1
    skew = np.full(len(x), np.nan)
    kurt = np.full(len(x), np.nan)
    if n <= 0:
        return skew, kurt
    total = np.zeros(n)
    for j in range(window):
        total += x[j : j + n]
    mean = total / window
    m2 = np.zeros(n)
    m3 = np.zeros(n)
    m4 = np.zeros(n)
    for j in range(window):
        d = x[j : j + n] - mean
        d2 = d * d
        m2 += d2
        m3 += d2 * d
        m4 += d2 * d2
    m2 /= window
    m3 /= window
    m4 /= window
    # Relative threshold: a window of equal returns has m2 that is pure rounding noise.
    flat = m2 <= 1e-24 + 1e-14 * mean * mean
    with np.errstate(divide="ignore", invalid="ignore"):
        skew[window - 1 :] = np.where(flat, 0.0, m3 / m2**1.5)
        kurt[window - 1 :] = np.where(flat, 0.0, m4 / (m2 * m2) - 3.0)
    return skew, kurt


def _window_autocorr(x: np.ndarray, window: int) -> np.ndarray:
    """Pearson correlation of (x_s, x_{s-1}) over the ``window`` pairs ending at t, float64 [T]."""
    out = np.full(len(x), np.nan)
    a = x[1:]
    b = x[:-1]
    n = len(a) - window + 1
    if n <= 0:
        return out
    sa = np.zeros(n)
    sb = np.zeros(n)
    for j in range(window):
        sa += a[j : j + n]
        sb += b[j : j + n]
    ma = sa / window
    mb = sb / window
    sab = np.zeros(n)
    saa = np.zeros(n)
    sbb = np.zeros(n)
    for j in range(window):
        da = a[j : j + n] - ma
        db = b[j : j + n] - mb
        sab += da * db
        saa += da * da
        sbb += db * db
    den = np.sqrt(saa * sbb)
    flat = den <= 1e-24
    with np.errstate(divide="ignore", invalid="ignore"):
        out[window:] = np.where(flat, 0.0, sab / den)
    return out


def _raw_features(
    o: np.ndarray, h: np.ndarray, lo: np.ndarray, c: np.ndarray, v: np.ndarray
) -> Iterator[np.ndarray]:
    """The 51 raw indicators, each float64 [T], NaN where a window is not yet full, one at a
    time: a long series never holds all 51 at once."""
    logc = np.log(c)
    r1 = np.diff(logc, prepend=np.nan)
    r1s = pd.Series(r1)
    rvol = {w: r1s.rolling(w, min_periods=w).std(ddof=0).to_numpy() for w in (5, 10, 20, 60)}
    yield from _trend_features(c, logc, rvol)
    yield from _oscillator_features(h, lo, c)
    yield from _candle_features(o, h, lo, c)
    yield from _volume_features(v)
    yield from _range_features(h, lo, c, logc, r1, rvol)


def _trend_features(
    c: np.ndarray, logc: np.ndarray, rvol: dict[int, np.ndarray]
) -> Iterator[np.ndarray]:
    """Log returns over 7 lags, realised volatility over 4 windows (``rvol``, by window), the
    log distance to 5 moving averages and to 4 exponential ones."""
    cs = pd.Series(c)
    for k in (1, 2, 3, 5, 10, 20, 60):
        yield logc - _lagged(logc, k)
    yield from rvol.values()

    for w in (5, 10, 20, 50, 100):
        yield logc - np.log(cs.rolling(w, min_periods=w).mean().to_numpy())
    for span in (5, 12, 26, 50):
        yield logc - np.log(cs.ewm(span=span, adjust=False).mean().to_numpy())


def _oscillator_features(h: np.ndarray, lo: np.ndarray, c: np.ndarray) -> Iterator[np.ndarray]:
    """RSI, MACD (line, signal, histogram), Bollinger position and width, ATR, stochastic %K
    and %D."""
    cs = pd.Series(c)
    hs = pd.Series(h)
    ls = pd.Series(lo)
    dc = cs.diff()
    gain = dc.clip(lower=0.0).ewm(alpha=1.0 / 14, adjust=False).mean().to_numpy()
    loss = (-dc).clip(lower=0.0).ewm(alpha=1.0 / 14, adjust=False).mean().to_numpy()
    yield _ratio(gain, gain + loss, 0.5)

    ema12 = cs.ewm(span=12, adjust=False).mean().to_numpy()
    ema26 = cs.ewm(span=26, adjust=False).mean().to_numpy()
    macd = (ema12 - ema26) / c
    signal = pd.Series(macd).ewm(span=9, adjust=False).mean().to_numpy()
    yield from (macd, signal, macd - signal)

    mid = cs.rolling(20, min_periods=20).mean().to_numpy()
    sd = cs.rolling(20, min_periods=20).std(ddof=0).to_numpy()
    yield _ratio(c - (mid - 2.0 * sd), 4.0 * sd, 0.5)
    yield 4.0 * sd / mid

    prev_c = _lagged(c, 1)
    tr = np.fmax(h - lo, np.fmax(np.abs(h - prev_c), np.abs(lo - prev_c)))
    yield pd.Series(tr).ewm(alpha=1.0 / 14, adjust=False).mean().to_numpy() / c

    hh14 = hs.rolling(14, min_periods=14).max().to_numpy()
    ll14 = ls.rolling(14, min_periods=14).min().to_numpy()
    stoch_k = _ratio(c - ll14, hh14 - ll14, 0.5)
    stoch_k = np.where(np.isnan(hh14), np.nan, stoch_k)
    yield stoch_k
    yield pd.Series(stoch_k).rolling(3, min_periods=3).mean().to_numpy()


def _candle_features(
    o: np.ndarray, h: np.ndarray, lo: np.ndarray, c: np.ndarray
) -> Iterator[np.ndarray]:
    """The bar's log range, close location, body, upper and lower wicks, and the opening gap."""
    prev_c = _lagged(c, 1)
    rng = h - lo
    yield np.log(h / lo)
    yield _ratio((c - lo) - (h - c), rng, 0.0)
    yield _ratio(c - o, rng, 0.0)
    yield _ratio(h - np.maximum(o, c), rng, 0.0)
    yield _ratio(np.minimum(o, c) - lo, rng, 0.0)
    yield np.log(o / prev_c)


def _volume_features(v: np.ndarray) -> Iterator[np.ndarray]:
    """The log volume's z-score over 20 and 60 bars and its change."""
    # log1p keeps zero-volume bars finite.
    lv = np.log1p(v)
    lvs = pd.Series(lv)
    for w in (20, 60):
        m = lvs.rolling(w, min_periods=w).mean().to_numpy()
        s = lvs.rolling(w, min_periods=w).std(ddof=0).to_numpy()
        z = _ratio(lv - m, s, 0.0)
        yield np.where(np.isnan(m), np.nan, z)
    yield np.diff(lv, prepend=np.nan)


def _range_features(
    h: np.ndarray,
    lo: np.ndarray,
    c: np.ndarray,
    logc: np.ndarray,
    r1: np.ndarray,
    rvol: dict[int, np.ndarray],
) -> Iterator[np.ndarray]:
    """Return skew and kurtosis, distance to the high and low of 20 and 60 bars, the worst
    drawdown, Parkinson volatility, the volatility ratio, autocorrelation and the CCI."""
    hs = pd.Series(h)
    ls = pd.Series(lo)
    for w in (20, 60):
        sk, ku = _window_moments(r1, w)
        yield from (sk, ku)

    for w in (20, 60):
        yield logc - np.log(hs.rolling(w, min_periods=w).max().to_numpy())
        yield logc - np.log(ls.rolling(w, min_periods=w).min().to_numpy())

    logcs = pd.Series(logc)
    drawdown = logcs - logcs.rolling(60, min_periods=60).max()
    yield drawdown.rolling(60, min_periods=60).min().to_numpy()

    hl2 = pd.Series(np.log(h / lo) ** 2)
    yield np.sqrt(hl2.rolling(20, min_periods=20).mean().to_numpy() / (4.0 * np.log(2.0)))

    with np.errstate(divide="ignore", invalid="ignore"):
        vr = np.log(rvol[5] / rvol[60])
    yield np.where((rvol[5] == 0.0) | (rvol[60] == 0.0), 0.0, vr)

    yield _window_autocorr(r1, 20)

    tp = pd.Series((h + lo + c) / 3.0)
    tp_mean = tp.rolling(20, min_periods=20).mean().to_numpy()
    tp_sd = tp.rolling(20, min_periods=20).std(ddof=0).to_numpy()
    cci = _ratio(tp.to_numpy() - tp_mean, tp_sd, 0.0)
    yield np.where(np.isnan(tp_mean), np.nan, cci)


def compute_features(
    open: np.ndarray,
    high: np.ndarray,
    low: np.ndarray,
    close: np.ndarray,
    volume: np.ndarray,
) -> np.ndarray:
    """The built-in feature set of ONE instrument.

    Args:
        open, high, low, close: prices per bar, float [T], positive, in any one currency unit.
        volume: traded volume per bar, float [T], non-negative.
        The bars must already be validated (``MarketData`` does that) and sorted in time.

    Returns:
        float32 [T, 51], columns in ``FEATURE_NAMES`` order. Rows ``0..WARMUP_BARS-1`` are NaN;
        every later value is finite and lies in ``[-CLIP, CLIP]``. Row ``t`` depends on bars
        ``0..t`` only.
    """
    arrays = [np.asarray(x, dtype=np.float64) for x in (open, high, low, close, volume)]
    t = len(arrays[0])
    if any(a.ndim != 1 or len(a) != t for a in arrays):
        raise ValueError(
            "compute_features: open, high, low, close, volume must be 1-D of one length"
        )
    o, h, lo, c, v = arrays

    # [T, F] filled column by column as the raw indicators come: no [F, T] copy to transpose.
    out = np.empty((t, len(FEATURE_NAMES)), dtype=np.float32)
    j = -1
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for j, raw in enumerate(_raw_features(o, h, lo, c, v)):
            out[:, j] = normalised(raw)
    assert j == len(FEATURE_NAMES) - 1
    assert all(np.isfinite(out[a : a + 65536]).all() for a in range(WARMUP_BARS, t, 65536))
    return out


def normalised(col: np.ndarray) -> np.ndarray:
    """One raw indicator, float64 [T], as its trailing rolling z-score, clipped (the module doc):
    float64 [T], NaN on rows ``0..WARMUP_BARS-1``, row ``t`` from rows ``RAW_WARMUP_BARS..t``.
    A trader's own columns (``extra_features``) are normalised by it too."""
    # Column by column on contiguous 1-D arrays: pandas rolls a Series about twice as fast as a
    # 2-D frame, and the elementwise work stays cache-friendly.
    raw = np.array(col, dtype=np.float64)
    raw[:RAW_WARMUP_BARS] = np.nan
    # Past the raw warm-up a NaN or inf can only come from degenerate data (e.g. a window of
    # equal prices); replacing it elementwise keeps causality, a fill along time would not.
    tail = raw[RAW_WARMUP_BARS:]
    tail[~np.isfinite(tail)] = 0.0
    roll = pd.Series(raw).rolling(NORM_WINDOW, min_periods=NORM_MIN_PERIODS)
    mean = roll.mean().to_numpy()
    std = roll.std(ddof=0).to_numpy()
    z = (raw - mean) / std
    # A (nearly) constant trailing window carries no information: 0 instead of noise / 0.
    flat = ~(std > 1e-12 * np.maximum(np.abs(mean), 1e-300))
    z[flat] = 0.0
    np.clip(z, -CLIP, CLIP, out=z)
    z[:WARMUP_BARS] = np.nan
    tail = z[WARMUP_BARS:]
    tail[~np.isfinite(tail)] = 0.0
    return z
