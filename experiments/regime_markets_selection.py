"""The regime input on regime markets of several families, and its level where there is no edge.
Selection and regression only, no network.

For each market (the zoo's 3-state Gaussian ``regime``, and ``regime_t``, ``regime_4``,
``regime_semi_markov`` of ``gpu_trading_env.data.regime_markets``) and seed: 20,000 bars, the
first 16,000 (``split(0.8)``) given to ``select_inputs``; its regime p-value, whether the
forecast is kept, and the out-of-sample Sharpe (last 4,000 bars, 1 bp a unit traded, the env's
default cost) of the sign of the fitted filter's forecast over the true filter's sign rule's.
``--null N``: the regime test alone on N draws of a driftless random walk and of a GARCH(1,1)
walk (16,000 bars), the share of draws where the forecast would be kept (p < 0.005).

    python3 -m experiments.regime_markets_selection --seeds 0 1 2 3 4
    python3 -m experiments.regime_markets_selection --markets regime --seeds 0 1 2 3 4 5 6 7 8 9
    python3 -m experiments.regime_markets_selection --markets --null 100
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from agents.pipelines.input_selection import SELECTION_LEVEL, _regime_fit, select_inputs
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.data.regime_filter import expected_next_returns
from gpu_trading_env.data.regime_markets import true_filter_expected_return

COST = 1e-4  # the env's default order cost, 1 bp of traded notional
PER_YEAR = 8766.0  # hourly bars
MARKETS = ("regime", "regime_t", "regime_4", "regime_semi_markov")


def sharpe_after_costs(exposure: np.ndarray, returns: np.ndarray) -> float:
    pnl = exposure * returns - np.abs(np.diff(np.r_[0.0, exposure])) * COST
    return float(pnl.mean() / pnl.std(ddof=1) * math.sqrt(PER_YEAR))


def one_market(kind: str, seed: int) -> tuple[float, bool, float, float, float]:
    """(p-value, kept, fitted sign's OOS Sharpe, true filter's, selection seconds)."""
    data = MarketData.synthetic(kind, 20_000, seed=seed)
    train, _ = data.split(0.8)
    t0 = time.perf_counter()
    sel = select_inputs(train)
    seconds = time.perf_counter() - t0
    close = np.asarray(data.close, dtype=np.float64)
    ret = close[1:] / close[:-1] - 1.0  # ret[t]: from bar t to t + 1, traded on row t
    test = slice(train.n_bars, len(ret))
    truth = true_filter_expected_return(data)
    ref = sharpe_after_costs(np.sign(truth[:-1][test]), ret[test])
    fitted = float("nan")
    if sel.regime is not None:
        forecast = expected_next_returns(data, sel.regime)
        fitted = sharpe_after_costs(np.sign(forecast[:-1][test]), ret[test])
    kept = "regime_expected_return" in sel.kept
    p = float("nan") if sel.regime_p_value is None else sel.regime_p_value
    return p, kept, fitted, ref, seconds


def garch_returns(n: int, rng: np.random.Generator) -> np.ndarray:
    """A driftless GARCH(1,1): volatility clusters, no edge."""
    omega, alpha, beta = 1e-6, 0.08, 0.9
    h = omega / (1.0 - alpha - beta)
    out = np.empty(n)
    for t in range(n):
        out[t] = math.sqrt(h) * rng.standard_normal()
        h = omega + alpha * out[t] ** 2 + beta * h
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--markets", nargs="*", default=list(MARKETS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--null", type=int, default=0, help="draws of each no-edge series")
    args = p.parse_args()
    for kind in args.markets:
        good = 0
        for seed in args.seeds:
            pv, kept, fitted, ref, sec = one_market(kind, seed)
            ratio = fitted / ref
            good += kept and ratio >= 0.6
            print(
                f"{kind} seed {seed}: p {pv:.2g} kept {kept} fitted sign {fitted:+.2f} "
                f"true filter {ref:+.2f} ratio {ratio:+.2f} selection {sec:.1f} s",
                flush=True,
            )
        print(f"{kind}: kept with ratio >= 0.6 in {good} of {len(args.seeds)} seeds", flush=True)
    for name in ("random walk", "GARCH"):
        if not args.null:
            break
        hits = 0
        for draw in range(args.null):
            rng = np.random.default_rng((7, draw))
            r = 0.01 * rng.standard_normal(16_000) if name == "random walk" else None
            r = garch_returns(16_000, rng) if r is None else r
            pv, _ = _regime_fit([r])
            hits += pv < SELECTION_LEVEL / 2.0
        print(f"{name}: forecast kept in {hits} of {args.null} draws", flush=True)


if __name__ == "__main__":
    main()
