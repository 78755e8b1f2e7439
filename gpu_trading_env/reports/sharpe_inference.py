"""Inference on Sharpe ratios: probabilistic and deflated Sharpe ratios, minimum track record
length and the probability of backtest overfitting.

Every Sharpe ratio here is per observation (mean / std of per-bar returns, not annualised), and
``kurtosis`` is the raw (non-excess) fourth standardised moment, 3 for a normal distribution.

- PSR, Bailey & López de Prado (2012), "The Sharpe Ratio Efficient Frontier", J. Risk 15(2):
  ``PSR(SR*) = Phi((SR - SR*) sqrt(n - 1) / sqrt(1 - skew SR + (kurtosis - 1) / 4 SR^2))``.
- MinTRL, same paper: ``1 + (1 - skew SR + (kurtosis - 1) / 4 SR^2) (Z_conf / (SR - SR*))^2``.
- Expected maximum Sharpe ratio of N null trials, Bailey & López de Prado (2014), "The Deflated
  Sharpe Ratio", J. Portfolio Management 40(5):
  ``SR0 = sqrt(V) ((1 - gamma) Z^-1(1 - 1/N) + gamma Z^-1(1 - 1/(N e)))``, gamma the
  Euler-Mascheroni constant; the DSR is ``PSR(SR0)``.
- PBO by combinatorially symmetric cross-validation (CSCV), Bailey, Borwein, López de Prado &
  Zhu (2014/2017), "The Probability of Backtest Overfitting", J. Computational Finance.

The normal CDF and its inverse are the standard library's ``statistics.NormalDist``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from itertools import combinations
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = [
    "EULER_MASCHERONI",
    "DeflatedSharpe",
    "OverfittingProbability",
    "deflated_sharpe_ratio",
    "expected_max_sharpe",
    "minimum_track_record_length",
    "probabilistic_sharpe_ratio",
    "probability_of_backtest_overfitting",
    "return_moments",
]

EULER_MASCHERONI = 0.5772156649015329
_NORMAL = NormalDist()


def _finite(name: str, value: float) -> float:
    """``value`` as a float, or a ValueError naming ``name`` when it is NaN or infinite."""
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {x!r}")
    return x


def _count(name: str, value: int, minimum: int) -> int:
    """``value`` as an int at least ``minimum``, or a ValueError naming ``name``."""
    if isinstance(value, bool) or not float(value).is_integer() or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _sr_variance_of_estimate(sr: float, skew: float, kurtosis: float) -> float:
    """``1 - skew SR + (kurtosis - 1) / 4 SR^2``: (n - 1) times the variance of the SR estimate."""
    skew = _finite("skew", skew)
    kurtosis = _finite("kurtosis", kurtosis)
    # Any distribution has kurtosis >= 1 + skew^2; below it the moments are not a distribution's.
    if kurtosis < 1.0 + skew * skew - 1e-12:
        raise ValueError(
            f"kurtosis must be the raw kurtosis, at least 1 + skew**2 = {1.0 + skew * skew:g} "
            f"(3 for a normal distribution), got {kurtosis!r}"
        )
    return 1.0 - skew * sr + (kurtosis - 1.0) / 4.0 * sr * sr


def return_moments(returns: np.ndarray) -> tuple[float, int, float, float]:
    """Per-observation Sharpe ratio, count, skewness and raw kurtosis of a returns series.

    :param returns: float [T] per-bar returns, finite, T >= 2, not all equal.
    :returns: ``(sr, n, skew, kurtosis)`` with ``sr = mean / std`` (ddof 1), ``skew = m3 / m2^1.5``
        and ``kurtosis = m4 / m2^2`` (population central moments ``m_k``; 3 for a normal).
    :raises ValueError: on a NaN or infinite return, fewer than 2 returns or returns that do not
        vary.
    """
    r = np.asarray(returns, dtype=np.float64).ravel()
    bad = np.flatnonzero(~np.isfinite(r))
    if len(bad):
        raise ValueError(
            f"returns must be finite, got {float(r[bad[0]])!r} at position {int(bad[0])}"
        )
    if len(r) < 2:
        raise ValueError(f"returns must hold at least 2 values, got {len(r)}")
    d = r - r.mean()
    m2 = float(np.mean(d**2))
    if not m2 > 0.0:
        raise ValueError(
            "returns must vary: all values are equal, so the Sharpe ratio is undefined"
        )
    sr = float(r.mean() / np.std(r, ddof=1))
    return sr, len(r), float(np.mean(d**3) / m2**1.5), float(np.mean(d**4) / m2**2)


def probabilistic_sharpe_ratio(
    sr: float, sr_benchmark: float, n: int, skew: float = 0.0, kurtosis: float = 3.0
) -> float:
    """Probability that the true Sharpe ratio exceeds ``sr_benchmark`` (Bailey & López de Prado
    2012): ``Phi((sr - sr*) sqrt(n - 1) / sqrt(1 - skew sr + (kurtosis - 1) / 4 sr^2))``.

    :param sr: observed Sharpe ratio per observation (not annualised).
    :param sr_benchmark: the threshold ``sr*``, per observation.
    :param n: number of return observations, >= 2.
    :param skew: skewness of the returns.
    :param kurtosis: raw (non-excess) kurtosis of the returns, 3 for a normal distribution; an
        excess kurtosis here understates the estimate's variance.
    :returns: a probability in [0, 1].
    :raises ValueError: naming the argument on NaN/inf, ``n < 2`` or ``kurtosis < 1 + skew^2``.
    """
    sr = _finite("sr", sr)
    sr_benchmark = _finite("sr_benchmark", sr_benchmark)
    n = _count("n", n, 2)
    spread = _sr_variance_of_estimate(sr, skew, kurtosis)
    if not spread > 0.0:
        raise ValueError(
            f"1 - skew*sr + (kurtosis - 1)/4*sr**2 must be positive, got {spread!r} "
            f"(sr={sr!r}, skew={skew!r}, kurtosis={kurtosis!r})"
        )
    return _NORMAL.cdf((sr - sr_benchmark) * math.sqrt(n - 1) / math.sqrt(spread))


def expected_max_sharpe(n_trials: int, sr_variance: float) -> float:
    """Expected maximum of ``n_trials`` Sharpe ratios whose true value is 0 (Bailey & López de
    Prado 2014): ``sqrt(V) ((1 - gamma) Z^-1(1 - 1/N) + gamma Z^-1(1 - 1/(N e)))``.

    :param n_trials: number of independent trials N, >= 1; one trial's expected value is 0 (the
        mean of the null), where the formula's ``Z^-1(0)`` is undefined.
    :param sr_variance: variance V of the trials' Sharpe ratios (per observation, squared), >= 0.
    :returns: the expected maximum Sharpe ratio SR0, per observation.
    :raises ValueError: naming the argument on NaN/inf, ``n_trials < 1`` or ``sr_variance < 0``.
    """
    n_trials = _count("n_trials", n_trials, 1)
    v = _finite("sr_variance", sr_variance)
    if v < 0.0:
        raise ValueError(f"sr_variance must be >= 0, got {sr_variance!r}")
    if n_trials == 1:
        return 0.0
    g = EULER_MASCHERONI
    z = (1.0 - g) * _NORMAL.inv_cdf(1.0 - 1.0 / n_trials) + g * _NORMAL.inv_cdf(
        1.0 - 1.0 / (n_trials * math.e)
    )
    return math.sqrt(v) * z


@dataclass(frozen=True)
class DeflatedSharpe:
    """A deflated Sharpe ratio and what it was computed from (Sharpe ratios per observation).

    :ivar dsr: ``PSR(sr0)``, the probability that the true Sharpe ratio exceeds ``sr0``.
    :ivar sr: the observed Sharpe ratio.
    :ivar sr0: the expected maximum Sharpe ratio of ``n_trials`` null trials.
    :ivar n: number of return observations.
    :ivar skew: skewness of the returns.
    :ivar kurtosis: raw kurtosis of the returns (3 for a normal).
    :ivar n_trials: number of trials the strategy was selected from.
    :ivar sr_variance: variance of the trials' Sharpe ratios.
    """

    dsr: float
    sr: float
    sr0: float
    n: int
    skew: float
    kurtosis: float
    n_trials: int
    sr_variance: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)


def deflated_sharpe_ratio(
    returns_or_sr: np.ndarray | float,
    n: int | None = None,
    skew: float | None = None,
    kurtosis: float | None = None,
    *,
    n_trials: int,
    sr_variance: float,
) -> DeflatedSharpe:
    """Deflated Sharpe ratio (Bailey & López de Prado 2014): the PSR against the expected
    maximum Sharpe ratio of ``n_trials`` null trials, ``DSR = PSR(expected_max_sharpe(N, V))``.

    :param returns_or_sr: either float [T] per-bar returns of the selected strategy (then ``n``,
        ``skew`` and ``kurtosis`` are computed from them and must be None), or its observed
        Sharpe ratio per observation (then ``n`` is required; ``skew`` defaults to 0 and
        ``kurtosis`` to 3, the raw kurtosis of a normal).
    :param n_trials: number of independent trials the strategy was selected from, >= 1.
    :param sr_variance: variance of the trials' Sharpe ratios (per observation), >= 0.
    :raises ValueError: naming the argument on bad input (see the functions it calls).
    """
    if np.ndim(returns_or_sr) == 0:
        if n is None:
            raise ValueError("n must be given with a Sharpe ratio, got None")
        sr = _finite("returns_or_sr", returns_or_sr)
        skew = 0.0 if skew is None else _finite("skew", skew)
        kurtosis = 3.0 if kurtosis is None else _finite("kurtosis", kurtosis)
    else:
        given = {"n": n, "skew": skew, "kurtosis": kurtosis}
        for name, value in given.items():
            if value is not None:
                raise ValueError(f"{name} is computed from the returns; pass None, got {value!r}")
        sr, n, skew, kurtosis = return_moments(np.asarray(returns_or_sr))
    sr0 = expected_max_sharpe(n_trials, sr_variance)
    dsr = probabilistic_sharpe_ratio(sr, sr0, n, skew, kurtosis)
    return DeflatedSharpe(
        dsr=dsr,
        sr=sr,
        sr0=sr0,
        n=int(n),
        skew=float(skew),
        kurtosis=float(kurtosis),
        n_trials=int(n_trials),
        sr_variance=float(sr_variance),
    )


def minimum_track_record_length(
    sr: float,
    sr_benchmark: float,
    skew: float = 0.0,
    kurtosis: float = 3.0,
    confidence: float = 0.95,
) -> float:
    """Observations needed for ``PSR(sr_benchmark) >= confidence`` (Bailey & López de Prado
    2012): ``1 + (1 - skew sr + (kurtosis - 1) / 4 sr^2) (Z^-1(confidence) / (sr - sr*))^2``.

    :param sr: observed Sharpe ratio per observation, > ``sr_benchmark``.
    :param sr_benchmark: the threshold ``sr*``, per observation.
    :param skew: skewness of the returns.
    :param kurtosis: raw (non-excess) kurtosis, 3 for a normal distribution.
    :param confidence: the required probability, in (0, 1).
    :returns: the minimum track record length in observations (not rounded).
    :raises ValueError: naming the argument on NaN/inf, ``sr <= sr_benchmark``, a confidence
        outside (0, 1) or ``kurtosis < 1 + skew^2``.
    """
    sr = _finite("sr", sr)
    sr_benchmark = _finite("sr_benchmark", sr_benchmark)
    confidence = _finite("confidence", confidence)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if not sr > sr_benchmark:
        raise ValueError(
            f"sr must exceed sr_benchmark={sr_benchmark!r} for a finite track record, got {sr!r}"
        )
    spread = _sr_variance_of_estimate(sr, skew, kurtosis)
    return 1.0 + spread * (_NORMAL.inv_cdf(confidence) / (sr - sr_benchmark)) ** 2


@dataclass(frozen=True)
class OverfittingProbability:
    """The probability of backtest overfitting by CSCV and its logit distribution.

    :ivar pbo: fraction of the splits whose in-sample best strategy ranks at or below the
        out-of-sample median (logit <= 0).
    :ivar logits: float64 [n_splits]: ``ln(w / (1 - w))`` per split, ``w`` the out-of-sample
        relative rank (rank / (N + 1), rank 1 the worst) of the in-sample best strategy.
    :ivar n_blocks: the number of row blocks S.
    :ivar n_splits: the number of splits, ``C(S, S/2)``.
    :ivar n_strategies: N, the columns.
    :ivar n_observations: T, the rows.
    """

    pbo: float
    logits: np.ndarray
    n_blocks: int
    n_splits: int
    n_strategies: int
    n_observations: int

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (``logits`` as a list)."""
        out = asdict(self)
        out["logits"] = [float(x) for x in self.logits]
        return out


