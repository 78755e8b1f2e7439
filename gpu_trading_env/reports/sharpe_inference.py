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
- The smallest detectable Sharpe ratio of a one-sided test (its power), from the estimate's
  asymptotic variance ``(1 - skew SR + (kurtosis - 1) / 4 SR^2) / n`` (Lo 2002; Mertens 2002),
  and the effective number of independent trials of correlated candidates, Li & Ji (2005),
  Heredity 95.

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
    "DetectableEdge",
    "OverfittingProbability",
    "deflated_sharpe_ratio",
    "detectable_edge",
    "effective_trials",
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
    returns_matrix: np.ndarray, n_blocks: int = 16, *, flat_sharpe: float | None = None
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
    :param flat_sharpe: the Sharpe ratio of a strategy whose returns do not vary within a half
        (0.0: a policy that stays flat, as :func:`~gpu_trading_env.reports.metrics.sharpe`
        rates it); None raises instead.
    :raises ValueError: naming the argument on a wrong shape, NaN/inf, an odd or too large
        ``n_blocks``, or (``flat_sharpe`` None) a strategy whose returns do not vary in a half.
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
        if len(flat) and flat_sharpe is not None:
            sr = (s / k) / np.sqrt(np.where(var <= 1e-12 * scale, 1.0, var))
            return np.where(var <= 1e-12 * scale, float(flat_sharpe), sr)
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


@dataclass(frozen=True)
class DetectableEdge:
    """The smallest Sharpe ratio a one-sided test detects with a given power (its resolution).

    :ivar sharpe: the minimum detectable Sharpe ratio, annualised (``sharpe_per_bar`` times
        ``sqrt(per_year)``).
    :ivar sharpe_per_bar: the same per observation.
    :ivar bars: number of return observations the test reads.
    :ivar level: the test's one-sided level (its false-positive rate with one trial, no parts).
    :ivar power: the probability of passing at ``sharpe``.
    :ivar per_year: observations per year.
    :ivar n_trials: independent trials the test allows for (Sidak: the level per trial is
        ``1 - (1 - level)^(1 / n_trials)``).
    :ivar halves: whether the edge must also be above zero in each half of the bars.
    :ivar last_third_level: the one-sided level the edge must also pass in the last third of
        the bars, or None.
    :ivar false_positive_rate: the probability that every condition passes with no edge.
    """

    sharpe: float
    sharpe_per_bar: float
    bars: int
    level: float
    power: float
    per_year: float
    n_trials: int
    halves: bool
    last_third_level: float | None
    false_positive_rate: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)


def _stacked_pass(u: float, z: np.ndarray, crit: float, halves: bool, z_third: float | None):
    """Share of the draws ``z`` (float [D, 6] standard normals, one per sixth of the bars)
    where every condition passes for a full-window statistic of mean ``u``."""
    sixths = z + u / math.sqrt(6.0)
    ok = sixths.sum(axis=1) / math.sqrt(6.0) > crit
    if halves:
        ok &= (sixths[:, :3].sum(axis=1) > 0.0) & (sixths[:, 3:].sum(axis=1) > 0.0)
    if z_third is not None:
        ok &= sixths[:, 4:].sum(axis=1) / math.sqrt(2.0) > z_third
    return float(np.mean(ok))


def _stacked_statistic(
    power: float, z: np.ndarray, crit: float, halves: bool, z_third: float | None
) -> float:
    """The full-window statistic's mean at which every condition passes with ``power``, by
    bisection (the pass share is monotone in it over fixed draws)."""
    lo, hi = 0.0, crit + _NORMAL.inv_cdf(power) + 10.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        passed = _stacked_pass(mid, z, crit, halves, z_third)
        lo, hi = (mid, hi) if passed < power else (lo, mid)
    return hi


