"""Can a network of the agent's size find a weak planted edge by plain regression?

Fits the next bar's return on the 51 features of the first 12,800 bars of a planted AR(1)
market (AdamW, batch 4,096, the snapshot with the best Sharpe on the next 3,200 bars kept),
trades its sign with 1 bp costs on the last 4,000 bars, and prints its Sharpe beside the sign
rule's for seeds 0 to 2. No TD targets, no exploration, one target for every exposure: what is
left is the function class and its fitting. CPU; about 2 minutes at width 256.

    python3 -m experiments.edge_regression --phi 0.10 --hidden 256 256 --weight-decay 0.1 --lr 3e-4
    python3 -m experiments.edge_regression --phi 0.10 --hidden --lr 1e-3      # linear
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch as th

from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.data.synthetic import planted_rule_exposure

BARS, FIT, TRAIN = 20_000, 12_800, 16_000
COST = 1e-4  # 1 bp of traded notional


def sharpe_after_costs(exposure: np.ndarray, returns: np.ndarray, per_year: float) -> float:
    """Annualised Sharpe of ``exposure * returns`` minus 1 bp per unit of exposure traded."""
    pnl = exposure * returns - np.abs(np.diff(np.r_[0.0, exposure])) * COST
    return float(pnl.mean() / pnl.std(ddof=1) * math.sqrt(per_year))


def fit_and_test(seed: int, args: argparse.Namespace) -> tuple[float, float]:
    """(network's, sign rule's) out-of-sample Sharpe on ``seed``'s market."""
    data = MarketData.synthetic("planted", BARS, seed=seed, phi=args.phi)
    x = np.asarray(data.features, np.float32)[:-1]
    close = np.asarray(data.close, np.float64)
    ret = close[1:] / close[:-1] - 1.0
    th.manual_seed(seed)
    layers: list[th.nn.Module] = []
    width = x.shape[1]
    for h in args.hidden:
        layers += [th.nn.Linear(width, h), th.nn.LeakyReLU()]
        width = h
    net = th.nn.Sequential(*layers, th.nn.Linear(width, 1))
    opt = th.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    xt = th.tensor(x[:FIT])
    yt = th.tensor(ret[:FIT] * 100.0, dtype=th.float32)  # percent: O(1) targets
    gen = th.Generator().manual_seed(seed)
    best, best_state = -np.inf, None
    for k in range(args.steps):
        idx = th.randint(0, FIT, (4096,), generator=gen)
        loss = ((net(xt[idx]).squeeze(1) - yt[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (k + 1) % max(args.steps // 10, 1) == 0:
            with th.no_grad():
                pred = net(th.tensor(x[FIT:TRAIN])).squeeze(1).numpy()
            s = sharpe_after_costs(np.sign(pred), ret[FIT:TRAIN], args.per_year)
            if s > best:
                best, best_state = s, {n: v.clone() for n, v in net.state_dict().items()}
    net.load_state_dict(best_state)
    with th.no_grad():
        pred = net(th.tensor(x[TRAIN:])).squeeze(1).numpy()
    rule = np.sign(args.phi) * planted_rule_exposure(data)[:-1][TRAIN:]
    return (
        sharpe_after_costs(np.sign(pred), ret[TRAIN:], args.per_year),
        sharpe_after_costs(rule, ret[TRAIN:], args.per_year),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--phi", type=float, default=0.10)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--hidden", type=int, nargs="*", default=[256, 256])
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--per-year", type=float, default=8766.0, help="hourly bars")
    args = p.parse_args()
    ratios = []
    for seed in range(3):
        net, rule = fit_and_test(seed, args)
        ratios.append(net / rule)
        print(
            f"seed {seed}: network Sharpe {net:6.2f}, sign rule {rule:6.2f}, ratio {net / rule:.2f}"
        )
    print(f"mean ratio {np.mean(ratios):.2f}")


if __name__ == "__main__":
    main()
