"""What does the agent do with the regime forecast? Its out-of-sample exposure by forecast decile.

Trains one zoo run of the regime market (``train``'s defaults and the zoo's costs, as
``gpu-trading-env zoo`` does) and prints the network's mean exposure over the test bars in each
decile of the input selection's forecast (``regime_expected_return``, z-scored on the training
bars), beside its Sharpe and the step of the snapshot kept (the zoo's CSV gives the reference's). A policy that uses
the forecast is short below the forecast's zero and long above it.

    python3 -m experiments.regime_policy_map --seed 0 --device cuda
    python3 -m experiments.regime_policy_map --seed 0 --device cpu --timesteps 1200000
"""

from __future__ import annotations

import argparse

import numpy as np

from agents.cli.train import CPU_DEFAULTS, train_settings
from agents.pipelines.input_selection import REGIME_INPUT, InputSelection, apply_inputs
from agents.pipelines.model_selection import train_selected
from agents.pipelines.zoo import MARKETS_BY_NAME, ZooBudget, market_data, train_args
from gpu_trading_env.reports.metrics import bars_per_year


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--timesteps", default=None, help="train's --timesteps (default: train's)")
    args = p.parse_args()
    market = MARKETS_BY_NAME["regime"]
    extra = [] if args.timesteps is None else ["--timesteps", args.timesteps]
    options = train_args(market, args.seed, args.device, ZooBudget(), extra)
    settings = train_settings(options, options.device, CPU_DEFAULTS["timesteps"])
    train, test = market_data(market, args.seed).split(options.train_fraction)
    run = train_selected(
        train,
        test,
        options.config,
        settings,
        seed=args.seed,
        per_year=bars_per_year(test.timestamps),
    )
    selection = InputSelection.from_dict(run["inputs"])
    if REGIME_INPUT not in selection.kept:
        print(f"seed {args.seed}: the forecast was not kept (p = {selection.regime_p_value})")
    forecast = apply_inputs(test, selection).features[:-1, -1]
    exposure = run["network_test"].exposure
    print(
        f"seed {args.seed}, {run['timesteps']:,} env steps: kept {run['kept']}, network Sharpe "
        f"{run['network_test'].strategy.sharpe:.2f} out of sample, snapshot of step "
        f"{run['selected_step']:,}"
    )
    edges = np.quantile(forecast, np.linspace(0.0, 1.0, 11))
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        rows = (forecast >= lo) & (forecast <= hi)
        print(f"  forecast z in [{lo:+.2f}, {hi:+.2f}]: mean exposure {exposure[rows].mean():+.2f}")


if __name__ == "__main__":
    main()
