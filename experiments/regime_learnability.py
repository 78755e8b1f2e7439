"""How much of the regime market's edge can be learned from its training bars?

The zoo's regime reference is the forward filter with the generator's *true* parameters. A
learner sees only the 16,000 training bars. This script asks what models fitted on those bars
reach out of sample (the last 4,000 bars, 1 bp costs, trading the sign of the forecast), as a
fraction of the true filter's Sharpe (the better of its sign and conviction rules, as the zoo
takes it), for the zoo's seeds:

- the same forward filter with parameters fitted by EM (Baum-Welch) on the training bars: the
  right model class, its parameters estimated;
- ridge regressions of the next bar's return on the 51 features (all of them, and the
  volatility features alone): what a learner on the features finds by plain regression.

No GPU, no RL: the ceiling a learner on these bars and features faces. 2-core CPU, about a minute.

    python3 -m experiments.regime_learnability --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from agents.pipelines.zoo import MARKETS_BY_NAME, market_data, reference_exposures
from gpu_trading_env.data.features import FEATURE_NAMES
from gpu_trading_env.data.regime_filter import expected_next_returns, fit_gaussian_hmm

COST = 1e-4  # 1 bp of traded notional
TRAIN = 16_000  # the zoo's training bars (80% of 20,000)
VOL_FEATURES = ("rvol_5", "rvol_10", "rvol_20", "rvol_60", "parkinson_vol_20", "atr_14")


def sharpe_after_costs(exposure: np.ndarray, returns: np.ndarray, per_year: float) -> float:
    """Annualised Sharpe of ``exposure * returns`` minus 1 bp per unit of exposure traded."""
    pnl = exposure * returns - np.abs(np.diff(np.r_[0.0, exposure])) * COST
    return float(pnl.mean() / pnl.std(ddof=1) * math.sqrt(per_year))


def ridge_forecast(x: np.ndarray, y: np.ndarray, x_test: np.ndarray, lam: float) -> np.ndarray:
    """Ridge regression of ``y`` on ``x`` (with an intercept), evaluated on ``x_test``."""
    design = np.c_[x, np.ones(len(x))]
    w = np.linalg.solve(design.T @ design + lam * np.eye(design.shape[1]), design.T @ y)
    return np.c_[x_test, np.ones(len(x_test))] @ w


def one_seed(seed: int) -> dict[str, float]:
    market = MARKETS_BY_NAME["regime"]
    data = market_data(market, seed)
    close = np.asarray(data.close, dtype=np.float64)
    ret = close[1:] / close[:-1] - 1.0  # ret[t]: from bar t to t + 1, traded on row t
    per_year = 8766.0
    test = slice(TRAIN, len(ret))
    truth = {
        name: sharpe_after_costs(x[:-1][test], ret[test], per_year)
        for name, x in reference_exposures(market, data).items()
    }
    out = {"true filter": max(truth.values())}
    # EM on the training bars' log returns, then the forward filter over every bar with the
    # fitted parameters (gpu_trading_env.data.regime_filter, as train's input selection).
    logr = np.r_[0.0, np.log(close[1:] / close[:-1])]
    fit = fit_gaussian_hmm(logr[1:TRAIN])
    m = expected_next_returns(data, fit)
    out["EM-fitted filter"] = sharpe_after_costs(np.sign(m[:-1][test]), ret[test], per_year)
    x = np.asarray(data.features, dtype=np.float64)[:-1]
    vol = [FEATURE_NAMES.index(f) for f in VOL_FEATURES]
    for name, cols in (("ridge, 51 features", slice(None)), ("ridge, volatility features", vol)):
        f = ridge_forecast(x[:TRAIN, cols], ret[:TRAIN], x[test][:, cols], lam=10.0)
        out[name] = sharpe_after_costs(np.sign(f), ret[test], per_year)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = p.parse_args()
    ratios: dict[str, list[float]] = {}
    for seed in args.seeds:
        row = one_seed(seed)
        ref = row["true filter"]
        cells = "  ".join(f"{k} {v:6.2f} ({v / ref:+.2f})" for k, v in row.items())
        print(f"seed {seed}: {cells}", flush=True)
        for k, v in row.items():
            ratios.setdefault(k, []).append(v / ref)
    print("mean fraction of the true filter's out-of-sample Sharpe:")
    for k, v in ratios.items():
        print(f"  {k:28s} {np.mean(v):+.2f}  (seeds: {', '.join(f'{x:+.2f}' for x in v)})")


if __name__ == "__main__":
    main()