def probability_of_backtest_overfitting(
    returns_matrix: np.ndarray, n_blocks: int = 16
) -> OverfittingProbability:
    """Probability of backtest overfitting by combinatorially symmetric cross-validation
    (Bailey, Borwein, López de Prado & Zhu 2014).

    The T rows are cut into ``n_blocks`` consecutive blocks (sizes differing by at most one, no
    row left out); every choice of half the blocks is an in-sample set, the other half its
    out-of-sample set. Per split, the strategy with the best in-sample Sharpe ratio is ranked
    out of sample; PBO is the fraction of splits where it lands at or below the median.

    :param returns_matrix: float [T, N] per-bar returns of N >= 2 strategies over the same T bars,
        finite, with ``T >= 2 * n_blocks``.
    :param n_blocks: S, even, >= 2.
    :raises ValueError: naming the argument on a wrong shape, NaN/inf, an odd or too large
        ``n_blocks``, or a strategy whose returns do not vary within a half.
    """
    m = np.asarray(returns_matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[1] < 2:
        raise ValueError(
            f"returns_matrix must be 2-D [T, N strategies] with N >= 2, got shape {m.shape}"
        )
    bad = np.argwhere(~np.isfinite(m))
    if len(bad):
        t, j = (int(x) for x in bad[0])
        raise ValueError(
            f"returns_matrix must be finite, got {float(m[t, j])!r} at row {t}, column {j}"
        )
    n_blocks = _count("n_blocks", n_blocks, 2)
    t_rows, n_strat = m.shape
    if n_blocks % 2 or 2 * n_blocks > t_rows:
        raise ValueError(
            f"n_blocks must be even and at most T/2 = {t_rows // 2} (blocks of >= 2 rows), "
            f"got {n_blocks}"
        )
    blocks = np.array_split(np.arange(t_rows), n_blocks)
    counts = np.array([len(b) for b in blocks], dtype=np.float64)
    sums = np.stack([m[b].sum(axis=0) for b in blocks])  # [S, N]
    squares = np.stack([(m[b] ** 2).sum(axis=0) for b in blocks])  # [S, N]
    chosen = np.zeros((math.comb(n_blocks, n_blocks // 2), n_blocks), dtype=np.float64)
    for i, combo in enumerate(combinations(range(n_blocks), n_blocks // 2)):
        chosen[i, list(combo)] = 1.0

    def sharpe_of(mask: np.ndarray, half: str) -> np.ndarray:
        """[splits, N] Sharpe ratios (ddof 1) of the rows the block mask selects."""
        k = (mask @ counts)[:, None]
        s, q = mask @ sums, mask @ squares
        var = (q - s * s / k) / (k - 1.0)
        scale = np.maximum(q / k, 1e-300)
        flat = np.argwhere(var <= 1e-12 * scale)
        if len(flat):
            raise ValueError(
                f"returns_matrix column {int(flat[0][1])} does not vary in an {half} half "
                f"(split {int(flat[0][0])}): its Sharpe ratio is undefined"
            )
        return (s / k) / np.sqrt(var)

    is_sr = sharpe_of(chosen, "in-sample")
    oos_sr = sharpe_of(1.0 - chosen, "out-of-sample")
    best = np.argmax(is_sr, axis=1)
    best_oos = oos_sr[np.arange(len(best)), best]
    rank = 1.0 + np.sum(oos_sr < best_oos[:, None], axis=1)  # 1 = the worst out of sample
    w = rank / (n_strat + 1.0)
    logits = np.log(w / (1.0 - w))
    return OverfittingProbability(
        pbo=float(np.mean(logits <= 0.0)),
        logits=logits,
        n_blocks=n_blocks,
        n_splits=len(logits),
        n_strategies=n_strat,
        n_observations=t_rows,
    )
