"""How often the fallback's test keeps the known rule of the zoo's phi 0.05 market, by the
length of the validation window.

    python benchmarks/gate_power.py              # 2-core CPU, about a minute
    python benchmarks/gate_power.py --phi 0.10 --seeds 20

The sign rule at exposure 1 (``planted_rule_exposure``), its per-bar returns after 1 bp of
costs per unit of exposure traded, on the last 3,200 / 6,400 / 12,800 of a zoo market's 16,000
training bars, tested as ``train``'s fallback tests a network (the reality check of one
strategy against flat at ``GATE_LEVEL``). docs/ZOO.md, "Validation window and actions".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's packages

import numpy as np  # noqa: E402

from agents.pipelines.baseline_policies import GATE_LEVEL  # noqa: E402
from agents.pipelines.zoo import ZOO_BARS  # noqa: E402
from gpu_trading_env import MarketData  # noqa: E402
from gpu_trading_env.data.synthetic import planted_rule_exposure  # noqa: E402
from gpu_trading_env.reports.metrics import best_sharpe_reality_check  # noqa: E402

WINDOWS = (3_200, 6_400, 12_800)
PER_YEAR = 8766.0  # hourly bars of a 24/7 market, as the zoo's
COST = 1e-4  # 1 bp per unit of exposure traded, the train env's market order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phi", type=float, default=0.05)
    parser.add_argument("--seeds", type=int, default=40)
    args = parser.parse_args()
    train_bars = int(ZOO_BARS * 0.8)
    passed = {n: 0 for n in WINDOWS}
    for seed in range(args.seeds):
        data = MarketData.synthetic("planted", ZOO_BARS, seed=seed, phi=args.phi)
        close = np.asarray(data.close, dtype=np.float64).ravel()
        exposure = planted_rule_exposure(data)[:-1]
        traded = np.abs(np.diff(np.concatenate([[0.0], exposure])))
        pnl = (exposure * (close[1:] / close[:-1] - 1.0) - COST * traded)[:train_bars]
        for n in WINDOWS:
            test = best_sharpe_reality_check(pnl[-n:], PER_YEAR, level=GATE_LEVEL, seed=seed)
            passed[n] += test["low"] > 0.0
    for n in WINDOWS:
        share = passed[n] / args.seeds
        print(f"{n:6,} validation bars: the sign rule passes in {share:.0%} of {args.seeds} seeds")


if __name__ == "__main__":
    main()