def detectable_edge(
    bars: int,
    per_year: float,
    *,
    level: float = 0.05,
    power: float = 0.80,
    n_trials: int = 1,
    halves: bool = False,
    last_third_level: float | None = None,
    skew: float = 0.0,
    kurtosis: float = 3.0,
    draws: int = 20_000,
) -> DetectableEdge:
    """The smallest true Sharpe ratio that a one-sided test of "Sharpe > 0" over ``bars``
    observations passes with probability ``power``.

    The Sharpe estimate over ``n`` bars is normal with mean ``SR`` and variance ``V(SR) / n``,
    ``V = 1 - skew SR + (kurtosis - 1) / 4 SR^2`` (Lo 2002; Mertens 2002: ``1 + SR^2 / 2`` for
    normal returns); the test passes where the estimate is above ``z V^(1/2) / n^(1/2)`` (a
    bootstrap of the estimate scales by the data's own variance), ``z`` the Sidak quantile of
    ``level`` over ``n_trials`` independent trials. So the statistic ``u = SR sqrt(n / V)`` is
    what decides; alone, ``u = z + Z^-1(power)``. ``halves`` and ``last_third_level`` add the
    conditions that the estimate be above zero in each half and above its one-sided
    ``last_third_level`` bound in the last third: the six sixths' statistics are independent
    normals of mean ``u / sqrt(6)``, and the ``u`` at which all pass with probability ``power``
    is found by bisection over ``draws`` fixed normal draws (power error about 0.3 points).
    ``SR`` then solves ``SR^2 n = u^2 V(SR)``: at power one half, one trial and no parts, the
    Sharpe ratio whose :func:`minimum_track_record_length` at ``1 - level`` is ``n + 1``.
    :param bars: observations n, >= 6; ``per_year``: observations a year, > 0 (annualises).
    :param level: one-sided level of the whole-window test, in (0, 1); ``power``: the
        probability of detection, in (level, 1); ``n_trials``: the trials it allows for, >= 1.
    :param halves: require the estimate above zero in each half too; ``last_third_level``: the
        one-sided level of the last third's test, or None (not required).
    :param skew: skewness of the returns; ``kurtosis``: their raw kurtosis, 3 for a normal.
    :param draws: normal draws of the stacked conditions' power (unused without them).
    :raises ValueError: naming the argument on bad input, or ``bars`` too few for ``power``.
    """
    n = _count("bars", bars, 6)
    per_year = _finite("per_year", per_year)
    if not per_year > 0.0:
        raise ValueError(f"per_year must be > 0, got {per_year!r}")
    level, power = _finite("level", level), _finite("power", power)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if not level < power < 1.0:
        raise ValueError(f"power must be in (level={level!r}, 1), got {power!r}")
    n_trials = _count("n_trials", n_trials, 1)
    if last_third_level is not None and not 0.0 < last_third_level < 1.0:
        raise ValueError(f"last_third_level must be in (0, 1) or None, got {last_third_level!r}")
    _sr_variance_of_estimate(0.0, skew, kurtosis)  # validates the moments
    crit = _NORMAL.inv_cdf((1.0 - level) ** (1.0 / n_trials))
    z_third = None if last_third_level is None else _NORMAL.inv_cdf(1.0 - last_third_level)
    if not halves and z_third is None:
        u, fpr = crit + _NORMAL.inv_cdf(power), 1.0 - (1.0 - level) ** (1.0 / n_trials)
    else:
        z = np.random.default_rng(0).standard_normal((_count("draws", draws, 100), 6))
        u = _stacked_statistic(power, z, crit, halves, z_third)
        fpr = _stacked_pass(0.0, z, crit, halves, z_third)
    # SR^2 n = u^2 (1 - skew SR + (kurtosis - 1) / 4 SR^2): the positive root.
    a = n - u * u * (kurtosis - 1.0) / 4.0
    if not a > 0.0:
        raise ValueError(
            f"bars = {n} is too few for power {power:g} at level {level:g}: the Sharpe "
            "estimate's variance grows faster than its mean"
        )
    b = u * u * skew
    sr = (-b + math.sqrt(b * b + 4.0 * a * u * u)) / (2.0 * a)
    return DetectableEdge(
        sharpe=sr * math.sqrt(per_year),
        sharpe_per_bar=sr,
        bars=n,
        level=level,
        power=power,
        per_year=per_year,
        n_trials=n_trials,
        halves=bool(halves),
        last_third_level=last_third_level,
        false_positive_rate=fpr,
    )


def effective_trials(returns_matrix: np.ndarray) -> int:
    """The effective number of independent trials among correlated strategies (Li & Ji 2005):
    ``sum_i I(l_i >= 1) + (l_i - floor(l_i))`` over the eigenvalues ``l_i`` of the correlation
    matrix of the strategies that vary, rounded up; 1 where none or one varies.

    :param returns_matrix: float [T, N] per-bar returns of N strategies over the same T bars.
    """
    m = np.asarray(returns_matrix, dtype=np.float64)
    if m.ndim != 2:
        raise ValueError(f"returns_matrix must be 2-D [T, N strategies], got shape {m.shape}")
    if not np.isfinite(m).all():
        raise ValueError("returns_matrix must be finite")
    varying = m[:, np.std(m, axis=0) > 0.0]
    if varying.shape[1] < 2 or varying.shape[0] < 2:
        return 1
    # Rounded: the eigenvalue N of N copies comes out a hair under N, which floor would halve.
    eig = np.round(np.abs(np.linalg.eigvalsh(np.corrcoef(varying, rowvar=False))), 9)
    m_eff = float(np.sum((eig >= 1.0) + (eig - np.floor(eig))))
    return max(1, min(varying.shape[1], math.ceil(m_eff - 1e-9)))
