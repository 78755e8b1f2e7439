"""A hidden Markov model of per-bar log returns: fitted by EM, run forward as a filter.

Markets that switch between regimes (bull, bear, sideways) carry their edge in a hidden state
that persists for hundreds of bars, which the indicator features do not summarise and a filter
fitted on the training bars does (experiments/README.md, "The regime market"). This module holds that
model:

- :func:`fit_gaussian_hmm`: Baum-Welch on one series of log returns (or several, one per
  instrument), regimes ordered by their mean; with ``dof="fit"`` the regimes' errors are
  Student-t, their shared degrees of freedom estimated (a Gaussian where the tails are thin);
- :func:`fit_regime_model`: that Student-t fit for each number of regimes in a set, the one of
  the lowest BIC kept (markets of 2 or 4 regimes, or fat-tailed errors, are not 3 Gaussians);
- :func:`predicted_regimes`: the forward filter, ``P(regime_{t+1} = k | r_1..r_t)`` for every
  bar, so that row ``t`` uses bars ``<= t`` only.
- :func:`expected_next_returns`: that filter's forecast of the next log return at every row of
  a ``MarketData``, each instrument its own chain (the input selection's forecast with fitted
  parameters, the zoo's regime reference with the generator's true ones).

Both recursions are linear in the unnormalised probabilities (``alpha_t = alpha_{t-1} A
diag(lik_t)``), so they are computed as a blocked scan: products of the per-bar matrices within
blocks of :data:`SCAN_BLOCK` bars, vectorised over the blocks, then one pass over the blocks. A
16,000-bar series takes milliseconds an EM iteration in NumPy instead of a Python loop over the
bars. Any positive factor on a bar's row drops out where it is normalised, so every product is
rescaled as it is formed and nothing under- or overflows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from gpu_trading_env.data.market_data import MarketData

__all__ = [
    "RESCALE_EVERY",
    "SCAN_BLOCK",
    "GaussianHMM",
    "expected_next_returns",
    "fit_gaussian_hmm",
    "fit_regime_model",
    "predicted_regimes",
]

SCAN_BLOCK = 128
# A bar's matrix has entries <= 1 and a largest entry >= the regime's probability of staying,
# and a product of n of them no entry below the smallest transition probability to the n-th
# power: rescaled every 16 bars, nothing comes near float64's range (about 1e-308).
RESCALE_EVERY = 16
# A regime's volatility is kept above this fraction of the series' own: without a floor EM can
# shrink one regime onto a few nearly equal returns and its likelihood grows without bound.
SIGMA_FLOOR = 0.05
# Degrees of freedom the Student-t fit chooses from (inf: Gaussian); a grid, since the
# M-step's objective in the degrees of freedom is one-dimensional and flat near the optimum.
DOF_GRID = (2.5, 3.0, 4.0, 6.0, 10.0, 30.0, math.inf)
# Numbers of regimes fit_regime_model compares.
REGIME_COUNTS = (2, 3, 4)
# fit_regime_model's stopping rule (log-likelihood gain per bar): BICs differ by tens of nats
# where a number of regimes is wrong, and a model with a regime too many creeps on for all its
# iterations at fit_gaussian_hmm's default tolerance.
COMPARE_TOLERANCE = 1e-5
# Bars of the moving average that fit_regime_model's second start groups bars by (regimes last
# hundreds of bars; a shorter average is mostly noise).
TREND_WINDOW = 100
# EM iterations each of fit_regime_model's two starts runs before the likelier one goes on.
SCOUT_ITERATIONS = 4


@dataclass(frozen=True)
class GaussianHMM:
    """A fitted model: regime ``k`` has per-bar log-return mean ``mus[k]`` and scale
    ``sigmas[k]`` (float64 [K], ``mus`` ascending where fitted); ``transition[i, j]`` is
    ``P(regime_{t+1} = j | regime_t = i)`` (float64 [K, K], rows sum to 1); ``initial`` the first
    bar's regime probabilities (float64 [K]). ``dof``: the errors' law, ``math.inf`` Gaussian
    (``sigmas`` the standard deviations), else Student-t with ``dof`` degrees of freedom shared
    by the regimes (a Gaussian scale mixture; ``sigmas`` the t's scales)."""

    mus: np.ndarray
    sigmas: np.ndarray
    transition: np.ndarray
    initial: np.ndarray
    log_likelihood: float
    iterations: int
    dof: float = math.inf

    @property
    def n_parameters(self) -> int:
        """Free parameters (means, scales, transitions, initial probabilities, the degrees of
        freedom where fitted), for the BIC."""
        k = len(self.mus)
        return 2 * k + k * (k - 1) + (k - 1) + (0 if math.isinf(self.dof) else 1)

    def bic(self, n_bars: int) -> float:
        """Schwarz's criterion ``-2 log L + n_parameters * log(n_bars)`` (lower is better)."""
        return -2.0 * self.log_likelihood + self.n_parameters * math.log(n_bars)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready parameters (``dof`` None for Gaussian errors: JSON has no infinity)."""
        return {
            "mus": self.mus.tolist(),
            "sigmas": self.sigmas.tolist(),
            "transition": self.transition.tolist(),
            "initial": self.initial.tolist(),
            "log_likelihood": self.log_likelihood,
            "iterations": self.iterations,
            "dof": None if math.isinf(self.dof) else float(self.dof),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GaussianHMM:
        """The inverse of :meth:`to_dict`; a dict without ``dof`` (files written before the
        Student-t errors) is a Gaussian model.

        :raises ValueError: where ``dof`` is not None or a number > 0.
        """
        dof = d.get("dof")
        dof = math.inf if dof is None else float(dof)
        if not dof > 0.0:
            raise ValueError(f"dof = {d.get('dof')!r} is invalid: allowed is None or a number > 0")
        return cls(
            mus=np.asarray(d["mus"], dtype=np.float64),
            sigmas=np.asarray(d["sigmas"], dtype=np.float64),
            transition=np.asarray(d["transition"], dtype=np.float64),
            initial=np.asarray(d["initial"], dtype=np.float64),
            log_likelihood=float(d["log_likelihood"]),
            iterations=int(d["iterations"]),
            dof=dof,
        )


def _prefix_products(start: np.ndarray, mats: np.ndarray) -> np.ndarray:
    """Rows ``v_t = v_{t-1} @ mats[t-1]`` from ``v_0 = start``, each normalised to sum 1:
    float64 [n + 1, K] for ``mats`` [n, K, K] with non-negative entries."""
    n, k, _ = mats.shape
    out = np.empty((n + 1, k))
    out[0] = start / start.sum()
    if n == 0:
        return out
    blocks = -(-n // SCAN_BLOCK)
    padded = np.broadcast_to(np.eye(k), (blocks * SCAN_BLOCK, k, k)).copy()
    padded[:n] = mats
    padded = padded.reshape(blocks, SCAN_BLOCK, k, k)
    local = np.empty_like(padded)
    local[:, 0] = padded[:, 0] / padded[:, 0].max(axis=(1, 2), keepdims=True)
    for j in range(1, SCAN_BLOCK):
        np.matmul(local[:, j - 1], padded[:, j], out=local[:, j])
        if j % RESCALE_EVERY == 0:
            local[:, j] /= local[:, j].max(axis=(1, 2), keepdims=True)
    carry = np.empty((blocks, k))
    carry[0] = out[0]
    for b in range(1, blocks):
        v = carry[b - 1] @ local[b - 1, -1]
        carry[b] = v / v.sum()
    rows = np.einsum("bi,bjik->bjk", carry, local).reshape(blocks * SCAN_BLOCK, k)[:n]
    out[1:] = rows / rows.sum(axis=1, keepdims=True)
    return out


def _log_densities(
    r: np.ndarray, mus: np.ndarray, sigmas: np.ndarray, dof: float = math.inf
) -> np.ndarray:
    """Per-bar log densities under each regime (float64 [T, K]): Gaussian for ``dof`` inf,
    else Student-t of location ``mus``, scale ``sigmas`` and ``dof`` degrees of freedom."""
    z2 = ((r[:, None] - mus[None, :]) / sigmas[None, :]) ** 2
    if math.isinf(dof):
        return -0.5 * z2 - np.log(sigmas)[None, :] - 0.5 * math.log(2.0 * math.pi)
    const = math.lgamma(0.5 * (dof + 1.0)) - math.lgamma(0.5 * dof) - 0.5 * math.log(dof * math.pi)
    return const - np.log(sigmas)[None, :] - 0.5 * (dof + 1.0) * np.log1p(z2 / dof)


def _likelihoods(
    r: np.ndarray, mus: np.ndarray, sigmas: np.ndarray, dof: float = math.inf
) -> tuple[np.ndarray, np.ndarray]:
    """Per-bar likelihoods under each regime, each row divided by its largest entry
    (float64 [T, K]), and the log of that divisor (float64 [T])."""
    loglik = _log_densities(r, mus, sigmas, dof)
    top = loglik.max(axis=1)
    return np.exp(loglik - top[:, None]), top


def _forward_backward(
    r: np.ndarray,
    mus: np.ndarray,
    sigmas: np.ndarray,
    trans: np.ndarray,
    initial: np.ndarray,
    dof: float = math.inf,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Posterior regime probabilities (float64 [T, K]), expected transition counts (float64
    [K, K]) and the log-likelihood of one series."""
    lik, offset = _likelihoods(r, mus, sigmas, dof)
    # alpha_t ∝ P(regime_t, r_1..r_t); beta_t ∝ P(r_{t+1}..r_T | regime_t).
    alpha = _prefix_products(initial * lik[0], trans[None, :, :] * lik[1:, None, :])
    beta_rev = _prefix_products(
        np.ones(len(mus)), (trans[None, :, :] * lik[:0:-1, None, :]).transpose(0, 2, 1)
    )
    beta = beta_rev[::-1]
    gamma = alpha * beta
    gamma /= gamma.sum(axis=1, keepdims=True)
    xi = alpha[:-1, :, None] * trans[None] * (lik[1:] * beta[1:])[:, None, :]
    xi /= xi.sum(axis=(1, 2), keepdims=True)
    # log P(r_t | r_1..r_{t-1}) from the normalised forward rows.
    step = np.empty(len(r))
    step[0] = (initial * lik[0]).sum()
    step[1:] = ((alpha[:-1] @ trans) * lik[1:]).sum(axis=1)
    return gamma, xi.sum(axis=0), float(np.log(step).sum() + offset.sum())


def _check_returns(returns: np.ndarray | Sequence[np.ndarray], n_regimes: int) -> list[np.ndarray]:
    """The non-empty float64 series of ``returns``; ValueError naming what is wrong."""
    series = [returns] if isinstance(returns, np.ndarray) else list(returns)
    series = [np.asarray(s, dtype=np.float64).ravel() for s in series]
    series = [s for s in series if len(s) > 0]
    if not isinstance(n_regimes, int) or n_regimes < 2:
        raise ValueError(f"n_regimes = {n_regimes!r} is invalid: allowed is an int >= 2")
    total = sum(len(s) for s in series)
    if total < 10 * n_regimes:
        raise ValueError(
            f"returns has {total} bars: allowed is at least {10 * n_regimes} for {n_regimes} regimes"
        )
    for s in series:
        if not np.isfinite(s).all():
            raise ValueError("returns holds non-finite values: allowed are finite log returns")
    if float(np.concatenate(series).std()) == 0.0:
        raise ValueError("returns is constant: a regime model needs returns that vary")
    return series


def _best_dof(flat: np.ndarray, gamma: np.ndarray, mus: np.ndarray, sigmas: np.ndarray) -> float:
    """The grid's degrees of freedom of the highest expected complete-data log-likelihood."""
    scores = [np.einsum("tk,tk->", gamma, _log_densities(flat, mus, sigmas, d)) for d in DOF_GRID]
    return DOF_GRID[int(np.argmax(scores))]


def fit_gaussian_hmm(
    returns: np.ndarray | Sequence[np.ndarray],
    n_regimes: int = 3,
    *,
    max_iterations: int = 60,
    tolerance: float = 1e-8,
    dof: float | str = math.inf,
    start: GaussianHMM | None = None,
) -> GaussianHMM:
    """Baum-Welch (EM) fit of a ``n_regimes``-state HMM to per-bar log returns.

    Started from regimes that differ in volatility only (quantiles of the absolute return,
    zero means, each regime kept with probability 0.99 a bar), which is what separates bull,
    bear and sideways markets first. Stops when the log-likelihood gains less than
    ``tolerance`` times the number of bars in an iteration, or after ``max_iterations``.

    :param returns: float [T] log returns, or one such array per instrument (each its own
        chain, the parameters shared); finite; at least ``10 * n_regimes`` bars in all.
    :param dof: the errors' degrees of freedom: ``math.inf`` Gaussian, a number > 0 Student-t
        with it fixed, ``"fit"`` Student-t with it chosen from :data:`DOF_GRID` each iteration
        (an ECM step: the means and scales from the t's weights ``(dof + 1) / (dof + z^2)``).
    :param start: a model of ``n_regimes`` regimes to start from (a fit on part of the bars)
        instead of the volatility quantiles; with ``dof="fit"`` its degrees of freedom too.
    :raises ValueError: on a bad argument, naming it.
    """
    series = _check_returns(returns, n_regimes)
    if max_iterations < 1:
        raise ValueError(f"max_iterations = {max_iterations!r} is invalid: allowed is >= 1")
    fit_dof = isinstance(dof, str)
    if fit_dof and dof != "fit" or not fit_dof and not float(dof) > 0.0:
        raise ValueError(f"dof = {dof!r} is invalid: allowed is a number > 0, math.inf or 'fit'")
    if start is not None and len(start.mus) != n_regimes:
        raise ValueError(
            f"start has {len(start.mus)} regimes: allowed is a model of n_regimes = {n_regimes}"
        )
    nu = DOF_GRID[len(DOF_GRID) // 2] if fit_dof else float(dof)
    total = sum(len(s) for s in series)
    flat = np.concatenate(series)
    scale = float(flat.std())
    if start is None:
        sigmas = np.quantile(np.abs(flat - flat.mean()), np.linspace(0.3, 0.9, n_regimes)) * 1.25
        mus = np.full(n_regimes, flat.mean())
        trans = np.full((n_regimes, n_regimes), 0.01 / (n_regimes - 1))
        np.fill_diagonal(trans, 0.99)
        initial = np.full(n_regimes, 1.0 / n_regimes)
    else:
        mus, sigmas = start.mus.copy(), start.sigmas.copy()
        trans, initial = start.transition.copy(), start.initial.copy()
        nu = start.dof if fit_dof else nu
    sigmas = np.maximum(sigmas, SIGMA_FLOOR * scale)
    previous = -np.inf
    loglik = -np.inf
    iterations = 0
    while iterations < max_iterations:
        iterations += 1
        gammas, counts, loglik = [], np.zeros((n_regimes, n_regimes)), 0.0
        for s in series:
            g, c, ll = _forward_backward(s, mus, sigmas, trans, initial, nu)
            gammas.append(g)
            counts += c
            loglik += ll
        gamma = np.concatenate(gammas)
        weight = gamma.sum(axis=0)
        if math.isinf(nu):
            u = gamma
        else:
            z2 = ((flat[:, None] - mus) / sigmas) ** 2
            u = gamma * (nu + 1.0) / (nu + z2)
        mus = (u * flat[:, None]).sum(axis=0) / u.sum(axis=0)
        sigmas = np.sqrt((u * (flat[:, None] - mus) ** 2).sum(axis=0) / weight)
        sigmas = np.maximum(sigmas, SIGMA_FLOOR * scale)
        trans = counts / counts.sum(axis=1, keepdims=True)
        initial = np.mean([g[0] for g in gammas], axis=0)
        if fit_dof:
            nu = _best_dof(flat, gamma, mus, sigmas)
        if loglik - previous < tolerance * total:
            break
        previous = loglik
    if fit_dof:
        # The log-likelihood of the parameters returned, not of the last E-step's.
        loglik = sum(_forward_backward(s, mus, sigmas, trans, initial, nu)[2] for s in series)
    order = np.argsort(mus)
    return GaussianHMM(
        mus=mus[order],
        sigmas=sigmas[order],
        transition=trans[np.ix_(order, order)],
        initial=initial[order],
        log_likelihood=float(loglik),
        iterations=iterations,
        dof=nu,
    )


def fit_regime_model(
    returns: np.ndarray | Sequence[np.ndarray],
    regime_counts: Sequence[int] = REGIME_COUNTS,
    *,
    max_iterations: int = 60,
    tolerance: float = COMPARE_TOLERANCE,
) -> GaussianHMM:
    """The Student-t HMM (``fit_gaussian_hmm(..., dof="fit")``) of the lowest BIC among
    ``regime_counts`` regimes: the number of regimes and the tails chosen by the data, each
    candidate fitted to ``tolerance``.

    :param returns: as :func:`fit_gaussian_hmm`'s; at least ``10 * max(regime_counts)`` bars.
    :raises ValueError: on a bad argument, naming it.
    """
    counts = list(regime_counts)
    if not counts:
        raise ValueError("regime_counts is empty: allowed is a non-empty set of ints >= 2")
    series = _check_returns(returns, max(counts))
    total = sum(len(s) for s in series)
    fits = []
    for k in counts:
        # EM from regimes of different volatility and from regimes of different trend: where
        # the regimes differ in their mean only, the first start ends at a split of the tails.
        # Each start runs a few iterations, the likelier goes on.
        trials = [
            fit_gaussian_hmm(
                series,
                k,
                max_iterations=SCOUT_ITERATIONS,
                tolerance=tolerance,
                dof="fit",
                start=start,
            )
            for start in (None, _trend_start(series, k))
        ]
        best = max(trials, key=lambda m: m.log_likelihood)
        fits.append(
            fit_gaussian_hmm(
                series,
                k,
                max_iterations=max(max_iterations - SCOUT_ITERATIONS, 1),
                tolerance=tolerance,
                dof="fit",
                start=best,
            )
        )
    return min(fits, key=lambda m: m.bic(total))


def _trend_start(series: list[np.ndarray], n_regimes: int) -> GaussianHMM:
    """A model to start EM from: bars grouped by quantiles of their centred moving average over
    :data:`TREND_WINDOW` bars (each series on its own), each group's mean and standard deviation
    its regime's, each regime kept with probability 0.99 a bar, Student-t errors of the grid's
    middle degrees of freedom."""
    trend = np.concatenate(
        [np.convolve(s, np.full(TREND_WINDOW, 1.0 / TREND_WINDOW), mode="same") for s in series]
    )
    flat = np.concatenate(series)
    edges = np.quantile(trend, np.linspace(0.0, 1.0, n_regimes + 1)[1:-1])
    group = np.searchsorted(edges, trend)
    scale = float(flat.std())
    mus = np.array(
        [flat[group == g].mean() if (group == g).any() else 0.0 for g in range(n_regimes)]
    )
    sigmas = np.array(
        [flat[group == g].std() if (group == g).sum() > 1 else scale for g in range(n_regimes)]
    )
    trans = np.full((n_regimes, n_regimes), 0.01 / (n_regimes - 1))
    np.fill_diagonal(trans, 0.99)
    return GaussianHMM(
        mus=mus,
        sigmas=np.maximum(sigmas, SIGMA_FLOOR * scale),
        transition=trans,
        initial=np.full(n_regimes, 1.0 / n_regimes),
        log_likelihood=0.0,
        iterations=0,
        dof=DOF_GRID[len(DOF_GRID) // 2],
    )


def predicted_regimes(returns: np.ndarray, model: GaussianHMM) -> np.ndarray:
    """The forward filter's ``P(regime_{t+1} = k | r_1..r_t)``: float64 [T, K].

    ``returns[t]`` is bar ``t``'s log return (``returns[0]``, which has no previous bar, is not
    read: row 0 is the model's initial probabilities pushed one bar). Row ``t`` depends on
    ``returns[:t + 1]`` only, so the filter can run over training and later bars as one series.
    """
    r = np.asarray(returns, dtype=np.float64).ravel()
    if len(r) == 0:
        return np.empty((0, len(model.mus)))
    if not np.isfinite(r).all():
        raise ValueError("returns holds non-finite values: allowed are finite log returns")
    lik, _ = _likelihoods(r, model.mus, model.sigmas, model.dof)
    filtered = _prefix_products(model.initial, model.transition[None] * lik[1:, None, :])
    return filtered @ model.transition


def expected_next_returns(data: MarketData, model: GaussianHMM) -> np.ndarray:
    """The filter's expected next log return at every row of ``data``: float64 [n_bars], row
    ``t`` from bars ``<= t`` of its instrument; each instrument's filter starts from
    ``model.initial`` at its first row."""
    out = np.empty(data.n_bars)
    for a, b, r in data.instrument_log_returns():
        out[a:b] = predicted_regimes(r, model) @ model.mus
    return out
