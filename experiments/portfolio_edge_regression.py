"""How much of a portfolio market's rule a linear learner on every instrument's features finds.

For each portfolio zoo market: ridge regressions of each instrument's next simple return on
all K x 51 features of the fit bars (the first 48% of the grid, ``train_portfolio``'s fit
window), their signs traded equal-weight (the env's gross cap) on the test bars (the last 20%),
against the rule; gross of costs. Beside it, with ``--own``, the regression on each
instrument's own 51 features (the structure an instrument-shared encoder would have). No TD
targets, no exploration: what is left is the number of inputs against the fit bars. CPU.

    python3 -m experiments.portfolio_edge_regression --bars 20000 60000 --seeds 0
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from gpu_trading_env.data.portfolio_markets import portfolio_market, rule_exposures

PER_YEAR = 8766.0  # hourly bars around the clock
LAMBDAS = (1e3, 1e4, 1e5)


def _sharpe(exposure: np.ndarray, returns: np.ndarray) -> float:
    """Annualised Sharpe of equal-weight sign exposures [T, K] on returns [T, K], no costs."""
    gross = np.maximum(np.abs(exposure).sum(axis=1, keepdims=True), 1e-12)
    pnl = (exposure / gross * returns).sum(axis=1)
    return float(pnl.mean() / pnl.std(ddof=1) * math.sqrt(PER_YEAR))


def _ridge_signs(x: np.ndarray, y: np.ndarray, fit: int, test: slice, lam: float) -> np.ndarray:
    """Signs of ridge forecasts: x float64 [T, D] (a constant appended), y [T, K]."""
    x1 = np.c_[x, np.ones(len(x))]
    w = np.linalg.solve(x1[:fit].T @ x1[:fit] + lam * np.eye(x1.shape[1]), x1[:fit].T @ y[:fit])
    return np.sign(x1[test] @ w)


def market_line(kind: str, k: int, bars: int, seed: int, own: bool) -> str:
    """One market's rule Sharpe and the ridge's at each lambda, as a line."""
    data = portfolio_market(kind, bars, k, seed)
    close = np.asarray(data.close, dtype=np.float64)
    y = close[1:] / close[:-1] - 1.0
    feats = np.asarray(data.features, dtype=np.float64)[:-1]
    fit, test = int(0.48 * bars), slice(int(0.8 * bars), bars - 1)
    rule = _sharpe(rule_exposures(kind, data)[:-1][test], y[test])
    x = feats.reshape(len(feats), -1)
    ridge = [_sharpe(_ridge_signs(x, y, fit, test, lam), y[test]) for lam in LAMBDAS]
    line = f"{kind} K={k} bars={bars} seed={seed}: rule {rule:.2f}; all features " + ", ".join(
        f"lambda {lam:g} {s:.2f} ({s / rule:.2f})" for lam, s in zip(LAMBDAS, ridge, strict=True)
    )
    if own:
        signs = np.stack(
            [_ridge_signs(feats[:, j], y[:, j : j + 1], fit, test, 1e3)[:, 0] for j in range(k)], 1
        )
        s = _sharpe(signs, y[test])
        line += f"; own features {s:.2f} ({s / rule:.2f})"
    return line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bars", type=int, nargs="+", default=[20_000])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--kinds", nargs="+", default=["ar1", "lead_lag"])
    p.add_argument("--k", type=int, nargs="+", default=[8, 32])
    p.add_argument("--own", action="store_true", help="also each instrument's own features")
    args = p.parse_args()
    for bars in args.bars:
        for kind in args.kinds:
            for k in args.k:
                for seed in args.seeds:
                    print(market_line(kind, k, bars, seed, args.own), flush=True)


if __name__ == "__main__":
    main()
