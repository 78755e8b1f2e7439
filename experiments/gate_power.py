"""How often the fallback's test keeps the known rule of the zoo's phi 0.05 market, by the
length of the validation window.

    python3 -m experiments.gate_power              # 2-core CPU, a few minutes
    python3 -m experiments.gate_power --market phi_0.10 --seeds 20
    python3 -m experiments.gate_power --seeds 5 --per-seed   # the zoo's seeds, one by one

The zoo's market, `train`'s env config and split (``agents.pipelines.zoo.train_args``), the
sign rule (``planted_rule_exposure``) backtested over the training bars with that env's
costs; its per-bar returns over the last 3,200 / 6,400 / 12,800 of them tested as ``train``'s
fallback tests a network (the reality check of one strategy against flat at ``GATE_LEVEL``).
experiments/README.md, "Validation window and actions".
"""

from __future__ import annotations

import argparse

from agents.pipelines.deployment import GATE_LEVEL
from agents.pipelines.zoo import MARKETS_BY_NAME, ZooBudget, market_data, train_args
from gpu_trading_env.data.synthetic import planted_rule_exposure
from gpu_trading_env.reports.backtest import backtest, exposure_policy
from gpu_trading_env.reports.metrics import bars_per_year
from gpu_trading_env.reports.significance import best_sharpe_reality_check

WINDOWS = (3_200, 6_400, 12_800)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--market", default="phi_0.05", help="a planted zoo market")
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument(
        "--per-seed", action="store_true", help="print each seed's Sharpe and verdict per window"
    )
    args = parser.parse_args()
    market = MARKETS_BY_NAME[args.market]
    budget = ZooBudget()
    passed = {n: 0 for n in WINDOWS}
    for seed in range(args.seeds):
        options = train_args(market, seed, "cpu", budget, ())
        train, _ = market_data(market, seed, budget.bars).split(options.train_fraction)
        per_year = bars_per_year(train.timestamps)
        rule = exposure_policy(planted_rule_exposure(train), options.config)
        returns = backtest(rule, train, options.config, per_year=per_year).returns
        for n in WINDOWS:
            test = best_sharpe_reality_check(returns[-n:], per_year, level=GATE_LEVEL, seed=seed)
            passed[n] += test["low"] > 0.0
            if args.per_seed:
                verdict = "passes" if test["low"] > 0.0 else "fails"
                print(f"seed {seed}, last {n:6,} bars: Sharpe {test['difference']:5.2f}, {verdict}")
    for n in WINDOWS:
        share = passed[n] / args.seeds
        print(f"{n:6,} validation bars: the sign rule passes in {share:.0%} of {args.seeds} seeds")


if __name__ == "__main__":
    main()
