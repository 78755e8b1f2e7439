"""How often does the fallback's predictability test reject, with and without an edge?

Step 3 of the fallback (``agents/pipelines/deployment.py``) lowers the validation bar a
network must clear where the training bars' features predict the next return: the robust Wald
test of the regression slopes (``features_predict_returns``) rejects at ``PREDICTABILITY_LEVEL``.
This script draws markets of the zoo's size (20,000 bars, the first 80% tested, as ``train``
does) from seeds the zoo does not use and reports the share of rejections:

- markets without a linear edge, where the share is the test's size: the driftless GBM, the
  GBM with drift (the slopes are zero; the drift is the intercept's), and regime switching
  with no drift in any regime (volatility that moves with the volatility features, the case
  that strains a plain F-test);
- markets with one: planted AR(1) at phi 0.05 and 0.03, and the zoo's regime market (its edge
  is in the regimes' drifts, which the features do not carry linearly).

``--test selection`` asks the same of the test ``train`` now runs by default, the input
selection's family-wise p-value (``agents.pipelines.input_selection``: Holm over the features'
slopes, and the fitted regime filter's forecast tested out of its fitting sample), and gives the
forecast's own cross-fitted p-value beside it.

No GPU. 2-core CPU: about 3 s a market (6 s with ``--test selection``), ``--seeds 100`` about
ten minutes.

    python3 -m experiments.predictability_power --seeds 100
    python3 -m experiments.predictability_power --seeds 40 --test selection
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from agents.pipelines.deployment import PREDICTABILITY_LEVEL, features_predict_returns
from agents.pipelines.input_selection import SELECTION_LEVEL, select_inputs
from gpu_trading_env.data.market_data import MarketData

MARKETS = {
    "driftless GBM": ("gbm", {"mu": 0.0, "sigma": 0.01}),
    "GBM with drift": ("gbm", {"mu": 1e-4, "sigma": 0.002}),
    "regime switching, no drift": ("regime", {"mus": (0.0, 0.0, 0.0)}),
    "planted AR(1), phi 0.05": ("planted", {"phi": 0.05, "sigma": 0.005}),
    "planted AR(1), phi 0.03": ("planted", {"phi": 0.03, "sigma": 0.005}),
    "regime switching (the zoo's)": ("regime", {}),
}
FIRST_SEED = 10_000  # away from the zoo's seeds 0 to 4


def p_value(job: tuple[str, int, str]) -> tuple[str, float, float]:
    """(market, the test's p-value, the regime forecast's own p-value or NaN)."""
    name, seed, test = job
    kind, params = MARKETS[name]
    data = MarketData.synthetic(kind, 20_000, seed=FIRST_SEED + seed, **params)
    train, _ = data.split(0.8)
    if test == "joint":
        return name, features_predict_returns(train)["p_value"], float("nan")
    sel = select_inputs(train)
    regime = float("nan") if sel.regime_p_value is None else sel.regime_p_value
    return name, sel.p_value, regime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--seeds", type=int, default=100, help="markets drawn per kind")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument(
        "--test",
        choices=["joint", "selection"],
        default="joint",
        help="joint: the Wald test of every feature's slope (--all-inputs); selection: the "
        "input selection's family-wise p-value (train's default)",
    )
    args = p.parse_args()
    jobs = [(name, s, args.test) for name in MARKETS for s in range(args.seeds)]
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in MARKETS}
    with ProcessPoolExecutor(args.workers) as pool:
        for name, pv, regime in pool.map(p_value, jobs, chunksize=4):
            found[name].append((pv, regime))
    print(
        f"share of {args.seeds} markets each where the {args.test} test rejects "
        "(20,000 bars, 16,000 tested)"
    )
    half = f"forecast p < {SELECTION_LEVEL / 2}"
    print(
        f"{'market':32s} {'p < ' + str(PREDICTABILITY_LEVEL):>10s} {'p < 0.05':>9s} {'median p':>9s}"
        + (f" {half:>24s}" if args.test == "selection" else "")
    )
    for name, rows in found.items():
        a = np.asarray([r[0] for r in rows])
        line = (
            f"{name:32s} {np.mean(a < PREDICTABILITY_LEVEL):10.2f} {np.mean(a < 0.05):9.2f} "
            f"{np.median(a):9.2g}"
        )
        if args.test == "selection":
            line += f" {np.mean(np.asarray([r[1] for r in rows]) < SELECTION_LEVEL / 2):24.2f}"
        print(line)


if __name__ == "__main__":
    main()
